/*
 * bench_copy.h - kv-bench copy: a transport's bandwidth (shm by default;
 * tcp or rdma on request) against a
 * single-thread memcpy of the very same copy list, in one process and run.
 * Two real pool files are made in /dev/shm; the "decode" one is registered
 * through one shm transport instance and connected by its descriptor from a
 * second ("prefill") instance that registered the source pool read-only,
 * exactly as a sender worker does; the copies go through xport_write_batch
 * in batches of WORKER_BATCH. The memcpy reference copies the same list
 * between the same files' pages (through this process's own mappings of
 * them), right before and right after the transport pass.
 */
#ifndef KVW_BENCH_COPY_H
#define KVW_BENCH_COPY_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

enum bench_copy_pattern {
	BENCH_COPY_CONTIGUOUS, /* runs of run_pages consecutive pages */
	BENCH_COPY_SCATTERED,  /* single pages, no two adjacent, any order */
};

struct bench_copy_cfg {
	uint64_t page_bytes;   /* >= 1 */
	uint32_t run_pages;    /* pages per run (contiguous), >= 1 */
	enum bench_copy_pattern pattern;
	uint64_t total_bytes;  /* bytes per pass (rounded down to whole runs) */
	double min_s;          /* each timed measurement lasts at least this */
	uint32_t reps;         /* memcpy / transport / memcpy rounds, >= 1 */
	uint64_t seed;         /* order of the pages */
	int tcp;               /* 1: the tcp transport to a forked sink, and
				* a raw loopback TCP stream as the limit */
	int rdma;              /* 1: the rdma transport, both ends in this
				* process (the decode's exchange thread on
				* 127.0.0.1), through the device's loopback;
				* memcpy stays the limit */
	const uint8_t *group_key; /* tcp: the group's data key (32 bytes) both
				   * ends prove at connect (tcp_auth.h), or
				   * NULL: the registration's secret only */
	int cuda;              /* 1: the cuda transport between two GPU pools
				* of a forked engine child, and that child's
				* cudaMemcpy device-to-device of the same
				* list as the limit (bench_copy_cuda.h) */
};

struct bench_copy_result {
	uint64_t bytes;        /* per pass */
	uint32_t copies;       /* per pass (after the pattern, not coalesced) */
	uint64_t copy_bytes;   /* bytes of one copy */
	double xport_gibs;     /* best transport pass, GiB/s */
	double before_gibs;    /* best limit (memcpy, or with tcp a raw TCP
				* stream) right before a transport pass */
	double after_gibs;     /* best limit right after one */
	double ratio;          /* xport / max(before, after) */
	double xport_cpu_gb;   /* tcp: CPU seconds per GB moved by the best
				* transport pass (this process and the sink) */
	double limit_cpu_gb;   /* tcp: the same for the raw stream (last) */
	int verified;          /* 1: the destination held the source's bytes
				* (rdma: and the decode saw every batch's
				* immediate land) */
};

/* Runs the measurement. Pool files are removed before returning. Returns 0
 * with *r, or KVW_EINVAL (bad cfg), KVW_ENOMEM, KVW_ESYS, or a transport
 * error, with err saying why. */
int bench_copy_run(const struct bench_copy_cfg *cfg,
		   struct bench_copy_result *r, char *err, size_t errlen);

#endif
