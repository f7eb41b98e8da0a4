/*
 * kv-sender - the prefill rank's transfer control process (lib/sender.h)
 * and, with --worker-id, one of its worker processes (lib/sworker.h),
 * which the control execs from /proc/self/exe. This file only parses
 * flags and maps results to exit codes: 0 clean stop, 100 usage (or the
 * bootstrap refused the registration), 111 system failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvw.h"
#include "log.h"
#include "proc.h"
#include "sender.h"
#include "shape.h"
#include "sworker.h"

#define PROG "kv-sender"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --listen EP --engine EP --table PATH --pool PATH\n"
		"         [--bootstrap EP] [--workers N] [--topo tp,pp] [--rank tp,pp]\n"
		"         [--bootstrap-timeout SECONDS] [--transport shm] [--work EP]\n"
		"         [--ready-fd N] [--log-level L] [--name NAME] [shape flags]\n"
		"       " PROG " --worker-id K --work EP --table PATH --pool PATH\n"
		"  %s\n"
		"Prefill-side control process of kvwire: takes REGISTER/XFER_INFO/ABORT\n"
		"from decode peers on --listen and SEND_BEGIN/SEND_CHUNK/CLEAR from the\n"
		"engine on --engine (ipc, 0600), moves KV through N worker processes.\n"
		"--bootstrap-timeout (env KVW_BOOTSTRAP_TIMEOUT, default 300) bounds a\n"
		"room's life. Exit: 0 stopped, 100 usage or registration refused,\n"
		"111 system failure.\n",
		shape_usage());
}

static int fatal_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, PROG ": fatal: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	return KVW_EXIT_USAGE;
}

static int parse_seconds(const char *v, uint64_t *ns)
{
	char *end;
	double d;

	errno = 0;
	d = strtod(v, &end);
	if (errno || end == v || *end || !(d > 0) || d > 1e7)
		return -1;
	*ns = (uint64_t)(d * 1e9);
	return 0;
}

static int parse_u32(const char *v, uint32_t *out)
{
	char *end;
	unsigned long x;

	errno = 0;
	x = strtoul(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || x > UINT32_MAX)
		return -1;
	*out = (uint32_t)x;
	return 0;
}

enum { O_LISTEN = 256, O_ENGINE, O_BOOT, O_TABLE, O_POOL, O_WORKERS, O_TOPO,
       O_RANK, O_BTIMEOUT, O_TRANSPORT, O_WORKER_ID, O_WORK, O_READY,
       O_LOGLEVEL, O_NAME, O_HELP, O_SHAPE };

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", 1, 0, O_LISTEN }, { "engine", 1, 0, O_ENGINE },
		{ "bootstrap", 1, 0, O_BOOT }, { "table", 1, 0, O_TABLE },
		{ "pool", 1, 0, O_POOL }, { "workers", 1, 0, O_WORKERS },
		{ "topo", 1, 0, O_TOPO }, { "rank", 1, 0, O_RANK },
		{ "bootstrap-timeout", 1, 0, O_BTIMEOUT },
		{ "transport", 1, 0, O_TRANSPORT }, { "worker-id", 1, 0, O_WORKER_ID },
		{ "work", 1, 0, O_WORK }, { "ready-fd", 1, 0, O_READY },
		{ "log-level", 1, 0, O_LOGLEVEL }, { "name", 1, 0, O_NAME },
		{ "help", 0, 0, O_HELP },
		{ "layers", 1, 0, O_SHAPE }, { "draft-layers", 1, 0, O_SHAPE },
		{ "page-tokens", 1, 0, O_SHAPE }, { "heads", 1, 0, O_SHAPE },
		{ "head-dim", 1, 0, O_SHAPE }, { "dtype-bytes", 1, 0, O_SHAPE },
		{ "pages", 1, 0, O_SHAPE }, { "aux-slots", 1, 0, O_SHAPE },
		{ "aux-bytes", 1, 0, O_SHAPE }, { "mla", 0, 0, O_SHAPE },
		{ 0, 0, 0, 0 },
	};
	struct sender_cfg cfg = { .workers = 4, .transport = "shm",
				  .exe = "/proc/self/exe",
				  .bootstrap_timeout_ns = 300000000000ull };
	struct sworker_cfg wcfg = { 0 };
	struct sender *s = NULL;
	int lvl = LOG_INFO, ready_fd = -1, worker = 0, c, idx, rc;
	uint32_t q[4];
	char err[512] = "", tag[32];
	const char *env = getenv("KVW_BOOTSTRAP_TIMEOUT");

	cfg.topo = (struct kvw_topo){ 1, 1, 1, 1 };
	shape_default(&cfg.shape);
	if (env && parse_seconds(env, &cfg.bootstrap_timeout_ns))
		return fatal_usage("bad KVW_BOOTSTRAP_TIMEOUT: %s", env);
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
		switch (c) {
		case O_LISTEN: cfg.listen = optarg; break;
		case O_ENGINE: cfg.engine = optarg; break;
		case O_BOOT: cfg.bootstrap = optarg; break;
		case O_TABLE: cfg.table = optarg; break;
		case O_POOL: cfg.pool = optarg; break;
		case O_WORK: cfg.work = optarg; break;
		case O_TRANSPORT: cfg.transport = optarg; break;
		case O_NAME: cfg.name = optarg; break;
		case O_HELP: usage(stdout); return KVW_EXIT_OK;
		case O_WORKERS:
			if (parse_u32(optarg, &cfg.workers) || !cfg.workers ||
			    cfg.workers > SENDER_MAX_WORKERS)
				return fatal_usage("--workers: want 1..64, got %s", optarg);
			break;
		case O_WORKER_ID:
			if (parse_u32(optarg, &wcfg.id) || wcfg.id >= SENDER_MAX_WORKERS)
				return fatal_usage("bad --worker-id: %s", optarg);
			worker = 1;
			break;
		case O_TOPO:
			if (shape_parse_quad(optarg, 1, q) || !q[0] || !q[1] ||
			    !q[2] || !q[3])
				return fatal_usage("bad --topo: %s", optarg);
			cfg.topo = (struct kvw_topo){ q[0], q[1], q[2], q[3] };
			break;
		case O_RANK:
			if (shape_parse_quad(optarg, 0, q))
				return fatal_usage("bad --rank: %s", optarg);
			cfg.coord = (struct kvw_coord){ q[0], q[1], q[2], q[3] };
			break;
		case O_BTIMEOUT:
			if (parse_seconds(optarg, &cfg.bootstrap_timeout_ns))
				return fatal_usage("bad --bootstrap-timeout: %s", optarg);
			break;
		case O_READY:
			if (parse_u32(optarg, &q[0]) || q[0] > 65535)
				return fatal_usage("bad --ready-fd: %s", optarg);
			ready_fd = (int)q[0];
			break;
		case O_LOGLEVEL:
			lvl = log_level_parse(optarg);
			if (lvl < 0)
				return fatal_usage("bad --log-level: %s", optarg);
			cfg.log_level = optarg;
			break;
		case O_SHAPE:
			rc = shape_option(&cfg.shape, opts[idx].name, optarg, err,
					  sizeof err);
			if (rc < 0)
				return fatal_usage("%s", err);
			break;
		default:
			return fatal_usage("unknown or incomplete option: %s",
					   argv[optind - 1]);
		}
	}
	if (optind < argc)
		return fatal_usage("unexpected argument: %s", argv[optind]);
	if (proc_signals_init() < 0) {
		fprintf(stderr, PROG ": fatal: unable to install signal handlers\n");
		return KVW_EXIT_SYS;
	}
	if (worker) {
		if (!cfg.work || !cfg.table || !cfg.pool)
			return fatal_usage("%s", "worker mode needs --work, --table, --pool");
		if (cfg.name)
			snprintf(tag, sizeof tag, "sworker.%s", cfg.name);
		log_init(cfg.name ? tag : "sworker", (int)wcfg.id, lvl);
		wcfg.work = cfg.work;
		wcfg.table = cfg.table;
		wcfg.pool = cfg.pool;
		wcfg.transport = cfg.transport;
		rc = sworker_run(&wcfg, err, sizeof err);
		if (rc < 0) {
			LOG(LOG_ERROR, "fatal: %s", err);
			return rc == KVW_ENODEV ? KVW_EXIT_SKIP : KVW_EXIT_SYS;
		}
		return KVW_EXIT_OK;
	}
	if (!cfg.listen || !cfg.engine || !cfg.table || !cfg.pool)
		return fatal_usage("%s", "--listen, --engine, --table and --pool are required");
	/* Workers must not inherit the readiness pipe. */
	if (ready_fd >= 0 && fcntl(ready_fd, F_SETFD, FD_CLOEXEC) < 0)
		return fatal_usage("%s", "--ready-fd is not open");
	if (cfg.name)
		snprintf(tag, sizeof tag, "sender.%s", cfg.name);
	log_init(cfg.name ? tag : "sender",
		 (int)sender_rank_of(&cfg.topo, &cfg.coord), lvl);
	rc = sender_open(&cfg, &s, err, sizeof err);
	if (rc == KVW_EINVAL)
		return fatal_usage("%s", err);
	if (rc < 0) {
		fprintf(stderr, PROG ": fatal: unable to start: %s\n", err);
		return KVW_EXIT_SYS;
	}
	rc = sender_run(s, ready_fd, err, sizeof err);
	sender_close(&s);
	if (rc == KVW_EINVAL) {
		fprintf(stderr, PROG ": fatal: %s\n", err);
		return KVW_EXIT_USAGE;
	}
	if (rc < 0) {
		fprintf(stderr, PROG ": fatal: %s\n", err);
		return KVW_EXIT_SYS;
	}
	return KVW_EXIT_OK;
}
