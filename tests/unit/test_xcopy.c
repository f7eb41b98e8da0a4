/*
 * test_xcopy.c - the transports' streaming copy (xcopy.h) copies exactly
 * the bytes asked for, at every length around its thresholds (memcpy
 * below XCOPY_STREAM_MIN, whole 64-byte lines, a head before the first
 * line and a tail after the last) and every alignment of destination and
 * source, and writes nothing before or after the destination range.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "xport/xcopy.h"

#define GUARD 192u /* bytes checked on either side of the destination */
#define MAXLEN ((1u << 20) + 4099u)
#define POISON 0xa5

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static int all_poison(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != POISON)
			return 0;
	return 1;
}

/* Copies len bytes from src + soff to the destination at offset doff of a
 * poisoned buffer (64-byte aligned) and checks both the copy and its
 * surroundings. */
static void one(uint8_t *dbuf, const uint8_t *src, size_t soff, size_t doff,
		size_t len)
{
	uint8_t *d = dbuf + GUARD + doff;

	memset(dbuf, POISON, GUARD + 64 + len + GUARD);
	xcopy_stream(d, src + soff, len);
	xcopy_drain();
	if (memcmp(d, src + soff, len) != 0 || !all_poison(dbuf, GUARD + doff) ||
	    !all_poison(d + len, GUARD))
		fail_msg("copy of %zu bytes (source offset %zu, destination "
			 "offset %zu) is wrong or wrote outside its range",
			 len, soff, doff);
}

static void test_every_length_and_alignment_is_copied_exactly(void **state)
{
	static const size_t lens[] = { 0, 1, 15, 63, 64, 65, 4095,
				       XCOPY_STREAM_MIN, XCOPY_STREAM_MIN + 1,
				       XCOPY_STREAM_MIN + 63, XCOPY_STREAM_MIN + 64,
				       8191, 32768, 32768 + 17, 65536, 1u << 20,
				       MAXLEN };
	uint8_t *src = malloc(MAXLEN + 64);
	/* C17: an aligned_alloc size is a multiple of the alignment. */
	uint8_t *dbuf = aligned_alloc(64, (GUARD + 64 + MAXLEN + GUARD + 63) /
					  64 * 64);
	uint64_t seed = 0x9e3779b97f4a7c15ull;

	(void)state;
	assert_non_null(src);
	assert_non_null(dbuf);
	for (size_t i = 0; i < MAXLEN + 64; i++)
		src[i] = (uint8_t)rnd(&seed);
	for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
		for (size_t doff = 0; doff < 64; doff++)
			for (size_t soff = 0; soff < 64; soff += 13)
				/* The two largest at a few alignments only:
				 * they take the same paths. */
				if (lens[l] < (1u << 20) || (doff % 21 == 0 &&
							    soff == 13))
					one(dbuf, src, soff, doff, lens[l]);
	free(dbuf);
	free(src);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			test_every_length_and_alignment_is_copied_exactly),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
