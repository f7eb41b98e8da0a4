/*
 * api_hold.h - commands held back by an engine handle (kvw_engine_hold,
 * api.h) and sent in one burst at kvw_engine_flush: each command is
 * encoded when the engine gives it (its page list copied, so the caller's
 * arrays are free again at once) and kept as its encoded parts, in order.
 */
#ifndef KVW_API_HOLD_H
#define KVW_API_HOLD_H

#include <stddef.h>
#include <stdint.h>

#include "base/byteq.h"
#include "wire/frame.h"

/* The held commands of one handle: in q, records of u32 nparts, then per
 * part u32 len and the bytes. */
struct api_hold {
	struct byteq q;
	uint32_t n; /* commands in q */
	int on;     /* kvw_engine_hold(e, 1) */
};

/* Past this many bytes held a command flushes first; one that still does
 * not fit is refused (KVW_EAGAIN, nothing queued). */
#define API_HOLD_MAX (4u << 20)

/* Appends m, encoded: 0, KVW_EINVAL (m refused by the codec, err says
 * why) or KVW_ENOMEM. */
int api_hold_put(struct api_hold *h, const struct frame_msg *m, char *err,
		 size_t errlen);

/* Sends what is held, oldest first, on sock: 0 when all went, KVW_EAGAIN
 * when the socket's queue is full (the rest stays held, in order) or
 * KVW_ESYS (err says why; the rest stays held). */
int api_hold_send(struct api_hold *h, void *sock, char *err, size_t errlen);

/* Bytes held. */
static inline size_t api_hold_bytes(const struct api_hold *h)
{
	return h->q.len - h->q.off;
}

void api_hold_free(struct api_hold *h);

#endif
