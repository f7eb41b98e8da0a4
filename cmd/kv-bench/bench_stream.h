/*
 * bench_stream.h - a raw TCP stream over loopback, the limit kv-bench copy
 * --transport tcp divides its figure by (bench_stream.c).
 */
#ifndef KVW_BENCH_STREAM_H
#define KVW_BENCH_STREAM_H

#include <stdint.h>

/* GiB/s of passes of `bytes` each, sent on a fresh loopback connection to a
 * forked reader, for at least min_s seconds; 0 when it could not run.
 * cpu_gb (may be NULL): CPU seconds per GB (1e9 bytes) moved, of both
 * processes. */
double bench_stream_gibs(uint64_t bytes, double min_s, double *cpu_gb);

#endif
