/*
 * kv-bench - simulated prefill and decode engines driving a running kvwire
 * group (--run-dir DIR) or a private one it starts through kv-up
 * (--spawn): rooms of random ids move patterned KV pages from the prefill
 * pools to the decode pools, optionally verified byte by byte. Prints one
 * summary line of key=value pairs on stdout; a progress bar on stderr when
 * that is a terminal. The logic is in lib/bench.c; the modes (copy, rooms,
 * demo) and their reports against the machine's limits are in modes.c and
 * copy.c.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "kvw.h"
#include "log.h"
#include "proc.h"
#include "runinfo.h"
#include "shape.h"
#include "modes.h"
#include "spawn.h"

static const char *const shape_names[] = {
	"layers", "draft-layers", "page-tokens", "heads", "head-dim",
	"dtype-bytes", "pages", "aux-slots", "aux-bytes", "mla",
};
#define NSHAPE (sizeof shape_names / sizeof shape_names[0])
#define MAX_ARGS 128

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kv-bench [demo|rooms] (--run-dir DIR | --spawn) "
		"[options] [shape flags]\n"
		"       kv-bench copy [options]\n"
		"Simulated prefill and decode engines moving patterned KV "
		"through a kvwire group.\n"
		"  --run-dir DIR        use the group of DIR/endpoints (its "
		"shape= line is the\n"
		"                       default shape; shape flags given here "
		"override it)\n"
		"  --spawn              start a group with kv-up in a temp dir, "
		"stop it at the end\n"
		"  --kv-up PATH         kv-up to run (default: kv-up beside "
		"this program)\n"
		"  --up-arg ARG         extra argument for kv-up (repeatable)\n"
		"  --rooms N            rooms to run (default 100)\n"
		"  --pages-per-room N   pages of each room (default 16)\n"
		"  --chunk-pages N      pages per SEND_CHUNK (default 4)\n"
		"  --zero-last          when pages-per-room is a multiple of "
		"chunk-pages, end\n"
		"                       with an empty last chunk\n"
		"  --concurrency N      rooms in flight (default 8)\n"
		"  --verify             check every destination byte (K, V, "
		"aux)\n"
		"  --seed N             room ids from N (default: random)\n"
		"  --room-timeout S     per-room deadline in seconds (default "
		"60)\n"
		"  --prefill-tp N --prefill-pp N --decode-tp N --decode-pp N\n"
		"                       topology (--prefill-ranks, "
		"--decode-ranks: the TP\n"
		"                       sizes): given to kv-up with --spawn; "
		"checked with --run-dir\n"
		"  --abort-frac F       abort that fraction of rooms (0..1) at "
		"random moments\n"
		"                       (before SEND_BEGIN, between chunks, "
		"copies in flight);\n"
		"                       once releasable their pages get a "
		"canary, checked\n"
		"                       before reuse and at the end (changed: "
		"corrupt)\n"
		"  --log-level LEVEL    error|warn|info|debug\n"
		"  --help               this text\n"
		"  %s\n"
		"Output: rooms= success= failed= aborted= stuck= corrupt= "
		"bytes= seconds=\n"
		"rooms_per_s= gib_per_s= (bytes: payload landed in decode "
		"pools by rooms that\nsucceeded). Exit: 0 every room succeeded "
		"(and verified), 1 some did not,\n100 usage, 111 system "
		"error.\n",
		shape_usage());
	kvb_usage(f);
}

static int fatal_usage(const char *msg, const char *arg)
{
	fprintf(stderr, "kv-bench: fatal: %s%s%s\n", msg, arg ? ": " : "",
		arg ? arg : "");
	return KVW_EXIT_USAGE;
}

static int parse_num(const char *s, unsigned long long max,
		     unsigned long long *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 0);
	return errno || *end || !*s || s[0] == '-' || *out > max ? -1 : 0;
}

/* Draws the bar when stderr is a terminal; stops the run on SIGINT or
 * SIGTERM (so a spawned group is still stopped). */
static int progress(void *arg, const struct bench_result *r, uint32_t total)
{
	unsigned width = 30, fill = total ? (unsigned)((uint64_t)r->rooms *
							width / total) : 0;
	char bar[64];

	if (!*(const int *)arg)
		return proc_stopping();
	memset(bar, '#', fill);
	memset(bar + fill, '.', width - fill);
	bar[width] = '\0';
	fprintf(stderr, "\r[%s] %u/%u ok=%u failed=%u stuck=%u corrupt=%u "
		"%.1fs ", bar, r->rooms, total, r->success, r->failed,
		r->stuck, r->corrupt, r->seconds);
	return proc_stopping();
}

int main(int argc, char **argv)
{
	enum { O_RUN = 256, O_SPAWN, O_KVUP, O_UPARG, O_ROOMS, O_PPR, O_CHUNK,
	       O_ZERO, O_CONC, O_VERIFY, O_SEED, O_TIMEOUT, O_PRANKS, O_DRANKS,
	       O_PPP, O_DPP, O_ABORT, O_LOG, O_HELP, O_SHAPE };
	static const struct option base[] = {
		{ "run-dir", 1, NULL, O_RUN }, { "spawn", 0, NULL, O_SPAWN },
		{ "kv-up", 1, NULL, O_KVUP }, { "up-arg", 1, NULL, O_UPARG },
		{ "rooms", 1, NULL, O_ROOMS },
		{ "pages-per-room", 1, NULL, O_PPR },
		{ "chunk-pages", 1, NULL, O_CHUNK },
		{ "zero-last", 0, NULL, O_ZERO },
		{ "concurrency", 1, NULL, O_CONC },
		{ "verify", 0, NULL, O_VERIFY }, { "seed", 1, NULL, O_SEED },
		{ "room-timeout", 1, NULL, O_TIMEOUT },
		{ "prefill-ranks", 1, NULL, O_PRANKS }, { "prefill-pp", 1, NULL, O_PPP },
		{ "decode-ranks", 1, NULL, O_DRANKS }, { "decode-pp", 1, NULL, O_DPP },
		{ "prefill-tp", 1, NULL, O_PRANKS }, { "decode-tp", 1, NULL, O_DRANKS },
		{ "abort-frac", 1, NULL, O_ABORT },
		{ "log-level", 1, NULL, O_LOG }, { "help", 0, NULL, O_HELP },
	};
	enum { NBASE = sizeof base / sizeof base[0] };
	static struct option opts[NBASE + NSHAPE + 1];
	static char flag[NSHAPE][24]; /* "--layers", ... for kv-up */
	struct bench_config cfg = { .rooms = 100, .pages_per_room = 16,
				    .chunk_pages = 4, .concurrency = 8,
				    .room_timeout_s = 60 };
	char *up_args[3 * MAX_ARGS + 8], *shape_val[MAX_ARGS];
	unsigned shape_idx[MAX_ARGS];
	char err[512], kv_up[PATH_MAX], rk[4][16];
	uint32_t topo[4] = { 0 }; /* prefill tp, prefill pp, decode tp, pp */
	const char *run_dir = NULL;
	unsigned nshape = 0, nup = 0;
	struct spawn sp = { 0 };
	struct runinfo *ri = NULL;
	struct kvb_opts mo;
	unsigned long long v;
	int c, spawn = 0, lvl = LOG_WARN, rc, tty;

	/* The mode word and the modes' own flags first (modes.c). */
	if ((rc = kvb_opts_parse(&argc, &argv, &mo)) != 0)
		return rc;
	if (mo.mode == KVB_COPY)
		return kvb_copy_main(argc, argv, &mo);
	kvb_defaults(&mo, &cfg);
	memcpy(opts, base, sizeof base);
	for (unsigned i = 0; i < NSHAPE; i++) {
		snprintf(flag[i], sizeof flag[i], "--%s", shape_names[i]);
		opts[NBASE + i] = (struct option){ shape_names[i],
						   i + 1 < NSHAPE, NULL,
						   O_SHAPE + (int)i };
	}
	kv_up[0] = '\0';
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		uint32_t *u32 = NULL;

		switch (c) {
		case O_RUN: run_dir = optarg; break;
		case O_SPAWN: spawn = 1; break;
		case O_KVUP: snprintf(kv_up, sizeof kv_up, "%s", optarg); break;
		case O_UPARG:
			if (nup == MAX_ARGS)
				return fatal_usage("too many --up-arg", NULL);
			up_args[nup++] = optarg;
			break;
		case O_ROOMS: u32 = &cfg.rooms; break;
		case O_PPR: u32 = &cfg.pages_per_room; break;
		case O_CHUNK: u32 = &cfg.chunk_pages; break;
		case O_CONC: u32 = &cfg.concurrency; break;
		case O_PRANKS: u32 = &topo[0]; break;
		case O_PPP: u32 = &topo[1]; break;
		case O_DRANKS: u32 = &topo[2]; break;
		case O_DPP: u32 = &topo[3]; break;
		case O_ZERO: cfg.zero_last = 1; break;
		case O_VERIFY: cfg.verify = 1; break;
		case O_SEED:
			if (parse_num(optarg, UINT64_MAX, &v))
				return fatal_usage("bad --seed", optarg);
			cfg.seed = v;
			cfg.seeded = 1;
			break;
		case O_TIMEOUT:
			cfg.room_timeout_s = strtod(optarg, NULL);
			if (!(cfg.room_timeout_s > 0 &&
			      cfg.room_timeout_s < 1e6))
				return fatal_usage("bad --room-timeout", optarg);
			break;
		case O_ABORT: {
			char *end;

			cfg.abort_frac = strtod(optarg, &end);
			if (*end || !*optarg ||
			    !(cfg.abort_frac >= 0 && cfg.abort_frac <= 1))
				return fatal_usage("bad --abort-frac (0..1)",
						   optarg);
			break;
		}
		case O_LOG:
			if ((lvl = log_level_parse(optarg)) < 0)
				return fatal_usage("bad --log-level", optarg);
			break;
		case O_HELP: usage(stdout); return KVW_EXIT_OK;
		default:
			if (c >= O_SHAPE && c < O_SHAPE + (int)NSHAPE &&
			    nshape < MAX_ARGS) {
				struct shape chk;

				shape_default(&chk);
				if (shape_option(&chk, shape_names[c - O_SHAPE],
						 optarg, err, sizeof err) < 0)
					return fatal_usage(err, NULL);
				/* Applied after the run dir's shape line. */
				shape_idx[nshape] = (unsigned)(c - O_SHAPE);
				shape_val[nshape++] = optarg;
				break;
			}
			return fatal_usage("unknown or incomplete option",
					   argv[optind - 1]);
		}
		if (u32) {
			if (parse_num(optarg, UINT32_MAX, &v) || v == 0)
				return fatal_usage("want a positive integer",
						   optarg);
			*u32 = (uint32_t)v;
		}
	}
	if (optind < argc)
		return fatal_usage("unexpected argument", argv[optind]);
	if (!!run_dir + spawn != 1)
		return fatal_usage("give exactly one of --run-dir and --spawn",
				   NULL);
	log_init("bench", -1, (enum log_level)lvl);
	if (proc_signals_init() < 0) {
		fprintf(stderr, "kv-bench: fatal: unable to set signals\n");
		return KVW_EXIT_SYS;
	}
	tty = isatty(2);
	shape_default(&cfg.shape);
	if (spawn) {
		/* kv-up gets the topology and the shape flags, after any
		 * --up-arg. */
		static char topo_flag[4][16] = { "--prefill-tp", "--prefill-pp",
						 "--decode-tp", "--decode-pp" };

		for (int k = 0; k < 4; k++)
			if (topo[k] && snprintf(rk[k], sizeof rk[k], "%u", topo[k])) {
				up_args[nup++] = topo_flag[k];
				up_args[nup++] = rk[k];
			}
		for (unsigned i = 0; i < nshape; i++) {
			up_args[nup++] = flag[shape_idx[i]];
			if (shape_val[i])
				up_args[nup++] = shape_val[i];
		}
		up_args[nup] = NULL;
		if (!kv_up[0])
			spawn_default_kv_up(kv_up, sizeof kv_up);
		if (spawn_start(&sp, kv_up, up_args, 120, err, sizeof err)) {
			fprintf(stderr, "kv-bench: fatal: unable to start the "
				"group: %s\n", err);
			return KVW_EXIT_SYS;
		}
		run_dir = sp.dir;
	}
	rc = runinfo_load(run_dir, &ri, err, sizeof err);
	if (rc == 0)
		rc = runinfo_check_topo(ri, RUNINFO_PREFILL, topo[0],
					topo[1], err, sizeof err);
	if (rc == 0)
		rc = runinfo_check_topo(ri, RUNINFO_DECODE, topo[2],
					topo[3], err, sizeof err);
	if (rc == 0)
		rc = runinfo_shape_apply(runinfo_shape(ri), &cfg.shape, err,
					 sizeof err);
	for (unsigned i = 0; rc == 0 && i < nshape; i++) {
		rc = shape_option(&cfg.shape, shape_names[shape_idx[i]],
				  shape_val[i], err, sizeof err);
		rc = rc > 0 ? 0 : rc;
	}
	if (rc < 0) {
		fprintf(stderr, "kv-bench: fatal: unable to read the group: "
			"%s\n", err);
		spawn_stop(&sp);
		runinfo_free(&ri);
		return rc == KVW_EINVAL ? KVW_EXIT_USAGE : KVW_EXIT_SYS;
	}
	/* Measures and prints (modes.c); the exit code comes back. */
	rc = kvb_run(&mo, ri, &cfg, progress, &tty);
	spawn_stop(&sp);
	runinfo_free(&ri);
	return rc;
}
