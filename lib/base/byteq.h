/*
 * byteq.h - a growing queue of bytes: appended at len, taken from off.
 * The worker channel's unsent bytes (wire/chan.c) and an engine's held
 * commands (api_hold.c) both queue in one.
 */
#ifndef KVW_BYTEQ_H
#define KVW_BYTEQ_H

#include <stddef.h>
#include <stdint.h>

struct byteq {
	uint8_t *p; /* [off, len) queued, not taken yet */
	size_t off, len, cap;
};

/* Room for `more` bytes at p + len: the bytes taken are dropped first
 * (the rest slides to the front), then the buffer grows (doubling, from
 * 4 KiB). 0, or KVW_ENOMEM with the queue as it was. */
int byteq_reserve(struct byteq *q, size_t more);

void byteq_free(struct byteq *q);

#endif
