/*
 * cli.h - what every kvwire program's main() does the same way: the common
 * options (--help, --ready-fd, --log-level, --name and the shape flags)
 * merged into the program's own getopt_long table and applied here, strict
 * number parsers, the one fatal-message form `prog: fatal: ...`, and the
 * map from KVW_E* codes to the documented exit codes. It writes to stderr,
 * which only the programs' main() own; the library never calls it.
 *
 * --check (CLI_CHECK), on the group's members: parse and validate every
 * flag and the configuration exactly as a start would, make nothing, and
 * exit 0 (kv-sender and kv-receiver print pool_bytes=N), 100 with the
 * fatal line, or 77 when the transport is not available here. kv-up runs
 * it on every member before it starts any.
 *
 * cmd/common/ is what the programs share (this module and notify, readiness
 * for systemd). It is not part of the library (issue 31): it lives beside
 * the programs, is built into build/<variant>/libkvwcli.a, linked into the
 * programs only, and may include any layer of lib/. The run directory's
 * endpoints file is the library's (lib/plan/runinfo.h): engines read it
 * too.
 */
#ifndef KVW_CLI_H
#define KVW_CLI_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

struct shape;

/* Which common options a program takes (--help is always taken). */
enum cli_flag {
	CLI_READY_FD = 1u << 0,  /* --ready-fd N into ready_fd */
	CLI_LOG_LEVEL = 1u << 1, /* --log-level L into log_level */
	CLI_NAME = 1u << 2,      /* --name NAME into name */
	CLI_SHAPE = 1u << 3,     /* the shape flags (shape_option) */
	CLI_OPERANDS = 1u << 4,  /* operands allowed (argv[optind..]) */
	CLI_MEMBER = 1u << 5,    /* a control process's flags, into member */
	CLI_CHECK = 1u << 6,     /* --check into check (see cli.h's top) */
	/* --rdma-device NAME and --rdma-gid-index N (with CLI_MEMBER too):
	 * exported as KVW_RDMA_DEVICE and KVW_RDMA_GID_INDEX, which the rdma
	 * transport reads (lib/xport/rdma/rdma_qp.h), for this process and every
	 * process it starts (kv-sender's workers). */
	CLI_RDMA = 1u << 7,
	CLI_AUTH = 1u << 8,      /* --keys DIR / --insecure: the process's
				  * tcp:// policy (wire/wire_auth.h), applied
				  * by cli_next at CLI_END */
};

/* The flags both control processes (kv-sender, kv-receiver) take, parsed
 * one way for both: --listen EP, --engine EP, --table PATH, --pool PATH,
 * --transport NAME (default shm), --topo tp,pp[,cp,dp] (each >= 1; default
 * 1,1,1,1) and --rank tp,pp[,cp,dp] (default 0,0,0,0). */
struct cli_member {
	const char *listen, *engine, *table, *pool, *transport;
	struct kvw_topo topo;
	struct kvw_coord rank;
};

/* What cli_next returns besides a program option's `val`, which must lie
 * in [1, CLI_HELP) and not be '?' or ':'. */
enum {
	CLI_END = -1,      /* options done; with CLI_OPERANDS see optind */
	CLI_HELP = 0x4000, /* --help: print usage to stdout, exit 0 */
	CLI_BAD,           /* usage error, fatal line written: exit 100 */
	CLI_SHAPE_OPT,     /* a valid shape flag, when shape is NULL */
};

#define CLI_MAX_OPTS 64

/* Parse state of one program's command line; fill with cli_init. */
struct cli {
	const char *prog;          /* "kv-sender", the fatal lines' prefix */
	unsigned flags;            /* enum cli_flag */
	int ready_fd;              /* --ready-fd, -1 when not given */
	int log_level;             /* enum log_level; --log-level or default */
	const char *log_level_arg; /* --log-level as given, NULL if not */
	const char *name;          /* --name, NULL if not given */
	struct shape *shape;       /* CLI_SHAPE: flags applied here, or NULL */
	struct cli_member member;  /* CLI_MEMBER: flags applied here */
	int check;                 /* --check: validate, make nothing, exit */
	const char *keys;          /* --keys DIR (CLI_AUTH) */
	int insecure;              /* --insecure (CLI_AUTH) */
	int encrypt;               /* --encrypt (CLI_AUTH): KVW_TCP_ENCRYPT=1 */
	const char *opt;           /* long name of the option just returned */
	const char *arg;           /* its value, NULL when it takes none */
	struct option table[CLI_MAX_OPTS]; /* own + common, built by cli_next */
};

/* Prepares c and restarts getopt (optind = 0, glibc). shape may be NULL:
 * then each valid shape flag is returned as CLI_SHAPE_OPT (opt, arg set)
 * for the program to apply later. */
void cli_init(struct cli *c, const char *prog, unsigned flags, int log_level,
	      struct shape *shape);

/* The next option of argv (getopt_long, so --opt=v and --opt v, any order;
 * operands are moved to the end). Applies the common options itself and
 * returns the program's own option `val` (c->opt, c->arg set), CLI_HELP,
 * CLI_SHAPE_OPT, CLI_END, or CLI_BAD after writing one fatal line (unknown
 * option, missing value, bad common value, or an operand without
 * CLI_OPERANDS). own ends with a zeroed entry and must not list "help". */
int cli_next(struct cli *c, int argc, char **argv, const struct option *own);

/* After CLI_END with CLI_MEMBER: checks that --listen, --engine, --table
 * and --pool were given and that --rank lies inside --topo. Returns 0, or
 * KVW_EXIT_USAGE after writing the fatal line. */
int cli_member_check(const struct cli *c);

/* Writes "prog: fatal: MESSAGE\n" to stderr; returns code, so that main()
 * can `return cli_fatal(PROG, KVW_EXIT_USAGE, "bad --x: %s", v);`. */
int cli_fatal(const char *prog, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* cli_fatal(c->prog, KVW_EXIT_USAGE, ...): a usage error of c's program;
 * returns KVW_EXIT_USAGE (100). */
int cli_bad(const struct cli *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Where a tool makes its temporary files: $TMPDIR when set and not
 * empty, else /tmp (as mktemp(1) and kv-demo do). */
const char *cli_tmpdir(void);

/* The exit code for a library result: 0 -> 0, KVW_EINVAL -> 100 (usage),
 * KVW_ENODEV -> 77 (skip), KVW_ETIMEDOUT -> 99, KVW_EPEER -> 102 (peer or
 * group gone), any other -> 111. */
int cli_exit_code(int rc);

/* Calls log_init with role "ROLE" or "ROLE.NAME" (--name, cut at 20
 * bytes), index idx (< 0: none) and c->log_level. */
void cli_log_init(const struct cli *c, const char *role, int idx);

/* Whole-string unsigned integers, decimal or 0x hex (no sign, no octal),
 * in [min, max]. Return 0, or KVW_EINVAL with *out unchanged. */
int cli_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int cli_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out);

/* A whole-string decimal number in [min, max]; 0 or KVW_EINVAL (*out
 * unchanged). */
int cli_double(const char *s, double min, double max, double *out);

/* Seconds, fractional, in [min_s, max_s] (min_s > 0), into *ns; 0 or
 * KVW_EINVAL (*ns unchanged). */
int cli_seconds(const char *s, double min_s, double max_s, uint64_t *ns);

#endif
