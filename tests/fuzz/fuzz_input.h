/*
 * fuzz_input.h - the input formats of fuzz_frame and fuzz_boot in one
 * place: the targets cut their input with these, tests/fuzz/mkseeds.c
 * writes seeds with them and tests/unit/test_seeds.c reads the seeds back.
 *  - one message (fuzz_frame): byte 0 = part count mod KVW_MAX_FRAMES + 2,
 *    each part but the last a u16 LE length and its bytes, the last part
 *    the rest of the input;
 *  - a sequence (fuzz_boot): records of byte 0 = part count mod
 *    KVW_MAX_FRAMES + 2, then every part a u16 LE length and its bytes.
 * Every part is copied into its own exact-size heap buffer (mem[i], freed
 * by the caller) so ASan sees any read past it.
 */
#ifndef KVW_FUZZ_INPUT_H
#define KVW_FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/frame.h"

#define FUZZ_NMAX (KVW_MAX_FRAMES + 1)

/* fuzz_roles: a record is byte 0 = the handler (mod FUZZ_ROLES_HANDLERS:
 * sender peer, sender engine, sender worker's JOB_DONE, receiver engine,
 * receiver peer, receiver bootstrap reply), then one message as fuzz_boot
 * reads it; the decode registered at the start talks as src_rank 0 with
 * this epoch. */
#define FUZZ_ROLES_HANDLERS 6
#define FUZZ_DECODE_EPOCH 0x5eed5eed5eed5eedull

/* A copy of len bytes at p in a buffer of its own (abort on no memory). */
static inline struct frame_part fuzz_part(const uint8_t *p, size_t len,
					  uint8_t **mem)
{
	*mem = malloc(len ? len : 1);
	if (*mem == NULL)
		abort();
	if (len)
		memcpy(*mem, p, len);
	return (struct frame_part){ *mem, len };
}

/* Cuts the message at data[*off..size) into parts[] (the last part takes
 * the rest when last_rest, else it has a length like the others); returns
 * the part count, or -1 when nothing is left. */
static inline int fuzz_cut(const uint8_t *data, size_t size, size_t *off,
			   int last_rest, struct frame_part *parts,
			   uint8_t **mem)
{
	size_t n;

	if (*off >= size)
		return -1;
	n = data[(*off)++] % (FUZZ_NMAX + 1);
	for (size_t i = 0; i < n; i++) {
		size_t len = size - *off;

		if (!(last_rest && i + 1 == n)) {
			len = 0;
			if (size - *off >= 2) {
				len = (size_t)data[*off] |
				      (size_t)data[*off + 1] << 8;
				*off += 2;
				if (len > size - *off)
					len = size - *off;
			}
		}
		parts[i] = fuzz_part(data + *off, len, &mem[i]);
		*off += len;
	}
	return (int)n;
}

/* Writes parts in the form fuzz_cut reads back; 0 or -1 (a part over
 * 65535 bytes that needs a length, or a write error). */
static inline int fuzz_put(FILE *f, const struct frame_part *parts, size_t n,
			   int last_rest)
{
	if (fputc((int)n, f) == EOF)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!(last_rest && i + 1 == n)) {
			if (parts[i].len > 0xFFFF ||
			    fputc((int)(parts[i].len & 0xFF), f) == EOF ||
			    fputc((int)(parts[i].len >> 8), f) == EOF)
				return -1;
		}
		if (parts[i].len &&
		    fwrite(parts[i].data, 1, parts[i].len, f) != parts[i].len)
			return -1;
	}
	return 0;
}

#endif
