/*
 * watch.c - kv-stat --watch (see watch.h). Rates are differences of the
 * tables' monotonic counters between two refreshes, matched by table path;
 * the wait between refreshes is sigtimedwait on SIGINT and SIGTERM, so a
 * signal ends it at once.
 */
#include "watch.h"

#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct prev {
	char path[KVW_MAX_STR + 1];
	uint64_t ok, failed, bytes;
};

/* Latency in ms under which a fraction q of the histogram lies (the
 * bucket's upper bound); -1 when empty, +Inf bucket shown as > 10 s. */
static double quantile_ms(const struct rtab_hist_view *h, double q)
{
	uint64_t want, cum = 0;

	if (h->count == 0)
		return -1;
	want = (uint64_t)(q * (double)h->count + 0.999999);
	for (unsigned i = 0; i < RTAB_HIST_BUCKETS; i++) {
		cum += h->bucket[i];
		if (cum >= want && i < RTAB_HIST_BOUNDS)
			return (double)rtab_hist_bound_ns(i) / 1e6;
	}
	return 1e9;
}

static void show(FILE *f, const struct render_table *rt, struct prev *p,
		 double dt)
{
	struct rtab_metrics_view m;
	struct rtab_info info;
	struct rtab_view v;
	struct rtab_peer_view pv;
	uint64_t rooms[KVW_NSTATES] = { 0 }, peers[3] = { 0 };
	uint64_t ok, failed, bytes;
	uint32_t c = 0;

	if (!rt->t) {
		fprintf(f, "%-10s unreadable: %s\n", rt->name, rt->error);
		return;
	}
	rtab_info(rt->t, &info);
	rtab_metrics_get(rt->t, &m);
	while (rtab_next(rt->t, &c, &v) == 0)
		rooms[v.state < KVW_NSTATES ? v.state : 0]++;
	c = 0;
	while (rtab_peer_next(rt->t, &c, &pv) == 0)
		peers[pv.liveness < 3 ? pv.liveness : 0]++;
	ok = m.entered[KVW_SUCCESS];
	failed = m.entered[KVW_FAILED];
	bytes = info.counters[RTAB_C_BYTES];
	fprintf(f, "%-10s boot %4llu wait %4llu xfer %4llu ok %6llu fail %4llu "
		"clear %6llu | %8.1f ok/s %6.1f fail/s %8.3f MiB/s | "
		"p50 %.2f p99 %.2f ms | peers alive %llu dead %llu unknown %llu\n",
		rt->name, (unsigned long long)rooms[KVW_BOOTSTRAPPING],
		(unsigned long long)rooms[KVW_WAITING],
		(unsigned long long)rooms[KVW_TRANSFERRING],
		(unsigned long long)rooms[KVW_SUCCESS],
		(unsigned long long)rooms[KVW_FAILED],
		(unsigned long long)rooms[KVW_CLEARED],
		dt > 0 && ok >= p->ok ? (double)(ok - p->ok) / dt : 0.0,
		dt > 0 && failed >= p->failed ? (double)(failed - p->failed) / dt
					      : 0.0,
		dt > 0 && bytes >= p->bytes
			? (double)(bytes - p->bytes) / dt / (1 << 20) : 0.0,
		quantile_ms(&m.hist[RTAB_H_TRANSFER], 0.5),
		quantile_ms(&m.hist[RTAB_H_TRANSFER], 0.99),
		(unsigned long long)peers[RTAB_PEER_ALIVE],
		(unsigned long long)peers[RTAB_PEER_DEAD],
		(unsigned long long)peers[RTAB_PEER_UNKNOWN]);
	p->ok = ok;
	p->failed = failed;
	p->bytes = bytes;
}

static struct prev *prev_of(struct prev *pv, unsigned *np, const char *path)
{
	for (unsigned i = 0; i < *np; i++)
		if (strcmp(pv[i].path, path) == 0)
			return &pv[i];
	if (*np == TABLES_MAX)
		return &pv[TABLES_MAX - 1];
	memset(&pv[*np], 0, sizeof pv[*np]);
	snprintf(pv[*np].path, sizeof pv[*np].path, "%s", path);
	return &pv[(*np)++];
}

int watch_run(struct tables *ts, uint64_t period_ns, unsigned count, FILE *f)
{
	static struct prev pv[TABLES_MAX];
	struct timespec ts_wait = { (time_t)(period_ns / 1000000000u),
				    (long)(period_ns % 1000000000u) };
	int tty = isatty(fileno(f));
	unsigned np = 0;
	uint64_t last = 0;
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	for (unsigned k = 0; count == 0 || k < count; k++) {
		uint64_t now = rtab_now_ns();
		double dt = last ? (double)(now - last) / 1e9 : 0;
		int rc = tables_load(ts);

		if (rc < 0)
			return rc;
		fprintf(f, "%skv-stat --watch: %u tables, every %.1f s%s\n",
			tty ? "\033[H\033[2J" : k ? "\n" : "", ts->n,
			(double)period_ns / 1e9, tty ? " (^C ends)" : "");
		for (unsigned i = 0; i < ts->n; i++)
			show(f, &ts->tb[i], prev_of(pv, &np, ts->tb[i].path),
			     dt);
		tables_unload(ts);
		fflush(f);
		last = now;
		if (count != 0 && k + 1 == count)
			break;
		if (sigtimedwait(&set, NULL, &ts_wait) >= 0)
			break;
	}
	return 0;
}
