/*
 * bench_cost.h - kv-bench rooms --metrics-cost N: the price of the room
 * tables' measures (lib/table/rtab_metrics.c). The same rate run is made
 * 2N times over the same group, alternating with the measures on and off
 * (every member table's `off` word, set through a writable mapping), so
 * drift of the machine falls on both sides alike.
 */
#ifndef KVW_BENCH_COST_H
#define KVW_BENCH_COST_H

#include <stddef.h>
#include <stdint.h>

#include "bench.h"

struct runinfo;

struct bench_cost_result {
	uint32_t passes;            /* per side */
	uint32_t rooms[2], ok[2];   /* [0] measures on, [1] off: all passes */
	double seconds[2];
	double per_s[2];            /* rooms / seconds of each side */
};

/* Runs cfg (rooms, concurrency as given) 2 * passes times. The measures
 * are left on at the end, also on error. Returns 0, or a negative KVW_E*
 * with err (a table could not be mapped writable, a pass could not run). */
int bench_cost_run(const struct runinfo *ri, const struct bench_config *cfg,
		   uint32_t passes, struct bench_cost_result *res, char *err,
		   size_t errlen);

#endif
