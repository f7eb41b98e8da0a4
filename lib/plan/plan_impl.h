/*
 * plan_impl.h - the planner's private state, shared by plan.c (pairing,
 * plan_build), plan_chunk.c (emitting copies) and plan_params.c (head
 * slice, model checks, CP share). Not for use outside these files.
 */
#ifndef KVW_PLAN_IMPL_H
#define KVW_PLAN_IMPL_H

#include "plan.h"

/* One source buffer and its partner. Buffer extents were checked against
 * their pools at build time, so any page index < pages is in bounds. */
struct pair {
	uint64_t src_base, dst_base;
	uint64_t src_end, dst_end; /* offset + pages * item_len */
	uint32_t src_item, dst_item;
	uint32_t layer_id;
	uint32_t slots; /* token slots per page (2 x page_tokens for KVB) */
	/* STATE: the bytes of a row copied, from and to where in the rows
	 * (a sharded component under a TP mismatch: one rank's part). */
	uint32_t row_src_off, row_dst_off, row_len;
	uint8_t role, sliced, src_pool, dst_pool;
};

struct plan {
	/* page-indexed pairs (K, V, KV), then nstate STATE pairs (by
	 * component, then layer), then naux AUX pairs */
	uint32_t npairs;
	uint32_t nstate;
	uint32_t naux;
	uint32_t nsliced; /* page-indexed pairs that are head-sliced */
	uint64_t sliced_slots; /* their token slots per page, summed */
	uint32_t page_tokens;
	struct plan_heads heads;
	/* Smallest paired page-indexed buffer on each side (its index into
	 * pairs[] for error text); UINT32_MAX pages when there is none. */
	uint32_t src_min_pages, dst_min_pages;
	uint32_t src_min_at, dst_min_at;
	uint32_t src_aux_min, dst_aux_min; /* AUX slots, same idea */
	struct pair pairs[];
};

#endif
