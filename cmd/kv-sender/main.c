/*
 * kv-sender - the prefill rank's transfer control process (lib/roles/sender/sender.h)
 * and, with --worker-id, one of its worker processes (lib/roles/sender/worker.h),
 * which the control execs from /proc/self/exe. Two small programs share
 * this main: each parses, runs its lib/ entry point and maps the result
 * with cli_exit_code: 0 clean stop, 77 transport not available, 100 usage
 * (or the bootstrap refused the registration), 111 system failure.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/kvw.h"
#include "base/log.h"
#include "base/proc.h"
#include "common/cli.h"
#include "common/notify.h"
#include "plan/shape.h"
#include "roles/sender/sender.h"
#include "roles/sender/worker.h"

#define PROG "kv-sender"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --listen EP --engine EP --table PATH --pool PATH\n"
		"         [--bootstrap EP] [--workers N] [--topo tp,pp[,cp,dp]]\n"
		"         [--rank tp,pp[,cp,dp]] [--bootstrap-timeout SECONDS]\n"
		"         [--worker-stall SECONDS]\n"
		"         [--transport shm|tcp|rdma] [--ready-fd N] [--log-level L]\n"
		"         [--name NAME] [--check] [shape flags]\n"
		"         [--rdma-device NAME] [--rdma-gid-index N]   (rdma transport)\n"
		"       " PROG " --worker-id K --job-fd FD --table PATH --pool PATH\n"
		"         (worker mode: started by the control, FD its socketpair end)\n"
		"  %s\n"
		"Prefill-side control process of kvwire: takes REGISTER/XFER_INFO/ABORT\n"
		"from decode peers on --listen and SEND_BEGIN/SEND_CHUNK/CLEAR from the\n"
		"engine on --engine (ipc, 0600), moves KV through N worker processes.\n"
		"--bootstrap-timeout (env KVW_BOOTSTRAP_TIMEOUT, default 300) bounds a\n"
		"room's life. --worker-stall (env KVW_WORKER_STALL, default 30): a\n"
		"worker with jobs queued that answers none for that long is killed\n"
		"and replaced, its rooms failed. --check validates every flag and the config, makes\n"
		"nothing and prints pool_bytes=N. Exit: 0 stopped, 77 transport not\n"
		"available, 100 usage or registration refused, 111 system failure.\n",
		shape_usage());
}

enum { O_BOOT = 256, O_WORKERS, O_BTIMEOUT, O_WORKER_ID, O_JOB_FD, O_STALL };

/* Worker mode: the control's channel end is --job-fd. */
static int run_worker(struct cli *cl, struct worker_cfg *w)
{
	char err[512] = "";
	int rc;

	if (w->job_fd < 0 || !cl->member.table || !cl->member.pool)
		return cli_bad(cl, "worker mode needs --job-fd, --table, --pool");
	if (fcntl(w->job_fd, F_GETFD) < 0)
		return cli_bad(cl, "--job-fd %d is not open", w->job_fd);
	cli_log_init(cl, "worker", (int)w->id);
	w->table = cl->member.table;
	w->pool = cl->member.pool;
	w->transport = cl->member.transport;
	rc = worker_run(w, err, sizeof err);
	if (rc < 0)
		LOG(LOG_ERROR, "fatal: %s", err);
	return cli_exit_code(rc < 0 ? rc : 0);
}

static int run_control(struct cli *cl, struct sender_cfg *cfg)
{
	const struct cli_member *m = &cl->member;
	struct sender *s = NULL;
	char err[512] = "";
	int rc;

	if ((rc = cli_member_check(cl)) != 0)
		return rc;
	/* Workers must not inherit the readiness pipe. */
	if (cl->ready_fd >= 0 && fcntl(cl->ready_fd, F_SETFD, FD_CLOEXEC) < 0)
		return cli_bad(cl, "--ready-fd is not open");
	cfg->listen = m->listen;
	cfg->engine = m->engine;
	cfg->table = m->table;
	cfg->pool = m->pool;
	cfg->transport = m->transport;
	cfg->topo = m->topo;
	cfg->coord = m->rank;
	cfg->name = cl->name;
	cfg->log_level = cl->log_level_arg;
	if (cl->check) {
		uint64_t bytes;

		rc = sender_check(cfg, &bytes, err, sizeof err);
		if (rc < 0)
			return cli_fatal(PROG, cli_exit_code(rc), "%s", err);
		printf("pool_bytes=%llu\n", (unsigned long long)bytes);
		return KVW_EXIT_OK;
	}
	cli_log_init(cl, "sender", (int)sender_rank_of(&cfg->topo, &cfg->coord));
	(void)proc_raise_nofile(); /* sockets grow with the peers */
	cli_notify_init(); /* READY=1 to systemd too */
	rc = sender_open(cfg, &s, err, sizeof err);
	if (rc < 0)
		return cli_fatal(PROG, cli_exit_code(rc), "unable to start: %s", err);
	rc = sender_run(s, cl->ready_fd, err, sizeof err);
	sender_close(&s);
	if (rc < 0)
		return cli_fatal(PROG, cli_exit_code(rc), "%s", err);
	return KVW_EXIT_OK;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "bootstrap", 1, 0, O_BOOT }, { "workers", 1, 0, O_WORKERS },
		{ "bootstrap-timeout", 1, 0, O_BTIMEOUT },
		{ "worker-stall", 1, 0, O_STALL },
		{ "worker-id", 1, 0, O_WORKER_ID }, { "job-fd", 1, 0, O_JOB_FD },
		{ 0, 0, 0, 0 },
	};
	struct sender_cfg cfg = { .workers = 4, .exe = "/proc/self/exe",
				  .bootstrap_timeout_ns = 300000000000ull };
	struct worker_cfg wcfg = { .job_fd = -1 };
	struct cli cl;
	int worker = 0, c;
	uint32_t jfd;
	const char *env = getenv("KVW_BOOTSTRAP_TIMEOUT");
	const char *stall = getenv("KVW_WORKER_STALL");

	shape_default(&cfg.shape);
	cli_init(&cl, PROG,
		 CLI_READY_FD | CLI_LOG_LEVEL | CLI_NAME | CLI_SHAPE | CLI_MEMBER |
			 CLI_CHECK | CLI_AUTH,
		 LOG_INFO, &cfg.shape);
	if (env && cli_seconds(env, 1e-9, 1e7, &cfg.bootstrap_timeout_ns))
		return cli_bad(&cl, "bad KVW_BOOTSTRAP_TIMEOUT: %s", env);
	if (stall && cli_seconds(stall, 1e-3, 1e7, &cfg.worker_stall_ns))
		return cli_bad(&cl, "bad KVW_WORKER_STALL: %s", stall);
	while ((c = cli_next(&cl, argc, argv, opts)) != CLI_END) {
		const char *v = cl.arg;

		switch (c) {
		case O_BOOT: cfg.bootstrap = v; break;
		case CLI_HELP: usage(stdout); return KVW_EXIT_OK;
		case O_JOB_FD:
			if (cli_u32(v, 0, INT32_MAX, &jfd))
				return cli_bad(&cl, "bad --job-fd: %s", v);
			wcfg.job_fd = (int)jfd;
			break;
		case O_WORKERS:
			if (cli_u32(v, 1, SENDER_MAX_WORKERS, &cfg.workers))
				return cli_bad(&cl, "--workers: want 1..%u, got %s",
					       SENDER_MAX_WORKERS, v);
			break;
		case O_WORKER_ID:
			if (cli_u32(v, 0, SENDER_MAX_WORKERS - 1, &wcfg.id))
				return cli_bad(&cl, "bad --worker-id: %s", v);
			worker = 1;
			break;
		case O_BTIMEOUT:
			if (cli_seconds(v, 1e-9, 1e7, &cfg.bootstrap_timeout_ns))
				return cli_bad(&cl, "bad --bootstrap-timeout: %s", v);
			break;
		case O_STALL:
			if (cli_seconds(v, 1e-3, 1e7, &cfg.worker_stall_ns))
				return cli_bad(&cl, "bad --worker-stall: %s", v);
			break;
		default: /* CLI_BAD: the fatal line is written */
			return KVW_EXIT_USAGE;
		}
	}
	if (proc_signals_init() < 0)
		return cli_fatal(PROG, KVW_EXIT_SYS, "unable to install signal handlers");
	return worker ? run_worker(&cl, &wcfg) : run_control(&cl, &cfg);
}
