/*
 * bench_gcpu.h - the CPU seconds of a kvwire group's processes over a
 * kv-bench run, by kind: what issue 35 asks for per process ("CPU seconds
 * per GB moved"), taken from /proc before and after the run. The members
 * are those of the run directory's endpoints file and pids/ (kv-up's);
 * a kv-sender's children are its workers, a kv-receiver's its tcp sink.
 */
#ifndef KVBENCH_GCPU_H
#define KVBENCH_GCPU_H

#include <stdint.h>
#include <sys/types.h>

struct runinfo;

enum gcpu_kind {
	GCPU_SENDER,
	GCPU_WORKER,
	GCPU_RECEIVER,
	GCPU_SINK,
	GCPU_BOOTSTRAP,
	GCPU_HEARTBEAT,
	GCPU_NKINDS
};

#define GCPU_MAX 1024u /* processes followed (a 256-member group's) */

/* One look at every process of the group. */
struct gcpu_snap {
	uint32_t n;
	struct gcpu_proc {
		pid_t pid;
		unsigned kind; /* enum gcpu_kind */
		double s;      /* CPU seconds so far */
	} p[GCPU_MAX];
};

/* Seconds per kind between two looks, and how many processes each. */
struct gcpu_sum {
	double s[GCPU_NKINDS];
	uint32_t procs[GCPU_NKINDS];
};

/* "kv-sender", "workers", ... (for output and JSON keys). */
const char *gcpu_kind_name(unsigned kind);

/* Adds the processes of the group ri describes, whose run directory is
 * dir (pids in dir/pids/, or dir/p/pids/ and dir/d/pids/ for a group
 * split over two hosts' directories), to *s. Members without a readable
 * pid file are left out. */
void gcpu_take(struct gcpu_snap *s, const struct runinfo *ri, const char *dir);

/* The CPU each kind used from a to b: a process in both looks (the same
 * pid and kind) counts its difference; one that was restarted between
 * them counts nothing. */
void gcpu_diff(const struct gcpu_snap *a, const struct gcpu_snap *b,
	       struct gcpu_sum *out);

#endif
