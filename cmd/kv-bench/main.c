/*
 * kv-bench - simulated prefill and decode engines driving a running kvwire
 * group (--run-dir DIR) or a private one it starts through kv-up
 * (--spawn): rooms of random ids move patterned KV pages from the prefill
 * pools to the decode pools, optionally verified byte by byte. Prints one
 * summary line of key=value pairs on stdout; a progress bar on stderr when
 * that is a terminal. The logic is in cmd/kv-bench/bench.c; the flags are in flags.c;
 * the modes (copy, rooms, demo) and their reports against the machine's
 * limits are in modes.c and copy.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "flags.h"
#include "history.h"
#include "modes.h"
#include "netns.h"
#include "plot.h"
#include "spawn.h"
#include "base/kvw.h"
#include "base/proc.h"
#include "common/cli.h"
#include "plan/runinfo.h"
#include "plan/shape.h"

#define PROG "kv-bench"

/* Starts a group with kv-up args `up` (--spawn) or reads run_dir, runs
 * the bench over it and stops what it started. The exit code. */
static int one_group(struct kvb_flags *fl, char *const *up,
		     const struct kvb_opts *mo, struct bench_config cfg,
		     struct kvb_progress *prog)
{
	static struct bench_netns ns;
	struct kvb_opts m = *mo;
	struct spawn sp = { 0 };
	struct runinfo *ri = NULL;
	const char *run_dir = fl->run_dir;
	char err[512];
	int rc;

	if ((m.netns || fl->spawn) && !fl->kv_up[0])
		spawn_default_kv_up(fl->kv_up, sizeof fl->kv_up);
	if (m.netns) {
		if (netns_make(&ns, err, sizeof err))
			return cli_fatal(PROG, KVW_EXIT_SYS, "%s", err);
		if (netns_group_start(&ns, fl->kv_up, up, err, sizeof err)) {
			netns_free(&ns);
			return cli_fatal(PROG, KVW_EXIT_SYS,
					 "unable to start the group across "
					 "two namespaces: %s", err);
		}
		run_dir = ns.dir;
		m.ns = &ns;
		mo = &m;
	} else if (fl->spawn) {
		if (spawn_start(&sp, fl->kv_up, up, 120, err, sizeof err))
			return cli_fatal(PROG, sp.up_rc == KVW_EXIT_SKIP
						       ? KVW_EXIT_SKIP
						       : KVW_EXIT_SYS,
					 "unable to start the group: %s", err);
		run_dir = sp.dir;
	}
	rc = runinfo_load(run_dir, &ri, err, sizeof err);
	cfg.run_dir = run_dir; /* names it in --peers' summary */
	if (rc == 0)
		rc = runinfo_check_topo(ri, RUNINFO_PREFILL, fl->topo[0],
					fl->topo[1], err, sizeof err);
	if (rc == 0)
		rc = runinfo_check_topo(ri, RUNINFO_DECODE, fl->topo[2],
					fl->topo[3], err, sizeof err);
	if (rc == 0)
		rc = runinfo_shape_apply(runinfo_shape(ri), &cfg.shape, err,
					 sizeof err);
	if (rc == 0)
		rc = kvb_flags_shape(fl, &cfg.shape, runinfo_shape(ri), err,
				     sizeof err);
	if (rc < 0) {
		spawn_stop(&sp);
		netns_free(&ns);
		runinfo_free(&ri);
		return cli_fatal(PROG, cli_exit_code(rc),
				 "unable to read the group: %s", err);
	}
	/* Measures and prints (modes.c); the exit code comes back. */
	rc = kvb_run(mo, ri, &cfg, kvb_progress_cb, prog);
	plot_free(prog);
	spawn_stop(&sp);
	netns_free(&ns);
	runinfo_free(&ri);
	return rc;
}

/* --auth-cost: the same rooms bench on a group whose control sockets are
 * tcp:// with the group's keys (CURVE, kv-up makes them), then on one
 * with --insecure, one after the other in this run; the ratio of their
 * rooms/s is what authentication costs. */
static int auth_cost(struct kvb_flags *fl, struct kvb_opts *mo,
		     const struct bench_config *cfg, struct kvb_progress *prog)
{
	/* Fixed ports by default (kv-up's --advertise needs them); a
	 * test or a shared host picks its own with --port-base N. */
	uint32_t pb = mo->port_base ? mo->port_base : 27400;
	char ports[2][12];
	char *const variant[2][6] = {
		{ "--advertise", "127.0.0.1", "--port-base", ports[0], NULL },
		{ "--advertise", "127.0.0.1", "--port-base", ports[1],
		  "--insecure", NULL },
	};
	static const char *const name[2] = { "keys (CURVE)", "--insecure" };
	char *const *base = kvb_flags_up_args(fl);
	char *up[3 * KVB_MAX_ARGS + 16];
	double rps[2] = { 0, 0 };
	size_t n = 0;
	int rc = KVW_EXIT_OK;

	snprintf(ports[0], sizeof ports[0], "%u", (unsigned)pb);
	snprintf(ports[1], sizeof ports[1], "%u", (unsigned)pb + 100);
	while (base[n] && n < sizeof up / sizeof up[0] - 6)
		n++;
	memcpy(up, base, n * sizeof *up);
	for (int v = 0; v < 2; v++) {
		size_t k = n;
		int r;

		for (int j = 0; variant[v][j]; j++)
			up[k++] = variant[v][j];
		up[k] = NULL;
		printf("auth cost: group with %s\n", name[v]);
		fflush(stdout);
		mo->rooms_per_s = &rps[v];
		r = one_group(fl, up, mo, *cfg, prog);
		if (r != KVW_EXIT_OK)
			rc = r;
	}
	printf("auth cost: rooms/s with keys %.1f, with --insecure %.1f, "
	       "ratio %.3f\n", rps[0], rps[1], rps[1] > 0 ? rps[0] / rps[1] : 0);
	return rc;
}

/* One run of the mode mo chose, on the flags left after its own. */
static int run(int argc, char **argv, const struct kvb_opts *m)
{
	static struct kvb_flags fl;
	struct bench_config cfg = { .rooms = 100, .pages_per_room = 16,
				    .chunk_pages = 4, .concurrency = 8,
				    .room_timeout_s = 60 };
	struct kvb_opts mo = *m;
	struct kvb_progress prog = { 0 };
	int rc;

	if (mo.mode == KVB_COPY)
		return kvb_copy_main(argc, argv, &mo);
	if (mo.mode == KVB_TCP)
		return kvb_tcp_main(argc, argv, &mo);
	if (mo.mode == KVB_HISTORY)
		return history_main(argc, argv);
	kvb_defaults(&mo, &cfg);
	if ((rc = kvb_flags_parse(argc, argv, &fl, &cfg)) >= 0)
		return rc;
	mo.stream_limit = fl.transport && strcmp(fl.transport, "tcp") == 0;
	if (mo.netns && !mo.stream_limit)
		return cli_fatal(PROG, KVW_EXIT_USAGE, "--netns moves the bytes "
				 "between two hosts: with --transport tcp");
	cli_log_init(&fl.cl, "bench", -1);
	if (proc_signals_init() < 0)
		return cli_fatal(PROG, KVW_EXIT_SYS, "unable to set signals");
	/* The bar only on a terminal (plot.c). */
	prog.tty = isatty(2);
	shape_default(&cfg.shape);
	if (mo.auth_cost)
		return auth_cost(&fl, &mo, &cfg, &prog);
	return one_group(&fl, kvb_flags_up_args(&fl), &mo, cfg, &prog);
}

int main(int argc, char **argv)
{
	struct kvb_opts mo;
	int rc;

	/* The mode word and the modes' own flags first (modes.c): argv
	 * becomes a vector of its own, freed once the run is over (so that
	 * LeakSanitizer has nothing to say of a kv-bench that ended). */
	if ((rc = kvb_opts_parse(&argc, &argv, &mo)) != 0)
		return rc;
	rc = run(argc, argv, &mo);
	free(argv);
	return rc;
}
