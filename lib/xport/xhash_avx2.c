/* xhash_avx2.c - xxh3 with AVX2 vector code (see xhash_isa.h); only
 * called when the CPU has AVX2 (xhash.c). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("avx2")
#define XXH_VECTOR XXH_AVX2
#define XHASH_ISA avx2
#include "xhash_isa.h"
#endif
