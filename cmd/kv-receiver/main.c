/*
 * kv-receiver - the decode rank's kvwire control process: parses flags,
 * builds the receiver (room table, pool, transport, sockets; lib/roles/receiver/receiver.h),
 * says READY on --ready-fd and runs the poll loop until SIGTERM. Exit codes:
 * 0 clean stop, 100 usage, 77 transport not available, 111 system failure.
 */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvw.h"
#include "base/log.h"
#include "base/proc.h"
#include "common/cli.h"
#include "common/notify.h"
#include "plan/shape.h"
#include "roles/receiver/receiver.h"
#include "roles/receiver/sink.h"

#define PROG "kv-receiver"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --listen EP --engine ipc://PATH --table PATH --pool PATH\n"
		"       [--topo tp,pp[,cp,dp]] [--rank tp,pp[,cp,dp]] [--transport shm|tcp|rdma]\n"
		"       [--waiting-timeout SECONDS] [--ready-fd N] [--log-level LEVEL]\n"
		"       [--name NAME] [--all-cp-ranks] [--forget-after SECONDS]\n"
		"       [--check] [shape options]\n"
		"       [--data-addr HOST[:PORT]] [--sinks N]   (tcp transport)\n"
		"       [--data-addr HOST[:PORT]] [--rdma-device NAME]\n"
		"       [--rdma-gid-index N]                     (rdma transport)\n"
		"Decode-side kvwire control process. --waiting-timeout defaults to\n"
		"$KVW_WAITING_TIMEOUT or 300 s. --all-cp-ranks: with prefill CP > 1,\n"
		"pull each CP rank's page share from every CP rank (default: CP\n"
		"rank 0 only). A prefill peer kv-heartbeat declared dead is\n"
		"forgotten (socket closed, table slot retired) once it has been\n"
		"dead for --forget-after (default 60 s) and no room names it.\n"
		"With --transport tcp, N sink processes (default 1)\n"
		"serve the data port on --data-addr (default 127.0.0.1, a free\n"
		"port) and write what prefill workers send into the pool. With\n"
		"--transport rdma, --data-addr is where prefill workers get their\n"
		"queue pairs; their RDMA WRITEs land in the pool directly.\n"
		"--check validates every flag and the config, makes\n"
		"nothing and prints pool_bytes=N. Shape options: %s\n"
		"Exit: 0 stopped, 77 transport not available, 100 usage, 111 system.\n",
		shape_usage());
}

enum { O_WAITING = 256, O_ALLCP, O_DATA_ADDR, O_SINKS, O_SINK_ID, O_SINK_FD,
       O_FORGET };

/* Sink mode (tcp): exec'd by kv-receiver with its data port as --sink-fd
 * and the registration's secret in KVW_SINK_SECRET (32 hex digits). */
static int run_sink(struct cli *cl, struct sink_cfg *s)
{
	const char *hex = getenv("KVW_SINK_SECRET");
	char err[256];
	int rc;

	if (s->listen_fd < 0 || !cl->member.table || !cl->member.pool)
		return cli_bad(cl, "sink mode needs --sink-fd, --table, --pool");
	if (!hex || strlen(hex) != 32)
		return cli_bad(cl, "sink mode needs KVW_SINK_SECRET (32 hex "
			       "digits)");
	for (unsigned i = 0; i < 16; i++) {
		unsigned v;

		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return cli_bad(cl, "bad KVW_SINK_SECRET");
		s->secret[i] = (uint8_t)v;
	}
	unsetenv("KVW_SINK_SECRET");
	s->table = cl->member.table;
	s->pool = cl->member.pool;
	cli_log_init(cl, "sink", (int)s->id);
	(void)proc_raise_nofile(); /* sockets grow with the peers */
	rc = sink_run(s, err, sizeof err);
	if (rc)
		return cli_fatal(PROG, cli_exit_code(rc), "%s", err);
	return KVW_EXIT_OK;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "waiting-timeout", 1, 0, O_WAITING },
		{ "all-cp-ranks", 0, 0, O_ALLCP },
		{ "forget-after", 1, 0, O_FORGET },
		{ "data-addr", 1, 0, O_DATA_ADDR }, { "sinks", 1, 0, O_SINKS },
		{ "sink-id", 1, 0, O_SINK_ID }, { "sink-fd", 1, 0, O_SINK_FD },
		{ 0, 0, 0, 0 },
	};
	struct sink_cfg sink = { .listen_fd = -1 };
	uint32_t u;
	int sink_mode = 0;
	struct receiver_cfg cfg = { 0 };
	struct receiver *r = NULL;
	const char *tmo = getenv("KVW_WAITING_TIMEOUT");
	const struct cli_member *m;
	struct cli cl;
	int c, rc;
	char err[256];

	shape_default(&cfg.shape);
	cli_init(&cl, PROG,
		 CLI_READY_FD | CLI_LOG_LEVEL | CLI_NAME | CLI_SHAPE | CLI_MEMBER |
			 CLI_CHECK | CLI_AUTH,
		 LOG_INFO, &cfg.shape);
	while ((c = cli_next(&cl, argc, argv, opts)) != CLI_END) {
		switch (c) {
		case O_ALLCP: cfg.all_cp_ranks = 1; break;
		case O_FORGET:
			if (cli_seconds(cl.arg, 1e-9, 1e7, &cfg.forget_after_ns))
				return cli_bad(&cl, "bad --forget-after: %s",
					       cl.arg);
			break;
		case O_DATA_ADDR: cfg.data_addr = cl.arg; break;
		case O_SINKS:
			if (cli_u32(cl.arg, 1, RECEIVER_MAX_SINKS, &cfg.sinks))
				return cli_bad(&cl, "--sinks: want 1..%u, got %s",
					       RECEIVER_MAX_SINKS, cl.arg);
			break;
		case O_SINK_ID:
			if (cli_u32(cl.arg, 0, RECEIVER_MAX_SINKS - 1, &sink.id))
				return cli_bad(&cl, "bad --sink-id: %s", cl.arg);
			sink_mode = 1;
			break;
		case O_SINK_FD:
			if (cli_u32(cl.arg, 0, INT32_MAX, &u))
				return cli_bad(&cl, "bad --sink-fd: %s", cl.arg);
			sink.listen_fd = (int)u;
			break;
		case CLI_HELP: usage(stdout); return KVW_EXIT_OK;
		case O_WAITING:
			tmo = cl.arg;
			if (cli_seconds(tmo, 1e-9, 1e7, &cfg.waiting_timeout_ns))
				return cli_bad(&cl, "bad --waiting-timeout: %s", tmo);
			break;
		default: /* CLI_BAD: the fatal line is written */
			return KVW_EXIT_USAGE;
		}
	}
	if (sink_mode) {
		if (proc_signals_init() != 0)
			return cli_fatal(PROG, KVW_EXIT_SYS,
					 "unable to install signal handlers");
		return run_sink(&cl, &sink);
	}
	if ((rc = cli_member_check(&cl)) != 0)
		return rc;
	if (cfg.waiting_timeout_ns == 0 &&
	    cli_seconds(tmo ? tmo : "300", 1e-9, 1e7, &cfg.waiting_timeout_ns))
		return cli_bad(&cl, "bad KVW_WAITING_TIMEOUT: %s", tmo);
	m = &cl.member;
	cfg.listen = m->listen;
	cfg.engine = m->engine;
	cfg.table = m->table;
	cfg.pool = m->pool;
	cfg.transport = m->transport;
	cfg.topo = m->topo;
	cfg.rank = m->rank;
	if (cl.check) {
		uint64_t bytes;

		rc = receiver_check(&cfg, &bytes, err, sizeof err);
		if (rc)
			return cli_fatal(PROG, cli_exit_code(rc), "%s", err);
		printf("pool_bytes=%llu\n", (unsigned long long)bytes);
		return KVW_EXIT_OK;
	}
	if (proc_signals_init() != 0)
		return cli_fatal(PROG, KVW_EXIT_SYS, "unable to install signal handlers");
	cli_log_init(&cl, "receiver", (int)cfg.rank.tp);
	(void)proc_raise_nofile(); /* sockets grow with the peers */
	cli_notify_init(); /* READY=1 to systemd too */
	rc = receiver_open(&cfg, &r, err, sizeof err);
	if (rc)
		return cli_fatal(PROG, cli_exit_code(rc), "unable to start: %s", err);
	if (proc_ready(cl.ready_fd) != 0) {
		receiver_close(&r);
		return cli_fatal(PROG, KVW_EXIT_SYS, "unable to write to --ready-fd");
	}
	rc = receiver_run(r, err, sizeof err);
	receiver_close(&r);
	if (rc)
		return cli_fatal(PROG, cli_exit_code(rc), "%s", err);
	return KVW_EXIT_OK;
}
