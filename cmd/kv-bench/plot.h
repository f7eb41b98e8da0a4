/*
 * plot.h - kv-bench --plot FILE.png: the progress samples of a run
 * (rooms and bytes done every ~100 ms) and its per-room latencies drawn by
 * gnuplot as one PNG: the latency histogram (log-spaced bins) beside
 * rooms/s and GiB/s over time. Also the progress callback main.c hands to
 * the modes, which draws the one-line bar on a terminal and records the
 * samples.
 */
#ifndef KVBENCH_PLOT_H
#define KVBENCH_PLOT_H

#include <stddef.h>
#include <stdint.h>

#include "bench.h"

struct plot_sample {
	double t;        /* seconds since the pass began */
	uint32_t rooms;  /* rooms finished */
	uint32_t failed;
	uint64_t bytes;
};

/* What the modes pass as the progress callback's arg. */
struct kvb_progress {
	int tty;                   /* draw the bar (stderr is a terminal) */
	int record;                /* keep samples (--plot) of the first
				    * pass of record_total rooms */
	uint32_t record_total;
	int done;                  /* the recorded pass ended: stop keeping */
	struct plot_sample *s;     /* malloc'd; plot_free */
	uint32_t n, cap;
};

/* bench_progress_fn: draws "[####....] rooms/total GiB/s failed=N" on
 * stderr when p->tty, keeps a sample when p->record (the first pass only:
 * a pass that starts over ends the recording). Returns non-zero when the
 * process was asked to stop (SIGINT/SIGTERM). */
int kvb_progress_cb(void *p, const struct bench_result *r, uint32_t total);

/* Ends a recorded pass with its final result (a last sample). */
void kvb_progress_end(struct kvb_progress *p, const struct bench_result *r);

/* Draws png from p's samples and lat_ns[0..nlat) (ns; may be 0 of them:
 * the histogram then says so) by running gnuplot (pngcairo or png
 * terminal). Returns 0, KVW_ENODEV when gnuplot is not installed, or
 * KVW_ESYS / KVW_EINVAL with err. Temporary files go under $TMPDIR (or
 * /tmp) and are removed. */
int plot_draw(const char *png, const struct kvb_progress *p,
	      const uint64_t *lat_ns, uint32_t nlat, const char *title,
	      char *err, size_t errlen);

void plot_free(struct kvb_progress *p);

/* Runs gnuplot on the script file at path; 0, KVW_ENODEV (not installed:
 * says which Debian package) or KVW_ESYS, with err. */
int plot_gnuplot(const char *path, char *err, size_t errlen);

#endif
