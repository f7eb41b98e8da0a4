/*
 * kv-heartbeat - pings the peers in a kvwire room table's peer table and
 * fails the rooms of peers that stop answering or restart (lib/roles/heartbeat/hbeat.h).
 * Exit codes: 0 clean stop on SIGTERM, 100 usage, 111 system failure.
 */
#include <stdio.h>

#include "base/kvw.h"
#include "base/log.h"
#include "base/proc.h"
#include "common/cli.h"
#include "common/notify.h"
#include "roles/heartbeat/hbeat.h"

#define PROG "kv-heartbeat"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --table PATH [--interval SECONDS] [--max-failures N]\n"
		"       [--ping-timeout SECONDS] [--ready-fd N] [--log-level LEVEL]\n"
		"       [--name NAME] [--check]\n"
		"Pings every peer of the table each interval (default 5 s, may be\n"
		"fractional, min 0.05); max-failures (default 2) missed pings in a\n"
		"row mark a peer dead and fail its rooms. The ping timeout defaults\n"
		"to the interval. One socket dials every peer, one connection\n"
		"each, within the open-file limit (raised to the hard limit at\n"
		"start): a peer beyond it is not watched, never declared dead for\n"
		"it, and the log names the limit. --check validates the flags and\n"
		"exits.\n"
		"Exit: 0 stopped, 100 usage, 111 system failure.\n");
}

enum { O_TABLE = 256, O_INTERVAL, O_PING_TIMEOUT, O_MAX_FAILURES };

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "table", 1, 0, O_TABLE }, { "interval", 1, 0, O_INTERVAL },
		{ "ping-timeout", 1, 0, O_PING_TIMEOUT },
		{ "max-failures", 1, 0, O_MAX_FAILURES }, { 0, 0, 0, 0 },
	};
	struct hbeat_cfg cfg = { .interval_ns = 5000000000ull, .max_failures = 2 };
	struct hbeat *h = NULL;
	struct cli cl;
	int c, rc;
	char err[256];

	cli_init(&cl, PROG, CLI_READY_FD | CLI_LOG_LEVEL | CLI_NAME | CLI_CHECK | CLI_AUTH,
		 LOG_INFO, NULL);
	while ((c = cli_next(&cl, argc, argv, opts)) != CLI_END) {
		const char *v = cl.arg;

		switch (c) {
		case O_TABLE: cfg.table = v; break;
		case CLI_HELP: usage(stdout); return KVW_EXIT_OK;
		case O_INTERVAL:
			if (cli_seconds(v, 0.05, 1e6, &cfg.interval_ns))
				return cli_bad(&cl, "bad --interval (min 0.05): %s", v);
			break;
		case O_PING_TIMEOUT:
			if (cli_seconds(v, 0.001, 1e6, &cfg.ping_timeout_ns))
				return cli_bad(&cl, "bad --ping-timeout: %s", v);
			break;
		case O_MAX_FAILURES:
			if (cli_u32(v, 1, 1000000, &cfg.max_failures))
				return cli_bad(&cl, "bad --max-failures (min 1): %s", v);
			break;
		default: /* CLI_BAD: the fatal line is written */
			return KVW_EXIT_USAGE;
		}
	}
	if (!cfg.table)
		return cli_bad(&cl, "--table is required");
	if (cl.check) {
		rc = hbeat_check(&cfg, err, sizeof err);
		return rc ? cli_fatal(PROG, cli_exit_code(rc), "%s", err)
			  : KVW_EXIT_OK;
	}
	if (proc_signals_init() != 0)
		return cli_fatal(PROG, KVW_EXIT_SYS, "unable to install signal handlers");
	cli_log_init(&cl, "heartbeat", -1);
	(void)proc_raise_nofile(); /* sockets grow with the peers */
	cli_notify_init(); /* READY=1 to systemd too */
	rc = hbeat_open(&cfg, &h, err, sizeof err);
	if (rc)
		return cli_fatal(PROG, cli_exit_code(rc),
				 "unable to open table %s: %s", cfg.table, err);
	if (proc_ready(cl.ready_fd) != 0) {
		hbeat_close(&h);
		return cli_fatal(PROG, KVW_EXIT_SYS, "unable to write to --ready-fd");
	}
	rc = hbeat_run(h, err, sizeof err);
	hbeat_close(&h);
	if (rc)
		return cli_fatal(PROG, cli_exit_code(rc), "%s", err);
	return KVW_EXIT_OK;
}
