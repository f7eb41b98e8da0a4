/*
 * history.c - kv-bench's ratios over commits: --record appends them to a
 * CSV file, `kv-bench history` reads it back and draws it (history.h).
 */
#include "history.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "plot.h"
#include "base/kvw.h"
#include "common/cli.h"

#define PROG "kv-bench"
#define HEADER "utc,commit,mode,figure,value,limit,ratio\n"
#define MAX_SERIES 64u
#define NAME_MAX_LEN 64u

const char *history_path(void)
{
	const char *p = getenv("KVW_BENCH_HISTORY");

	return p && *p ? p : "bench/history.csv";
}

/* Letters, digits and a few marks only: a field never holds a comma, a
 * quote or a line end (the file stays one line per figure). */
static int plain(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			    "0123456789_.-+/ ", *s))
			return 0;
	return 1;
}

/* The commit of the tree kv-bench runs in, found once. */
static const char *commit(void)
{
	static char c[48];
	FILE *g;

	if (c[0])
		return c;
	g = popen("git rev-parse --short HEAD 2>/dev/null", "r");
	if (g) {
		if (!fgets(c, sizeof c, g))
			c[0] = '\0';
		pclose(g);
	}
	c[strcspn(c, "\r\n")] = '\0';
	if (!plain(c))
		snprintf(c, sizeof c, "%s",
			 getenv("KVW_COMMIT") && plain(getenv("KVW_COMMIT"))
				 ? getenv("KVW_COMMIT") : "unknown");
	return c;
}

int history_record(const char *mode, const char *figure, double value,
		   double limit, double ratio, char *err, size_t errlen)
{
	const char *path = history_path();
	char when[32];
	time_t now = time(NULL);
	struct tm tm;
	FILE *f;
	int rc;

	if (!plain(mode) || !plain(figure))
		return kvw_errf(err, errlen, -1, "--record: a figure named "
				"\"%s %s\" cannot be a CSV field", mode, figure);
	f = fopen(path, "a");
	if (!f)
		return kvw_errf(err, errlen, -1, "--record: %s: %s", path,
				strerror(errno));
	gmtime_r(&now, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (ftell(f) == 0)
		fputs(HEADER, f);
	fprintf(f, "%s,%s,%s,%s,%.6g,%.6g,%.6g\n", when, commit(), mode,
		figure, value, limit, ratio);
	rc = fclose(f);
	return rc == 0 ? 0 : kvw_errf(err, errlen, -1, "--record: %s: %s",
				      path, strerror(errno));
}

void history_note(int on, const char *mode, const char *figure, double value,
		  double limit, double ratio)
{
	char err[512];

	if (on && history_record(mode, figure, value, limit, ratio, err,
				 sizeof err) != 0)
		fprintf(stderr, "%s: %s\n", PROG, err);
}

/* One figure's ratios, in the order recorded. */
struct series {
	char name[2 * NAME_MAX_LEN + 2]; /* "mode figure" */
	double *ratio;
	char (*commit)[16];
	size_t n, cap;
};

static struct series *series_of(struct series *s, size_t *ns,
				const char *name)
{
	for (size_t i = 0; i < *ns; i++)
		if (strcmp(s[i].name, name) == 0)
			return &s[i];
	if (*ns == MAX_SERIES)
		return NULL;
	memset(&s[*ns], 0, sizeof s[*ns]);
	snprintf(s[*ns].name, sizeof s[*ns].name, "%s", name);
	return &s[(*ns)++];
}

static int series_add(struct series *s, const char *commit_id, double r)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		double *a = realloc(s->ratio, cap * sizeof *a);
		char (*c)[16];

		if (!a)
			return -1;
		s->ratio = a;
		c = realloc(s->commit, cap * sizeof *c);
		if (!c)
			return -1;
		s->commit = c;
		s->cap = cap;
	}
	s->ratio[s->n] = r;
	snprintf(s->commit[s->n], sizeof s->commit[s->n], "%s", commit_id);
	s->n++;
	return 0;
}

/* Reads the file into series; 0, or an exit code after the fatal line.
 * A line that is not seven fields is skipped and counted. */
static int read_history(const char *path, struct series *s, size_t *ns,
			unsigned *bad)
{
	char line[512];
	FILE *f = fopen(path, "r");

	if (!f)
		return cli_fatal(PROG, errno == ENOENT ? KVW_EXIT_USAGE
						       : KVW_EXIT_SYS,
				 "history: %s: %s", path, strerror(errno));
	*ns = 0;
	*bad = 0;
	while (fgets(line, sizeof line, f)) {
		char mode[NAME_MAX_LEN], fig[NAME_MAX_LEN], cm[16],
			name[2 * NAME_MAX_LEN + 2];
		double v, l, r;
		struct series *one;

		if (strncmp(line, "utc,", 4) == 0)
			continue;
		if (sscanf(line, "%*[^,],%15[^,],%63[^,],%63[^,],%lf,%lf,%lf",
			   cm, mode, fig, &v, &l, &r) != 6) {
			(*bad)++;
			continue;
		}
		snprintf(name, sizeof name, "%s %s", mode, fig);
		one = series_of(s, ns, name);
		if (!one || series_add(one, cm, r) != 0) {
			fclose(f);
			return cli_fatal(PROG, KVW_EXIT_SYS, "history: more "
					 "than %u figures, or out of memory",
					 MAX_SERIES);
		}
	}
	fclose(f);
	return -1;
}

/* A latency percentile (rooms' "p50", "p99": the latency over the round
 * trip) is better lower; every other ratio is better higher. */
static int lower_better(const char *name)
{
	const char *fig = strchr(name, ' ');

	return fig && fig[1] == 'p' && fig[2] >= '0' && fig[2] <= '9';
}

/* Each figure: runs, first, last, best, and the last against the best of
 * the runs before it, as a speed (a regression shows as a fall below 1
 * whichever way the figure points). */
static void print_series(const struct series *s, size_t ns)
{
	printf("%-40s %5s %18s %18s %18s %8s\n", "figure", "runs",
	       "first (commit)", "last (commit)", "best before last",
	       "last vs");
	for (size_t i = 0; i < ns; i++) {
		const struct series *x = &s[i];
		int low = lower_better(x->name);
		double best = 0, last_r = x->ratio[x->n - 1];
		char first[40], last[40], bb[40] = "-", vs[16] = "-";

		for (size_t k = 0; k + 1 < x->n; k++)
			if (best == 0 || (low ? x->ratio[k] < best
					      : x->ratio[k] > best))
				best = x->ratio[k];
		snprintf(first, sizeof first, "%.3f (%s)", x->ratio[0],
			 x->commit[0]);
		snprintf(last, sizeof last, "%.3f (%s)", x->ratio[x->n - 1],
			 x->commit[x->n - 1]);
		if (x->n > 1 && best > 0 && last_r > 0) {
			snprintf(bb, sizeof bb, "%.3f", best);
			snprintf(vs, sizeof vs, "%.2f",
				 low ? best / last_r : last_r / best);
		}
		printf("%-40s %5zu %18s %18s %18s %8s\n", x->name, x->n, first,
		       last, bb, vs);
	}
}

/* Draws every figure's ratio over its runs into png. 0, or an exit code
 * after the fatal line. */
static int draw(const struct series *s, size_t ns, const char *png)
{
	const char *tmp = cli_tmpdir();
	char dir[512], dat[600], gp[600], err[256];
	FILE *d, *g;
	int rc = 0;

	if (strchr(png, '\'') || strchr(png, '"'))
		return cli_fatal(PROG, KVW_EXIT_USAGE,
				 "history --plot: no quote in the file name");
	snprintf(dir, sizeof dir, "%s/kvbhist.XXXXXX", tmp);
	if (!mkdtemp(dir))
		return cli_fatal(PROG, KVW_EXIT_SYS, "mkdtemp %s: %s", dir,
				 strerror(errno));
	snprintf(dat, sizeof dat, "%s/h.dat", dir);
	snprintf(gp, sizeof gp, "%s/h.gp", dir);
	d = fopen(dat, "w");
	g = fopen(gp, "w");
	if (d && g) {
		/* One data block per figure, blocks two blank lines apart. */
		for (size_t i = 0; i < ns; i++) {
			fprintf(d, "# %s\n", s[i].name);
			for (size_t k = 0; k < s[i].n; k++)
				fprintf(d, "%zu %.6g\n", k + 1, s[i].ratio[k]);
			fputs("\n\n", d);
		}
		fprintf(g, "set terminal pngcairo size 1200,600 noenhanced\n"
			   "set output '%s'\nset title 'kv-bench ratios, run "
			   "after run'\nset xlabel 'run'\nset format x '%%.0f'\nset ylabel 'ratio to "
			   "the limit'\nset key outside right\nset grid\nplot ",
			png);
		for (size_t i = 0; i < ns; i++)
			fprintf(g, "%s'%s' index %zu with linespoints title "
				"'%s'", i ? ", " : "", dat, i, s[i].name);
		fputs("\n", g);
	}
	if (!d || !g || fclose(d) != 0 || fclose(g) != 0) {
		rc = cli_fatal(PROG, KVW_EXIT_SYS, "%s: %s", dir,
			       strerror(errno));
		d = g = NULL;
	} else if ((rc = plot_gnuplot(gp, err, sizeof err)) != 0 ||
		   access(png, F_OK) != 0) {
		rc = cli_fatal(PROG, rc == KVW_ENODEV ? KVW_EXIT_SKIP
						      : KVW_EXIT_SYS,
			       "history --plot: %s",
			       rc ? err : "gnuplot wrote nothing");
	}
	unlink(dat);
	unlink(gp);
	rmdir(dir);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kv-bench history [FILE] [--plot PNG]\n"
		"Reads the ratios that runs with --record appended to FILE "
		"(default\n$KVW_BENCH_HISTORY, else bench/history.csv; one line "
		"per figure:\nutc,commit,mode,figure,value,limit,ratio) and "
		"prints, per figure, the\nruns, the first and last ratio with "
		"their commits, the best before the\nlast and how the last "
		"compares with it as a speed (a regression shows as\na fall "
		"below 1; the latency percentiles p50 and p99 are better "
		"lower);\n--plot PNG draws every figure's ratio run after run "
		"with gnuplot.\n"
		"Exit: 0, 100 usage (or no such file), 77 gnuplot missing, 111 "
		"system error.\n");
}

int history_main(int argc, char **argv)
{
	const char *path = NULL, *png = NULL;
	struct series *s = calloc(MAX_SERIES, sizeof *s);
	size_t ns = 0;
	unsigned bad = 0;
	int rc = -1;

	for (int i = 1; i < argc && rc < 0; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			rc = KVW_EXIT_OK;
		} else if (strcmp(argv[i], "--plot") == 0 && i + 1 < argc) {
			png = argv[++i];
		} else if (argv[i][0] != '-' && !path) {
			path = argv[i];
		} else {
			rc = cli_fatal(PROG, KVW_EXIT_USAGE, "history: unknown "
				       "argument %s (kv-bench history --help)",
				       argv[i]);
		}
	}
	if (rc < 0 && !s)
		rc = cli_fatal(PROG, KVW_EXIT_SYS, "out of memory");
	if (rc < 0)
		rc = read_history(path ? path : history_path(), s, &ns, &bad);
	if (rc < 0 && ns == 0)
		rc = cli_fatal(PROG, KVW_EXIT_USAGE, "history: %s holds no "
			       "figure", path ? path : history_path());
	if (rc < 0) {
		print_series(s, ns);
		if (bad)
			printf("(%u lines that are not a record skipped)\n",
			       bad);
		rc = png ? draw(s, ns, png) : KVW_EXIT_OK;
		if (rc == KVW_EXIT_OK && png)
			printf("drew %s\n", png);
	}
	for (size_t i = 0; s && i < ns; i++) {
		free(s[i].ratio);
		free(s[i].commit);
	}
	free(s);
	return rc;
}
