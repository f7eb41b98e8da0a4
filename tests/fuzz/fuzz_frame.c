/*
 * fuzz_frame.c - libFuzzer target for frame_decode. The input is split
 * into up to KVW_MAX_FRAMES + 1 parts: byte 0 picks the part count, then each
 * part but the last is a u16 LE length and that many bytes, and the last part
 * takes the rest (fuzz_input.h). Each part is copied into its own exact-size
 * heap buffer so ASan sees any read past a part. Whatever decodes must encode
 * back to exactly the input bytes (the wire form is canonical) and decode again
 * to the same message; otherwise the target aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "wire/frame.h"

#define NMAX FUZZ_NMAX

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Returns 1 when both lists hold the same bytes. */
static int parts_equal(const struct frame_part *a, size_t na,
		       const struct frame_part *b, size_t nb)
{
	if (na != nb)
		return 0;
	for (size_t i = 0; i < na; i++)
		if (a[i].len != b[i].len ||
		    (a[i].len && memcmp(a[i].data, b[i].data, a[i].len)))
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct frame_out out1, out2;
	struct frame_part parts[NMAX];
	uint8_t *mem[NMAX] = { 0 };
	struct frame_msg m1, m2;
	char err[160];
	size_t off = 0;
	int k = fuzz_cut(data, size, &off, 1, parts, mem);
	size_t n = k < 0 ? 0 : (size_t)k;

	if (k < 0)
		return 0;

	if (frame_decode(parts, n, &m1, err, sizeof err) == 0) {
		/* the decoded views point into parts, which are still alive */
		if (frame_encode(&m1, &out1, err, sizeof err) != 0)
			abort(); /* decode accepted what encode refuses */
		if (!parts_equal(parts, n, out1.parts, out1.nparts))
			abort(); /* not canonical: re-encoding changed the bytes */
		if (frame_decode(out1.parts, out1.nparts, &m2, err, sizeof err) != 0)
			abort();
		if (frame_encode(&m2, &out2, err, sizeof err) != 0 ||
		    !parts_equal(out1.parts, out1.nparts, out2.parts, out2.nparts))
			abort(); /* the second round trip differs from the first */
	}
	for (size_t i = 0; i < n; i++)
		free(mem[i]);
	return 0;
}
