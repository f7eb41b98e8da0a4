/*
 * kv-receiver - the decode rank's kvwire control process: parses flags,
 * builds the receiver (room table, pool, transport, sockets; lib/receiver.h),
 * says READY on --ready-fd and runs the poll loop until SIGTERM. Exit codes:
 * 0 clean stop, 100 usage, 77 transport not available, 111 system failure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvw.h"
#include "log.h"
#include "proc.h"
#include "receiver.h"
#include "shape.h"

#define PROG "kv-receiver"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --listen EP --engine ipc://PATH --table PATH --pool PATH\n"
		"       [--topo tp,pp[,cp,dp]] [--rank tp,pp[,cp,dp]] [--transport shm]\n"
		"       [--waiting-timeout SECONDS] [--ready-fd N] [--log-level LEVEL]\n"
		"       [--name NAME] [--all-cp-ranks] [shape options]\n"
		"Decode-side kvwire control process. --waiting-timeout defaults to\n"
		"$KVW_WAITING_TIMEOUT or 300 s. --all-cp-ranks: with prefill CP > 1,\n"
		"pull each CP rank's page share from every CP rank (default: CP\n"
		"rank 0 only). Shape options: %s\n"
		"Exit: 0 stopped, 77 transport not available, 100 usage, 111 system.\n",
		shape_usage());
}

static int fatal_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, PROG ": fatal: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	return KVW_EXIT_USAGE;
}

/* Seconds (fractional, > 0) to ns; -1 on a bad value. */
static int parse_secs(const char *s, uint64_t *ns)
{
	char *end;
	double v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !(v > 0) || v > 1e7)
		return -1;
	*ns = (uint64_t)(v * 1e9);
	return 0;
}

static int parse_int(const char *s, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = s ? strtol(s, &end, 10) : 0;
	if (!s || !*s || errno || *end || v < 0 || v > 1 << 20)
		return -1;
	*out = (int)v;
	return 0;
}

/* 1 when opt is one of our flags or a shape option. */
static int known(const char *opt)
{
	static const char *const own[] = {
		"listen", "engine", "table", "pool", "transport", "name",
		"waiting-timeout", "ready-fd", "log-level", "topo", "rank",
	};
	struct shape scratch;
	char err[8];

	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
		if (strcmp(opt, own[i]) == 0)
			return 1;
	shape_default(&scratch);
	return shape_option(&scratch, opt, "1", err, sizeof err) != 0;
}

int main(int argc, char **argv)
{
	struct receiver_cfg cfg = { .transport = "shm" };
	struct receiver *r = NULL;
	const char *name = NULL, *tmo = getenv("KVW_WAITING_TIMEOUT");
	uint32_t q[4];
	int ready_fd = -1, lvl = LOG_INFO, rc;
	char err[256];

	shape_default(&cfg.shape);
	cfg.topo = (struct kvw_topo){ 1, 1, 1, 1 };
	for (int i = 1; i < argc; i++) {
		char opt[64];
		const char *a = argv[i], *val, *eq;

		if (strcmp(a, "--help") == 0) {
			usage(stdout);
			return KVW_EXIT_OK;
		}
		if (strncmp(a, "--", 2) != 0 || strlen(a) - 2 >= sizeof opt)
			return fatal_usage("unexpected argument: %s", a);
		eq = strchr(a, '=');
		snprintf(opt, sizeof opt, "%.*s", eq ? (int)(eq - a - 2) : 63, a + 2);
		if (strcmp(opt, "mla") == 0 || strcmp(opt, "all-cp-ranks") == 0) {
			val = NULL;
		} else if (eq) {
			val = eq + 1;
		} else {
			if (!known(opt))
				return fatal_usage("unknown option: %s", a);
			if (i + 1 >= argc)
				return fatal_usage("option --%s needs a value", opt);
			val = argv[++i];
		}
		if (strcmp(opt, "listen") == 0) {
			cfg.listen = val;
		} else if (strcmp(opt, "engine") == 0) {
			cfg.engine = val;
		} else if (strcmp(opt, "table") == 0) {
			cfg.table = val;
		} else if (strcmp(opt, "pool") == 0) {
			cfg.pool = val;
		} else if (strcmp(opt, "transport") == 0) {
			cfg.transport = val;
		} else if (strcmp(opt, "name") == 0) {
			name = val;
		} else if (strcmp(opt, "waiting-timeout") == 0) {
			tmo = val;
			if (parse_secs(val, &cfg.waiting_timeout_ns))
				return fatal_usage("bad --waiting-timeout: %s", val);
		} else if (strcmp(opt, "all-cp-ranks") == 0) {
			if (eq)
				return fatal_usage("--all-cp-ranks takes no value: %s", a);
			cfg.all_cp_ranks = 1;
		} else if (strcmp(opt, "ready-fd") == 0) {
			if (parse_int(val, &ready_fd))
				return fatal_usage("bad --ready-fd: %s", val);
		} else if (strcmp(opt, "log-level") == 0) {
			if ((lvl = log_level_parse(val)) < 0)
				return fatal_usage("bad --log-level: %s", val);
		} else if (strcmp(opt, "topo") == 0) {
			if (shape_parse_quad(val, 1, q))
				return fatal_usage("bad --topo: %s", val);
			cfg.topo = (struct kvw_topo){ q[0], q[1], q[2], q[3] };
		} else if (strcmp(opt, "rank") == 0) {
			if (shape_parse_quad(val, 0, q))
				return fatal_usage("bad --rank: %s", val);
			cfg.rank = (struct kvw_coord){ q[0], q[1], q[2], q[3] };
		} else {
			rc = shape_option(&cfg.shape, opt, val, err, sizeof err);
			if (rc == 0)
				return fatal_usage("unknown option: %s", a);
			if (rc < 0)
				return fatal_usage("%s", err);
		}
	}
	if (!cfg.listen || !cfg.engine || !cfg.table || !cfg.pool)
		return fatal_usage("%s", "--listen, --engine, --table and --pool are required");
	if (cfg.waiting_timeout_ns == 0 &&
	    parse_secs(tmo ? tmo : "300", &cfg.waiting_timeout_ns))
		return fatal_usage("bad KVW_WAITING_TIMEOUT: %s", tmo);

	if (proc_signals_init() != 0) {
		fprintf(stderr, PROG ": fatal: unable to install signal handlers\n");
		return KVW_EXIT_SYS;
	}
	{
		char role[32];

		snprintf(role, sizeof role, "receiver%s%.20s", name ? "." : "",
			 name ? name : "");
		log_init(role, (int)cfg.rank.tp, (enum log_level)lvl);
	}
	rc = receiver_open(&cfg, &r, err, sizeof err);
	if (rc) {
		fprintf(stderr, PROG ": fatal: unable to start: %s\n", err);
		return rc == KVW_ENODEV ? KVW_EXIT_SKIP
		       : rc == KVW_EINVAL ? KVW_EXIT_USAGE : KVW_EXIT_SYS;
	}
	if (proc_ready(ready_fd) != 0) {
		fprintf(stderr, PROG ": fatal: unable to write to --ready-fd\n");
		receiver_close(&r);
		return KVW_EXIT_SYS;
	}
	rc = receiver_run(r, err, sizeof err);
	receiver_close(&r);
	if (rc) {
		fprintf(stderr, PROG ": fatal: %s\n", err);
		return KVW_EXIT_SYS;
	}
	return KVW_EXIT_OK;
}
