/*
 * bench_stream.h - a raw TCP stream over loopback (or between kv-bench's two
 * namespaces), the limit a tcp figure is divided by (bench_stream.c).
 */
#ifndef KVW_BENCH_STREAM_H
#define KVW_BENCH_STREAM_H

#include <stdint.h>

/* GiB/s of passes of `bytes` each, sent on a fresh loopback connection to a
 * forked reader, for at least min_s seconds; 0 when it could not run.
 * cpu_gb (may be NULL): CPU seconds per GB (1e9 bytes) moved, of both
 * processes. */
double bench_stream_gibs(uint64_t bytes, double min_s, double *cpu_gb);

struct bench_netns;

/* The same between two namespaces (netns.h): the reader listens on B's end
 * of their link and the stream comes from a socket in A; ns NULL:
 * loopback, as bench_stream_gibs. */
double bench_stream_gibs_ns(uint64_t bytes, double min_s, double *cpu_gb,
			    const struct bench_netns *ns);

#endif
