/*
 * bench_copy_cuda.h - kv-bench copy --transport cuda: the engine side. A
 * forked child (forked before this process touches CUDA: a CUDA context
 * does not survive fork) owns the source and destination device memory,
 * fills the source from the source pool's host bytes, registers both as
 * GPU pools (records beside the two pools), and on request measures the
 * raw cudaMemcpy device-to-device limit over the same copy list
 * (bench_limit_cuda_d2d) or checks the destination. The parent then opens
 * the records through the cuda transport, as a worker does: CUDA IPC
 * handles only open in another process than the one that made them.
 */
#ifndef KVB_BENCH_COPY_CUDA_H
#define KVB_BENCH_COPY_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"
#include "xport/xport.h"

struct bcc; /* opaque: the child and its pipes */

/* Forks the child for the two pools (paths, `size` bytes each, pages of
 * page_bytes) and copies[0..n) (only their offsets and lengths are used),
 * and waits until both GPU pools are registered. 0, or the child's error
 * (KVW_ENODEV "cuda: not available: ..." on a machine without a GPU),
 * with err; *out NULL on failure (no child left). */
int bcc_start(struct bcc **out, const char *src_pool, const char *dst_pool,
	      uint64_t size, uint64_t page_bytes,
	      const struct xport_copy *copies, uint32_t n, char *err,
	      size_t errlen);

/* The raw device-to-device limit (GiB/s) for at least min_s seconds. */
int bcc_limit(struct bcc *e, double min_s, double *gibs, char *err,
	      size_t errlen);

/* *ok = 1 when every destination span holds its source's bytes. */
int bcc_verify(struct bcc *e, int *ok, char *err, size_t errlen);

/* Tells the child to free its memory and remove the records, reaps it;
 * *e = NULL. Accepts NULL and *e == NULL. */
void bcc_stop(struct bcc **e);

#endif
