/*
 * layout.c - builders for the standard KV layouts of layout.h, in the
 * order an engine registers them (target K, target V, draft K, draft V,
 * state components, AUX), packed back to back in one pool.
 */
#include "layout.h"

uint32_t layout_item_len(const struct kvw_model *m)
{
	uint64_t heads, len;

	if (m == NULL)
		return 0;
	heads = (m->flags & KVW_MODEL_MLA) ? 1 : m->rank_kv_heads;
	len = (uint64_t)m->page_tokens * heads * m->head_bytes;
	return len > UINT32_MAX ? 0 : (uint32_t)len;
}

/* Appends one buffer at *off if there is room; counts it either way. */
static int put(struct kvw_buf *out, uint32_t cap, uint32_t *k, uint64_t *off,
	       uint32_t layer, uint8_t role, uint8_t pool, uint32_t item,
	       uint32_t pages)
{
	uint64_t len = (uint64_t)item * pages;

	if (*k < cap)
		out[*k] = (struct kvw_buf){.layer_id = layer,
					   .role = role,
					   .pool = pool,
					   .offset = *off,
					   .item_len = item,
					   .pages = pages};
	(*k)++;
	if (__builtin_add_overflow(*off, len, off))
		return KVW_EINVAL;
	return 0;
}

/* The K/V buffers of layers first..first+count-1: role by role (every K,
 * then every V), or layer by layer with s->per_layer (one role: each
 * layer's buffer in turn). */
static int put_layers(const struct layout_spec *s, struct kvw_buf *out,
		      uint32_t cap, uint32_t *k, uint64_t *off, uint32_t first,
		      uint32_t count, uint8_t r0, uint32_t nroles,
		      uint32_t item)
{
	int rc = 0;

	for (uint32_t a = 0; a < (s->per_layer ? count : nroles); a++)
		for (uint32_t b = 0; b < (s->per_layer ? nroles : count) &&
				     rc == 0; b++) {
			uint32_t layer = s->per_layer ? a : b;
			uint32_t r = s->per_layer ? b : a;

			rc = put(out, cap, k, off, first + layer,
				 (uint8_t)(r0 + r), s->pool, item, s->pages);
		}
	return rc;
}

/* Component c's buffers: its own layers where the spec gives them, else
 * one per target layer. */
static uint32_t state_first(const struct layout_spec *s, uint32_t c)
{
	return s->state_first ? s->state_first[c] : s->first_layer;
}

static uint32_t state_count(const struct layout_spec *s, uint32_t c)
{
	return s->state_count ? s->state_count[c] : s->layers;
}

int layout_make(const struct layout_spec *s, struct kvw_buf *out, uint32_t cap,
		uint32_t *n, uint64_t *end, char *err, size_t errlen)
{
	uint8_t r0 = KVW_ROLE_K;
	uint32_t k = 0, nroles, item;
	uint64_t off;
	int rc = 0;

	if (s == NULL || n == NULL || (cap && out == NULL)) {
		kvw_seterr(err, errlen, "layout_make: missing argument");
		return KVW_EINVAL;
	}
	*n = 0;
	if ((s->layers || s->draft_layers) &&
	    (s->item_len == 0 || s->pages == 0)) {
		kvw_seterr(err, errlen,
			   "layout: item length %u and pages %u must be > 0",
			   s->item_len, s->pages);
		return KVW_EINVAL;
	}
	if (s->aux_slots && (s->naux > KVW_MAX_AUX ||
			     (s->naux && s->aux_item_lens == NULL))) {
		kvw_seterr(err, errlen, "layout: %u aux buffers (at most %u)",
			   s->naux, KVW_MAX_AUX);
		return KVW_EINVAL;
	}
	for (uint32_t i = 0; s->aux_slots && i < s->naux; i++)
		if (s->aux_item_lens[i] == 0) {
			kvw_seterr(err, errlen,
				   "layout: aux buffer %u's item length must "
				   "be > 0", i);
			return KVW_EINVAL;
		}
	if (s->nstate > KVW_MAX_STATE || (s->nstate && s->state == NULL)) {
		kvw_seterr(err, errlen, "layout: %u state components (at most "
			   "%u)", s->nstate, KVW_MAX_STATE);
		return KVW_EINVAL;
	}
	for (uint32_t i = 0; i < s->nstate; i++)
		if (s->state[i].rows == 0 || s->state[i].bytes == 0 ||
		    s->state[i].kind >= KVW_NSTATE_KINDS) {
			kvw_seterr(err, errlen, "layout: state component %u: "
				   "rows and bytes must be > 0, kind known", i);
			return KVW_EINVAL;
		}
	for (uint32_t c = 0; c < s->nstate; c++)
		if ((uint64_t)state_first(s, c) + state_count(s, c) >
		    0x10000u) {
			kvw_seterr(err, errlen, "layout: state components "
				   "need layer ids below 65536");
			return KVW_EINVAL;
		}
	if ((uint64_t)s->first_layer + s->layers > LAYOUT_DRAFT_BASE ||
	    s->draft_layers > UINT32_MAX - LAYOUT_DRAFT_BASE) {
		kvw_seterr(err, errlen,
			   "layout: layer ids overrun the draft id range");
		return KVW_EINVAL;
	}
	if (s->block_major && s->mla)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"layout: block-major K and V need MHA (MLA "
				"has one latent buffer per layer)");
	if (s->block_major && s->item_len > UINT32_MAX / 2)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"layout: a block's K and V (2 x %u bytes) do "
				"not fit 32 bits", s->item_len);
	item = s->item_len;
	nroles = s->mla ? 1 : 2;
	if (s->mla)
		r0 = KVW_ROLE_KV;
	if (s->block_major) {
		r0 = KVW_ROLE_KVB;
		nroles = 1;
		item = 2 * s->item_len;
	}
	off = s->base;
	rc = put_layers(s, out, cap, &k, &off, s->first_layer, s->layers,
			r0, nroles, item);
	if (rc == 0)
		rc = put_layers(s, out, cap, &k, &off, LAYOUT_DRAFT_BASE,
				s->draft_layers, r0, nroles, item);
	for (uint32_t c = 0; c < s->nstate && rc == 0; c++)
		for (uint32_t l = 0; l < state_count(s, c) && rc == 0; l++)
			rc = put(out, cap, &k, &off,
				 KVW_STATE_LAYER(c, state_first(s, c) + l),
				 KVW_ROLE_STATE, s->pool, s->state[c].bytes,
				 s->state[c].rows);
	for (uint32_t i = 0; s->aux_slots && i < s->naux && rc == 0; i++)
		rc = put(out, cap, &k, &off, i, KVW_ROLE_AUX, s->pool,
			 s->aux_item_lens[i], s->aux_slots);
	if (rc < 0) {
		kvw_seterr(err, errlen, "layout: offsets overflow");
		return rc;
	}
	*n = k;
	if (k > cap) {
		kvw_seterr(err, errlen, "layout needs %u buffers, room for %u",
			   k, cap);
		return KVW_ENOMEM;
	}
	if (end != NULL)
		*end = off;
	return 0;
}
