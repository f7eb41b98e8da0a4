/*
 * cuda_stage.h - GPU pools over tcp: device bytes staged through the host
 * pool of the same layout. An engine's GPU record (gpool.h) stands for
 * pool bytes [0, bytes of its buffers); the host pool beside it has room
 * for exactly those bytes, unused while the KV lives on the GPU. So the
 * prefill worker copies a batch's device pages into the host pool at the
 * same offsets (device to host) and sends them from there as it sends any
 * host page, and the decode sink lands a batch in its host pool as always
 * and, before it acks, copies the device part on to the GPU (host to
 * device). Everything the host-pool path checks and hashes is checked and
 * hashed the same way; a batch kept for a resend keeps its bytes (they sit
 * in the pool, not in a ring slot that could be reused).
 *
 * The staging writes go through a read-write view of the pool file that
 * the instance maps itself when a record is first loaded (a prefill
 * worker maps its source pool read-only; the same shared pages, so what
 * it sends from its own mapping is what was staged). That view is
 * registered with the runtime (cudaHostRegister), so the copies are DMA from pinned memory; where
 * registration is refused the copies still work, from pageable memory
 * (slower; cstage_pinned says which). Nothing of CUDA is loaded for a pool
 * that has no record: a host pool costs one stat per batch.
 *
 * One stream and one event per instance: cstage_sync returns when every
 * queued copy is done (the quiescence rule of the cuda transport: a batch
 * is sent, or acked, only after its copies completed).
 */
#ifndef KVW_CUDA_STAGE_H
#define KVW_CUDA_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

struct cstage; /* opaque */

/* For the host pool at pool_path (size bytes); maps and loads nothing
 * yet. 0, KVW_EINVAL (not a pool path) or KVW_ENOMEM; *out is the
 * caller's (cstage_close). */
int cstage_open(struct cstage **out, const char *pool_path, uint64_t size,
		char *err, size_t errlen);

/* Before a batch: makes the GPU record current (one stat; a new engine
 * epoch closes the old handles after the stream drained and opens the
 * new ones). 0 with *gpu 0 (no record: a host pool), 0 with *gpu 1 (the
 * record's handles are open), or the error: a record exists but CUDA is
 * not available (KVW_ENODEV), the record is malformed or of another pool
 * size, or a handle does not open. */
int cstage_fresh(struct cstage *s, int *gpu, char *err, size_t errlen);

/* Queues the copies between the GPU and the host pool for the device
 * bytes of pool range [off, off + len): to_host 1 (GPU -> host pool, the
 * prefill before it sends) or 0 (host pool -> GPU, the sink before it
 * acks). Host bytes of the range (the AUX slots) are left as they are.
 * The range is inside the pool (the caller checked it) and the record
 * current (cstage_fresh said *gpu 1). 0 or the CUDA error. */
int cstage_queue(struct cstage *s, uint64_t off, uint64_t len, int to_host,
		 char *err, size_t errlen);

/* Waits for every queued copy. 0, or the CUDA error (of a copy or of the
 * wait): the batch must not count as moved. */
int cstage_sync(struct cstage *s, char *err, size_t errlen);

/* 1 when the host pool is registered with the runtime (pinned). */
int cstage_pinned(const struct cstage *s);

/* Waits for the stream, closes the handles, unregisters and unmaps the
 * pool view, frees;
 * *s = NULL. Accepts NULL and *s == NULL. */
void cstage_close(struct cstage **s);

#endif
