/*
 * bench_cost.c - kv-bench rooms --metrics-cost (see bench_cost.h).
 */
#include "bench_cost.h"

#include <string.h>

#include "plan/runinfo.h"
#include "table/rtab.h"

#define MAX_TABLES RUNINFO_MAX_MEMBERS

struct tabs {
	struct rtab *t[MAX_TABLES];
	unsigned n;
};

static void tabs_close(struct tabs *ts)
{
	for (unsigned i = 0; i < ts->n; i++) {
		rtab_metrics_set_off(ts->t[i], 0);
		rtab_close(&ts->t[i]);
	}
	ts->n = 0;
}

/* Maps every prefill and decode member's table writable. */
static int tabs_open(const struct runinfo *ri, struct tabs *ts, char *err,
		     size_t errlen)
{
	for (uint32_t i = 0; i < runinfo_count(ri) && ts->n < MAX_TABLES; i++) {
		const struct runinfo_member *m = runinfo_member(ri, i);
		int rc;

		if (m->role != RUNINFO_PREFILL && m->role != RUNINFO_DECODE)
			continue;
		rc = rtab_open(m->table, 1, &ts->t[ts->n], err, errlen);
		if (rc < 0) {
			tabs_close(ts);
			return rc;
		}
		ts->n++;
	}
	return 0;
}

int bench_cost_run(const struct runinfo *ri, const struct bench_config *cfg,
		   uint32_t passes, struct bench_cost_result *res, char *err,
		   size_t errlen)
{
	struct tabs ts = { .n = 0 };
	int rc;

	memset(res, 0, sizeof *res);
	res->passes = passes;
	if ((rc = tabs_open(ri, &ts, err, errlen)) < 0)
		return rc;
	for (uint32_t k = 0; k < 2 * passes && rc == 0; k++) {
		unsigned side = k % 2; /* on, off, on, off, ... */
		struct bench_result r;

		for (unsigned i = 0; i < ts.n; i++)
			rtab_metrics_set_off(ts.t[i], (int)side);
		rc = bench_run(ri, cfg, NULL, NULL, &r, err, errlen);
		res->rooms[side] += r.rooms;
		res->ok[side] += r.success;
		res->seconds[side] += r.seconds;
	}
	tabs_close(&ts);
	for (unsigned side = 0; side < 2; side++)
		res->per_s[side] = res->seconds[side] > 0
					   ? res->rooms[side] / res->seconds[side]
					   : 0;
	return rc;
}
