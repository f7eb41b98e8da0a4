/*
 * test_bench.c - kv-bench's pattern and allocator, without processes: a
 * filled room verifies clean; one flipped byte in a K page, a V page or the
 * aux slot is counted; a word shifted, token slots or two heads of a slot
 * swapped inside a page, another room's key or another page list fails;
 * the model head of each local head slot matches values written by hand
 * for heads/TP pairs (sliced, replicated, MLA); the
 * pattern survives the planner's copies unchanged across TP mismatches
 * (prefill TP 2 -> decode TP 1, TP 1 -> TP 2, and 2 heads replicated
 * over decode TP 4, where a rank of the other head does not verify) and
 * PP stages, so what a decode rank verifies is exactly what the prefill
 * ranks wrote; vLLM's block-major layout moves each block's K and V
 * slots, head-sliced, to where the other side's tensor has them (bytes
 * written by hand) and refuses a split peer; draft layers (never sent)
 * are not checked; the allocator
 * hands out low indices first, refuses to over-allocate without taking
 * anything, and takes back what it gave.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv-bench/bench.h"
#include "kv-bench/bench_hops.h"
#include "base/proc.h"
#include "plan/layout.h"
#include "plan/plan.h"
#include "plan/shape.h"

static char err[256];

/* One rank: its layout, geometry and a zeroed pool. */
struct rank {
	struct kvw_topo t;
	struct kvw_coord c;
	struct kvw_buf bufs[64];
	uint32_t n;
	uint64_t size;
	uint8_t *pool;
	struct bench_geom g;
	struct kvw_model m;
};

static void rank_make(struct rank *r, const struct shape *s, uint32_t tp,
		      uint32_t pp, uint32_t tpr, uint32_t ppr, int decode)
{
	memset(r, 0, sizeof *r);
	r->t = (struct kvw_topo){ tp, pp, 1, 1 };
	r->c = (struct kvw_coord){ tpr, ppr, 0, 0 };
	assert_int_equal(shape_layout(s, &r->t, &r->c, decode, r->bufs, 64,
				      &r->n, &r->size, err, sizeof err), 0);
	r->pool = calloc(1, r->size);
	assert_non_null(r->pool);
	bench_geom_init(&r->g, s, &r->t, &r->c, r->bufs, r->n);
	shape_model(s, &r->t, &r->c, &r->m);
}

static void small_shape(struct shape *s)
{
	shape_default(s);
	s->layers = 4;
	s->page_tokens = 4;
	s->kv_heads = 4;
	s->head_dim = 6; /* 12-byte heads: not a multiple of 8 */
	s->pages = 32;
	s->aux_slots = 8;
	s->naux = 2; /* two metadata buffers of different rows */
	s->aux_bytes[0] = 20;
	s->aux_bytes[1] = 12;
}

/* Copies room pages from src to dst as kv-sender's workers would. */
static void transfer(const struct rank *src, struct rank *dst,
		     const uint32_t *sp, const uint32_t *dp, uint32_t n,
		     uint32_t saux, uint32_t daux)
{
	struct plan_side a = { &src->m, src->bufs, src->n, &src->size, 1 };
	struct plan_side b = { &dst->m, dst->bufs, dst->n, &dst->size, 1 };
	struct plan_heads h;
	struct plan *p = NULL;
	struct plan_copy cp[4096];
	size_t nc;

	if (src->t.tp != dst->t.tp)
		assert_int_equal(plan_heads_compute(&src->m, src->t.tp,
						    src->c.tp, dst->t.tp,
						    dst->c.tp, &h, err,
						    sizeof err), 0);
	assert_int_equal(plan_build(&a, &b, src->t.tp != dst->t.tp ? &h : NULL,
				    &p, err, sizeof err), 0);
	assert_int_equal(plan_chunk(p, sp, dp, n, 1, saux, daux, cp, 4096, &nc,
				    err, sizeof err), 0);
	for (size_t i = 0; i < nc; i++)
		memcpy(dst->pool + cp[i].dst_off, src->pool + cp[i].src_off,
		       cp[i].len);
	plan_free(&p);
}

static void filled_room_verifies_and_flipped_bytes_are_counted(void **state)
{
	uint32_t pages[3] = { 5, 6, 20 };
	struct shape s;
	struct rank r;

	(void)state;
	small_shape(&s);
	rank_make(&r, &s, 1, 1, 0, 0, 0);
	bench_fill(r.pool, &r.g, 42, pages, 3, 2);
	assert_int_equal(bench_verify(r.pool, &r.g, 42, pages, 3, 2), 0);
	/* The first byte of page 20 of buffer 0 (K of layer 0). */
	r.pool[r.bufs[0].offset + 20u * r.bufs[0].item_len] ^= 0x10;
	assert_int_equal(bench_verify(r.pool, &r.g, 42, pages, 3, 2), 1);
	r.pool[r.bufs[0].offset + 20u * r.bufs[0].item_len] ^= 0x10;
	/* The last byte of page 5 of the last V buffer. */
	r.pool[r.bufs[7].offset + 6u * r.bufs[7].item_len - 1] ^= 0xff;
	assert_int_equal(bench_verify(r.pool, &r.g, 42, pages, 3, 2), 1);
	r.pool[r.bufs[7].offset + 6u * r.bufs[7].item_len - 1] ^= 0xff;
	/* The aux slot's tail in each metadata buffer (20 and 12 bytes:
	 * partial words). */
	for (uint32_t a = 0; a < 2; a++) {
		const struct kvw_buf *x = &r.bufs[r.n - 2 + a];
		uint64_t at = x->offset + 2u * x->item_len + x->item_len - 1;

		assert_int_equal(x->role, KVW_ROLE_AUX);
		assert_int_equal(x->layer_id, a);
		r.pool[at] ^= 1;
		assert_int_equal(bench_verify(r.pool, &r.g, 42, pages, 3, 2),
				 1);
		r.pool[at] ^= 1;
	}
	assert_int_equal(bench_verify(r.pool, &r.g, 42, pages, 3, 2), 0);
	/* Buffer 1's row written into buffer 0's (a row in the wrong
	 * metadata buffer): its 12 bytes are wrong there. */
	memcpy(r.pool + r.bufs[r.n - 2].offset + 2u * 20,
	       r.pool + r.bufs[r.n - 1].offset + 2u * 12, 12);
	assert_true(bench_verify(r.pool, &r.g, 42, pages, 3, 2) >= 10);
	free(r.pool);
}

/* Swaps n bytes at a with n bytes at b (not overlapping). */
static void swap_bytes(uint8_t *a, uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t t = a[i];

		a[i] = b[i];
		b[i] = t;
	}
}

/* Bytes that arrive at the wrong place inside a page (a word shifted by
 * its own size, two token slots swapped) do not verify: the pattern holds
 * the offset and the token, not only the page. */
static void bytes_shifted_or_swapped_within_a_page_do_not_verify(void **state)
{
	uint32_t pages[1] = { 3 };
	struct shape s;
	struct rank r;
	uint8_t *pg;
	uint64_t slot;

	(void)state;
	small_shape(&s);
	s.head_dim = 8; /* 16-byte heads: two whole words per segment */
	rank_make(&r, &s, 1, 1, 0, 0, 0);
	bench_fill(r.pool, &r.g, 21, pages, 1, 0);
	pg = r.pool + r.bufs[0].offset + 3u * r.bufs[0].item_len;
	slot = r.bufs[0].item_len / r.g.page_tokens;
	assert_true(slot >= 16);
	memmove(pg + 8, pg, 8); /* word 0 of a segment now also at word 1 */
	assert_true(bench_verify(r.pool, &r.g, 21, pages, 1, 0) >= 6);
	bench_fill(r.pool, &r.g, 21, pages, 1, 0);
	assert_int_equal(bench_verify(r.pool, &r.g, 21, pages, 1, 0), 0);
	swap_bytes(pg, pg + slot, slot); /* token slots 0 and 1 */
	assert_true(bench_verify(r.pool, &r.g, 21, pages, 1, 0) >
		    slot * 2 * 9 / 10);
	free(r.pool);
}

/* Two heads of one token slot swapped do not verify: the head is part of
 * each segment's key. */
static void heads_swapped_within_a_token_slot_do_not_verify(void **state)
{
	uint32_t pages[1] = { 4 };
	struct shape s;
	struct rank r;
	uint8_t *pg;
	uint32_t hb;

	(void)state;
	small_shape(&s);
	rank_make(&r, &s, 1, 1, 0, 0, 0);
	assert_int_equal(r.g.rank_heads, 4);
	hb = r.g.head_bytes;
	bench_fill(r.pool, &r.g, 31, pages, 1, 0);
	/* Token slot 2 of page 4 of the K buffer of layer 1: heads 1 and 3. */
	assert_int_equal(r.bufs[1].layer_id, 1);
	assert_int_equal(r.bufs[1].role, KVW_ROLE_K);
	pg = r.pool + r.bufs[1].offset + 4u * r.bufs[1].item_len +
	     2u * r.g.rank_heads * hb;
	swap_bytes(pg + 1u * hb, pg + 3u * hb, hb);
	assert_true(bench_verify(r.pool, &r.g, 31, pages, 1, 0) > 2u * hb * 9 / 10);
	free(r.pool);
}

/* Which model head a rank's local head slot holds, written by hand for
 * heads/TP pairs with more heads than ranks (a contiguous slice each),
 * fewer (T/H ranks replicate one head) and one (MLA). */
static void global_heads_are_placed_as_written_by_hand(void **state)
{
	static const struct {
		uint32_t heads, tp, tp_rank, h, want;
	} cases[] = {
		{ 8, 1, 0, 5, 5 }, { 8, 2, 0, 3, 3 }, { 8, 2, 1, 0, 4 },
		{ 8, 2, 1, 3, 7 }, { 8, 4, 2, 1, 5 }, { 8, 4, 3, 0, 6 },
		{ 4, 4, 3, 0, 3 }, { 2, 4, 0, 0, 0 }, { 2, 4, 1, 0, 0 },
		{ 2, 4, 2, 0, 1 }, { 2, 4, 3, 0, 1 }, { 4, 8, 1, 0, 0 },
		{ 4, 8, 2, 0, 1 }, { 4, 8, 5, 0, 2 }, { 4, 8, 7, 0, 3 },
		{ 1, 4, 3, 0, 0 },
	};
	struct bench_geom g;

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		memset(&g, 0, sizeof g);
		g.total_heads = cases[i].heads;
		g.tp = cases[i].tp;
		g.tp_rank = cases[i].tp_rank;
		g.rank_heads = cases[i].heads >= cases[i].tp ?
				       cases[i].heads / cases[i].tp : 1;
		assert_int_equal(bench_global_head(&g, cases[i].h),
				 cases[i].want);
	}
}

static void another_room_or_page_list_does_not_verify(void **state)
{
	uint32_t pages[2] = { 1, 2 }, swapped[2] = { 2, 1 };
	uint64_t total;
	struct shape s;
	struct rank r;

	(void)state;
	small_shape(&s);
	rank_make(&r, &s, 1, 1, 0, 0, 0);
	bench_fill(r.pool, &r.g, 7, pages, 2, 0);
	total = bench_room_bytes(&r.g, 2);
	assert_int_equal(total, 8u * 2 * r.bufs[0].item_len + 20 + 12);
	/* Nearly every byte differs (a random byte matches 1 in 256). */
	assert_true(bench_verify(r.pool, &r.g, 8, pages, 2, 0) > total * 9 / 10);
	assert_true(bench_verify(r.pool, &r.g, 7, swapped, 2, 0) >
		    8u * 2 * r.bufs[0].item_len * 9 / 10);
	free(r.pool);
}

static void pattern_survives_tp_slicing_both_ways(void **state)
{
	uint32_t sp[3] = { 3, 4, 9 }, dp[3] = { 30, 0, 7 };
	struct rank p[2], d[2];
	struct shape s;

	(void)state;
	small_shape(&s);
	/* Prefill TP 2 -> decode TP 1: each prefill rank fills its heads. */
	rank_make(&d[0], &s, 1, 1, 0, 0, 1);
	for (int k = 0; k < 2; k++) {
		rank_make(&p[k], &s, 2, 1, (uint32_t)k, 0, 0);
		bench_fill(p[k].pool, &p[k].g, 99, sp, 3, 1);
		transfer(&p[k], &d[0], sp, dp, 3, 1, 5);
	}
	assert_int_equal(bench_verify(d[0].pool, &d[0].g, 99, dp, 3, 5), 0);
	/* Only one prefill rank: the other half of the heads is missing. */
	memset(d[0].pool, 0, d[0].size);
	transfer(&p[0], &d[0], sp, dp, 3, 1, 5);
	assert_true(bench_verify(d[0].pool, &d[0].g, 99, dp, 3, 5) > 0);
	free(d[0].pool);
	/* Prefill TP 1 -> decode TP 2: each decode rank gets its half. */
	free(p[1].pool);
	free(p[0].pool);
	rank_make(&p[0], &s, 1, 1, 0, 0, 0);
	bench_fill(p[0].pool, &p[0].g, 5, sp, 3, 0);
	for (int k = 0; k < 2; k++) {
		rank_make(&d[k], &s, 2, 1, (uint32_t)k, 0, 1);
		transfer(&p[0], &d[k], sp, dp, 3, 0, 0);
		assert_int_equal(bench_verify(d[k].pool, &d[k].g, 5, dp, 3, 0),
				 0);
		free(d[k].pool);
	}
	free(p[0].pool);
}

/* vLLM's per-layer layout (K then V of each layer) against SGLang's (every
 * K, then every V), both ways and under a TP mismatch: buffers pair by
 * (layer, role), so every byte lands where the other side put its twin. */
static void kv_layouts_exchange_across_tp(void **state)
{
	uint32_t sp[3] = { 3, 4, 9 }, dp[3] = { 30, 0, 7 };
	struct shape ps, ds;
	struct rank p[2], d;

	(void)state;
	for (int way = 0; way < 2; way++) {
		small_shape(&ps);
		ds = ps;
		(way ? &ps : &ds)->kv_layout = SHAPE_KV_VLLM;
		rank_make(&d, &ds, 1, 1, 0, 0, 1);
		if (ds.kv_layout == SHAPE_KV_VLLM) { /* K0 V0 K1 V1 ... */
			assert_int_equal(d.bufs[1].role, KVW_ROLE_V);
			assert_int_equal(d.bufs[1].layer_id, 0);
			assert_int_equal(d.bufs[2].layer_id, 1);
		}
		for (int k = 0; k < 2; k++) {
			rank_make(&p[k], &ps, 2, 1, (uint32_t)k, 0, 0);
			if (ps.kv_layout == SHAPE_KV_VLLM)
				assert_int_equal(p[k].bufs[1].offset,
						 p[k].bufs[0].offset +
						 (uint64_t)p[k].bufs[0].pages *
						 p[k].bufs[0].item_len);
			bench_fill(p[k].pool, &p[k].g, 41, sp, 3, 1);
			transfer(&p[k], &d, sp, dp, 3, 1, 2);
			free(p[k].pool);
		}
		assert_int_equal(bench_verify(d.pool, &d.g, 41, dp, 3, 2), 0);
		free(d.pool);
	}
}

/* The byte a block-major page holds at (layer, page i of the room, half h:
 * 0 K / 1 V, token t, model head g, byte k of the head): written by hand,
 * not by the bench pattern, so the test knows where vLLM puts each. */
static uint8_t kvb_byte(uint32_t layer, uint32_t i, uint32_t h, uint32_t t,
			uint32_t g, uint32_t k)
{
	return (uint8_t)(layer * 31 + i * 7 + h * 101 + t * 13 + g * 53 + k);
}

/* Fills (check 0) or counts the wrong bytes of (check 1) the room pages
 * pg[0..n) of every target KVB buffer of r, a [blocks, 2, block_size,
 * heads, head_bytes] tensor per layer whose heads are r's TP share. */
static uint64_t kvb_walk(struct rank *r, const uint32_t *pg, uint32_t n,
			 int check)
{
	uint32_t pt = r->m.page_tokens, hb = r->m.head_bytes;
	uint32_t heads = r->m.rank_kv_heads, first = r->c.tp * heads;
	uint64_t bad = 0;

	for (uint32_t b = 0; b < r->n; b++) {
		const struct kvw_buf *x = &r->bufs[b];

		if (x->role != KVW_ROLE_KVB || x->layer_id >= LAYOUT_DRAFT_BASE)
			continue;
		for (uint32_t i = 0; i < n; i++) {
			uint8_t *page =
			    r->pool + x->offset + (uint64_t)pg[i] * x->item_len;

			/* Slot s: half s / pt, token s % pt. */
			for (uint32_t s = 0; s < 2 * pt; s++)
				for (uint32_t j = 0; j < heads * hb; j++) {
					uint8_t *at = page +
						      (uint64_t)s * heads * hb + j;
					uint8_t want = kvb_byte(
					    x->layer_id, i, s / pt, s % pt,
					    first + j / hb, j % hb);

					if (check)
						bad += *at != want;
					else
						*at = want;
				}
		}
	}
	return bad;
}

/* vLLM's block-major layout (--kv-layout vllm-blocks): one buffer per
 * layer whose page is a block, its K token slots then its V slots. Under
 * a TP mismatch both ways every (half, token, head) lands where vLLM's
 * [blocks, 2, block_size, heads, dim] puts it on the other side (bytes
 * written by hand, not by the pattern); a missing rank leaves its heads
 * unwritten; a block-major side does not pair with a split one, and the
 * plan says which flag both need. */
static void block_major_layers_move_by_block_across_tp(void **state)
{
	uint32_t sp[3] = { 3, 4, 9 }, dp[3] = { 30, 0, 7 };
	struct shape s, split;
	struct rank p[2], d[2];
	struct plan_side a, b;
	struct plan *pl = NULL;
	uint32_t kvb = 0;

	(void)state;
	small_shape(&s);
	s.kv_layout = SHAPE_KV_VLLM_BLOCKS;
	rank_make(&d[0], &s, 1, 1, 0, 0, 1);
	for (uint32_t i = 0; i < d[0].n; i++)
		kvb += d[0].bufs[i].role == KVW_ROLE_KVB;
	assert_int_equal(kvb, s.layers);
	assert_int_equal(d[0].bufs[1].layer_id, 1);
	assert_int_equal(d[0].bufs[0].item_len,
			 2u * s.page_tokens * s.kv_heads * s.head_dim *
			     s.dtype_bytes);
	/* Prefill TP 2 -> decode TP 1. */
	for (int k = 0; k < 2; k++) {
		rank_make(&p[k], &s, 2, 1, (uint32_t)k, 0, 0);
		kvb_walk(&p[k], sp, 3, 0);
		transfer(&p[k], &d[0], sp, dp, 3, 1, 2);
		if (k == 0) /* one rank's heads only: the rest are missing */
			assert_true(kvb_walk(&d[0], dp, 3, 1) > 0);
		free(p[k].pool);
	}
	assert_int_equal(kvb_walk(&d[0], dp, 3, 1), 0);
	free(d[0].pool);
	/* Prefill TP 1 -> decode TP 2: each decode rank gets its heads. */
	rank_make(&p[0], &s, 1, 1, 0, 0, 0);
	kvb_walk(&p[0], sp, 3, 0);
	for (int k = 0; k < 2; k++) {
		rank_make(&d[k], &s, 2, 1, (uint32_t)k, 0, 1);
		transfer(&p[0], &d[k], sp, dp, 3, 0, 0);
		assert_int_equal(kvb_walk(&d[k], dp, 3, 1), 0);
		free(d[k].pool);
	}
	/* A split decode: refused, naming the flag. */
	small_shape(&split);
	rank_make(&d[0], &split, 1, 1, 0, 0, 1);
	a = (struct plan_side){ &p[0].m, p[0].bufs, p[0].n, &p[0].size, 1 };
	b = (struct plan_side){ &d[0].m, d[0].bufs, d[0].n, &d[0].size, 1 };
	assert_int_equal(plan_build(&a, &b, NULL, &pl, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "--kv-layout vllm-blocks"));
	assert_int_equal(plan_build(&b, &a, NULL, &pl, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "--kv-layout vllm-blocks"));
	free(d[0].pool);
	free(p[0].pool);
}

/* --hops from two real tables: a room's moments on each side, kv-bench's
 * own around them; the hops add up to its latency, and a moment not
 * written (a room that never went Transferring) is no sample. */
static void hops_split_a_room_from_both_tables(void **state)
{
	struct rtab *t[2] = { NULL, NULL };
	struct rtab_ref ref[2];
	uint64_t hops[BENCH_NHOPS], sum = 0, t0, t1;
	char path[2][64];
	int existed;

	(void)state;
	for (int k = 0; k < 2; k++) {
		snprintf(path[k], sizeof path[k], "/dev/shm/kvwire.thops%d-%d.rooms",
			 k, (int)getpid());
		unlink(path[k]);
		assert_int_equal(rtab_create(path[k], 16, 2, 1 + k, &t[k],
					     &existed, err, sizeof err), 0);
	}
	t0 = proc_now_ns();
	/* decode: RECV_BEGIN taken, XFER_INFO out; prefill: Waiting,
	 * Transferring, Success; decode: Success; the bench sees it. */
	assert_int_equal(rtab_insert(t[0], 9, 0, 0, &ref[0]), 0);
	assert_int_equal(rtab_transition(t[0], ref[0], KVW_WAITING, 0), 0);
	assert_int_equal(rtab_insert(t[1], 9, 0, 0, &ref[1]), 0);
	assert_int_equal(rtab_transition(t[1], ref[1], KVW_WAITING, 0), 0);
	assert_int_equal(bench_hops_take(t[0], t[1], 9, t0, proc_now_ns(),
					 hops), -1); /* not Transferring yet */
	assert_int_equal(rtab_transition(t[1], ref[1], KVW_TRANSFERRING, 0),
			 0);
	assert_int_equal(rtab_transition(t[1], ref[1], KVW_SUCCESS, 0), 0);
	assert_int_equal(rtab_transition(t[0], ref[0], KVW_TRANSFERRING, 0),
			 0);
	assert_int_equal(rtab_transition(t[0], ref[0], KVW_SUCCESS, 0), 0);
	t1 = proc_now_ns();
	assert_int_equal(bench_hops_take(t[0], t[1], 9, t0, t1, hops), 0);
	for (unsigned h = 0; h < BENCH_NHOPS; h++)
		sum += hops[h];
	assert_true(sum == t1 - t0);
	assert_int_equal(bench_hops_take(t[0], t[1], 10, t0, t1, hops), -1);
	assert_string_equal(bench_hop_name(HOP_STATUS), "status");
	for (int k = 0; k < 2; k++) {
		rtab_close(&t[k]);
		unlink(path[k]);
	}
}

static void replicated_heads_and_pp_stages_verify(void **state)
{
	uint32_t sp[2] = { 0, 1 }, dp[2] = { 2, 3 };
	struct rank p[2], d;
	struct shape s;

	(void)state;
	small_shape(&s);
	s.kv_heads = 2; /* fewer heads than decode ranks: each replicated twice */
	rank_make(&p[0], &s, 1, 1, 0, 0, 0);
	bench_fill(p[0].pool, &p[0].g, 11, sp, 2, 0);
	for (uint32_t k = 0; k < 4; k++) {
		struct rank other;

		rank_make(&d, &s, 4, 1, k, 0, 1);
		assert_int_equal(d.g.rank_heads, 1);
		assert_int_equal(bench_global_head(&d.g, 0), k / 2);
		transfer(&p[0], &d, sp, dp, 2, 0, 0);
		assert_int_equal(bench_verify(d.pool, &d.g, 11, dp, 2, 0), 0);
		/* What rank k holds is not what a rank of the other head
		 * should hold. */
		rank_make(&other, &s, 4, 1, (k + 2) % 4, 0, 1);
		assert_true(bench_verify(d.pool, &other.g, 11, dp, 2, 0) > 0);
		free(other.pool);
		free(d.pool);
	}
	free(p[0].pool);
	/* Two PP stages, one decode rank holding every layer plus two draft
	 * layers nobody sends: the draft layers are not checked. */
	small_shape(&s);
	s.draft_layers = 2;
	rank_make(&d, &s, 1, 1, 0, 0, 1);
	for (int k = 0; k < 2; k++) {
		rank_make(&p[k], &s, 1, 2, 0, (uint32_t)k, 0);
		bench_fill(p[k].pool, &p[k].g, 12, sp, 2, 1);
		transfer(&p[k], &d, sp, dp, 2, 1, 1);
		free(p[k].pool);
	}
	assert_int_equal(bench_verify(d.pool, &d.g, 12, dp, 2, 1), 0);
	assert_int_equal(bench_room_bytes(&d.g, 2),
			 4u * 2 * 2 * d.bufs[0].item_len + 20 + 12);
	free(d.pool);
}

static void allocator_takes_low_first_refuses_overdraw_and_takes_back(
	void **state)
{
	struct bench_alloc a;
	uint32_t got[8], more[8];

	(void)state;
	assert_int_equal(bench_alloc_init(&a, 5), 0);
	assert_int_equal(bench_alloc_take(&a, 3, got), 0);
	assert_int_equal(got[0], 0);
	assert_int_equal(got[1], 1);
	assert_int_equal(got[2], 2);
	assert_int_equal(bench_alloc_take(&a, 3, more), KVW_EAGAIN);
	assert_int_equal(a.n, 2);
	bench_alloc_put(&a, 3, got);
	assert_int_equal(a.n, 5);
	assert_int_equal(bench_alloc_take(&a, 5, more), 0);
	assert_int_equal(more[0], 0);
	assert_int_equal(more[1], 1);
	assert_int_equal(more[2], 2);
	assert_int_equal(bench_alloc_take(&a, 1, more), KVW_EAGAIN);
	assert_int_equal(bench_alloc_take(&a, 0, more), 0);
	bench_alloc_fini(&a);
	assert_null(a.free);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(filled_room_verifies_and_flipped_bytes_are_counted),
		cmocka_unit_test(
			bytes_shifted_or_swapped_within_a_page_do_not_verify),
		cmocka_unit_test(heads_swapped_within_a_token_slot_do_not_verify),
		cmocka_unit_test(global_heads_are_placed_as_written_by_hand),
		cmocka_unit_test(another_room_or_page_list_does_not_verify),
		cmocka_unit_test(pattern_survives_tp_slicing_both_ways),
		cmocka_unit_test(replicated_heads_and_pp_stages_verify),
		cmocka_unit_test(kv_layouts_exchange_across_tp),
		cmocka_unit_test(block_major_layers_move_by_block_across_tp),
		cmocka_unit_test(hops_split_a_room_from_both_tables),
		cmocka_unit_test(
			allocator_takes_low_first_refuses_overdraw_and_takes_back),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
