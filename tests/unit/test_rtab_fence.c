/*
 * test_rtab_fence.c - the decode's writer-side fence on real files in
 * /dev/shm: a held slot makes its room busy and only its incarnation;
 * leave and reset free it; out-of-range slots and zero refs are never
 * held; a file that is not a fence, or of the wrong size, is refused; a
 * fresh create replaces an old fence rather than sharing it; and the
 * store-buffering race itself, run by two threads 200,000 times: once
 * the "receiver" has armed a room and seen it idle, the "sink" never
 * writes it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/kvw.h"
#include "table/rtab_fence.h"
#include "unit_wait.h"

static char path[128];

static int fresh(void **state)
{
	static unsigned n;

	(void)state;
	snprintf(path, sizeof path, "/dev/shm/kvwire.tfence-%d-%u.fence",
		 (int)getpid(), n++);
	return 0;
}

static int gone(void **state)
{
	(void)state;
	unlink(path);
	return 0;
}

static void test_a_held_slot_makes_only_its_incarnation_busy(void **state)
{
	struct rtab_fence *f, *g;
	struct rtab_ref a = { 5, 1 }, a2 = { 5, 2 }, b = { 6, 1 };
	char err[160];

	(void)state;
	assert_int_equal(rtab_fence_create(path, 2, 8, &f, err, sizeof err), 0);
	assert_int_equal(rtab_fence_open(path, &g, err, sizeof err), 0);
	assert_int_equal(rtab_fence_sinks(g), 2);
	assert_int_equal(rtab_fence_slots(g), 8);
	assert_false(rtab_fence_busy(f, a));
	/* The sink's mapping and the receiver's are the same bytes. */
	assert_int_equal(rtab_fence_enter(g, 1, 7, a), 1);
	assert_true(rtab_fence_busy(f, a));
	assert_false(rtab_fence_busy(f, a2)); /* the next incarnation */
	assert_false(rtab_fence_busy(f, b));
	rtab_fence_leave(g, 1, 7);
	assert_false(rtab_fence_busy(f, a));
	rtab_fence_close(&g);
	rtab_fence_close(&f);
	assert_null(f);
	rtab_fence_close(&f); /* twice: a no-op */
}

static void test_reset_frees_a_dead_sinks_row_and_only_it(void **state)
{
	struct rtab_fence *f;
	struct rtab_ref a = { 1, 3 }, b = { 2, 3 };
	char err[160];

	(void)state;
	assert_int_equal(rtab_fence_create(path, 3, 4, &f, err, sizeof err), 0);
	assert_int_equal(rtab_fence_enter(f, 0, 0, a), 1);
	assert_int_equal(rtab_fence_enter(f, 2, 3, b), 1);
	rtab_fence_reset(f, 2);
	assert_false(rtab_fence_busy(f, b));
	assert_true(rtab_fence_busy(f, a));
	rtab_fence_reset(f, 99); /* out of range: nothing */
	assert_true(rtab_fence_busy(f, a));
	rtab_fence_close(&f);
}

static void test_out_of_range_slots_and_zero_refs_are_never_held(void **state)
{
	struct rtab_fence *f;
	struct rtab_ref a = { 1, 1 }, zero = { 0, 0 };
	char err[160];

	(void)state;
	assert_int_equal(rtab_fence_create(path, 1, 2, &f, err, sizeof err), 0);
	assert_int_equal(rtab_fence_enter(f, 1, 0, a), 0);
	assert_int_equal(rtab_fence_enter(f, 0, 2, a), 0);
	assert_int_equal(rtab_fence_enter(f, 0, 0, zero), 0);
	assert_false(rtab_fence_busy(f, a));
	assert_false(rtab_fence_busy(f, zero));
	rtab_fence_leave(f, 5, 5); /* ignored, no crash */
	rtab_fence_close(&f);
}

static void test_bad_sizes_and_files_that_are_not_fences_are_refused(void **state)
{
	struct rtab_fence *f = (struct rtab_fence *)&f;
	char err[160];
	FILE *fp;

	(void)state;
	assert_int_equal(rtab_fence_create(path, 0, 8, &f, err, sizeof err),
			 KVW_EINVAL);
	assert_null(f);
	assert_int_equal(rtab_fence_create(path, RTAB_FENCE_MAX_SINKS + 1, 8, &f,
					   err, sizeof err), KVW_EINVAL);
	assert_int_equal(rtab_fence_create(path, 1, RTAB_FENCE_MAX_SLOTS + 1, &f,
					   err, sizeof err), KVW_EINVAL);
	assert_int_equal(rtab_fence_open(path, &f, err, sizeof err), KVW_ENOENT);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("not a fence, not even close to one; long enough to be read "
	      "as a header of sixty-four bytes", fp);
	fclose(fp);
	assert_int_equal(rtab_fence_open(path, &f, err, sizeof err), KVW_EVERSION);
	assert_non_null(strstr(err, "not a kvwire fence"));
	/* A real fence cut short is refused too. */
	assert_int_equal(rtab_fence_create(path, 2, 8, &f, err, sizeof err), 0);
	rtab_fence_close(&f);
	assert_int_equal(truncate(path, 64 + 8), 0);
	assert_int_equal(rtab_fence_open(path, &f, err, sizeof err), KVW_EVERSION);
}

static void test_a_new_fence_never_shares_the_old_ones_slots(void **state)
{
	struct rtab_fence *old, *f;
	struct rtab_ref a = { 9, 9 };
	char err[160];

	(void)state;
	assert_int_equal(rtab_fence_create(path, 1, 4, &old, err, sizeof err), 0);
	assert_int_equal(rtab_fence_enter(old, 0, 1, a), 1);
	/* A restarted receiver makes a new one: an old sink still mapping
	 * the old file cannot make the new receiver's rooms look busy, nor
	 * the other way round. */
	assert_int_equal(rtab_fence_create(path, 1, 4, &f, err, sizeof err), 0);
	assert_false(rtab_fence_busy(f, a));
	assert_true(rtab_fence_busy(old, a));
	rtab_fence_close(&old);
	rtab_fence_close(&f);
}

/* The race: per round a fresh room; the receiver arms it and waits until
 * the fence says idle, then declares it released; the sink enters, reads
 * armed, and writes only if not armed. A write that starts after the
 * release is the bug the fence exists to prevent. */
#define ROUNDS 200000u
/* Each round is a hand-off between the two threads: on a machine whose
 * cores are busy with other work a round costs a scheduling delay, and
 * 200,000 of them ran past the unit tests' 300 s limit. So the race stops
 * at ROUNDS or after RACE_LIMIT_S, whichever comes first, and the
 * assertions count the rounds it ran (both orders among them). */
#define RACE_LIMIT_S 60

struct race {
	struct rtab_fence *f;
	_Atomic uint32_t last;      /* the last round that will be raced */
	_Atomic uint32_t round;     /* the room being raced */
	_Atomic uint32_t armed;     /* round number once armed */
	_Atomic uint32_t released;  /* round number once released */
	_Atomic uint32_t sink_done; /* round number the sink finished */
	uint64_t late;              /* writes after the release: must stay 0 */
	uint64_t wrote;             /* rounds the sink won (not armed yet) */
};

static void *sink_side(void *arg)
{
	struct race *r = arg;

	for (uint32_t n = 1; n <= ROUNDS; n++) {
		struct rtab_ref ref = { n & 1023u, n };

		while (atomic_load(&r->round) < n) {
			if (n > atomic_load(&r->last))
				return NULL;
			sched_yield();
		}
		rtab_fence_enter(r->f, 0, 0, ref);
		if (atomic_load_explicit(&r->armed, memory_order_relaxed) != n) {
			/* Writing: the receiver must not have released. */
			if (atomic_load_explicit(&r->released,
						 memory_order_relaxed) == n)
				r->late++;
			r->wrote++;
		}
		rtab_fence_leave(r->f, 0, 0);
		atomic_store(&r->sink_done, n);
	}
	return NULL;
}

static void test_no_sink_write_starts_after_the_release(void **state)
{
	struct race r = { 0 };
	long until = unit_now_s() + RACE_LIMIT_S;
	uint32_t rounds = ROUNDS;
	pthread_t th;
	char err[160];

	(void)state;
	atomic_store(&r.last, ROUNDS);
	assert_int_equal(rtab_fence_create(path, 1, 1, &r.f, err, sizeof err), 0);
	assert_int_equal(pthread_create(&th, NULL, sink_side, &r), 0);
	uint32_t rnd = 2463534242u;

	for (uint32_t n = 1; n <= ROUNDS; n++) {
		if (n % 1024 == 0 && unit_now_s() >= until) {
			rounds = n - 1; /* the sink finished it: it ends */
			atomic_store(&r.last, rounds);
			break;
		}
		struct rtab_ref ref = { n & 1023u, n };

		rnd ^= rnd << 13;
		rnd ^= rnd >> 17;
		rnd ^= rnd << 5;
		atomic_store(&r.round, n);
		/* Sometimes give the sink the first move, so both orders
		 * happen even on one core. */
		if (rnd & 1)
			sched_yield();
		for (volatile uint32_t k = 0; k < (rnd >> 24); k++)
			;
		atomic_store_explicit(&r.armed, n, memory_order_relaxed);
		while (rtab_fence_busy(r.f, ref))
			sched_yield();
		atomic_store_explicit(&r.released, n, memory_order_relaxed);
		while (atomic_load(&r.sink_done) < n)
			sched_yield();
	}
	assert_int_equal(unit_join(th, 30), 0);
	assert_int_equal(r.late, 0);
	/* Both orders were raced, or the test proved nothing. */
	assert_true(r.wrote > 0 && r.wrote < rounds);
	rtab_fence_close(&r.f);
	print_message("fence race: %u rounds, the sink won %llu, late 0\n",
		      rounds, (unsigned long long)r.wrote);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_a_held_slot_makes_only_its_incarnation_busy, fresh, gone),
		cmocka_unit_test_setup_teardown(test_reset_frees_a_dead_sinks_row_and_only_it, fresh, gone),
		cmocka_unit_test_setup_teardown(test_out_of_range_slots_and_zero_refs_are_never_held, fresh, gone),
		cmocka_unit_test_setup_teardown(test_bad_sizes_and_files_that_are_not_fences_are_refused, fresh, gone),
		cmocka_unit_test_setup_teardown(test_a_new_fence_never_shares_the_old_ones_slots, fresh, gone),
		cmocka_unit_test_setup_teardown(test_no_sink_write_starts_after_the_release, fresh, gone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
