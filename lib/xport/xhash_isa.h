/*
 * xhash_isa.h - one instruction set's XXH3-128 for xhash.c: included by
 * xhash_avx2.c and xhash_avx512.c after they chose XHASH_ISA (the suffix
 * of the three functions) and the compiler target. xxhash.h is compiled
 * inline here (XXH_INLINE_ALL: its own names, nothing shared with
 * libxxhash) with the vector code of that target; the state is the same
 * struct as libxxhash's, as the asserts check.
 */
#include <stddef.h>
#include <stdint.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define XHASH_CAT2(a, b) a##_##b
#define XHASH_CAT(a, b) XHASH_CAT2(a, b)

_Static_assert(sizeof(XXH3_state_t) == 576 && _Alignof(XXH3_state_t) == 64,
	       "xxh3 state differs from the one libxxhash 0.8 allocates");

void XHASH_CAT(xhash_reset, XHASH_ISA)(void *s);
void XHASH_CAT(xhash_update, XHASH_ISA)(void *s, const void *p, size_t n);
XXH128_hash_t XHASH_CAT(xhash_digest, XHASH_ISA)(const void *s);

void XHASH_CAT(xhash_reset, XHASH_ISA)(void *s)
{
	XXH3_128bits_reset((XXH3_state_t *)s);
}

void XHASH_CAT(xhash_update, XHASH_ISA)(void *s, const void *p, size_t n)
{
	XXH3_128bits_update((XXH3_state_t *)s, p, n);
}

XXH128_hash_t XHASH_CAT(xhash_digest, XHASH_ISA)(const void *s)
{
	return XXH3_128bits_digest((const XXH3_state_t *)s);
}
