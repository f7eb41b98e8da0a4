/*
 * test_xhash.c - the tcp transport's tag without keys gives libxxhash's
 * XXH3-128 digest bit for bit on every path this CPU can run (AVX-512,
 * AVX2, libxxhash), however the bytes are split into updates: the sender
 * and the sink may hash on different paths (different CPUs, one of them
 * an older kvwire on libxxhash) and must still agree.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "xport/xhash.h"

#define BUF (3u << 20)

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Hashes len bytes of buf in random pieces through the three functions. */
static XXH128_hash_t pieces(void (*reset)(void *), void (*update)(void *,
		       const void *, size_t), XXH128_hash_t (*digest)(const void *),
		       const uint8_t *buf, size_t len, uint64_t *seed)
{
	XXH3_state_t s;

	reset(&s);
	for (size_t off = 0; off < len;) {
		size_t k = (size_t)(rnd(seed) % 70000);

		k = k > len - off ? len - off : k;
		update(&s, buf + off, k);
		off += k;
	}
	return digest(&s);
}

static void assert_same(XXH128_hash_t got, XXH128_hash_t want)
{
	assert_int_equal(got.low64, want.low64);
	assert_int_equal(got.high64, want.high64);
}

static void d_reset(void *s) { xhash_reset(s); }
static void d_update(void *s, const void *p, size_t n) { xhash_update(s, p, n); }
static XXH128_hash_t d_digest(const void *s) { return xhash_digest(s); }

static void test_every_path_gives_libxxhashs_digest(void **state)
{
	uint8_t *buf = malloc(BUF);
	uint64_t seed = 0x12345678abcdefULL;
	static const size_t lens[] = { 0, 1, 3, 16, 17, 128, 129, 240, 241,
				       1023, 1024, 4096, 65536, 65537,
				       1u << 20, BUF };

	(void)state;
	assert_non_null(buf);
	for (size_t i = 0; i < BUF; i++)
		buf[i] = (uint8_t)rnd(&seed);
	assert_non_null(xhash_path());
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		XXH128_hash_t want = XXH3_128bits(buf, lens[i]);

		assert_same(pieces(d_reset, d_update, d_digest, buf, lens[i],
				   &seed), want);
#ifdef XHASH_FAST
		__builtin_cpu_init();
		if (__builtin_cpu_supports("avx2"))
			assert_same(pieces(xhash_reset_avx2,
					   xhash_update_avx2,
					   xhash_digest_avx2, buf, lens[i],
					   &seed), want);
		if (__builtin_cpu_supports("avx512f") &&
		    __builtin_cpu_supports("avx512bw"))
			assert_same(pieces(xhash_reset_avx512,
					   xhash_update_avx512,
					   xhash_digest_avx512, buf, lens[i],
					   &seed), want);
#endif
	}
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_path_gives_libxxhashs_digest),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
