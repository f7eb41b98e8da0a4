/*
 * xhash.c - xhash.h's dispatch: the AVX-512 or AVX2 build of XXH3-128
 * (xhash_avx512.c, xhash_avx2.c) when the CPU has it, else libxxhash.
 * KVW_XHASH=lib forces libxxhash and KVW_XHASH=avx2 the AVX2 path where
 * the CPU has both (to compare, or to rule a fast path out).
 */
#include "xhash.h"

#include <stdlib.h>
#include <string.h>

struct path {
	const char *name;
	void (*reset)(void *s);
	void (*update)(void *s, const void *p, size_t n);
	XXH128_hash_t (*digest)(const void *s);
};

static void lib_reset(void *s)
{
	XXH3_128bits_reset(s);
}

static void lib_update(void *s, const void *p, size_t n)
{
	XXH3_128bits_update(s, p, n);
}

static XXH128_hash_t lib_digest(const void *s)
{
	return XXH3_128bits_digest(s);
}

static const struct path lib = { "libxxhash", lib_reset, lib_update,
				 lib_digest };
#ifdef XHASH_FAST
static const struct path avx2 = { "avx2", xhash_reset_avx2,
				  xhash_update_avx2, xhash_digest_avx2 };
static const struct path avx512 = { "avx512", xhash_reset_avx512,
				    xhash_update_avx512, xhash_digest_avx512 };
#endif

/* Chosen once; a race between two first callers picks the same one. */
static const struct path *pick(void)
{
	static const struct path *_Atomic chosen;
	const struct path *p = chosen;
	const char *env;

	if (p)
		return p;
	p = &lib;
	env = getenv("KVW_XHASH");
#ifdef XHASH_FAST
	if (!(env && !strcmp(env, "lib"))) {
		__builtin_cpu_init();
		if (__builtin_cpu_supports("avx512f") &&
		    __builtin_cpu_supports("avx512bw") &&
		    !(env && !strcmp(env, "avx2")))
			p = &avx512;
		else if (__builtin_cpu_supports("avx2"))
			p = &avx2;
	}
#else
	(void)env;
#endif
	chosen = p;
	return p;
}

void xhash_reset(XXH3_state_t *s)
{
	pick()->reset(s);
}

void xhash_update(XXH3_state_t *s, const void *p, size_t n)
{
	pick()->update(s, p, n);
}

XXH128_hash_t xhash_digest(const XXH3_state_t *s)
{
	return pick()->digest(s);
}

const char *xhash_path(void)
{
	return pick()->name;
}
