/*
 * modes.c - kv-bench's modes (see modes.h): picking the mode and its flags
 * out of argv, the machine line, and the demo and rooms reports. Every
 * figure is printed beside the limit it is divided by, both measured in
 * this run.
 */
#include "modes.h"

#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "bench_cost.h"
#include "bench_cpu.h"
#include "bench_gcpu.h"
#include "bench_hops.h"
#include "bench_limit.h"
#include "bench_rooms.h"
#include "bench_stream.h"
#include "history.h"
#include "plot.h"
#include "base/kvw.h"
#include "common/cli.h"
#include "plan/runinfo.h"

#define PROG "kv-bench"
#define GIB (1024.0 * 1024.0 * 1024.0)
#define DEMO_REF_BYTES (64u << 20)

/* Tiny rooms: 64 layers of 1-token pages of one 64-dim bf16 head (128
 * bytes), 1 page per layer per room; placed before the caller's flags. */
static char *const tiny_shape[] = {
	"--layers", "64", "--page-tokens", "1", "--heads", "1",
	"--head-dim", "64", "--pages", "4096", "--aux-slots", "1024",
};
#define NTINY (sizeof tiny_shape / sizeof tiny_shape[0])

/* kvb_opts_parse's work: argv[0..n) read, what the run parses next put
 * in out (room for n + NTINY + 1) and counted in *argc. */
static int opts_into(int n, char **argv, char **out, int *argc,
		     struct kvb_opts *o)
{
	int k = 1, spawn = 0;
	const char *noref = getenv("KVW_BENCH_NO_REFERENCE");

	*o = (struct kvb_opts){ .mode = KVB_DEMO, .lat_rooms = 300,
				.rtt = 2000, .warmup = 3000 };
	o->no_reference = noref && strcmp(noref, "1") == 0;
	if (n > 1 && strcmp(argv[1], "copy") == 0)
		o->mode = KVB_COPY;
	else if (n > 1 && strcmp(argv[1], "rooms") == 0)
		o->mode = KVB_ROOMS;
	else if (n > 1 && strcmp(argv[1], "tcp") == 0)
		o->mode = KVB_TCP;
	else if (n > 1 && strcmp(argv[1], "history") == 0)
		o->mode = KVB_HISTORY;
	if (n > 1 && (o->mode != KVB_DEMO || strcmp(argv[1], "demo") == 0))
		k = 2;
	out[0] = argv[0];
	*argc = 1;
	for (int i = k; i < n; i++) {
		const char *a = argv[i];
		uint32_t *dst = NULL;

		if (strcmp(a, "--") == 0) {
			while (i < n)
				out[(*argc)++] = argv[i++];
			break;
		}
		if (o->mode == KVB_HISTORY) { /* its own flags: history.c */
			out[(*argc)++] = argv[i];
			continue;
		}
		if (strcmp(a, "--json") == 0) {
			o->json = 1;
			continue;
		}
		if (strcmp(a, "--record") == 0) {
			o->record = 1;
			continue;
		}
		if (strcmp(a, "--hops") == 0 && o->mode != KVB_COPY &&
		    o->mode != KVB_TCP) {
			o->hops = 1;
			continue;
		}
		if (strcmp(a, "--netns") == 0) {
			if (o->mode != KVB_DEMO)
				return cli_fatal(PROG, KVW_EXIT_USAGE,
						 "only kv-bench demo takes: %s", a);
			o->netns = 1;
			continue;
		}
		if (strcmp(a, "--no-reference") == 0) {
			if (o->mode != KVB_DEMO)
				return cli_fatal(PROG, KVW_EXIT_USAGE,
						 "only kv-bench demo takes: %s", a);
			o->no_reference = 1;
			continue;
		}
		if (strcmp(a, "--plot") == 0 && o->mode != KVB_COPY && o->mode != KVB_TCP) {
			if (i + 1 >= n || argv[i + 1][0] == '\0')
				return cli_fatal(PROG, KVW_EXIT_USAGE,
						 "want a file name after: %s", a);
			o->plot = argv[++i];
			continue;
		}
		if (strcmp(a, "--latency-rooms") == 0)
			dst = &o->lat_rooms;
		else if (strcmp(a, "--rtt") == 0)
			dst = &o->rtt;
		else if (strcmp(a, "--warmup") == 0)
			dst = &o->warmup;
		else if (strcmp(a, "--metrics-cost") == 0)
			dst = &o->cost;
		if (dst) {
			if (o->mode != KVB_ROOMS)
				return cli_fatal(PROG, KVW_EXIT_USAGE,
						 "only kv-bench rooms takes: %s", a);
			if (i + 1 >= n || cli_u32(argv[i + 1], 1, UINT32_MAX, dst))
				return cli_fatal(PROG, KVW_EXIT_USAGE,
						 "want a positive integer after: %s",
						 a);
			i++;
			continue;
		}
		if (strcmp(a, "--port-base") == 0) {
			/* kv-up takes bases up to 64000; the second group's
			 * is N + 100. */
			if (o->mode != KVB_ROOMS)
				return cli_fatal(PROG, KVW_EXIT_USAGE,
						 "only kv-bench rooms takes: %s", a);
			if (i + 1 >= n ||
			    cli_u32(argv[i + 1], 1, 63900, &o->port_base))
				return cli_fatal(PROG, KVW_EXIT_USAGE,
						 "want an integer in 1..63900 "
						 "after: %s", a);
			i++;
			continue;
		}
		if (strcmp(a, "--auth-cost") == 0) {
			if (o->mode != KVB_ROOMS)
				return cli_fatal(PROG, KVW_EXIT_USAGE,
						 "only kv-bench rooms takes: %s", a);
			o->auth_cost = 1;
			continue;
		}
		spawn |= strcmp(a, "--spawn") == 0;
		out[(*argc)++] = argv[i];
	}
	if (o->auth_cost && (!spawn || o->json))
		return cli_fatal(PROG, KVW_EXIT_USAGE, "--auth-cost starts its "
				 "own groups: with --spawn, not --json");
	if (o->port_base && !o->auth_cost)
		return cli_fatal(PROG, KVW_EXIT_USAGE,
				 "--port-base is for --auth-cost's groups "
				 "(else: --up-arg --port-base --up-arg N)");
	if (o->cost && o->json)
		return cli_fatal(PROG, KVW_EXIT_USAGE,
				 "--metrics-cost prints a line: not with --json");
	if (o->netns && !spawn)
		return cli_fatal(PROG, KVW_EXIT_USAGE, "--netns starts its own "
				 "group (with --spawn --transport tcp)");
	if (o->hops && o->json)
		return cli_fatal(PROG, KVW_EXIT_USAGE,
				 "--hops prints lines: not with --json");
	if (o->mode == KVB_ROOMS && spawn) {
		/* The tiny shape goes first so the caller's flags win. */
		memmove(out + 1 + NTINY, out + 1, (size_t)(*argc - 1) * sizeof *out);
		memcpy(out + 1, tiny_shape, sizeof tiny_shape);
		*argc += (int)NTINY;
	}
	out[*argc] = NULL;
	return 0;
}

int kvb_opts_parse(int *argc, char ***argvp, struct kvb_opts *o)
{
	char **out = calloc((size_t)*argc + NTINY + 1, sizeof *out);
	int rc;

	if (!out)
		return cli_fatal(PROG, KVW_EXIT_USAGE, "out of memory");
	/* A refused flag frees the new vector too: no way out of kv-bench
	 * leaves it to a leak check. */
	if ((rc = opts_into(*argc, *argvp, out, argc, o)) != 0) {
		free(out);
		return rc;
	}
	*argvp = out;
	return 0;
}

void kvb_defaults(const struct kvb_opts *o, struct bench_config *cfg)
{
	if (o->mode != KVB_ROOMS)
		return;
	cfg->rooms = 3000;
	cfg->concurrency = 64;
	cfg->pages_per_room = 1;
	cfg->chunk_pages = 1;
	cfg->no_fill = 1;
	cfg->eager = 1;
}

void kvb_usage(FILE *f)
{
	fprintf(f,
		"Modes (the first argument; none = demo):\n"
		"  demo   the workload below, with one core's memcpy bandwidth "
		"and all\n"
		"         cores' (one thread per core) beside it (measured right "
		"before and\n"
		"         after: about two seconds of CPU); with --transport tcp "
		"also a\n"
		"         raw loopback tcp stream (the same 64 MiB passes, 1 MiB "
		"writes)\n"
		"         --no-reference (or $KVW_BENCH_NO_REFERENCE=1) leaves it "
		"out, for\n"
		"         runs that only drive rooms (the tests do)\n"
		"         --netns (with --spawn --transport tcp; root): the group "
		"split over\n"
		"         two network namespaces it makes and removes (prefill "
		"side in A,\n"
		"         decode side in B, a veth link between them), the "
		"stream limit\n"
		"         measured from A to B\n"
		"  rooms  tiny rooms (with --spawn: 64 layers of 128-byte pages, "
		"1 page per\n"
		"         layer; defaults --rooms 3000 --concurrency 64 "
		"--pages-per-room 1\n"
		"         --chunk-pages 1): rooms/s at --concurrency, then "
		"--latency-rooms N\n"
		"         (default 300) one at a time for latency RECV_BEGIN -> "
		"Success\n"
		"         p50/p99/max, against a ZMQ ipc ping-pong of --rtt N "
		"(default 2000)\n"
		"         round trips to a forked echo child, right before and "
		"after;\n"
		"         --warmup N untimed rooms first (default 3000)\n"
		"         --auth-cost (with --spawn): the same on a group with keys\n"
		"         (tcp:// control, CURVE), then one with --insecure, and the\n"
		"         ratio of their rooms/s; --port-base N their control "
		"ports\n"
		"         (kv-up --port-base N, then N + 100; default 27400)\n"
		"  copy   a transport (shm, tcp, rdma) vs its limit, no group: kv-bench "
		"copy --help\n"
		"         --metrics-cost N: N rate passes with the tables' "
		"measures and N\n"
		"         without (alternating), rooms/s of each\n"
		"  --plot FILE.png  (demo, rooms) draw the room latency "
		"histogram and\n"
		"         rooms/s and GiB/s over time with gnuplot\n"
		"  --hops  (demo, rooms) where the rooms' time went, hop by "
		"hop (RECV_BEGIN,\n"
		"         kv-receiver, XFER_INFO, dispatch, worker, STATUS, "
		"seen): p50/p99 us\n"
		"         from the tables' moments (rooms: of the latency "
		"run); not with --json\n"
		"  --json  one JSON document instead of the table (any mode)\n"
		"  --record  (any mode) append each figure's ratio, with the "
		"commit, to\n"
		"         $KVW_BENCH_HISTORY or bench/history.csv; "
		"kv-bench history reads\n"
		"         it back (--plot PNG draws it): kv-bench history "
		"--help\n"
		"Every run prints the machine: cores, page sizes, CPU model.\n");
}

void kvb_machine_print(FILE *f, int json, uint64_t kv_page_bytes)
{
	struct bench_limit_machine m;

	bench_limit_machine(&m);
	for (char *p = m.cpu; *p; p++)
		if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
			*p = ' ';
	if (json)
		fprintf(f, "\"machine\":{\"cores\":%u,\"os_page\":%ld,"
			"\"huge_page_kib\":%ld,\"kv_page_bytes\":%llu,"
			"\"cpu\":\"%s\"}", m.cores, m.os_page, m.huge_page_kib,
			(unsigned long long)kv_page_bytes, m.cpu);
	else
		fprintf(f, "machine: cores=%u os_page=%ld huge_page_kib=%ld "
			"kv_page_bytes=%llu cpu=\"%s\"\n", m.cores, m.os_page,
			m.huge_page_kib, (unsigned long long)kv_page_bytes,
			m.cpu);
}

/* Bytes of one page of one buffer on a rank holding the whole model. */
static uint64_t kv_page_bytes(const struct shape *s)
{
	return (uint64_t)s->page_tokens * s->head_dim * s->dtype_bytes *
	       (s->mla ? 1 : s->kv_heads);
}

/* One core's memcpy between two private buffers of DEMO_REF_BYTES. */
static double demo_memcpy(void)
{
	uint8_t *a = malloc(DEMO_REF_BYTES), *b = malloc(DEMO_REF_BYTES);
	struct bench_limit_span s = { b, a, DEMO_REF_BYTES };
	double g = 0;

	if (a && b) {
		memset(a, 1, DEMO_REF_BYTES);
		memset(b, 2, DEMO_REF_BYTES);
		g = bench_limit_memcpy(&s, 1, 0.3);
	}
	free(a);
	free(b);
	return g;
}

/* Every core's memcpy at once (one thread per core, private buffers past
 * the caches, at most 1 GiB in all, copied a KV page of the run's shape at
 * a time in a shuffled order, as issue 35 asks): the limit for a group
 * whose workers run on every core. streaming: the copy the shm transport
 * makes (xport/xcopy.h), on buffers that ask for 2 MiB pages (as kv-up
 * --huge-pages gives the pools), faster than memcpy into memory past the
 * caches: the machine's best copy, the stricter limit, printed beside
 * memcpy's. */
static double demo_memcpy_all(unsigned *threads, uint64_t page, int streaming)
{
	struct bench_limit_machine m;
	size_t each;

	bench_limit_machine(&m);
	*threads = m.cores ? m.cores : 1;
	each = (size_t)(1u << 30) / (2u * *threads);
	each = each > (32u << 20) ? (32u << 20) : each;
	each = each < (4u << 20) ? (4u << 20) : each;
	page = page < 4096 ? 4096 : page > each ? each : page;
	return bench_limit_memcpy_cores(*threads, each, (size_t)page, 0.3,
					streaming);
}

/* The limits a demo run is divided by, measured right before and after
 * it: the better of each pair is the limit. */
struct demo_limits {
	double one[2], all[2]; /* GiB/s: before, after */
	double all_st[2]; /* all cores, the streaming copy */
	unsigned threads;
	double stream[2]; /* a group over tcp: a raw loopback stream */
};

static void demo_limits_take(struct demo_limits *l, int after,
			     const struct kvb_opts *o, uint64_t page)
{
	l->one[after] = demo_memcpy();
	l->all[after] = demo_memcpy_all(&l->threads, page, 0);
	l->all_st[after] = demo_memcpy_all(&l->threads, page, 1);
	/* Passes of the same size as the memcpy's, in 1 MiB writes; between
	 * the namespaces with --netns. */
	if (o->stream_limit)
		l->stream[after] = bench_stream_gibs_ns(DEMO_REF_BYTES, 0.3,
							NULL, o->ns);
}

/* The group's processes (--run-dir's or --spawn's, and --peers') and this
 * process's CPU, one look (bench_gcpu.h); nothing when s is NULL. */
static void group_cpu_take(struct gcpu_snap *s, double *self,
			   const struct runinfo *ri,
			   const struct bench_config *cfg)
{
	if (!s)
		return;
	s->n = 0;
	if (cfg->run_dir)
		gcpu_take(s, ri, cfg->run_dir);
	for (uint32_t i = 0; i < cfg->npeers; i++) {
		struct runinfo *pr = NULL;
		char e[256];

		if (runinfo_load(cfg->peers[i], &pr, e, sizeof e) == 0)
			gcpu_take(s, pr, cfg->peers[i]);
		runinfo_free(&pr);
	}
	*self = bench_cpu_s(0);
}

/* One process kind's CPU, as a table line or a JSON member. */
static void group_cpu_line(const char *name, uint32_t n, double v, double gib,
			   int json)
{
	char label[64];

	if (json) {
		printf("\"%s\":{\"procs\":%u,\"s\":%.3f,\"s_per_gib\":%.4f},",
		       name, n, v, gib > 0 ? v / gib : 0);
		return;
	}
	snprintf(label, sizeof label, "cpu %s (%u)", name, n);
	printf("%-34s %12.3f s %10.4f s/GiB\n", label, v,
	       gib > 0 ? v / gib : 0);
}

/* CPU seconds and seconds per GiB moved, per kind of process, kv-bench
 * (the engines) and in all (issue 35), as table lines or as the JSON
 * object "cpu". */
static void group_cpu_print(const struct gcpu_sum *g, double self, double gib,
			    int json)
{
	double all = self;

	if (json)
		printf("\"cpu\":{");
	for (unsigned k = 0; k < GCPU_NKINDS; k++) {
		group_cpu_line(gcpu_kind_name(k), g->procs[k], g->s[k], gib,
			       json);
		all += g->s[k];
	}
	group_cpu_line("kv-bench", 1, self, gib, json);
	if (json)
		printf("\"all\":{\"s\":%.3f,\"s_per_gib\":%.4f}},", all,
		       gib > 0 ? all / gib : 0);
	else
		printf("%-34s %12.3f s %10.4f s/GiB   (utime+stime over the "
		       "run, /proc; kv-bench runs the engines)\n", "cpu all",
		       all, gib > 0 ? all / gib : 0);
}

static double best(const double v[2])
{
	return v[0] > v[1] ? v[0] : v[1];
}

static void print_summary(const struct bench_result *r)
{
	double secs = r->seconds > 0 ? r->seconds : 1e-9;

	printf("rooms=%u success=%u failed=%u aborted=%u stuck=%u corrupt=%u "
	       "bytes=%llu seconds=%.3f rooms_per_s=%.1f gib_per_s=%.3f\n",
	       r->rooms, r->success, r->failed, r->aborted, r->stuck,
	       r->corrupt, (unsigned long long)r->bytes, r->seconds,
	       r->rooms / secs, (double)r->bytes / GIB / secs);
}

/* --plot: ends the recorded pass with its result r and draws it with the
 * latencies. Returns 0, or an exit code after a fatal line. */
static int draw(const struct kvb_opts *o, struct kvb_progress *p,
		const struct bench_result *r, const uint64_t *lat,
		uint32_t nlat, const char *title)
{
	char err[512];
	int rc;

	if (!o->plot)
		return KVW_EXIT_OK;
	kvb_progress_end(p, r);
	rc = plot_draw(o->plot, p, lat, nlat, title, err, sizeof err);
	if (rc < 0)
		return cli_fatal(PROG, cli_exit_code(rc), "unable to draw %s: %s",
				 o->plot, err);
	return KVW_EXIT_OK;
}

static int run_demo(const struct kvb_opts *o, const struct runinfo *ri,
		    const struct bench_config *cfg, bench_progress_fn *progress,
		    void *arg)
{
	struct kvb_progress *p = arg;
	struct bench_config c = *cfg;
	struct bench_result res;
	struct demo_limits l = { { 0, 0 }, { 0, 0 }, { 0, 0 }, 0, { 0, 0 } };
	struct gcpu_snap *cpu0 = calloc(1, sizeof *cpu0);
	struct gcpu_snap *cpu1 = calloc(1, sizeof *cpu1);
	struct gcpu_sum gsum = { { 0 }, { 0 } };
	double self0 = 0, self1 = 0;
	char err[512];
	double lim, all, all_st, stream, secs, gibs;
	int rc, drc;

	if (!o->no_reference)
		demo_limits_take(&l, 0, o, kv_page_bytes(&cfg->shape));

	if (o->plot || o->hops) {
		c.lat_cap = cfg->rooms;
		c.lat_ns = calloc(cfg->rooms, sizeof *c.lat_ns);
		p->record = o->plot && c.lat_ns != NULL;
		p->record_total = cfg->rooms;
	}
	if (o->hops && c.lat_ns)
		c.hop_ns = calloc((size_t)cfg->rooms * BENCH_NHOPS,
				  sizeof *c.hop_ns);
	group_cpu_take(cpu0, &self0, ri, cfg);
	rc = bench_run(ri, &c, progress, arg, &res, err, sizeof err);
	group_cpu_take(cpu1, &self1, ri, cfg);
	if (cpu0 && cpu1)
		gcpu_diff(cpu0, cpu1, &gsum);
	free(cpu0);
	free(cpu1);
	if (!o->no_reference)
		demo_limits_take(&l, 1, o, kv_page_bytes(&cfg->shape));
	lim = best(l.one);
	all = best(l.all);
	all_st = best(l.all_st);
	stream = best(l.stream);
	secs = res.seconds > 0 ? res.seconds : 1e-9;
	gibs = (double)res.bytes / GIB / secs;
	if (p->tty)
		fputc('\n', stderr);
	drc = rc < 0 || !o->plot ? KVW_EXIT_OK
		 : draw(o, p, &res, c.lat_ns, res.nlat, "kv-bench demo");
	free(c.lat_ns);
	if (drc != KVW_EXIT_OK)
		return drc;
	if (o->json) {
		/* gib_per_s to 6 significant digits: a few small rooms on a
		 * busy machine move well under 0.0005 GiB/s, which %.3f
		 * printed as 0 (a reader divides by it). */
		printf("{\"mode\":\"demo\",");
		kvb_machine_print(stdout, 1, kv_page_bytes(&cfg->shape));
		printf(",\"rooms\":%u,\"success\":%u,\"failed\":%u,\"stuck\":%u,"
		       "\"corrupt\":%u,\"bytes\":%llu,\"seconds\":%.3f,"
		       "\"rooms_per_s\":%.1f,\"gib_per_s\":%.6g,", res.rooms,
		       res.success, res.failed, res.stuck, res.corrupt,
		       (unsigned long long)res.bytes, res.seconds,
		       res.rooms / secs, gibs);
		group_cpu_print(&gsum, self1 - self0, (double)res.bytes / GIB,
				1);
		if (o->no_reference)
			printf("\"memcpy_gib_per_s\":null,\"memcpy_before\":null,"
			       "\"memcpy_after\":null,\"ratio\":null,"
			       "\"memcpy_all_gib_per_s\":null,"
			       "\"memcpy_all_threads\":null,\"ratio_all\":null,"
			       "\"streaming_all_gib_per_s\":null,"
			       "\"ratio_streaming_all\":null,"
			       "\"stream_gib_per_s\":null,\"ratio_stream\":null}\n");
		else
			printf("\"memcpy_gib_per_s\":%.3f,\"memcpy_before\":%.3f,"
			       "\"memcpy_after\":%.3f,\"ratio\":%.3f,"
			       "\"memcpy_all_gib_per_s\":%.3f,"
			       "\"memcpy_all_before\":%.3f,"
			       "\"memcpy_all_after\":%.3f,"
			       "\"memcpy_all_threads\":%u,\"ratio_all\":%.3f,"
			       "\"streaming_all_gib_per_s\":%.3f,"
			       "\"streaming_all_before\":%.3f,"
			       "\"streaming_all_after\":%.3f,"
			       "\"ratio_streaming_all\":%.3f,",
			       lim, l.one[0], l.one[1], lim > 0 ? gibs / lim : 0,
			       all, l.all[0], l.all[1], l.threads,
			       all > 0 ? gibs / all : 0, all_st, l.all_st[0],
			       l.all_st[1], all_st > 0 ? gibs / all_st : 0);
		if (!o->no_reference && o->stream_limit)
			printf("\"stream_gib_per_s\":%.3f,\"stream_before\":"
			       "%.3f,\"stream_after\":%.3f,\"ratio_stream\":"
			       "%.3f}\n", stream, l.stream[0], l.stream[1],
			       stream > 0 ? gibs / stream : 0);
		else if (!o->no_reference)
			printf("\"stream_gib_per_s\":null,"
			       "\"ratio_stream\":null}\n");
	} else {
		kvb_machine_print(stdout, 0, kv_page_bytes(&cfg->shape));
		if (rc == 0 || res.rooms || res.inflight)
			print_summary(&res);
		printf("%-34s %12s %12s %8s\n", "figure", "value", "limit",
		       "ratio");
		if (o->no_reference)
			printf("%-34s %12.3f %12s %8s   (--no-reference: no "
			       "memcpy limit measured)\n", "demo GiB/s", gibs,
			       "-", "-");
		else {
			printf("%-34s %12.3f %12.3f %8.3f   (limit: 1-core "
			       "memcpy GiB/s, before %.3f after %.3f)\n",
			       "demo GiB/s", gibs, lim,
			       lim > 0 ? gibs / lim : 0, l.one[0], l.one[1]);
			printf("%-34s %12.3f %12.3f %8.3f   (limit: all-core "
			       "memcpy GiB/s, %u threads, before %.3f after "
			       "%.3f)\n", "demo GiB/s vs all cores", gibs, all,
			       all > 0 ? gibs / all : 0, l.threads, l.all[0],
			       l.all[1]);
			printf("%-34s %12.3f %12.3f %8.3f   (limit: all-core "
			       "streaming-store copy GiB/s, %u threads, before "
			       "%.3f after %.3f)\n", "demo GiB/s vs all cores, streaming",
			       gibs, all_st, all_st > 0 ? gibs / all_st : 0,
			       l.threads, l.all_st[0], l.all_st[1]);
			if (o->stream_limit)
				printf("%-34s %12.3f %12.3f %8.3f   (limit: raw "
				       "%s tcp stream GiB/s, before %.3f "
				       "after %.3f)\n", "demo GiB/s vs a tcp stream",
				       gibs, stream,
				       stream > 0 ? gibs / stream : 0,
				       o->ns ? "A-to-B (namespaces)" : "loopback",
				       l.stream[0], l.stream[1]);
		}
		printf("%-34s %12.1f\n", "demo rooms/s", res.rooms / secs);
		group_cpu_print(&gsum, self1 - self0, (double)res.bytes / GIB,
				0);
		if (c.hop_ns)
			bench_hops_print(stdout, c.hop_ns, res.nhops,
					 res.nlat, 0);
	}
	free(c.hop_ns);
	fflush(stdout);
	if (rc < 0) {
		return cli_fatal(PROG, cli_exit_code(rc), "%s", err);
	}
	if (!o->no_reference) {
		history_note(o->record, "demo", "gibs-1core", gibs, lim,
			     lim > 0 ? gibs / lim : 0);
		history_note(o->record, "demo", "gibs-allcore", gibs, all,
			     all > 0 ? gibs / all : 0);
		history_note(o->record, "demo", "gibs-allcore-streaming", gibs,
			     all_st, all_st > 0 ? gibs / all_st : 0);
		if (o->stream_limit)
			history_note(o->record, "demo",
				     o->ns ? "gibs-netns-stream"
					   : "gibs-tcp-stream",
				     gibs, stream,
				     stream > 0 ? gibs / stream : 0);
	}
	/* Aborted rooms count as done when they became releasable. */
	return res.success + res.aborted == cfg->rooms && !res.stuck &&
	       !res.corrupt ? KVW_EXIT_OK : 1;
}

static void rooms_human(const struct bench_rooms_result *r, uint32_t conc)
{
	char what[64];

	printf("%-34s %12s %12s %8s %s\n", "figure", "value", "limit", "ratio",
	       "target");
	snprintf(what, sizeof what, "rooms/s (concurrency %u)", conc);
	printf("%-34s %12.1f %12.1f %8.2f %s\n", what, r->rooms_per_s,
	       r->rtt_per_s, r->rate_ratio, ">= 2 x round trips/s");
	printf("%-34s %12.1f %12.1f %8.2f %s\n", "room latency p50 us (1 at a "
	       "time)", r->p50_us, r->rtt_us, r->p50_ratio, "< 4 x round trip");
	printf("%-34s %12.1f %12.1f %8.2f %s\n", "room latency p99 us",
	       r->p99_us, r->rtt_us, r->p99_ratio, "< 10 x round trip");
	printf("%-34s %12.1f %12.1f %8.2f\n", "room latency max us", r->max_us,
	       r->rtt_us, r->rtt_us > 0 ? r->max_us / r->rtt_us : 0);
	printf("ping-pong: before %.0f/s (p50 %.1f us, p99 %.1f us), after "
	       "%.0f/s (p50 %.1f us, p99 %.1f us)\n", r->rtt_before.per_s,
	       r->rtt_before.p50_us, r->rtt_before.p99_us, r->rtt_after.per_s,
	       r->rtt_after.p50_us, r->rtt_after.p99_us);
	printf("rate run: rooms=%u success=%u failed=%u stuck=%u seconds=%.3f; "
	       "latency run: rooms=%u success=%u failed=%u stuck=%u; warm-up: "
	       "rooms=%u success=%u\n", r->rate.rooms, r->rate.success,
	       r->rate.failed, r->rate.stuck, r->rate.seconds, r->lat.rooms,
	       r->lat.success, r->lat.failed, r->lat.stuck, r->warmup.rooms,
	       r->warmup.success);
}

static void rooms_json(const struct bench_rooms_result *r, uint32_t conc)
{
	printf(",\"concurrency\":%u,\"rooms_per_s\":%.1f,\"rtt_per_s\":%.1f,"
	       "\"rtt_us\":%.2f,\"rate_ratio\":%.3f,\"p50_us\":%.1f,"
	       "\"p99_us\":%.1f,\"max_us\":%.1f,\"p50_ratio\":%.3f,"
	       "\"p99_ratio\":%.3f,\"rtt_before_per_s\":%.1f,"
	       "\"rtt_after_per_s\":%.1f,\"rtt_p50_us\":%.2f,"
	       "\"rate_rooms\":%u,\"rate_success\":%u,\"lat_rooms\":%u,"
	       "\"lat_success\":%u}\n", conc, r->rooms_per_s, r->rtt_per_s,
	       r->rtt_us, r->rate_ratio, r->p50_us, r->p99_us, r->max_us,
	       r->p50_ratio, r->p99_ratio, r->rtt_before.per_s,
	       r->rtt_after.per_s, r->rtt_before.p50_us, r->rate.rooms,
	       r->rate.success, r->lat.rooms, r->lat.success);
}

/* --metrics-cost N: rooms/s with and without the tables' measures. */
static int cost(const struct kvb_opts *o, const struct runinfo *ri,
		const struct bench_config *rate)
{
	struct bench_cost_result c;
	char err[512];
	int rc = bench_cost_run(ri, rate, o->cost, &c, err, sizeof err);

	if (rc < 0)
		return cli_fatal(PROG, cli_exit_code(rc), "metrics cost: %s",
				 err);
	printf("metrics cost: %u passes of %u rooms each way, alternating: "
	       "with measures %.1f rooms/s (%u/%u ok), without %.1f rooms/s "
	       "(%u/%u ok), cost %.1f%%\n", c.passes, rate->rooms, c.per_s[0],
	       c.ok[0], c.rooms[0], c.per_s[1], c.ok[1], c.rooms[1],
	       c.per_s[1] > 0 ? 100.0 * (c.per_s[1] - c.per_s[0]) / c.per_s[1]
			      : 0.0);
	fflush(stdout);
	return c.ok[0] == c.rooms[0] && c.ok[1] == c.rooms[1] ? KVW_EXIT_OK
							      : 1;
}

static int run_rooms(const struct kvb_opts *o, const struct runinfo *ri,
		     const struct bench_config *cfg, bench_progress_fn *progress,
		     void *arg)
{
	struct bench_rooms_cfg rc_cfg = {
		.base = *cfg, .rate_rooms = cfg->rooms,
		.concurrency = cfg->concurrency, .lat_rooms = o->lat_rooms,
		.rtt_count = o->rtt, .ipc_dir = "/tmp",
		.warmup_rooms = o->warmup,
	};
	struct kvb_progress *p = arg;
	struct bench_rooms_result res;
	char err[512];
	int rc;

	if (o->plot) {
		rc_cfg.lat_ns_out = calloc(o->lat_rooms, sizeof (uint64_t));
		p->record = rc_cfg.lat_ns_out != NULL;
		p->record_total = cfg->rooms;
	}
	if (o->hops)
		rc_cfg.hop_ns_out = calloc((size_t)o->lat_rooms * BENCH_NHOPS,
					   sizeof (uint64_t));
	rc = bench_rooms_run(ri, &rc_cfg, progress, arg, &res, err,
			     sizeof err);
	if (p->tty)
		fputc('\n', stderr);
	if (rc == 0)
		rc = draw(o, p, &res.rate, rc_cfg.lat_ns_out, res.lat.nlat,
			  "kv-bench rooms");
	free(rc_cfg.lat_ns_out);
	if (rc < 0) {
		return cli_fatal(PROG, cli_exit_code(rc), "%s", err);
	}
	if (rc > 0)
		return rc;
	if (o->json) {
		printf("{\"mode\":\"rooms\",");
		kvb_machine_print(stdout, 1, kv_page_bytes(&cfg->shape));
		rooms_json(&res, cfg->concurrency);
	} else {
		kvb_machine_print(stdout, 0, kv_page_bytes(&cfg->shape));
		printf("rooms: %u layers, %u page(s) per room, %llu payload "
		       "bytes per room\n", cfg->shape.layers, cfg->pages_per_room,
		       (unsigned long long)(res.rate.success
			       ? res.rate.bytes / res.rate.success : 0));
		rooms_human(&res, cfg->concurrency);
		if (rc_cfg.hop_ns_out)
			bench_hops_print(stdout, rc_cfg.hop_ns_out,
					 res.lat.nhops, res.lat.nlat, 0);
	}
	free(rc_cfg.hop_ns_out);
	if (o->rooms_per_s)
		*o->rooms_per_s = res.rooms_per_s;
	fflush(stdout);
	history_note(o->record, "rooms", "rate", res.rooms_per_s, res.rtt_per_s,
		     res.rate_ratio);
	history_note(o->record, "rooms", "p50", res.p50_us, res.rtt_us,
		     res.p50_ratio);
	history_note(o->record, "rooms", "p99", res.p99_us, res.rtt_us,
		     res.p99_ratio);
	if (o->cost && (rc = cost(o, ri, &rc_cfg.base)) != KVW_EXIT_OK)
		return rc;
	return res.rate.success == res.rate.rooms &&
	       res.lat.success == res.lat.rooms ? KVW_EXIT_OK : 1;
}

int kvb_run(const struct kvb_opts *o, const struct runinfo *ri,
	    const struct bench_config *cfg, bench_progress_fn *progress,
	    void *arg)
{
	/* The bench's short naps between table polls should last what they
	 * ask (default slack is 50 us, more than a ZMQ round trip here). */
	(void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	return o->mode == KVB_ROOMS ? run_rooms(o, ri, cfg, progress, arg)
				    : run_demo(o, ri, cfg, progress, arg);
}
