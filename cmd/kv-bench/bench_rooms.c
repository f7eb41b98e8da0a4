/*
 * bench_rooms.c - kv-bench rooms (see bench_rooms.h): two bench_run passes
 * over the same group between two ping-pong measurements. The ping-pong
 * forks, so it runs while this process holds no ZMQ context (bench_run
 * opens and closes its engines inside each pass).
 */
#include "bench_rooms.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RTT_WARMUP 200u
#define RTT_MSG 64u /* about one frame header and a small body */

static int rtt(const struct bench_rooms_cfg *c, struct bench_limit_rtt *out,
	       char *err, size_t errlen)
{
	return bench_limit_zmq_rtt(c->ipc_dir, RTT_WARMUP, c->rtt_count, RTT_MSG,
				   out, err, errlen);
}

int bench_rooms_run(const struct runinfo *ri, const struct bench_rooms_cfg *c,
		    bench_progress_fn *progress, void *arg,
		    struct bench_rooms_result *res, char *err, size_t errlen)
{
	struct bench_config rate = c->base, lat = c->base;
	const struct bench_limit_rtt *best;
	double *us = NULL;
	int rc;

	memset(res, 0, sizeof *res);
	if (c->rate_rooms == 0 || c->concurrency == 0 || c->lat_rooms == 0 ||
	    c->rtt_count == 0) {
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rooms, concurrency, latency rooms and "
				"round trips must be >= 1");
	}
	rate.rooms = c->rate_rooms;
	rate.concurrency = c->concurrency;
	rate.lat_ns = NULL;
	rate.lat_cap = 0;
	lat.rooms = c->lat_rooms;
	lat.concurrency = 1;
	lat.lat_cap = c->lat_rooms;
	lat.lat_ns = c->lat_ns_out ? c->lat_ns_out
				   : calloc(c->lat_rooms, sizeof *lat.lat_ns);
	lat.hop_ns = c->hop_ns_out;
	us = calloc(c->lat_rooms, sizeof *us);
	if (!lat.lat_ns || !us) {
		kvw_seterr(err, errlen, "out of memory");
		rc = KVW_ENOMEM;
		goto out;
	}
	/* Untimed warm-up at the rate run's concurrency: first touches of the
	 * tables' and pools' pages (page faults in every member) are a cost of
	 * a fresh group, not of the steady state measured here. */
	if (c->warmup_rooms) {
		struct bench_config w = rate;

		w.rooms = c->warmup_rooms;
		rc = bench_run(ri, &w, NULL, NULL, &res->warmup, err, errlen);
		if (rc < 0)
			goto out;
	}
	if ((rc = rtt(c, &res->rtt_before, err, errlen)) < 0)
		goto out;
	rc = bench_run(ri, &rate, progress, arg, &res->rate, err, errlen);
	if (rc < 0)
		goto out;
	rc = bench_run(ri, &lat, progress, arg, &res->lat, err, errlen);
	if (rc < 0)
		goto out;
	if ((rc = rtt(c, &res->rtt_after, err, errlen)) < 0)
		goto out;
	res->rooms_per_s = res->rate.seconds > 0
				   ? res->rate.rooms / res->rate.seconds : 0;
	for (uint32_t i = 0; i < res->lat.nlat; i++)
		us[i] = (double)lat.lat_ns[i] / 1e3;
	res->max_us = bench_limit_quantile(us, res->lat.nlat, 1.0);
	res->p50_us = bench_limit_quantile(us, res->lat.nlat, 0.50);
	res->p99_us = bench_limit_quantile(us, res->lat.nlat, 0.99);
	/* The machine's limit: the better of the two ping-pongs. */
	best = res->rtt_before.per_s >= res->rtt_after.per_s ? &res->rtt_before
							      : &res->rtt_after;
	res->rtt_per_s = best->per_s;
	res->rtt_us = best->per_s > 0 ? 1e6 / best->per_s : 0;
	res->rate_ratio = res->rtt_per_s > 0 ? res->rooms_per_s / res->rtt_per_s
					     : 0;
	res->p50_ratio = res->rtt_us > 0 ? res->p50_us / res->rtt_us : 0;
	res->p99_ratio = res->rtt_us > 0 ? res->p99_us / res->rtt_us : 0;
out:
	if (lat.lat_ns != c->lat_ns_out)
		free(lat.lat_ns);
	free(us);
	return rc;
}
