/* xhash_avx512.c - xxh3 with AVX-512 vector code (see xhash_isa.h); only
 * called when the CPU has AVX512F and AVX512BW (xhash.c). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("avx512f,avx512bw,avx2")
#define XXH_VECTOR XXH_AVX512
#define XHASH_ISA avx512
#include "xhash_isa.h"
#endif
