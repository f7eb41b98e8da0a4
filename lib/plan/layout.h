/*
 * layout.h - builders for the standard KV layouts (MHA: a K and a V buffer
 * per layer; MLA: one KV buffer per layer; draft layers after the target
 * layers; an optional AUX buffer last), packed back to back in one pool.
 * Used by tests, kv-bench and the engine simulator to describe memory the
 * way an engine would register it. Pure functions, no I/O.
 */
#ifndef KVW_LAYOUT_H
#define KVW_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

/* Draft layer i carries layer id LAYOUT_DRAFT_BASE + i (SGLang's rule). */
#define LAYOUT_DRAFT_BASE 1000000u

struct layout_spec {
	uint32_t first_layer;  /* id of the first target layer */
	uint32_t layers;       /* target layers: ids first_layer .. +layers-1 */
	uint32_t draft_layers; /* draft layers: ids LAYOUT_DRAFT_BASE + i */
	int mla;	       /* 1: one KV buffer per layer; 0: K and V */
	int per_layer;         /* 1: a layer's K then its V (vLLM's per-layer
				* tensor); 0: every K, then every V */
	int block_major;       /* 1 (MHA): one KVB buffer per layer, a page
				* a block's K then its V (2 x item_len) */
	uint32_t item_len;     /* bytes per page of every K/V/KV buffer */
	uint32_t pages;	       /* pages of every K/V/KV buffer */
	uint32_t aux_slots;    /* rows of every AUX buffer; 0: none */
	uint32_t naux;         /* AUX buffers, ids 0..naux-1 */
	const uint32_t *aux_item_lens; /* bytes of a row of each */
	uint32_t nstate;       /* state components, each a buffer per
				* target layer (layer id KVW_STATE_LAYER) */
	const struct kvw_state_spec *state;
	/* Where given, component c's buffers are its own layers
	 * [state_first[c], + state_count[c]) instead (shape_state_layers). */
	const uint32_t *state_first, *state_count;
	uint8_t pool;	       /* pool every buffer lives in */
	uint64_t base;	       /* byte offset of the first buffer */
};

/* Bytes of one page of one K (or V) buffer: page_tokens * rank_kv_heads *
 * head_bytes (MHA), page_tokens * head_bytes (MLA: head_bytes is the
 * latent width). Returns 0 when a factor is 0 or the result exceeds
 * UINT32_MAX. */
uint32_t layout_item_len(const struct kvw_model *m);

/* Token slots in one page of a buffer of role `role`: page_tokens, or
 * twice that for a KVB page (a block's K slots, then its V slots). 64
 * bits: the product never wraps. */
static inline uint64_t layout_page_slots(unsigned role, uint32_t page_tokens)
{
	return (role == KVW_ROLE_KVB ? 2ull : 1ull) * page_tokens;
}

/* Fills out[0..*n) in this order: target K (or KV) by layer, target V by
 * layer (MHA; with per_layer, K0 V0 K1 V1 ...; with block_major one KVB
 * per layer), draft K (or KV), draft V
 * (MHA; likewise), state component 0's buffer of each target layer (or
 * of each of its own layers), component 1's, ..., AUX 0..naux-1 (layer id =
 * its index: they pair by it, in order); buffers back to back
 * from s->base. *end gets the byte just past the last buffer (the pool size
 * it needs). Returns 0, KVW_ENOMEM when cap is too small (*n = needed), or
 * KVW_EINVAL (zero item_len or pages with layers, offsets that overflow). */
int layout_make(const struct layout_spec *s, struct kvw_buf *out, uint32_t cap,
		uint32_t *n, uint64_t *end, char *err, size_t errlen);

#endif
