/*
 * bench_rooms.h - kv-bench rooms: the control plane's speed against a raw
 * ZMQ ipc ping-pong measured in the same run. Tiny rooms (the caller's
 * shape; kv-bench picks 1 page per layer over many layers) go through the
 * whole group twice (after an untimed warm-up): at high concurrency for
 * rooms/s, then one at a time for the latency from RECV_BEGIN to Success. The ping-pong (serialized
 * round trips between this process and a forked echo child) runs right
 * before and right after.
 */
#ifndef KVW_BENCH_ROOMS_H
#define KVW_BENCH_ROOMS_H

#include <stddef.h>
#include <stdint.h>

#include "bench.h"
#include "bench_limit.h"

struct runinfo;

struct bench_rooms_cfg {
	struct bench_config base;  /* shape, pages, chunking, seed, timeout;
				    * rooms/concurrency/lat_* are set here */
	uint32_t rate_rooms;       /* rooms of the rate run, >= 1 */
	uint32_t concurrency;      /* rooms in flight in the rate run */
	uint32_t lat_rooms;        /* rooms of the one-at-a-time run, >= 1 */
	uint32_t rtt_count;        /* timed ping-pong round trips, >= 1 */
	uint32_t warmup_rooms;     /* untimed rooms first (0: none) */
	const char *ipc_dir;       /* where the ping-pong's socket goes */
	uint64_t *lat_ns_out;      /* optional (caller's, lat_rooms entries):
				    * the latency run's samples are left here
				    * (res->lat.nlat of them) */
	uint64_t *hop_ns_out;      /* optional (caller's, lat_rooms rows of
				    * BENCH_NHOPS): the latency run's rooms'
				    * hops (res->lat.nhops rows) */
};

struct bench_rooms_result {
	struct bench_result warmup, rate, lat;
	double rooms_per_s;            /* rate run: rooms / seconds */
	double p50_us, p99_us, max_us; /* one-at-a-time room latency */
	struct bench_limit_rtt rtt_before, rtt_after;
	double rtt_per_s, rtt_us;      /* the better of before and after;
					 * rtt_us = 1e6 / rtt_per_s */
	double rate_ratio;             /* rooms_per_s / rtt_per_s */
	double p50_ratio, p99_ratio;   /* p50_us / rtt_us, p99_us / rtt_us */
};

/* Runs the warm-up, ping-pong, rate run, latency run, ping-pong. Returns 0 with *res
 * (even when some rooms failed: see res->rate/lat), or a negative KVW_E*
 * with err when a part could not run; progress as for bench_run. */
int bench_rooms_run(const struct runinfo *ri, const struct bench_rooms_cfg *cfg,
		    bench_progress_fn *progress, void *arg,
		    struct bench_rooms_result *res, char *err, size_t errlen);

#endif
