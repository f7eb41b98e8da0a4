/*
 * cli.c - the command-line handling every kvwire program shares; see
 * cli.h. The common options are appended to the program's own getopt_long
 * table once, on the first cli_next call, and handled here so that each
 * program rejects, reports and exits on them the same way.
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/keys.h"
#include "base/kvw.h"
#include "base/log.h"
#include "plan/shape.h"
#include "wire/wire_auth.h"

/* The common options' vals, above every value cli_next returns. */
enum { O_HELP = 0x4100, O_READY, O_LOG, O_NAME, O_SHAPE, O_LISTEN, O_ENGINE,
       O_TABLE, O_POOL, O_TRANSPORT, O_TOPO, O_RANK, O_CHECK, O_RDMA_DEV,
       O_RDMA_GID, O_KEYS, O_INSECURE, O_ENCRYPT };

void cli_init(struct cli *c, const char *prog, unsigned flags, int log_level,
	      struct shape *shape)
{
	/* Every file, socket and directory a kvwire program makes (tables,
	 * pools, ipc sockets, keys, logs) is its user's alone from the moment
	 * it exists (issue 14): no window between create or bind and a
	 * chmod. Workers and sinks inherit it. */
	umask(077);
	memset(c, 0, sizeof *c);
	c->prog = prog;
	c->flags = flags;
	c->ready_fd = -1;
	c->log_level = log_level;
	c->shape = shape;
	c->member.transport = "shm";
	c->member.topo = (struct kvw_topo){ 1, 1, 1, 1 };
	optind = 0;
}

/* Fills c->table with own, then the common options of c->flags. Returns 0,
 * or -1 when they do not fit (a program bug). */
static int build(struct cli *c, const struct option *own)
{
	static const struct option common[] = {
		{ "help", no_argument, NULL, O_HELP },
		{ "ready-fd", required_argument, NULL, O_READY },
		{ "log-level", required_argument, NULL, O_LOG },
		{ "name", required_argument, NULL, O_NAME },
		{ "check", no_argument, NULL, O_CHECK },
		{ "keys", required_argument, NULL, O_KEYS },
		{ "insecure", no_argument, NULL, O_INSECURE },
		{ "encrypt", no_argument, NULL, O_ENCRYPT },
	};
	static const struct option member[] = {
		{ "listen", required_argument, NULL, O_LISTEN },
		{ "engine", required_argument, NULL, O_ENGINE },
		{ "table", required_argument, NULL, O_TABLE },
		{ "pool", required_argument, NULL, O_POOL },
		{ "transport", required_argument, NULL, O_TRANSPORT },
		{ "topo", required_argument, NULL, O_TOPO },
		{ "rank", required_argument, NULL, O_RANK },
	};
	static const struct option rdma[] = {
		{ "rdma-device", required_argument, NULL, O_RDMA_DEV },
		{ "rdma-gid-index", required_argument, NULL, O_RDMA_GID },
	};
	const unsigned want[] = { 0, CLI_READY_FD, CLI_LOG_LEVEL, CLI_NAME,
				  CLI_CHECK, CLI_AUTH, CLI_AUTH, CLI_AUTH };
	const char *sname;
	int has, n = 0;

	for (; own && own[n].name; n++) {
		if (n == CLI_MAX_OPTS - 1)
			return -1;
		c->table[n] = own[n];
	}
	for (size_t i = 0; i < sizeof common / sizeof common[0]; i++) {
		if (want[i] && !(c->flags & want[i]))
			continue; /* --help (want 0) is always there */
		if (n == CLI_MAX_OPTS - 1)
			return -1;
		c->table[n++] = common[i];
	}
	for (size_t i = 0; (c->flags & CLI_MEMBER) &&
			   i < sizeof member / sizeof member[0]; i++) {
		if (n == CLI_MAX_OPTS - 1)
			return -1;
		c->table[n++] = member[i];
	}
	for (size_t i = 0; (c->flags & (CLI_MEMBER | CLI_RDMA)) &&
			   i < sizeof rdma / sizeof rdma[0]; i++) {
		if (n == CLI_MAX_OPTS - 1)
			return -1;
		c->table[n++] = rdma[i];
	}
	for (unsigned i = 0; (c->flags & CLI_SHAPE) &&
			     (sname = shape_option_name(i, &has)); i++) {
		if (n == CLI_MAX_OPTS - 1)
			return -1;
		c->table[n++] = (struct option){ sname, has ? required_argument
							    : no_argument,
						 NULL, O_SHAPE };
	}
	c->table[n] = (struct option){ NULL, 0, NULL, 0 };
	return 0;
}

/* --topo (every size >= 1) or --rank into c->member; 0 or CLI_BAD. */
static int member_quad(struct cli *c, int v)
{
	uint32_t q[4];

	if (shape_parse_quad(c->arg, v == O_TOPO, q) ||
	    (v == O_TOPO && (!q[0] || !q[1] || !q[2] || !q[3])))
		return cli_fatal(c->prog, CLI_BAD, "bad --%s: %s", c->opt, c->arg);
	if (v == O_TOPO)
		c->member.topo = (struct kvw_topo){ q[0], q[1], q[2], q[3] };
	else
		c->member.rank = (struct kvw_coord){ q[0], q[1], q[2], q[3] };
	return 0;
}

/* Applies one common option; returns 0 to go on, CLI_HELP, CLI_SHAPE_OPT
 * or CLI_BAD. */
static int common(struct cli *c, int v)
{
	char err[256];
	uint32_t fd;

	switch (v) {
	case O_HELP:
		return CLI_HELP;
	case O_READY:
		if (cli_u32(c->arg, 0, 1u << 20, &fd))
			return cli_fatal(c->prog, CLI_BAD, "bad --ready-fd: %s",
					 c->arg);
		c->ready_fd = (int)fd;
		return 0;
	case O_LOG:
		if ((c->log_level = log_level_parse(c->arg)) < 0)
			return cli_fatal(c->prog, CLI_BAD, "bad --log-level: %s",
					 c->arg);
		c->log_level_arg = c->arg;
		return 0;
	case O_NAME:
		c->name = c->arg;
		return 0;
	case O_CHECK:
		c->check = 1;
		return 0;
	case O_KEYS:
		c->keys = c->arg;
		return 0;
	case O_INSECURE:
		c->insecure = 1;
		return 0;
	/* --encrypt: the tcp data port's payloads AES-256-GCM encrypted
	 * (xport_tcp.c reads it from the environment, so the processes
	 * this one execs - workers, sinks - follow). */
	case O_ENCRYPT:
		setenv("KVW_TCP_ENCRYPT", "1", 1);
		c->encrypt = 1;
		return 0;
	case O_LISTEN: c->member.listen = c->arg; return 0;
	case O_ENGINE: c->member.engine = c->arg; return 0;
	case O_TABLE: c->member.table = c->arg; return 0;
	case O_POOL: c->member.pool = c->arg; return 0;
	case O_TRANSPORT: c->member.transport = c->arg; return 0;
	case O_TOPO:
	case O_RANK:
		return member_quad(c, v);
	/* The rdma transport reads its choice from the environment, so
	 * kv-sender's workers (exec'd later) inherit it. */
	case O_RDMA_DEV:
		if (!*c->arg || strlen(c->arg) > 63)
			return cli_fatal(c->prog, CLI_BAD,
					 "bad --rdma-device: %s", c->arg);
		setenv("KVW_RDMA_DEVICE", c->arg, 1);
		return 0;
	case O_RDMA_GID:
		if (cli_u32(c->arg, 0, 65535, &fd))
			return cli_fatal(c->prog, CLI_BAD,
					 "bad --rdma-gid-index: %s", c->arg);
		snprintf(err, sizeof err, "%u", fd);
		setenv("KVW_RDMA_GID_INDEX", err, 1);
		return 0;
	default: { /* O_SHAPE */
		struct shape scratch;

		if (!c->shape)
			shape_default(&scratch);
		if (shape_option(c->shape ? c->shape : &scratch, c->opt, c->arg,
				 err, sizeof err) < 0)
			return cli_fatal(c->prog, CLI_BAD, "%s", err);
		return c->shape ? 0 : CLI_SHAPE_OPT;
	}
	}
}

/* CLI_AUTH: the tcp:// policy, before any socket exists. CLI_END, or
 * CLI_BAD with the fatal line written. */
static int auth(struct cli *c)
{
	struct keys k;
	char err[512];

	const char *env_keys = getenv("KVW_KEYS");
	const char *env_insecure = getenv("KVW_INSECURE");

	if (!(c->flags & CLI_AUTH))
		return CLI_END;
	/* Defaults from the environment; what is chosen goes back into it,
	 * so the processes this one execs (kv-sender's workers) follow. */
	if (!c->keys && !c->insecure) {
		c->keys = env_keys && *env_keys ? env_keys : NULL;
		c->insecure = !c->keys && env_insecure && !strcmp(env_insecure, "1");
	}
	if (c->keys)
		setenv("KVW_KEYS", c->keys, 1);
	else if (c->insecure)
		setenv("KVW_INSECURE", "1", 1);
	if (c->keys && c->insecure)
		return cli_fatal(c->prog, CLI_BAD, "--keys and --insecure "
				 "exclude each other");
	if (c->insecure)
		wire_auth_insecure();
	if (!c->keys && c->encrypt)
		return cli_fatal(c->prog, CLI_BAD, "--encrypt needs the "
				 "group's keys (--keys)");
	if (!c->keys)
		return CLI_END;
	if (keys_load(c->keys, &k, err, sizeof err) != 0)
		return cli_fatal(c->prog, CLI_BAD, "--keys: %s", err);
	wire_auth_use(&k);
	keys_wipe(&k);
	return CLI_END;
}

int cli_next(struct cli *c, int argc, char **argv, const struct option *own)
{
	int v, idx, rc;

	if (!c->table[0].name && build(c, own))
		return cli_fatal(c->prog, CLI_BAD, "too many options");
	opterr = 0;
	for (;;) {
		idx = -1;
		v = getopt_long(argc, argv, ":", c->table, &idx);
		if (v == -1)
			break;
		if (v == '?' || v == ':' || idx < 0)
			return cli_fatal(c->prog, CLI_BAD, "%s: %s",
					 v == ':' ? "option needs a value"
						  : "unknown option",
					 argv[optind - 1]);
		c->opt = c->table[idx].name;
		c->arg = optarg;
		if (v < O_HELP)
			return v;
		if ((rc = common(c, v)) != 0)
			return rc;
	}
	if (!(c->flags & CLI_OPERANDS) && optind < argc)
		return cli_fatal(c->prog, CLI_BAD, "unexpected argument: %s",
				 argv[optind]);
	return auth(c);
}

int cli_member_check(const struct cli *c)
{
	const struct cli_member *m = &c->member;
	const struct kvw_topo *t = &m->topo;
	const struct kvw_coord *r = &m->rank;

	if (!m->listen || !m->engine || !m->table || !m->pool)
		return cli_bad(c, "--listen, --engine, --table and --pool are "
			       "required");
	if (r->tp >= t->tp || r->pp >= t->pp || r->cp >= t->cp || r->dp >= t->dp)
		return cli_bad(c, "--rank %u,%u,%u,%u lies outside --topo "
			       "%u,%u,%u,%u", r->tp, r->pp, r->cp, r->dp, t->tp,
			       t->pp, t->cp, t->dp);
	return 0;
}

int cli_fatal(const char *prog, int code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: fatal: %s\n", prog, msg);
	return code;
}

int cli_bad(const struct cli *c, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return cli_fatal(c->prog, KVW_EXIT_USAGE, "%s", msg);
}

const char *cli_tmpdir(void)
{
	const char *t = getenv("TMPDIR");

	return t && *t ? t : "/tmp";
}

int cli_exit_code(int rc)
{
	switch (rc) {
	case 0: return KVW_EXIT_OK;
	case KVW_EINVAL: return KVW_EXIT_USAGE;
	case KVW_ENODEV: return KVW_EXIT_SKIP;
	case KVW_ETIMEDOUT: return KVW_EXIT_TIMEOUT;
	case KVW_EPEER: return KVW_EXIT_PEER;
	default: return KVW_EXIT_SYS;
	}
}

void cli_log_init(const struct cli *c, const char *role, int idx)
{
	char tag[48];

	snprintf(tag, sizeof tag, "%s%s%.20s", role, c->name ? "." : "",
		 c->name ? c->name : "");
	log_init(tag, idx, (enum log_level)c->log_level);
}

int cli_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	int hex = s && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
	unsigned long long v;
	char *end;

	/* strtoull would take a sign, blanks and (base 0) octal. */
	if (!s || !(hex ? s[2] : s[0]) || !(hex ? isxdigit((unsigned char)s[2])
					       : isdigit((unsigned char)s[0])))
		return KVW_EINVAL;
	errno = 0;
	v = strtoull(hex ? s + 2 : s, &end, hex ? 16 : 10);
	if (errno || *end || v < min || v > max)
		return KVW_EINVAL;
	*out = v;
	return 0;
}

int cli_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t v;

	if (cli_u64(s, min, max, &v))
		return KVW_EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int cli_double(const char *s, double min, double max, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return KVW_EINVAL;
	errno = 0;
	v = strtod(s, &end);
	/* NaN fails both comparisons. */
	if (errno || *end || !(v >= min && v <= max))
		return KVW_EINVAL;
	*out = v;
	return 0;
}

int cli_seconds(const char *s, double min_s, double max_s, uint64_t *ns)
{
	double v;

	if (cli_double(s, min_s, max_s, &v))
		return KVW_EINVAL;
	*ns = (uint64_t)(v * 1e9);
	return 0;
}
