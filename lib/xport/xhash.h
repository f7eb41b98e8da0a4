/*
 * xhash.h - the tcp transport's tag without group keys (tcp_mac.h): XXH3-128
 * (libxxhash's algorithm), the same digest on both ends, computed by the
 * fastest code this CPU runs. The distribution's libxxhash is built for
 * SSE2 only (about 13-19 GB/s on the machines this was measured on), and
 * the transport hashes every byte twice (the sender after it sent the
 * source pages, the sink over the written pages); xxhash.h compiled for
 * AVX2 (about 20-25 GB/s) and AVX-512 (about 55 GB/s) takes most of that
 * cost away. The path is picked once, at the first reset, from what the
 * CPU reports; every path gives the same digest (the algorithm is defined
 * bit for bit).
 */
#ifndef KVW_XHASH_H
#define KVW_XHASH_H

#include <stddef.h>
#include <stdint.h>
/* XXH3_state_t by value: its size must be known. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

void xhash_reset(XXH3_state_t *s);
void xhash_update(XXH3_state_t *s, const void *p, size_t n);
XXH128_hash_t xhash_digest(const XXH3_state_t *s);

/* The path in use: "avx512", "avx2" or "libxxhash". */
const char *xhash_path(void);

/* The compiled fast paths (xhash_isa.h), for the dispatch and its test:
 * call one only on a CPU that has its instructions. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define XHASH_FAST 1
void xhash_reset_avx2(void *s);
void xhash_update_avx2(void *s, const void *p, size_t n);
XXH128_hash_t xhash_digest_avx2(const void *s);
void xhash_reset_avx512(void *s);
void xhash_update_avx512(void *s, const void *p, size_t n);
XXH128_hash_t xhash_digest_avx512(const void *s);
#endif

#endif
