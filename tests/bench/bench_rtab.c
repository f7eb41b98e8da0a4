/*
 * bench_rtab.c - what one room-table access costs on the hot path, in a
 * table of 16384 slots holding 10,000 live rooms: rtab_lookup + rtab_get +
 * a pair of CAS state transitions (Bootstrapping -> WaitingForInput ->
 * Transferring) on an existing room, in random room order; the same with
 * the job-counter CAS pair (+1/-1) instead; and the single calls alone.
 * Rooms used up by the transition pair are failed, cleared and re-inserted
 * between timed batches, outside the timing. Prints ns per operation.
 * Usage: bench_rtab [iterations] (default 5,000,000).
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "table/rtab.h"

#define ROOMS 10000u
#define CAP 16384u

static uint64_t key_of(uint32_t i)
{
	return (uint64_t)i * 0x9e3779b97f4a7c15ULL + 12345;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "bench_rtab: fatal: unable to %s: %s\n", what,
		kvw_strerror(rc));
	exit(111);
}

/* Fails, clears and re-inserts every room: all back in Bootstrapping. */
static void reset(struct rtab *t)
{
	for (uint32_t i = 0; i < ROOMS; i++) {
		struct rtab_ref r;
		int rc = rtab_lookup(t, key_of(i), &r);

		if (rc == 0)
			rc = rtab_clear(t, r, KVW_R_CLEARED);
		if (rc == 0 || rc == KVW_ENOENT)
			rc = rtab_insert(t, key_of(i), 1, 0, &r);
		if (rc < 0)
			die("reset a room", rc);
	}
}

int main(int argc, char **argv)
{
	uint64_t iters = argc > 1 ? strtoull(argv[1], NULL, 10) : 5000000;
	uint32_t *order = malloc(ROOMS * sizeof(*order));
	char path[128], err[256];
	struct rtab *t = NULL;
	struct rtab_view v;
	struct rtab_ref r;
	uint64_t t0, elapsed = 0, sink = 0, done = 0, x = 88172645463325252ULL;
	int rc;

	if (order == NULL)
		die("allocate", KVW_ENOMEM);
	snprintf(path, sizeof(path), "/dev/shm/kvwire.bench-rtab.%ld.rooms",
		 (long)getpid());
	rtab_unlink(path);
	rc = rtab_create(path, CAP, 16, 1, &t, NULL, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "bench_rtab: fatal: %s\n", err);
		return 111;
	}
	for (uint32_t i = 0; i < ROOMS; i++) {
		order[i] = i;
		if ((rc = rtab_insert(t, key_of(i), 1, 0, &r)) < 0)
			die("insert", rc);
	}

	/* lookup + get + transition pair, batches of ROOMS in random order */
	while (done < iters) {
		for (uint32_t i = ROOMS - 1; i > 0; i--) {
			uint32_t j, tmp;

			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			j = (uint32_t)(x % (i + 1));
			tmp = order[i], order[i] = order[j], order[j] = tmp;
		}
		t0 = rtab_now_ns();
		for (uint32_t i = 0; i < ROOMS; i++) {
			if (rtab_lookup(t, key_of(order[i]), &r) != 0 ||
			    rtab_get(t, r, &v) != 0 ||
			    rtab_transition(t, r, KVW_WAITING, 0) != 0 ||
			    rtab_transition(t, r, KVW_TRANSFERRING, 0) != 0)
				die("run the transition pair", KVW_ESTATE);
			sink += v.pages_done;
		}
		elapsed += rtab_now_ns() - t0;
		done += ROOMS;
		reset(t);
	}
	printf("rtab: lookup+get+transition pair: %.1f ns/op (%llu ops, %u live rooms)\n",
	       (double)elapsed / (double)done, (unsigned long long)done, ROOMS);

	/* lookup + get + job-counter pair, repeatable on the same rooms */
	t0 = rtab_now_ns();
	for (uint64_t n = 0; n < iters; n++) {
		uint64_t key = key_of(order[n % ROOMS]);

		if (rtab_lookup(t, key, &r) != 0 || rtab_get(t, r, &v) != 0 ||
		    rtab_outstanding_add(t, r, 1) != 1 ||
		    rtab_outstanding_add(t, r, -1) != 0)
			die("run the job pair", KVW_ESTATE);
		sink += v.flags;
	}
	elapsed = rtab_now_ns() - t0;
	printf("rtab: lookup+get+job +1/-1:       %.1f ns/op\n",
	       (double)elapsed / (double)iters);

	t0 = rtab_now_ns();
	for (uint64_t n = 0; n < iters; n++)
		sink += (uint64_t)rtab_lookup(t, key_of(order[n % ROOMS]), &r) + r.gen;
	elapsed = rtab_now_ns() - t0;
	printf("rtab: lookup alone:               %.1f ns/op\n",
	       (double)elapsed / (double)iters);

	t0 = rtab_now_ns();
	for (uint64_t n = 0; n < iters; n++)
		sink += (uint64_t)rtab_get(t, r, &v) + v.state;
	elapsed = rtab_now_ns() - t0;
	printf("rtab: get alone:                  %.1f ns/op\n",
	       (double)elapsed / (double)iters);

	t0 = rtab_now_ns();
	for (uint64_t n = 0; n < iters; n++)
		sink += (uint64_t)rtab_state(t, r);
	elapsed = rtab_now_ns() - t0;
	printf("rtab: state poll alone:           %.1f ns/op\n",
	       (double)elapsed / (double)iters);

	rtab_close(&t);
	rtab_unlink(path);
	free(order);
	return sink == 42 ? 1 : 0;
}
