/*
 * cuda_stage.h - the staging ring for GPU pools over tcp: a few pinned host
 * buffers (cudaHostAlloc), each with its own stream and event, used in
 * ring order. The prefill worker gathers a batch's device pages into slot
 * k+1 (cstage_d2h) while slot k's bytes are on the wire; the decode sink
 * reads a batch's payload into a slot and scatters it to device pages
 * (cstage_h2d). A slot is reused only after cstage_release, and its copies
 * are known done only after cstage_wait: the same quiescence rule as the
 * cuda transport's.
 *
 * Not hooked into the tcp transport yet (xport_tcp.c would send a slot's
 * buffer where it sends pool bytes today, tcp_sink.c would read into a
 * slot and land it): those files change elsewhere at the same time.
 */
#ifndef KVW_CUDA_STAGE_H
#define KVW_CUDA_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

#define CSTAGE_MAX_SLOTS 16u

struct cstage; /* opaque */

/* One run of device memory: len bytes at dev. */
struct cstage_piece {
	void *dev;
	uint64_t len;
};

/* A ring of `slots` (2..CSTAGE_MAX_SLOTS) pinned buffers of slot_bytes
 * each on `device`. 0, or KVW_EINVAL, KVW_ENODEV ("cuda: not available"),
 * KVW_ESYS (a CUDA call); *out NULL on failure, nothing left allocated. */
int cstage_open(struct cstage **out, int device, uint32_t slots,
		uint64_t slot_bytes, char *err, size_t errlen);

/* The next slot in ring order, if it was released: 0 and *slot, or
 * KVW_EAGAIN (the ring is full: send or land and release first). */
int cstage_acquire(struct cstage *s, uint32_t *slot);

/* The slot's host buffer (owned by the ring) and its size. */
uint8_t *cstage_buf(const struct cstage *s, uint32_t slot);
uint64_t cstage_slot_bytes(const struct cstage *s);

/* Queues device -> slot copies of p[0..n), packed back to back from the
 * buffer's start, and records the slot's event. KVW_ERANGE (more than a
 * slot holds), KVW_EINVAL (slot not acquired, NULL piece): nothing queued.
 * *bytes gets the packed length. */
int cstage_d2h(struct cstage *s, uint32_t slot, const struct cstage_piece *p,
	       size_t n, uint64_t *bytes, char *err, size_t errlen);

/* Queues slot -> device copies: the buffer's bytes, back to back, to
 * p[0..n); the same checks. */
int cstage_h2d(struct cstage *s, uint32_t slot, const struct cstage_piece *p,
	       size_t n, char *err, size_t errlen);

/* 0 when the slot's queued copies are done, KVW_ETIMEDOUT after
 * timeout_ms (< 0: no limit), or the CUDA error. */
int cstage_wait(struct cstage *s, uint32_t slot, int timeout_ms, char *err,
		size_t errlen);

/* Gives the slot back (its copies must be done: call cstage_wait first). */
void cstage_release(struct cstage *s, uint32_t slot);

/* Waits for every slot, frees the buffers, streams and events; *s = NULL.
 * Accepts NULL and *s == NULL. */
void cstage_close(struct cstage **s);

#endif
