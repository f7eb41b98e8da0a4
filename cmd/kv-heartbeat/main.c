/*
 * kv-heartbeat - pings the peers in a kvwire room table's peer table and
 * fails the rooms of peers that stop answering or restart (lib/hbeat.h).
 * Exit codes: 0 clean stop on SIGTERM, 100 usage, 111 system failure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbeat.h"
#include "kvw.h"
#include "log.h"
#include "proc.h"

#define PROG "kv-heartbeat"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --table PATH [--interval SECONDS] [--max-failures N]\n"
		"       [--ping-timeout SECONDS] [--ready-fd N] [--log-level LEVEL]\n"
		"       [--name NAME]\n"
		"Pings every peer of the table each interval (default 5 s, may be\n"
		"fractional, min 0.05); max-failures (default 2) missed pings in a\n"
		"row mark a peer dead and fail its rooms. The ping timeout defaults\n"
		"to the interval.\n"
		"Exit: 0 stopped, 100 usage, 111 system failure.\n");
}

static int fatal_usage(const char *what, const char *arg)
{
	fprintf(stderr, PROG ": fatal: %s%s\n", what, arg ? arg : "");
	return KVW_EXIT_USAGE;
}

static int parse_secs(const char *s, double min, uint64_t *ns)
{
	char *end;
	double v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !(v >= min) || v > 1e6)
		return -1;
	*ns = (uint64_t)(v * 1e9);
	return 0;
}

static int parse_long(const char *s, long min, long max, long *out)
{
	char *end;

	if (!s || !*s)
		return -1;
	errno = 0;
	*out = strtol(s, &end, 10);
	return errno || *end || *out < min || *out > max ? -1 : 0;
}

int main(int argc, char **argv)
{
	struct hbeat_cfg cfg = { .interval_ns = 5000000000ull, .max_failures = 2 };
	struct hbeat *h = NULL;
	const char *name = NULL;
	long ready_fd = -1, v;
	int lvl = LOG_INFO, rc;
	char err[256], role[32];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--help") == 0) {
			usage(stdout);
			return KVW_EXIT_OK;
		}
		if (strncmp(a, "--", 2) != 0)
			return fatal_usage("unexpected argument: ", a);
		if (!val)
			return fatal_usage("option needs a value: ", a);
		i++;
		if (strcmp(a, "--table") == 0) {
			cfg.table = val;
		} else if (strcmp(a, "--interval") == 0) {
			if (parse_secs(val, 0.05, &cfg.interval_ns))
				return fatal_usage("bad --interval (min 0.05): ", val);
		} else if (strcmp(a, "--ping-timeout") == 0) {
			if (parse_secs(val, 0.001, &cfg.ping_timeout_ns))
				return fatal_usage("bad --ping-timeout: ", val);
		} else if (strcmp(a, "--max-failures") == 0) {
			if (parse_long(val, 1, 1000000, &v))
				return fatal_usage("bad --max-failures (min 1): ", val);
			cfg.max_failures = (uint32_t)v;
		} else if (strcmp(a, "--ready-fd") == 0) {
			if (parse_long(val, 0, 1 << 20, &ready_fd))
				return fatal_usage("bad --ready-fd: ", val);
		} else if (strcmp(a, "--log-level") == 0) {
			if ((lvl = log_level_parse(val)) < 0)
				return fatal_usage("bad --log-level: ", val);
		} else if (strcmp(a, "--name") == 0) {
			name = val;
		} else {
			return fatal_usage("unknown option: ", a);
		}
	}
	if (!cfg.table)
		return fatal_usage("--table is required", NULL);
	if (proc_signals_init() != 0) {
		fprintf(stderr, PROG ": fatal: unable to install signal handlers\n");
		return KVW_EXIT_SYS;
	}
	snprintf(role, sizeof role, "heartbeat%s%.20s", name ? "." : "",
		 name ? name : "");
	log_init(role, -1, (enum log_level)lvl);
	rc = hbeat_open(&cfg, &h, err, sizeof err);
	if (rc) {
		fprintf(stderr, PROG ": fatal: unable to open table %s: %s\n",
			cfg.table, err);
		return rc == KVW_EINVAL ? KVW_EXIT_USAGE : KVW_EXIT_SYS;
	}
	if (proc_ready((int)ready_fd) != 0) {
		fprintf(stderr, PROG ": fatal: unable to write to --ready-fd\n");
		hbeat_close(&h);
		return KVW_EXIT_SYS;
	}
	rc = hbeat_run(h, err, sizeof err);
	hbeat_close(&h);
	if (rc) {
		fprintf(stderr, PROG ": fatal: %s\n", err);
		return KVW_EXIT_SYS;
	}
	return KVW_EXIT_OK;
}
