/*
 * bench_hops.c - kv-bench --hops (see bench_hops.h).
 */
#include "bench_hops.h"

#include <stdlib.h>

#include "bench_limit.h"

static const char *const names[BENCH_NHOPS] = {
	[HOP_RECV_BEGIN] = "recv-begin", [HOP_RECEIVER] = "receiver",
	[HOP_XFER_INFO] = "xfer-info",   [HOP_DISPATCH] = "dispatch",
	[HOP_WORKER] = "worker",         [HOP_STATUS] = "status",
	[HOP_SEEN] = "seen",
};

const char *bench_hop_name(unsigned h)
{
	return h < BENCH_NHOPS ? names[h] : "?";
}

static int times_of(const struct rtab *t, uint64_t room,
		    uint64_t enter[KVW_NSTATES])
{
	struct rtab_ref ref;

	return t && rtab_lookup(t, room, &ref) == 0 &&
			       rtab_times(t, ref, enter) == 0
		       ? 0
		       : -1;
}

int bench_hops_take(const struct rtab *dt, const struct rtab *pt,
		    uint64_t room, uint64_t t_begin, uint64_t t_done,
		    uint64_t out[BENCH_NHOPS])
{
	uint64_t d[KVW_NSTATES], p[KVW_NSTATES], at[BENCH_NHOPS + 1];

	if (times_of(dt, room, d) < 0 || times_of(pt, room, p) < 0)
		return -1;
	/* The moments, in the order the room reaches them. */
	at[0] = t_begin;
	at[1] = d[KVW_BOOTSTRAPPING];
	at[2] = d[KVW_WAITING];
	at[3] = p[KVW_WAITING];
	at[4] = p[KVW_TRANSFERRING];
	at[5] = p[KVW_SUCCESS];
	at[6] = d[KVW_SUCCESS];
	at[7] = t_done;
	for (unsigned h = 0; h < BENCH_NHOPS; h++) {
		if (at[h] == 0 || at[h + 1] < at[h])
			return -1;
		out[h] = at[h + 1] - at[h];
	}
	return 0;
}

/* p50 and p99 in us of hop h (or of the total, h == BENCH_NHOPS). */
static void quantiles(const uint64_t *hop_ns, uint32_t n, unsigned h,
		      double *us, double q[2])
{
	for (uint32_t i = 0; i < n; i++) {
		uint64_t v = 0;

		for (unsigned k = 0; k < BENCH_NHOPS; k++)
			if (k == h || h == BENCH_NHOPS)
				v += hop_ns[(size_t)i * BENCH_NHOPS + k];
		us[i] = (double)v / 1e3;
	}
	q[0] = bench_limit_quantile(us, n, 0.50);
	q[1] = bench_limit_quantile(us, n, 0.99);
}

void bench_hops_print(FILE *f, const uint64_t *hop_ns, uint32_t n,
		      uint32_t of, int json)
{
	double *us = calloc(n ? n : 1, sizeof *us), q[2];

	if (!us)
		return;
	if (!json)
		fprintf(f, "hops (p50 / p99 us over %u of %u rooms; rank 0 of "
			"each side, the tables' moments):\n", n, of);
	else
		fprintf(f, "\"hops\":{\"rooms\":%u,\"of\":%u", n, of);
	for (unsigned h = 0; h <= BENCH_NHOPS; h++) {
		const char *name = h < BENCH_NHOPS ? names[h] : "total";

		quantiles(hop_ns, n, h, us, q);
		if (json)
			fprintf(f, ",\"%s\":[%.1f,%.1f]", name, q[0], q[1]);
		else
			fprintf(f, "  %-11s %9.1f %9.1f\n", name, q[0], q[1]);
	}
	if (json)
		fputc('}', f);
	free(us);
}
