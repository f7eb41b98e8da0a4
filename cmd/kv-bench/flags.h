/*
 * flags.h - kv-bench's group and workload flags (demo and rooms modes):
 * where the group is (--run-dir, or --spawn through kv-up with its extra
 * arguments), the workload (struct bench_config), the topology to check or
 * ask kv-up for, and the shape flags, kept to be applied over the group's
 * own shape line. The mode word and the modes' flags are modes.c's.
 */
#ifndef KVBENCH_FLAGS_H
#define KVBENCH_FLAGS_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "bench.h"
#include "common/cli.h"

#define KVB_MAX_ARGS 128

struct kvb_flags {
	struct cli cl;         /* --log-level (cl.log_level) */
	const char *run_dir;   /* --run-dir, NULL with --spawn */
	int spawn;             /* --spawn */
	char kv_up[PATH_MAX];  /* --kv-up, "" for the default */
	uint32_t topo[4];      /* prefill tp, pp, decode tp, pp; 0: not given */
	unsigned nshape;       /* shape flags given, in order */
	const char *shape_name[KVB_MAX_ARGS];
	char *shape_val[KVB_MAX_ARGS]; /* NULL for --mla */
	const char *transport; /* --transport, NULL when not given */
	unsigned nup;          /* arguments for kv-up so far */
	char *up_args[3 * KVB_MAX_ARGS + 9];
	char up_flag[KVB_MAX_ARGS][24]; /* "--layers", ... for up_args */
	char up_num[4][16];             /* the topology, for up_args */
};

/* Parses argv (mode word and mode flags already taken out) into *f and
 * the workload fields of *cfg (its defaults already set). Returns -1 to go
 * on, or the exit code to leave with (--help: 0; usage error: 100 after
 * the fatal line). */
int kvb_flags_parse(int argc, char **argv, struct kvb_flags *f,
		    struct bench_config *cfg);

/* The NULL-terminated kv-up arguments for --spawn: the --up-arg ones, then
 * the topology and shape flags given. Call once. */
char **kvb_flags_up_args(struct kvb_flags *f);

/* Applies the shape flags, in order, over *s. With group (the group's
 * shape flags as its endpoints file records them, *s already set from
 * them), a flag that would change *s is refused. Returns 0 or KVW_EINVAL
 * with err. */
int kvb_flags_shape(const struct kvb_flags *f, struct shape *s,
		    const char *group, char *err, size_t errlen);

/* kv-bench --help for the demo and rooms modes (the modes' lines too). */
void kvb_flags_usage(FILE *f);

#endif
