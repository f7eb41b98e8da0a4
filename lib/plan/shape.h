/*
 * shape.h - the model shape a kvwire group is started with (layers, page
 * tokens, heads, ...) and the per-rank KV layout and pool size it implies.
 * kv-sender, kv-receiver and kv-bench derive their layouts from the same
 * flags through these functions, so both ends agree without a side channel.
 */
#ifndef KVW_SHAPE_H
#define KVW_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

struct shape {
	uint32_t layers;       /* target layers of the whole model */
	uint32_t draft_layers; /* speculative draft layers (decode only) */
	uint32_t page_tokens;  /* tokens per page */
	uint32_t kv_heads;     /* KV heads of the whole model */
	uint32_t head_dim;     /* elements per head */
	uint32_t dtype_bytes;  /* bytes per element (2 = bf16) */
	uint32_t pages;        /* pages in each rank's pool */
	uint32_t aux_slots;    /* per-request metadata slots (rows) */
	/* The metadata buffers (SGLang's aux_data_*: output ids, cached
	 * tokens, logprobs, hidden states, ...): naux of them, each
	 * aux_slots rows of aux_bytes[i] bytes; a room's aux slot selects
	 * one row of every one. */
	uint32_t naux;
	uint32_t aux_bytes[KVW_MAX_AUX];
	/* State components (--state KIND:ROWS:BYTES[:rep][:layers=N],...):
	 * none, or nstate of them, each one buffer per layer or N of its
	 * own (shape_layout). */
	uint32_t nstate;
	struct kvw_state_spec state[KVW_MAX_STATE];
	int mla;               /* 1: one latent KV buffer per layer */
	uint32_t kv_layout;    /* enum shape_kv_layout: where K and V lie */
};

/* How a rank's K and V buffers lie in its pool (--kv-layout). Buffers pair
 * by (layer, role), never by place, so two sides of different layouts
 * exchange KV as two of one. */
enum shape_kv_layout {
	SHAPE_KV_SGLANG = 0, /* "sglang": every layer's K, then every V
			      * (SGLang's kv_data_ptrs order) */
	SHAPE_KV_VLLM = 1,   /* "vllm": per layer its K then its V, back to
			      * back: vLLM's per-layer tensor
			      * [2, num_blocks, block_size, heads, head_dim] */
	SHAPE_KV_VLLM_BLOCKS = 2, /* "vllm-blocks": per layer one buffer whose
				   * page is a block's K then its V: vLLM's
				   * block-major tensor [num_blocks, 2,
				   * block_size, heads, head_dim] (MHA) */
	SHAPE_NKV_LAYOUTS
};

/* The demo's realistic default: 32 layers, 16-token pages of 8 KV heads x
 * 128 dims in bf16 (32 KiB per page per buffer), 512 pages, 256 aux slots
 * of one 64-byte metadata buffer, no draft layers, MHA. */
void shape_default(struct shape *s);

/* Applies one long option of the shape ("layers", "draft-layers",
 * "page-tokens", "heads", "head-dim", "dtype-bytes", "pages", "aux-slots",
 * "aux-bytes" (a row's bytes of each metadata buffer: "N" or "N,N,..." up
 * to KVW_MAX_AUX), "state" ("none", or up to KVW_MAX_STATE components
 * "KIND:ROWS:BYTES" separated by commas, KIND slot, paged or exact, each
 * with ":rep" when replicated over TP and ":layers=N" for N buffers of its
 * own), "kv-layout" ("sglang", "vllm" or
 * "vllm-blocks"),
 * "mla" (value
 * ignored, may be NULL)). Returns 1 when `name`
 * is a shape option and was applied, 0 when it is not a shape option,
 * KVW_EINVAL (with err) for a bad value. */
int shape_option(struct shape *s, const char *name, const char *value,
		 char *err, size_t errlen);

/* The name of shape option i as shape_option takes it ("layers", ...,
 * "kv-layout", "mla"), NULL past the last; *takes_value is 0 only for
 * "mla". For option tables that must not repeat the list. */
const char *shape_option_name(unsigned i, int *takes_value);

/* Writes *s as shape flags, every option in shape_option's order with its
 * value ("--layers 32 --draft-layers 0 ... --aux-bytes 64,8", then
 * "--state ..." when there are state components and "--mla" when set):
 * what runinfo_shape_apply and shape_option read back to the
 * same shape. Returns the length written (NUL excluded) or KVW_ERANGE when
 * buf[len] is too small. */
int shape_flags(const struct shape *s, char *buf, size_t len);

/* A state component kind's name as --state writes it ("slot", "paged",
 * "exact"), "?" for another value. */
const char *shape_state_kind_str(uint32_t kind);

/* One line of --help text listing the shape options. */
const char *shape_usage(void);

/* The model summary of rank `c` of topology `t`: page_tokens, dtype code
 * (= dtype_bytes), total and per-rank KV heads (heads are split over TP,
 * replicated when fewer heads than ranks), head_bytes, MLA flag. */
void shape_model(const struct shape *s, const struct kvw_topo *t,
		 const struct kvw_coord *c, struct kvw_model *m);

/* The layer range [*first, *first + *count) that PP stage c->pp of t->pp
 * holds: an even split, the first (layers % pp) stages one layer more. */
void shape_layers(const struct shape *s, const struct kvw_topo *t,
		  const struct kvw_coord *c, uint32_t *first, uint32_t *count);

/* The buffers [*first, *first + *count) of state component comp that PP
 * stage c->pp holds: its own layers (kvw_state_spec.layers) split by the
 * same rule, or the stage's layers (shape_layers) when it has none. */
void shape_state_layers(const struct shape *s, uint32_t comp,
			const struct kvw_topo *t, const struct kvw_coord *c,
			uint32_t *first, uint32_t *count);

/* Fills out[0..*n) with the layout of rank c (its PP stage's layers, draft
 * layers when with_draft, its layers' state buffers, the AUX buffers), all
 * in pool 0, and *pool_bytes
 * with the pool size it needs. Returns 0, KVW_ENOMEM (cap too small, *n =
 * needed) or KVW_EINVAL with err (also for kv heads that do not split over
 * t->tp: neither a multiple nor a divisor of it, MLA excepted). */
int shape_layout(const struct shape *s, const struct kvw_topo *t,
		 const struct kvw_coord *c, int with_draft,
		 struct kvw_buf *out, uint32_t cap, uint32_t *n,
		 uint64_t *pool_bytes, char *err, size_t errlen);

/* Parses "A,B" (tp,pp) or "A,B,C,D" (tp,pp,cp,dp) into four u32 (missing
 * trailing fields: 1 for sizes, 0 for coordinates as `fill` says).
 * Returns 0 or KVW_EINVAL. */
int shape_parse_quad(const char *s, uint32_t fill, uint32_t out[4]);

#endif
