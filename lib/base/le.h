/*
 * le.h - little-endian fields packed byte by byte, for the transports'
 * wire formats and the GPU pool records (nothing is sent as a struct).
 * In base because both lib/mem and lib/xport write them. Header only.
 */
#ifndef KVW_LE_H
#define KVW_LE_H

#include <stdint.h>

/* Writes the low `bytes` bytes of v at p, least significant first. */
static inline void le_put(uint8_t *p, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Reads `bytes` bytes at p, least significant first. */
static inline uint64_t le_get(const uint8_t *p, unsigned bytes)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < bytes; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

#endif
