/*
 * kv-sender - the prefill rank's transfer control process (lib/roles/sender.h)
 * and, with --worker-id, one of its worker processes (lib/roles/worker.h),
 * which the control execs from /proc/self/exe. This file only parses
 * flags and maps results to exit codes: 0 clean stop, 100 usage (or the
 * bootstrap refused the registration), 111 system failure.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/kvw.h"
#include "base/log.h"
#include "base/proc.h"
#include "cli/cli.h"
#include "plan/shape.h"
#include "roles/sender.h"
#include "roles/worker.h"

#define PROG "kv-sender"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --listen EP --engine EP --table PATH --pool PATH\n"
		"         [--bootstrap EP] [--workers N] [--topo tp,pp] [--rank tp,pp]\n"
		"         [--bootstrap-timeout SECONDS] [--transport shm]\n"
		"         [--ready-fd N] [--log-level L] [--name NAME] [shape flags]\n"
		"       " PROG " --worker-id K --job-fd FD --table PATH --pool PATH\n"
		"         (worker mode: started by the control, FD its socketpair end)\n"
		"  %s\n"
		"Prefill-side control process of kvwire: takes REGISTER/XFER_INFO/ABORT\n"
		"from decode peers on --listen and SEND_BEGIN/SEND_CHUNK/CLEAR from the\n"
		"engine on --engine (ipc, 0600), moves KV through N worker processes.\n"
		"--bootstrap-timeout (env KVW_BOOTSTRAP_TIMEOUT, default 300) bounds a\n"
		"room's life. Exit: 0 stopped, 100 usage or registration refused,\n"
		"111 system failure.\n",
		shape_usage());
}

enum { O_LISTEN = 256, O_ENGINE, O_BOOT, O_TABLE, O_POOL, O_WORKERS, O_TOPO,
       O_RANK, O_BTIMEOUT, O_TRANSPORT, O_WORKER_ID, O_JOB_FD };

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", 1, 0, O_LISTEN }, { "engine", 1, 0, O_ENGINE },
		{ "bootstrap", 1, 0, O_BOOT }, { "table", 1, 0, O_TABLE },
		{ "pool", 1, 0, O_POOL }, { "workers", 1, 0, O_WORKERS },
		{ "topo", 1, 0, O_TOPO }, { "rank", 1, 0, O_RANK },
		{ "bootstrap-timeout", 1, 0, O_BTIMEOUT },
		{ "transport", 1, 0, O_TRANSPORT }, { "worker-id", 1, 0, O_WORKER_ID },
		{ "job-fd", 1, 0, O_JOB_FD }, { 0, 0, 0, 0 },
	};
	struct sender_cfg cfg = { .workers = 4, .transport = "shm",
				  .exe = "/proc/self/exe",
				  .bootstrap_timeout_ns = 300000000000ull };
	struct worker_cfg wcfg = { .job_fd = -1 };
	struct sender *s = NULL;
	struct cli cl;
	int worker = 0, c, rc;
	uint32_t q[4], jfd;
	char err[512] = "";
	const char *env = getenv("KVW_BOOTSTRAP_TIMEOUT");

	cfg.topo = (struct kvw_topo){ 1, 1, 1, 1 };
	shape_default(&cfg.shape);
	cli_init(&cl, PROG, CLI_READY_FD | CLI_LOG_LEVEL | CLI_NAME | CLI_SHAPE,
		 LOG_INFO, &cfg.shape);
	if (env && cli_seconds(env, 1e-9, 1e7, &cfg.bootstrap_timeout_ns))
		return cli_bad(&cl, "bad KVW_BOOTSTRAP_TIMEOUT: %s", env);
	while ((c = cli_next(&cl, argc, argv, opts)) != CLI_END) {
		const char *v = cl.arg;

		switch (c) {
		case O_LISTEN: cfg.listen = v; break;
		case O_ENGINE: cfg.engine = v; break;
		case O_BOOT: cfg.bootstrap = v; break;
		case O_TABLE: cfg.table = v; break;
		case O_POOL: cfg.pool = v; break;
		case O_JOB_FD:
			if (cli_u32(v, 0, INT32_MAX, &jfd))
				return cli_fatal(PROG, KVW_EXIT_USAGE,
						 "bad --job-fd: %s", v);
			wcfg.job_fd = (int)jfd;
			break;
		case O_TRANSPORT: cfg.transport = v; break;
		case CLI_HELP: usage(stdout); return KVW_EXIT_OK;
		case O_WORKERS:
			if (cli_u32(v, 1, SENDER_MAX_WORKERS, &cfg.workers))
				return cli_fatal(PROG, KVW_EXIT_USAGE,
						 "--workers: want 1..64, got %s", v);
			break;
		case O_WORKER_ID:
			if (cli_u32(v, 0, SENDER_MAX_WORKERS - 1, &wcfg.id))
				return cli_fatal(PROG, KVW_EXIT_USAGE,
						 "bad --worker-id: %s", v);
			worker = 1;
			break;
		case O_TOPO:
			if (shape_parse_quad(v, 1, q) || !q[0] || !q[1] ||
			    !q[2] || !q[3])
				return cli_bad(&cl, "bad --topo: %s", v);
			cfg.topo = (struct kvw_topo){ q[0], q[1], q[2], q[3] };
			break;
		case O_RANK:
			if (shape_parse_quad(v, 0, q))
				return cli_bad(&cl, "bad --rank: %s", v);
			cfg.coord = (struct kvw_coord){ q[0], q[1], q[2], q[3] };
			break;
		case O_BTIMEOUT:
			if (cli_seconds(v, 1e-9, 1e7, &cfg.bootstrap_timeout_ns))
				return cli_fatal(PROG, KVW_EXIT_USAGE,
						 "bad --bootstrap-timeout: %s", v);
			break;
		default: /* CLI_BAD: the fatal line is written */
			return KVW_EXIT_USAGE;
		}
	}
	cfg.name = cl.name;
	cfg.log_level = cl.log_level_arg;
	if (proc_signals_init() < 0)
		return cli_fatal(PROG, KVW_EXIT_SYS, "unable to install signal handlers");
	if (worker) {
		if (wcfg.job_fd < 0 || !cfg.table || !cfg.pool)
			return cli_fatal(PROG, KVW_EXIT_USAGE, "worker mode needs "
					 "--job-fd, --table, --pool");
		if (fcntl(wcfg.job_fd, F_GETFD) < 0)
			return cli_fatal(PROG, KVW_EXIT_USAGE,
					 "--job-fd %d is not open", wcfg.job_fd);
		cli_log_init(&cl, "sworker", (int)wcfg.id);
		wcfg.table = cfg.table;
		wcfg.pool = cfg.pool;
		wcfg.transport = cfg.transport;
		rc = worker_run(&wcfg, err, sizeof err);
		if (rc < 0) {
			LOG(LOG_ERROR, "fatal: %s", err);
			return rc == KVW_ENODEV ? KVW_EXIT_SKIP : KVW_EXIT_SYS;
		}
		return KVW_EXIT_OK;
	}
	if (!cfg.listen || !cfg.engine || !cfg.table || !cfg.pool)
		return cli_fatal(PROG, KVW_EXIT_USAGE,
				 "--listen, --engine, --table and --pool are required");
	/* Workers must not inherit the readiness pipe. */
	if (cl.ready_fd >= 0 && fcntl(cl.ready_fd, F_SETFD, FD_CLOEXEC) < 0)
		return cli_bad(&cl, "--ready-fd is not open");
	cli_log_init(&cl, "sender", (int)sender_rank_of(&cfg.topo, &cfg.coord));
	rc = sender_open(&cfg, &s, err, sizeof err);
	if (rc == KVW_EINVAL)
		return cli_bad(&cl, "%s", err);
	if (rc < 0)
		return cli_fatal(PROG, KVW_EXIT_SYS, "unable to start: %s", err);
	rc = sender_run(s, cl.ready_fd, err, sizeof err);
	sender_close(&s);
	if (rc < 0)
		return cli_fatal(PROG, rc == KVW_EINVAL ? KVW_EXIT_USAGE : KVW_EXIT_SYS,
				 "%s", err);
	return KVW_EXIT_OK;
}
