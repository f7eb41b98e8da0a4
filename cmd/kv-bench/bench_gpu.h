/*
 * bench_gpu.h - a simulated engine's KV cache on a GPU (kv-bench
 * --transport cuda, or --gpu-pools with any transport): one device
 * allocation mirrors the KV buffers of the engine's host pool (everything
 * before the AUX buffers), registered with kvw_register_gpu_pool. The
 * pattern code stays on the host: bench_fill pushes the pages it wrote to
 * the device and scrubs their host copy (so only a transport that moves
 * the GPU's bytes passes), bench_verify pulls the pages it reads from it
 * first, page by page, so rooms in flight are never touched.
 */
#ifndef KVB_BENCH_GPU_H
#define KVB_BENCH_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

struct kvw_engine;
struct bgpu; /* opaque */

/* Allocates the mirror on `device`, copies the host pool's KV bytes into
 * it and registers it for engine e (bufs[0..n): its layout, kept by the
 * caller). 0, or KVW_ENODEV / KVW_EINVAL / KVW_ESYS with err; *out NULL
 * on failure. */
int bgpu_attach(struct bgpu **out, struct kvw_engine *e,
		const struct kvw_buf *bufs, uint32_t n, int device, char *err,
		size_t errlen);

/* Host -> device (push) or device -> host (pull) of pages[0..n) in every
 * page-carrying buffer. 0 or KVW_ESYS. A NULL g does nothing. */
int bgpu_push(struct bgpu *g, const uint32_t *pages, uint32_t n);
int bgpu_pull(struct bgpu *g, const uint32_t *pages, uint32_t n);

/* Frees the device memory; *g = NULL. Accepts NULL and *g == NULL. Close
 * the engine first (its close withdraws the registration). */
void bgpu_close(struct bgpu **g);

#endif
