/*
 * plan.h - the KV layout planner: a pure function from (source layout,
 * destination layout, optional head slice, page lists) to a list of byte
 * copies (src pool, src offset, dst pool, dst offset, length). Buffers pair
 * by (layer id, role), never by position, so pipeline stages, uneven splits
 * and draft layers land where they belong (PROTOCOL-NOTES 12.2-12.3); a TP
 * mismatch is handled by slicing heads per token slot (12.7). Every copy is
 * checked against its buffer's page count and its pool's registered size
 * before it is returned. No I/O, no logging, no global state.
 *
 * Layer plan (lib/plan/): pure functions of model shape, KV layout, rank
 * mapping and copy planning (shape, layout, rankmap, plan*). It includes
 * only base/; wire, table and xport never include it, nor it them.
 */
#ifndef KVW_PLAN_H
#define KVW_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

/* One planned copy: `len` bytes from (src_pool, src_off) to
 * (dst_pool, dst_off). Offsets are byte offsets into the pool. */
struct plan_copy {
	uint64_t src_off;
	uint64_t dst_off;
	uint64_t len;
	uint8_t src_pool;
	uint8_t dst_pool;
};

/* One side's layout as the planner sees it. Nothing is copied: every
 * pointer must stay valid until plan_build returns (the built plan keeps
 * its own copies of what it needs). pool_size[i] is the registered byte
 * size of pool i; every buffer must lie inside its pool. */
struct plan_side {
	const struct kvw_model *model;
	const struct kvw_buf *bufs;
	uint32_t nbufs;
	const uint64_t *pool_size;
	uint32_t npools;
};

/* TP-mismatch head slice (PROTOCOL-NOTES 12.7), per token slot: the
 * n_heads heads starting at src_head_start of the source slot go to the
 * destination slot starting at dst_head_start. head_bytes is the bytes of
 * one head of one token. Applies to K and V buffers only. The TP sizes and
 * ranks of the pair (plan_heads_compute fills them) split a sharded state
 * component's rows: each rank holds its part of a row, part r of tp. */
struct plan_heads {
	uint32_t src_head_start;
	uint32_t n_heads;
	uint32_t dst_head_start;
	uint32_t head_bytes;
	uint32_t src_tp, src_rank, dst_tp, dst_rank;
};

/* Built plan: opaque, immutable after plan_build, so one plan may be used
 * by several threads at once. */
struct plan;

/* Checks that two engines' models can exchange KV: equal page_tokens, equal
 * dtype when both state one, equal MLA flag, equal head_bytes and
 * total_kv_heads when both state them. Returns 0 or KVW_EINVAL with the
 * first difference in err. */
int plan_models_compat(const struct kvw_model *src, const struct kvw_model *dst,
		       char *err, size_t errlen);

/* The one rule of how kv heads spread over tp ranks: evenly (heads a
 * multiple of tp), or, with fewer heads than ranks, each head whole on
 * tp / heads ranks (tp a multiple of heads). 1 when heads split so; 0
 * otherwise and for 0 heads or tp. The group plan, the shape check and
 * the head slice all ask this. */
int plan_heads_split(uint64_t heads, uint32_t tp);

/* Computes the head slice for prefill rank `prank` of `ptp` sending to
 * decode rank `drank` of `dtp` (ranks are taken modulo their TP size),
 * from m->total_kv_heads (H; if 0, rank_kv_heads * ptp) and m->head_bytes:
 * src_heads = max(1, H/ptp), dst_heads = max(1, H/dtp);
 * ptp > dtp: src start 0, n = src_heads,
 *            dst start = ((prank / max(1, ptp/H)) * src_heads) % dst_heads;
 * ptp <= dtp: n = dst_heads, dst start 0,
 *            src start = ((drank / max(1, dtp/H)) * dst_heads) % src_heads.
 * Returns 0 and fills *out, or KVW_EINVAL (zero sizes, TP sizes that do not
 * divide, a slice that does not fit either side's token slot) with *out
 * unchanged. When ptp == dtp the slice is the whole slot. */
int plan_heads_compute(const struct kvw_model *m, uint32_t ptp, uint32_t prank,
		       uint32_t dtp, uint32_t drank, struct plan_heads *out,
		       char *err, size_t errlen);

/* Pairs src buffers with dst buffers by (layer_id, role) and validates
 * everything that does not depend on page lists. Rules:
 *  - every source K/V/KV/STATE buffer needs a destination buffer with the
 *    same (layer_id, role), else KVW_EINVAL "layer 14 role V has no
 *    destination"; extra destination buffers (draft layers prefill does not
 *    send, other PP stages' layers) are ignored; STATE pairs need equal
 *    item lengths (rows), and plan_chunk never copies them (plan_state);
 *  - a (layer_id, role) appearing twice on one side is an error;
 *  - AUX buffers pair by their order among AUX buffers; the destination
 *    needs at least as many AUX buffers as the source;
 *  - paired buffers have equal item_len, except K/V under a head slice,
 *    where each side's item_len must be a multiple of page_tokens and the
 *    slice must fit both token slots;
 *  - every buffer must lie inside its pool (pool < npools, offset +
 *    pages * item_len <= pool_size[pool], no overflow);
 *  - plan_models_compat must hold.
 * heads may be NULL (no slicing); a slice covering whole, equal slots is
 * planned as no slicing. On success returns 0 and *out owns a new plan
 * (free with plan_free); on error returns KVW_EINVAL or KVW_ENOMEM, writes
 * err and leaves *out NULL. */
int plan_build(const struct plan_side *src, const struct plan_side *dst,
	       const struct plan_heads *heads, struct plan **out, char *err,
	       size_t errlen);

/* Frees *p (NULL allowed) and sets it to NULL. */
void plan_free(struct plan **p);

/* Number of buffer pairs (STATE and AUX included), of AUX pairs and of
 * STATE pairs in the plan. */
/* A buffer role's name: "K", "V", "KV", "AUX", "STATE", "KVB" or "?". */
const char *plan_role_str(unsigned role);

uint32_t plan_npairs(const struct plan *p);
uint32_t plan_naux(const struct plan *p);
uint32_t plan_nstate(const struct plan *p);

/* Plans state component comp's rows of one room: src_rows[i] to
 * dst_rows[i] in every STATE pair of the component (its buffer of each
 * layer both sides hold), one copy of a whole row each, pair by pair.
 * Which rows go (a kind's rule, struct kvw_state_spec) is the caller's;
 * this checks every row against both buffers. Returns 0 with *n copies;
 * KVW_ERANGE (a row outside a buffer; err names it), KVW_ENOMEM (cap too
 * small, *n the count needed) or KVW_EINVAL (nrows over
 * KVW_MAX_STATE_IDX, missing arguments). A component the plan does not
 * hold gives 0 copies. */
int plan_state(const struct plan *p, uint32_t comp, const uint32_t *src_rows,
	       const uint32_t *dst_rows, uint32_t nrows, struct plan_copy *out,
	       size_t cap, size_t *n, char *err, size_t errlen);

/* The copies plan_state emits for nrows rows of component comp. */
uint32_t plan_state_max(const struct plan *p, uint32_t comp, uint32_t nrows);

/* Plans one chunk: src_pages[i] goes to dst_pages[i] in every paired
 * buffer, plus, when with_aux, aux slot src_aux to dst_aux in every AUX
 * pair. Without a head slice, runs where both page indices rise by exactly
 * 1 become one copy per buffer pair; with one, each page yields one copy
 * per token slot per K/V pair. Output is ordered pair by pair (in source
 * buffer order, AUX last), runs in page-list order.
 * Returns 0 with *n copies in out; KVW_ERANGE when a page index or aux slot
 * is outside a paired buffer (err names the index and its position);
 * KVW_ENOMEM when cap is too small, with *n set to the count needed;
 * KVW_EINVAL on bad arguments (npages > KVW_MAX_PAGES). On any error, *n
 * is 0 (except ENOMEM) and out[0..cap) may have been overwritten (it is
 * used as scratch). npages may be 0. Reads only the plan: safe to call
 * from several threads on one plan with separate outputs. */
int plan_chunk(const struct plan *p, const uint32_t *src_pages,
	       const uint32_t *dst_pages, uint32_t npages, int with_aux,
	       uint32_t src_aux, uint32_t dst_aux, struct plan_copy *out,
	       size_t cap, size_t *n, char *err, size_t errlen);

/* Upper bound on the copies plan_chunk can emit for npages pages (no
 * coalescing assumed), for sizing an output array. */
uint64_t plan_chunk_max(const struct plan *p, uint32_t npages, int with_aux);

/* Context-parallel share of a room's pages (PROTOCOL-NOTES 10.1):
 * base = total / cp_size, rem = total % cp_size,
 * start = cp_rank * base + min(cp_rank, rem), count = base + (cp_rank < rem).
 * Returns 0, or KVW_EINVAL when cp_size is 0 or cp_rank >= cp_size. */
int plan_cp_split(uint32_t total_pages, uint32_t cp_size, uint32_t cp_rank,
		  uint32_t *start, uint32_t *count);

#endif
