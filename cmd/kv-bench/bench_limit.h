/*
 * bench_limit.h - the machine's limits that kv-bench prints beside its own
 * figures, measured in the same process and run: what the machine is (cores,
 * page sizes, CPU model), single-thread memcpy bandwidth over a caller's
 * list of spans, and a raw ZMQ ipc ping-pong
 * between this process and a forked echo child (serialized round trips: the
 * cost floor of one control-plane hop there and back).
 */
#ifndef KVW_BENCH_LIMIT_H
#define KVW_BENCH_LIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

/* What the machine is; every field best effort (0 / "unknown"). */
struct bench_limit_machine {
	unsigned cores;       /* online CPUs */
	long os_page;         /* bytes (sysconf PAGESIZE) */
	long huge_page_kib;   /* /proc/meminfo Hugepagesize, 0 unknown */
	char cpu[128];        /* /proc/cpuinfo "model name" */
};

void bench_limit_machine(struct bench_limit_machine *m);

/* One memcpy of the reference: len bytes from src to dst. */
struct bench_limit_span {
	uint8_t *dst;
	const uint8_t *src;
	size_t len;
};

/* Copies spans[0..n) in order with memcpy, again and again, for at least
 * min_s seconds (at least one pass). Returns GiB/s (2^30 bytes) of bytes
 * copied, 0 when the spans hold no byte. */
double bench_limit_memcpy(const struct bench_limit_span *spans, size_t n,
			double min_s);

/* The all-core limit (issue 35): `threads` threads at once (one per
 * core), each copying a private pair of `bytes` buffers as pages of `page`
 * bytes (0: the whole buffer at once; page <= bytes) in a shuffled order,
 * with memcpy (or, streaming, with the transports' streaming copy,
 * xport/xcopy.h: stores that bypass the cache, on buffers that ask for 2
 * MiB pages: the machine's best copy) again and again
 * for at least min_s seconds after they all started. Returns the GiB/s of
 * all of them together, 0 when a buffer or a thread could not be had. The
 * machine's limit for a group whose workers run on every core, with the
 * page size and scatter of its rooms. */
double bench_limit_memcpy_cores(unsigned threads, size_t bytes, size_t page,
				double min_s, int streaming);

/* The same list on a GPU (spans hold device addresses): one
 * cudaMemcpyAsync device-to-device per span on one stream, then one
 * cudaStreamSynchronize per pass, again and again for at least min_s
 * seconds: the best the raw runtime does with these pages, the limit of
 * `kv-bench copy --transport cuda`. Returns GiB/s, or -1 when the runtime
 * is missing or a call failed. Call from the process that owns the
 * memory, on its current device. */
double bench_limit_cuda_d2d(const struct bench_limit_span *spans, size_t n,
			    double min_s);

/* A serialized ZMQ ipc ping-pong. */
struct bench_limit_rtt {
	uint32_t n;        /* round trips timed */
	double per_s;      /* round trips per second (n / elapsed) */
	double p50_us, p99_us, max_us, mean_us;
};

/* Forks a child that binds a ROUTER on ipc://DIR/bench-limit-<pid>.ipc and
 * echoes every message; this process connects a DEALER, makes `warmup`
 * untimed round trips, then `count` timed ones of `msg_bytes` each (one
 * at a time), then stops and reaps the child. Call it while this process
 * holds no ZMQ context of its own threads' making that the child could
 * inherit in use (the child builds its own). Returns 0 with *out, or
 * KVW_ESYS / KVW_ENOMEM / KVW_ETIMEDOUT (no echo within 2 s) with err. */
int bench_limit_zmq_rtt(const char *dir, uint32_t warmup, uint32_t count,
		      size_t msg_bytes, struct bench_limit_rtt *out, char *err,
		      size_t errlen);

/* Sorts v[0..n) and returns its q-quantile (0 <= q <= 1; nearest rank);
 * 0 when n == 0. */
double bench_limit_quantile(double *v, size_t n, double q);

#endif
