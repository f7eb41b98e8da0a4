/*
 * copy.c - `kv-bench copy`: flags for bench_copy_run (cmd/kv-bench/bench_copy.c)
 * and its report, one row per pattern.
 */
#include <string.h>

#include "bench_copy.h"
#include "history.h"
#include "modes.h"
#include "base/proc.h"
#include "common/cli.h"
#include "xport/xport.h"

static void copy_usage(FILE *f)
{
	fprintf(f,
		"usage: kv-bench copy [options]\n"
		"A transport (xport_write_batch between two pool files in "
		"/dev/shm, batches\nas a sender worker sends them) against one "
		"core's memcpy of the same copy\nlist, measured right before "
		"and after it.\n"
		"  --pattern P       contiguous (runs of --run-pages pages), "
		"scattered (single\n"
		"                    pages, no two adjacent), or both "
		"(default)\n"
		"  --page-bytes N    bytes per page (default 4096)\n"
		"  --run-pages N     pages per contiguous run (default: 64 KiB "
		"worth)\n"
		"  --mib N           MiB copied per pass (default 128; pools "
		"are twice that)\n"
		"  --seconds S       minimum time of each measurement (default "
		"0.1)\n"
		"  --reps N          memcpy/transport/memcpy rounds, best of "
		"each (default 7)\n"
		"  --seed N          page order (default 1)\n"
		"  --transport T     shm (default); tcp: to a forked sink over\n"
		"                    loopback, against a raw TCP stream of the same\n"
		"                    bytes per pass (the limit, instead of memcpy);\n"
		"                    cuda: between two GPU pools of a forked engine\n"
		"                    child, against cudaMemcpy device-to-device of\n"
		"                    the same list in that child (77 without a GPU),\n"
		"                    or rdma: RDMA WRITE through the device's\n"
		"                    loopback (both ends here), against memcpy\n"
		"                    (compare with ib_write_bw on the same device)\n"
		"  --rdma-device NAME, --rdma-gid-index N   (rdma: which device, GID)\n"
		"  --json            one JSON document\n"
		"Exit: 0 measured (and the destination verified), 1 a pass "
		"copied wrong bytes\nor SIGTERM stopped it (its pools are "
		"removed), 77 the transport is not available here, 100 usage,\n"
		"111 system error.\n");
}

static void row(const struct bench_copy_cfg *c, const struct bench_copy_result *r,
		int json, int first)
{
	const char *name = c->pattern == BENCH_COPY_CONTIGUOUS ? "contiguous"
							       : "scattered";

	if (json) {
		printf("%s{\"pattern\":\"%s\",\"copy_bytes\":%llu,\"copies\":%u,"
		       "\"bytes\":%llu,\"xport_gib_per_s\":%.3f,"
		       "\"memcpy_before\":%.3f,\"memcpy_after\":%.3f,"
		       "\"ratio\":%.3f,\"verified\":%s}", first ? "" : ",", name,
		       (unsigned long long)r->copy_bytes, r->copies,
		       (unsigned long long)r->bytes, r->xport_gibs,
		       r->before_gibs, r->after_gibs, r->ratio,
		       r->verified ? "true" : "false");
		return;
	}
	printf("%-11s %10llu %8u %12.3f %12.3f %12.3f %7.3f %s\n", name,
	       (unsigned long long)r->copy_bytes, r->copies, r->xport_gibs,
	       r->before_gibs, r->after_gibs, r->ratio,
	       r->verified ? "yes" : "NO");
}

int kvb_copy_main(int argc, char **argv, const struct kvb_opts *o)
{
	enum { O_PAT = 256, O_PAGE, O_RUN, O_MIB, O_SECS, O_REPS, O_SEED,
	       O_XPORT };
	static const struct option opts[] = {
		{ "pattern", 1, NULL, O_PAT }, { "page-bytes", 1, NULL, O_PAGE },
		{ "run-pages", 1, NULL, O_RUN }, { "mib", 1, NULL, O_MIB },
		{ "seconds", 1, NULL, O_SECS }, { "reps", 1, NULL, O_REPS },
		{ "seed", 1, NULL, O_SEED }, { "transport", 1, NULL, O_XPORT },
		{ NULL, 0, NULL, 0 },
	};
	struct bench_copy_cfg cfg = { .page_bytes = 4096, .total_bytes = 128u << 20,
				      .min_s = 0.1, .reps = 7, .seed = 1 };
	int pat = 3, c, ok = 1, first = 1; /* bit 0 contiguous, bit 1 scattered */
	const char *xname, *lname;
	struct cli cl;
	uint64_t v;
	char err[512];

	cli_init(&cl, "kv-bench", CLI_RDMA, 0, NULL);
	while ((c = cli_next(&cl, argc, argv, opts)) != CLI_END) {
		switch (c) {
		case O_PAT:
			pat = !strcmp(cl.arg, "contiguous") ? 1
			    : !strcmp(cl.arg, "scattered") ? 2
			    : !strcmp(cl.arg, "both") ? 3 : 0;
			if (!pat)
				return cli_bad(&cl, "bad --pattern: %s", cl.arg);
			break;
		case O_PAGE: case O_RUN: case O_MIB: case O_REPS: case O_SEED:
			if (cli_u64(cl.arg, 1, c == O_MIB ? 1u << 16 : UINT32_MAX,
				    &v))
				return cli_bad(&cl, "want a positive integer: %s",
					       cl.arg);
			if (c == O_PAGE) cfg.page_bytes = v;
			if (c == O_RUN) cfg.run_pages = (uint32_t)v;
			if (c == O_MIB) cfg.total_bytes = v << 20;
			if (c == O_REPS) cfg.reps = (uint32_t)v;
			if (c == O_SEED) cfg.seed = v;
			break;
		case O_XPORT:
			if (strcmp(cl.arg, "shm") && strcmp(cl.arg, "tcp") &&
			    strcmp(cl.arg, "cuda") && strcmp(cl.arg, "rdma"))
				return cli_bad(&cl, "--transport: shm, tcp, cuda "
					       "or rdma, got %s", cl.arg);
			cfg.tcp = !strcmp(cl.arg, "tcp");
			cfg.cuda = !strcmp(cl.arg, "cuda");
			cfg.rdma = !strcmp(cl.arg, "rdma");
			break;
		case O_SECS:
			if (cli_double(cl.arg, 1e-9, 3600, &cfg.min_s))
				return cli_bad(&cl, "bad --seconds: %s", cl.arg);
			break;
		case CLI_HELP: copy_usage(stdout); return KVW_EXIT_OK;
		default: /* CLI_BAD: the fatal line is written */
			return KVW_EXIT_USAGE;
		}
	}
	if (!cfg.run_pages)
		cfg.run_pages = cfg.page_bytes >= 65536
					? 1 : (uint32_t)((65535 + cfg.page_bytes) /
							 cfg.page_bytes);
	/* A transport this machine lacks: 77 with the probe's reason before
	 * anything is made. */
	if (xport_probe(cfg.rdma ? "rdma" : cfg.tcp ? "tcp" : "shm", err,
			sizeof err) < 0)
		return cli_fatal("kv-bench", KVW_EXIT_SKIP, "copy: %s", err);
	if (proc_signals_init() < 0)
		return cli_fatal("kv-bench", KVW_EXIT_SYS,
				 "unable to install signal handlers");
	xname = cfg.cuda ? "cuda" : cfg.rdma ? "rdma" : cfg.tcp ? "tcp" : "shm";
	lname = cfg.cuda ? "cudaMemcpy D2D" : cfg.tcp ? "tcp stream" : "memcpy";
	if (o->json) {
		printf("{\"mode\":\"copy\",\"transport\":\"%s\",\"limit\":\"%s\",",
		       xname, lname);
		kvb_machine_print(stdout, 1, cfg.page_bytes);
		printf(",\"seconds\":%.3f,\"reps\":%u,\"results\":[", cfg.min_s,
		       cfg.reps);
	} else {
		kvb_machine_print(stdout, 0, cfg.page_bytes);
		printf("%-11s %10s %8s %12s %12s %12s %7s %s\n", "pattern",
		       "copy_bytes", "copies",
		       cfg.cuda ? "cuda_GiB/s" : cfg.rdma ? "rdma_GiB/s"
			 : cfg.tcp ? "tcp_GiB/s" : "shm_GiB/s",
		       cfg.cuda ? "d2d_bef" : cfg.tcp ? "stream_bef"
						      : "memcpy_bef",
		       cfg.cuda ? "d2d_aft" : cfg.tcp ? "stream_aft"
						      : "memcpy_aft", "ratio",
		       "verified");
	}
	fflush(stdout);
	for (int k = 0; k < 2; k++) {
		struct bench_copy_result r;
		int rc;

		if (!(pat & (1 << k)))
			continue;
		cfg.pattern = k ? BENCH_COPY_SCATTERED : BENCH_COPY_CONTIGUOUS;
		rc = bench_copy_run(&cfg, &r, err, sizeof err);
		if (rc < 0) {
			fflush(stdout);
			/* Stopped by SIGTERM/SIGINT: not every figure was
			 * measured (exit 1), and the pools are gone. */
			return cli_fatal("kv-bench",
					 proc_stopping() ? 1 : cli_exit_code(rc),
					 "copy: %s", err);
		}
		row(&cfg, &r, o->json, first);
		history_note(o->record, "copy",
			     cfg.tcp ? (k ? "tcp-scattered" : "tcp-contiguous")
			     : cfg.rdma ? (k ? "rdma-scattered" : "rdma-contiguous")
			     : (k ? "shm-scattered" : "shm-contiguous"),
			     r.xport_gibs, r.before_gibs > r.after_gibs
					       ? r.before_gibs : r.after_gibs,
			     r.ratio);
		first = 0;
		ok &= r.verified;
		fflush(stdout);
	}
	if (o->json)
		printf("]}\n");
	return ok ? KVW_EXIT_OK : 1;
}
