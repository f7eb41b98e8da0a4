/*
 * plot.c - kv-bench's progress bar and --plot (see plot.h). gnuplot runs
 * as a child (posix_spawnp) on a script and two data files written to a
 * private temporary directory; its exit status decides success, and the
 * PNG must exist afterwards.
 */
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/proc.h"
#include "common/cli.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define BINS 40u

extern char **environ;

static void keep(struct kvb_progress *p, const struct bench_result *r)
{
	if (p->n == 0 && r->seconds > 0) {
		struct bench_result zero = { 0 };

		keep(p, &zero); /* the pass starts at 0 s with nothing done */
	}
	if (p->n == p->cap) {
		uint32_t cap = p->cap ? 2 * p->cap : 256;
		struct plot_sample *s = realloc(p->s, cap * sizeof *s);

		if (!s)
			return; /* fewer points, not a failure */
		p->s = s;
		p->cap = cap;
	}
	p->s[p->n++] = (struct plot_sample){ r->seconds, r->rooms, r->failed,
					     r->bytes };
}

int kvb_progress_cb(void *arg, const struct bench_result *r, uint32_t total)
{
	struct kvb_progress *p = arg;
	unsigned width = 30, fill = total ? (unsigned)((uint64_t)r->rooms *
							width / total) : 0;
	char bar[64];

	if (p->record && !p->done && total == p->record_total) {
		if (p->n && r->seconds < p->s[p->n - 1].t)
			p->done = 1;
		else
			keep(p, r);
	}
	if (!p->tty)
		return proc_stopping();
	if (fill > width)
		fill = width;
	memset(bar, '#', fill);
	memset(bar + fill, '.', width - fill);
	bar[width] = '\0';
	fprintf(stderr, "\r[%s] %u/%u %.3f GiB/s ok=%u failed=%u stuck=%u "
		"%.1fs ", bar, r->rooms, total,
		r->seconds > 0 ? (double)r->bytes / GIB / r->seconds : 0.0,
		r->success, r->failed, r->stuck, r->seconds);
	return proc_stopping();
}

void kvb_progress_end(struct kvb_progress *p, const struct bench_result *r)
{
	if (p->record && !p->done) {
		keep(p, r);
		p->done = 1;
	}
}

void plot_free(struct kvb_progress *p)
{
	free(p->s);
	p->s = NULL;
	p->n = p->cap = 0;
}

/* Latency histogram, log-spaced bins between the smallest and the largest
 * sample: "centre_us count" lines. */
static void write_hist(FILE *f, const uint64_t *lat_ns, uint32_t n)
{
	uint32_t cnt[BINS] = { 0 };
	double lo = INFINITY, hi = 0, step;

	for (uint32_t i = 0; i < n; i++) {
		double us = (double)lat_ns[i] / 1e3;

		lo = us < lo ? us : lo;
		hi = us > hi ? us : hi;
	}
	if (n == 0 || lo <= 0)
		lo = 1;
	if (hi <= lo)
		hi = lo * 1.01;
	step = log(hi / lo) / BINS;
	for (uint32_t i = 0; i < n; i++) {
		double us = (double)lat_ns[i] / 1e3;
		long b = us > lo ? (long)(log(us / lo) / step) : 0;

		cnt[b >= (long)BINS ? BINS - 1 : (b < 0 ? 0 : b)]++;
	}
	for (unsigned b = 0; b < BINS; b++)
		fprintf(f, "%g %u\n", lo * exp(step * (b + 0.5)), cnt[b]);
}

/* Rates between consecutive samples: "t rooms_per_s gib_per_s". */
static void write_rate(FILE *f, const struct kvb_progress *p)
{
	for (uint32_t i = 1; i < p->n; i++) {
		const struct plot_sample *a = &p->s[i - 1], *b = &p->s[i];
		double dt = b->t - a->t;

		if (dt <= 0)
			continue;
		fprintf(f, "%g %g %g\n", b->t, (b->rooms - a->rooms) / dt,
			(double)(b->bytes - a->bytes) / GIB / dt);
	}
}

static int write_file(const char *path, const struct kvb_progress *p,
		      const uint64_t *lat_ns, uint32_t nlat, int which)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	if (which == 0)
		write_hist(f, lat_ns, nlat);
	else
		write_rate(f, p);
	return fclose(f);
}

static int write_script(const char *path, const char *dir, const char *png,
			const char *title, uint32_t nlat, uint32_t nrate)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fprintf(f,
		"set terminal pngcairo size 1200,450 noenhanced\n"
		"set output '%s'\n"
		"set multiplot layout 1,2 title '%s'\n"
		"set title 'room latency (%u rooms)'\n"
		"set logscale x\nset xlabel 'us'\nset ylabel 'rooms'\n"
		"set style fill solid 0.6\nset boxwidth 0.9 relative\n"
		"plot '%s/hist.dat' using 1:2 with boxes notitle\n"
		"unset logscale x\n"
		"set title 'throughput over time (%u intervals)'\n"
		"set xlabel 's'\nset ylabel 'rooms/s'\nset y2label 'GiB/s'\n"
		"set ytics nomirror\nset y2tics\nset yrange [0:*]\n"
		"set y2range [0:*]\n",
		png, title, nlat, dir, nrate);
	if (nrate)
		fprintf(f, "plot '%s/rate.dat' using 1:2 with linespoints "
			"title 'rooms/s', '' using 1:3 axes x1y2 with "
			"linespoints title 'GiB/s'\n", dir);
	else
		fprintf(f, "set label 1 'run too short for a rate sample' at "
			"graph 0.5,0.5 center\nplot [0:1][0:1] -1 notitle\n");
	fprintf(f, "unset multiplot\n");
	return fclose(f);
}

int plot_gnuplot(const char *script, char *err, size_t errlen)
{
	char path[600];
	char *argv[] = { "gnuplot", path, NULL };
	pid_t pid;
	int st, e;

	snprintf(path, sizeof path, "%s", script);
	e = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);

	if (e == ENOENT)
		return kvw_errf(err, errlen, KVW_ENODEV,
				"gnuplot is not installed (Debian gnuplot-nox)");
	if (e != 0)
		return kvw_errf(err, errlen, KVW_ESYS, "gnuplot: %s",
				strerror(e));
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return kvw_errf(err, errlen, KVW_ESYS, "waitpid: %s",
					strerror(errno));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return kvw_errf(err, errlen, KVW_ESYS,
				"gnuplot failed (status %d)", st);
	return 0;
}

int plot_draw(const char *png, const struct kvb_progress *p,
	      const uint64_t *lat_ns, uint32_t nlat, const char *title,
	      char *err, size_t errlen)
{
	const char *tmp = cli_tmpdir();
	char dir[512], f[3][600];
	int rc;

	if (strchr(png, '\'') || strchr(title, '\''))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--plot: no quote in the file name");
	snprintf(dir, sizeof dir, "%s/kvbplot.XXXXXX", tmp);
	if (!mkdtemp(dir))
		return kvw_errf(err, errlen, KVW_ESYS, "mkdtemp %s: %s", dir,
				strerror(errno));
	snprintf(f[0], sizeof f[0], "%s/hist.dat", dir);
	snprintf(f[1], sizeof f[1], "%s/rate.dat", dir);
	snprintf(f[2], sizeof f[2], "%s/plot.gp", dir);
	if (write_file(f[0], p, lat_ns, nlat, 0) != 0 ||
	    write_file(f[1], p, lat_ns, nlat, 1) != 0 ||
	    write_script(f[2], dir, png, title, nlat,
			 p->n > 1 ? p->n - 1 : 0) != 0)
		rc = kvw_errf(err, errlen, KVW_ESYS, "%s: %s", dir,
			      strerror(errno));
	else
		rc = plot_gnuplot(f[2], err, errlen);
	if (rc == 0 && access(png, F_OK) != 0)
		rc = kvw_errf(err, errlen, KVW_ESYS, "gnuplot wrote no %s", png);
	for (int i = 0; i < 3; i++)
		unlink(f[i]);
	rmdir(dir);
	return rc;
}
