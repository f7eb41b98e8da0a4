/*
 * bench_pattern.c - kv-bench's verifiable data pattern and its page
 * allocator (see bench.h). A K/V page is page_tokens token slots (a KVB
 * page twice that: a block's K slots, then its V slots) of
 * rank_heads heads of head_bytes bytes; each (token, head) segment gets 64-bit
 * words from a key mixed from (room, layer, role, page of the room, token,
 * model head) and the word's offset in the segment, so the bytes a decode rank
 * should hold are known without asking which prefill rank sent them. An AUX
 * slot is one segment per metadata buffer, keyed by the room and the
 * buffer (a row landing in another buffer is wrong bytes).
 */
#include "bench.h"
#include "bench_gpu.h"

#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "plan/layout.h"

#define GOLDEN 0x9e3779b97f4a7c15ULL

/* splitmix64's finaliser: a cheap, well-mixed 64-bit bijection. */
static inline uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

void bench_geom_init(struct bench_geom *g, const struct shape *s,
		     const struct kvw_topo *t, const struct kvw_coord *c,
		     const struct kvw_buf *bufs, uint32_t nbufs)
{
	struct kvw_model m;

	shape_model(s, t, c, &m);
	memset(g, 0, sizeof *g);
	g->bufs = bufs;
	g->nbufs = nbufs;
	g->page_tokens = m.page_tokens;
	g->rank_heads = m.rank_kv_heads;
	g->total_heads = m.total_kv_heads;
	g->head_bytes = m.head_bytes;
	g->tp = t->tp ? t->tp : 1;
	g->tp_rank = c->tp % g->tp;
	g->gpu = NULL;
}

uint32_t bench_global_head(const struct bench_geom *g, uint32_t h)
{
	uint32_t H = g->total_heads, T = g->tp;

	if (H <= 1)
		return 0;
	if (H >= T)
		return g->tp_rank * (H / T) + h;
	/* Fewer heads than ranks: T/H ranks share (replicate) one head. */
	return g->tp_rank / (T / H);
}

/* The word at byte offset i of a segment keyed by k. k is already well
 * mixed and differs between segments, so a word that lands at another
 * offset or in another segment reads wrong; no per-word mix is needed, and
 * this form lets the compiler vectorise the fill (kv-bench's own pattern
 * work was a third of the demo's CPU with a mix per word). */
static inline uint64_t word_at(uint64_t k, uint32_t i)
{
	return k ^ ((uint64_t)i * GOLDEN);
}

/* Fills w[0..len) with segment k's words: the stand-in engine's own
 * writes, on the demo's critical path (kv-bench is one thread for all the
 * engines), so two words at a time where the CPU has SSE2: the word at
 * offset i is k ^ i * GOLDEN, and i * GOLDEN advances by a constant. */
static void seg_fill(uint8_t *w, uint32_t len, uint64_t k)
{
	uint32_t i = 0;
	uint64_t v;

#if defined(__SSE2__)
	__m128i kk = _mm_set1_epi64x((long long)k);
	__m128i at = _mm_set_epi64x((long long)(8 * GOLDEN), 0);
	const __m128i step = _mm_set1_epi64x((long long)(16 * GOLDEN));

	for (; i + 16 <= len; i += 16) {
		_mm_storeu_si128((__m128i *)(w + i), _mm_xor_si128(kk, at));
		at = _mm_add_epi64(at, step);
	}
#endif
	for (; i + 8 <= len; i += 8) {
		v = word_at(k, i);
		memcpy(w + i, &v, 8);
	}
	if (i < len) {
		v = word_at(k, i);
		memcpy(w + i, &v, len - i);
	}
}

/* The bytes of r[0..len) that differ from segment k's words. */
static uint64_t seg_check(const uint8_t *r, uint32_t len, uint64_t k)
{
	uint64_t bad = 0, v, got;
	uint32_t i = 0;

	for (; i + 8 <= len; i += 8) {
		v = word_at(k, i);
		memcpy(&got, r + i, 8);
		if (got != v)
			for (got ^= v; got; got >>= 8)
				bad += (got & 0xff) != 0;
	}
	if (i < len) {
		const uint8_t *e = (const uint8_t *)&v;

		v = word_at(k, i); /* e reads it */
		for (uint32_t j = 0; i + j < len; j++)
			bad += r[i + j] != e[j];
	}
	return bad;
}

/* Fills (w != NULL) or checks (r != NULL) one segment of len bytes keyed by
 * k; returns the bytes that differ when checking. */
static uint64_t seg(uint8_t *w, const uint8_t *r, uint32_t len, uint64_t k)
{
	if (w) {
		seg_fill(w, len, k);
		return 0;
	}
	return seg_check(r, len, k);
}

static int carries_pages(const struct kvw_buf *b)
{
	return (b->role == KVW_ROLE_K || b->role == KVW_ROLE_V ||
		b->role == KVW_ROLE_KV || b->role == KVW_ROLE_KVB) &&
	       b->layer_id < LAYOUT_DRAFT_BASE;
}

/* One page of one buffer at byte offset off (w or r as in seg). */
static uint64_t page(uint8_t *w, const uint8_t *r, const struct bench_geom *g,
		     const struct kvw_buf *b, uint64_t key)
{
	uint64_t seg_len = g->head_bytes, bad = 0;
	/* A KVB page (a block-major layer) has twice the slots, each keyed
	 * apart. */
	uint64_t slots = layout_page_slots(b->role, g->page_tokens);

	if (seg_len == 0 || slots * g->rank_heads * seg_len != b->item_len)
		/* Not a token x head page: one segment. */
		return seg(w, r, b->item_len, mix(key));
	for (uint32_t t = 0; t < (uint32_t)slots; t++)
		for (uint32_t h = 0; h < g->rank_heads; h++) {
			uint64_t o = ((uint64_t)t * g->rank_heads + h) * seg_len;
			uint64_t k = mix(key ^ ((uint64_t)t << 32 |
						bench_global_head(g, h)));

			bad += seg(w ? w + o : NULL, r ? r + o : NULL,
				   (uint32_t)seg_len, k);
		}
	return bad;
}

static uint64_t walk(uint8_t *wbase, const uint8_t *rbase,
		     const struct bench_geom *g, uint64_t room,
		     const uint32_t *pages, uint32_t n, uint32_t aux_slot)
{
	uint64_t rk = mix(room + GOLDEN), bad = 0;

	for (uint32_t b = 0; b < g->nbufs; b++) {
		const struct kvw_buf *x = &g->bufs[b];
		uint64_t bk = mix(rk ^ ((uint64_t)x->layer_id << 8 | x->role));

		if (x->role == KVW_ROLE_AUX) {
			uint64_t o = x->offset + (uint64_t)aux_slot * x->item_len;

			bad += seg(wbase ? wbase + o : NULL,
				   rbase ? rbase + o : NULL, x->item_len,
				   mix(rk ^ 0xA0A0A0A0ULL ^
				       (uint64_t)x->layer_id << 32));
			continue;
		}
		if (!carries_pages(x))
			continue;
		for (uint32_t i = 0; i < n; i++) {
			uint64_t o = x->offset + (uint64_t)pages[i] * x->item_len;

			bad += page(wbase ? wbase + o : NULL,
				    rbase ? rbase + o : NULL, g, x,
				    mix(bk + i));
		}
	}
	return bad;
}

void bench_fill(uint8_t *base, const struct bench_geom *g, uint64_t room,
		const uint32_t *pages, uint32_t n, uint32_t aux_slot)
{
	walk(base, NULL, g, room, pages, n, aux_slot);
	bgpu_push(g->gpu, pages, n); /* a failure shows in the verify */
}

uint64_t bench_verify(const uint8_t *base, const struct bench_geom *g,
		      uint64_t room, const uint32_t *pages, uint32_t n,
		      uint32_t aux_slot)
{
	if (bgpu_pull(g->gpu, pages, n) != 0)
		return 1; /* unreadable counts as changed */
	return walk(NULL, base, g, room, pages, n, aux_slot);
}

uint64_t bench_room_bytes(const struct bench_geom *g, uint32_t n)
{
	uint64_t sum = 0;

	for (uint32_t b = 0; b < g->nbufs; b++) {
		const struct kvw_buf *x = &g->bufs[b];

		if (x->role == KVW_ROLE_AUX)
			sum += x->item_len;
		else if (carries_pages(x))
			sum += (uint64_t)x->item_len * n;
	}
	return sum;
}

int bench_alloc_init(struct bench_alloc *a, uint32_t count)
{
	a->free = malloc((count ? count : 1) * sizeof *a->free);
	a->n = a->cap = 0;
	if (a->free == NULL)
		return KVW_ENOMEM;
	/* A stack: push high to low so index 0 is handed out first. */
	for (uint32_t i = 0; i < count; i++)
		a->free[i] = count - 1 - i;
	a->n = a->cap = count;
	return 0;
}

void bench_alloc_fini(struct bench_alloc *a)
{
	free(a->free);
	a->free = NULL;
	a->n = a->cap = 0;
}

int bench_alloc_take(struct bench_alloc *a, uint32_t k, uint32_t *out)
{
	if (k > a->n)
		return KVW_EAGAIN;
	for (uint32_t i = 0; i < k; i++)
		out[i] = a->free[--a->n];
	return 0;
}

void bench_alloc_put(struct bench_alloc *a, uint32_t k, const uint32_t *in)
{
	/* Reverse order, so a take right after gets the same run back. */
	for (uint32_t i = k; i-- > 0 && a->n < a->cap;)
		a->free[a->n++] = in[i];
}
