/*
 * xcopy.c - xcopy.h. SSE2's 16-byte streaming stores, four to a cache
 * line: every x86-64 CPU has them, and on the machines measured wider
 * stores (AVX2, AVX-512) moved no more (memory, not the core, is the
 * limit). The head up to the first 64-byte boundary of dst and the tail
 * after the last one go by memcpy, so every streaming store fills whole
 * lines (a partial line costs a read of it after all).
 */
#include "xcopy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>

void xcopy_stream(void *dst, const void *src, size_t len)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
	size_t head, lines;

	if (len < XCOPY_STREAM_MIN) {
		memcpy(d, s, len);
		return;
	}
	head = (64 - ((uintptr_t)d & 63)) & 63;
	memcpy(d, s, head);
	d += head;
	s += head;
	len -= head;
	for (lines = len / 64; lines > 0; lines--, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));

		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, len & 63);
}

void xcopy_drain(void)
{
	_mm_sfence();
}
#else
void xcopy_stream(void *dst, const void *src, size_t len)
{
	memcpy(dst, src, len);
}

void xcopy_drain(void)
{
}
#endif
