/*
 * tcp.c - `kv-bench tcp`: the tcp transport alone between two processes
 * (this one writing as a sender worker does, a forked sink reading into a
 * pool file) for the three shapes KV takes on the wire - 4 KiB pages
 * scattered over the pool, 64 KiB runs and 1 MiB runs - each beside a raw
 * TCP stream of the same bytes over the same loopback path, measured in
 * the same run (bench_copy.c with tcp), with the CPU seconds per GB moved
 * of both. The ratios are set against the goals and reported, not
 * enforced: a benchmark, not a test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_copy.h"
#include "history.h"
#include "modes.h"
#include "base/kvw.h"
#include "base/proc.h"
#include "common/cli.h"

static void tcp_usage(FILE *f)
{
	fprintf(f,
		"usage: kv-bench tcp [options]\n"
		"The tcp transport alone, to a forked sink over loopback, for 4 KiB\n"
		"pages scattered over the pool, 64 KiB runs and 1 MiB runs, each\n"
		"beside a raw TCP stream of the same bytes measured in the same run\n"
		"(ratio), with CPU seconds per GB moved of both (both processes).\n"
		"  --mib N        MiB per pass (default 64)\n"
		"  --seconds S    minimum time of each measurement (default 0.5)\n"
		"  --reps N       stream/tcp/stream rounds, best of each (default 3)\n"
		"  --auth MODE    on (default: every data connection proves the\n"
		"                 group's data key and every batch carries Poly1305\n"
		"                 tags, docs/TCP-V4.md), off (--insecure: XXH3-128)\n"
		"                 or both: each case without, then with, and the ratio\n"
		"                 of their tcp GiB/s (the cost of authentication)\n"
		"  --encrypt      AES-256-GCM payloads (the group's --encrypt; with\n"
		"                 --auth on)\n"
		"  --json         one JSON document\n"
		"Goals (reported, not enforced): ratio >= 0.6 scattered, >= 0.8 at\n"
		"64 KiB (and <= 1.0 CPU s/GB), >= 0.85 at 1 MiB.\n"
		"Exit: 0 measured and every destination verified, 1 a pass copied\n"
		"wrong bytes or a signal stopped it, 100 usage, 111 system error.\n");
}

struct tcp_case {
	const char *name;
	enum bench_copy_pattern pattern;
	uint32_t run_pages; /* of 4 KiB */
	double goal;
};

static const struct tcp_case cases[] = {
	{ "4KiB-scattered", BENCH_COPY_SCATTERED, 1, 0.6 },
	{ "64KiB", BENCH_COPY_CONTIGUOUS, 16, 0.8 },
	{ "1MiB", BENCH_COPY_CONTIGUOUS, 256, 0.85 },
};

static void row(const struct tcp_case *k, const struct bench_copy_result *r,
		int json, int first)
{
	double lim = r->before_gibs > r->after_gibs ? r->before_gibs
						    : r->after_gibs;

	if (json) {
		printf("%s{\"case\":\"%s\",\"copy_bytes\":%llu,\"copies\":%u,"
		       "\"tcp_gibs\":%.4f,\"stream_gibs\":%.4f,\"ratio\":%.4f,"
		       "\"goal\":%.2f,\"tcp_cpu_s_per_gb\":%.4f,"
		       "\"stream_cpu_s_per_gb\":%.4f,\"verified\":%s}",
		       first ? "" : ",", k->name,
		       (unsigned long long)r->copy_bytes, r->copies,
		       r->xport_gibs, lim, r->ratio, k->goal, r->xport_cpu_gb,
		       r->limit_cpu_gb, r->verified ? "true" : "false");
		return;
	}
	printf("%-20s %10llu %10.3f %12.3f %6.3f %5.2f %-5s %9.3f %12.3f %s\n",
	       k->name, (unsigned long long)r->copy_bytes, r->xport_gibs, lim,
	       r->ratio, k->goal, r->ratio >= k->goal ? "met" : "below",
	       r->xport_cpu_gb, r->limit_cpu_gb, r->verified ? "yes" : "NO");
}

int kvb_tcp_main(int argc, char **argv, const struct kvb_opts *o)
{
	enum { O_MIB = 256, O_SECS, O_REPS, O_AUTH, O_ENC };
	static const struct option opts[] = {
		{ "mib", 1, NULL, O_MIB }, { "seconds", 1, NULL, O_SECS },
		{ "reps", 1, NULL, O_REPS }, { "auth", 1, NULL, O_AUTH },
		{ "encrypt", 0, NULL, O_ENC }, { NULL, 0, NULL, 0 },
	};
	static uint8_t group_key[32];
	int auth = 2; /* bit 0: a pass without the key, bit 1: one with it */
	struct bench_copy_cfg cfg = { .page_bytes = 4096, .total_bytes = 64u << 20,
				      .min_s = 0.5, .reps = 3, .seed = 1,
				      .tcp = 1 };
	struct cli cl;
	char err[512];
	uint64_t v;
	int c, ok = 1;

	cli_init(&cl, "kv-bench", 0, 0, NULL);
	while ((c = cli_next(&cl, argc, argv, opts)) != CLI_END) {
		switch (c) {
		case O_MIB: case O_REPS:
			if (cli_u64(cl.arg, 1, c == O_MIB ? 1u << 14 : 1000, &v))
				return cli_bad(&cl, "want a positive integer: %s",
					       cl.arg);
			if (c == O_MIB)
				cfg.total_bytes = v << 20;
			else
				cfg.reps = (uint32_t)v;
			break;
		case O_SECS:
			if (cli_double(cl.arg, 1e-3, 3600, &cfg.min_s))
				return cli_bad(&cl, "bad --seconds: %s", cl.arg);
			break;
		case O_AUTH:
			auth = !strcmp(cl.arg, "off") ? 1 : !strcmp(cl.arg, "on") ? 2
			       : !strcmp(cl.arg, "both") ? 3 : 0;
			if (!auth)
				return cli_bad(&cl, "--auth: want off, on or "
					       "both, got %s", cl.arg);
			break;
		case O_ENC: /* read by the tcp transport at its open */
			setenv("KVW_TCP_ENCRYPT", "1", 1);
			break;
		case CLI_HELP: tcp_usage(stdout); return KVW_EXIT_OK;
		default: return KVW_EXIT_USAGE; /* CLI_BAD: line written */
		}
	}
	if (proc_signals_init() < 0)
		return cli_fatal("kv-bench", KVW_EXIT_SYS,
				 "unable to install signal handlers");
	if (o->json) {
		printf("{\"mode\":\"tcp\",\"limit\":\"tcp stream\",");
		kvb_machine_print(stdout, 1, cfg.page_bytes);
		printf(",\"seconds\":%.3f,\"reps\":%u,\"results\":[", cfg.min_s,
		       cfg.reps);
	} else {
		kvb_machine_print(stdout, 0, cfg.page_bytes);
		printf("%-20s %10s %10s %12s %6s %5s %-5s %9s %12s %s\n", "case",
		       "copy_bytes", "tcp_GiB/s", "stream_GiB/s", "ratio",
		       "goal", "", "tcp_cpu/GB", "stream_cpu/GB", "verified");
	}
	fflush(stdout);
	/* Any 32 bytes: both ends are this run's. */
	for (size_t k = 0; k < sizeof group_key; k++)
		group_key[k] = (uint8_t)(k * 37 + 11);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		double gibs[2] = { 0, 0 };

		for (int a = 0; a < 2; a++) {
			struct tcp_case k = cases[i];
			struct bench_copy_result r;
			char name[32];
			int rc;

			if (!(auth & (1 << a)))
				continue;
			snprintf(name, sizeof name, "%s%s", k.name,
				 a && auth == 3 ? "+auth" : "");
			k.name = name;
			cfg.pattern = k.pattern;
			cfg.run_pages = k.run_pages;
			cfg.group_key = a ? group_key : NULL;
			rc = bench_copy_run(&cfg, &r, err, sizeof err);
			if (rc < 0)
				return cli_fatal("kv-bench",
						 proc_stopping() ? 1
								 : cli_exit_code(rc),
						 "tcp %s: %s", k.name, err);
			row(&k, &r, o->json, i == 0 && (a == 0 || auth == 2));
			history_note(o->record, "tcp", k.name, r.xport_gibs,
				     r.before_gibs > r.after_gibs
					     ? r.before_gibs : r.after_gibs,
				     r.ratio);
			gibs[a] = r.xport_gibs;
			ok &= r.verified;
			fflush(stdout);
		}
		if (auth == 3 && !o->json && gibs[0] > 0)
			printf("%-20s auth/insecure tcp GiB/s ratio %.3f\n",
			       cases[i].name, gibs[1] / gibs[0]);
	}
	if (o->json)
		printf("]}\n");
	return ok ? KVW_EXIT_OK : 1;
}
