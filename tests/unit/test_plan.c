/*
 * test_plan.c - truth tables for the layout planner (PROTOCOL-NOTES 12,
 * test matrix J1-J10). Layout cases execute the planned copies between
 * malloc'd pools filled with a pattern and compare the destination with a
 * reference the test computes on its own (pairing by layer id and role by
 * linear search; head slices from global head numbers), so a copy that
 * lands in the wrong buffer, page, token slot or head is caught byte by
 * byte, and so is a byte written where nothing should land.
 */
/* cmocka.h needs these first, in this order */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"
#include "plan/plan.h"
#include "plan/rankmap.h"

#define MAXB 256

/* One engine rank's layout plus its single pool. */
struct side {
	struct kvw_model m;
	struct kvw_buf b[MAXB];
	uint32_t n;
	uint64_t pool_size[1];
	uint8_t *pool;
	struct plan_side ps;
};

static void side_fix(struct side *s)
{
	s->ps = (struct plan_side){&s->m, s->b, s->n, s->pool_size, 1};
	free(s->pool);
	s->pool = calloc(1, s->pool_size[0] ? s->pool_size[0] : 1);
	assert_non_null(s->pool);
}

static void side_make(struct side *s, uint32_t first, uint32_t layers,
		      uint32_t draft, int mla, uint32_t item, uint32_t pages,
		      uint32_t aux_slots)
{
	struct layout_spec sp = {.first_layer = first,
				 .layers = layers,
				 .draft_layers = draft,
				 .mla = mla,
				 .item_len = item,
				 .pages = pages,
				 .aux_slots = aux_slots,
				 .naux = 1, .aux_item_lens = (const uint32_t[]){ 64 }};
	char err[256] = "";

	memset(s, 0, sizeof *s);
	s->m = (struct kvw_model){.page_tokens = 4,
				  .flags = mla ? KVW_MODEL_MLA : 0};
	assert_int_equal(layout_make(&sp, s->b, MAXB, &s->n, &s->pool_size[0],
				     err, sizeof err),
			 0);
	side_fix(s);
}

static void side_done(struct side *s)
{
	free(s->pool);
	s->pool = NULL;
}

static uint8_t pat(uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t e)
{
	uint32_t x = a * 2654435761u ^ (b + 1) * 40503u ^ c * 0x9e3779b1u ^
		     d * 2246822519u ^ e * 3266489917u;

	x ^= x >> 15;
	x *= 0x2c1b3c6du;
	x ^= x >> 12;
	return (uint8_t)(x | 1); /* never 0: 0 means "nothing landed here" */
}

/* Every source byte tells which (layer, role, page, byte) it is. */
static void fill_src(struct side *s)
{
	for (uint32_t i = 0; i < s->n; i++) {
		const struct kvw_buf *b = &s->b[i];

		for (uint32_t p = 0; p < b->pages; p++)
			for (uint32_t k = 0; k < b->item_len; k++)
				s->pool[b->offset + (uint64_t)p * b->item_len +
					k] = pat(b->layer_id, b->role, p, k, 0);
	}
}

/* Plans one chunk and executes it into dst's pool; returns the copy count
 * (or the negative error, err filled). */
static long run_chunk(struct side *src, struct side *dst,
		      const struct plan_heads *h, const uint32_t *sp,
		      const uint32_t *dp, uint32_t np, int aux, uint32_t sa,
		      uint32_t da, char *err, size_t errlen)
{
	struct plan *p = NULL;
	struct plan_copy *c;
	size_t n = 0, cap;
	int rc;

	rc = plan_build(&src->ps, &dst->ps, h, &p, err, errlen);
	if (rc < 0) {
		assert_null(p);
		return rc;
	}
	cap = plan_chunk_max(p, np, aux);
	c = calloc(cap + 1, sizeof *c);
	assert_non_null(c);
	rc = plan_chunk(p, sp, dp, np, aux, sa, da, c, cap, &n, err, errlen);
	if (rc == 0) {
		for (size_t i = 0; i < n; i++) {
			assert_int_equal(c[i].src_pool, 0);
			assert_int_equal(c[i].dst_pool, 0);
			assert_true(c[i].src_off + c[i].len <=
				    src->pool_size[0]);
			assert_true(c[i].dst_off + c[i].len <=
				    dst->pool_size[0]);
			memcpy(dst->pool + c[i].dst_off,
			       src->pool + c[i].src_off, c[i].len);
		}
	}
	free(c);
	plan_free(&p);
	assert_null(p);
	return rc < 0 ? rc : (long)n;
}

/* Reference: what dst's pool must hold after whole-page copies of pages
 * sp[] -> dp[], pairing by linear search on (layer, role), AUX by order. */
static uint8_t *expect_pages(const struct side *src, const struct side *dst,
			     const uint32_t *sp, const uint32_t *dp,
			     uint32_t np, int aux, uint32_t sa, uint32_t da)
{
	uint8_t *e = calloc(1, dst->pool_size[0] ? dst->pool_size[0] : 1);
	uint32_t sa_i = 0;

	assert_non_null(e);
	for (uint32_t i = 0; i < src->n; i++) {
		const struct kvw_buf *s = &src->b[i], *d = NULL;

		if (s->role == KVW_ROLE_AUX) {
			uint32_t seen = 0;

			for (uint32_t j = 0; j < dst->n; j++)
				if (dst->b[j].role == KVW_ROLE_AUX &&
				    seen++ == sa_i)
					d = &dst->b[j];
			sa_i++;
			assert_non_null(d);
			if (aux)
				for (uint32_t k = 0; k < s->item_len; k++)
					e[d->offset +
					  (uint64_t)da * d->item_len + k] =
					    pat(s->layer_id, s->role, sa, k, 0);
			continue;
		}
		for (uint32_t j = 0; j < dst->n; j++)
			if (dst->b[j].layer_id == s->layer_id &&
			    dst->b[j].role == s->role)
				d = &dst->b[j];
		assert_non_null(d);
		for (uint32_t q = 0; q < np; q++)
			for (uint32_t k = 0; k < s->item_len; k++)
				e[d->offset + (uint64_t)dp[q] * d->item_len +
				  k] = pat(s->layer_id, s->role, sp[q], k, 0);
	}
	return e;
}

static void assert_pool(const struct side *dst, const uint8_t *e)
{
	for (uint64_t i = 0; i < dst->pool_size[0]; i++) {
		if (dst->pool[i] != e[i]) {
			for (uint32_t j = 0; j < dst->n; j++) {
				const struct kvw_buf *b = &dst->b[j];
				uint64_t len = (uint64_t)b->item_len * b->pages;

				if (i >= b->offset && i < b->offset + len)
					print_error(
					    "dst byte %llu (layer %u role %u "
					    "page %llu) = %u, want %u\n",
					    (unsigned long long)i, b->layer_id,
					    b->role,
					    (unsigned long long)((i -
								  b->offset) /
								 b->item_len),
					    dst->pool[i], e[i]);
			}
			fail();
		}
	}
}

/* Plans, executes and checks a whole-page chunk between two layouts. */
static long check_pages(struct side *src, struct side *dst, const uint32_t *sp,
			const uint32_t *dp, uint32_t np)
{
	char err[256] = "";
	uint8_t *e;
	long n;

	fill_src(src);
	n = run_chunk(src, dst, NULL, sp, dp, np, 0, 0, 0, err, sizeof err);
	if (n < 0)
		print_error("plan: %s\n", err);
	assert_true(n >= 0);
	e = expect_pages(src, dst, sp, dp, np, 0, 0, 0);
	assert_pool(dst, e);
	free(e);
	return n;
}

static const uint32_t SP[] = {3, 4, 9, 0, 1};
static const uint32_t DP[] = {7, 8, 2, 5, 6};

static void test_same_layout_pairs_k_to_k_and_v_to_v(void **st)
{
	struct side s, d;

	(void)st;
	side_make(&s, 0, 4, 0, 0, 64, 12, 0);
	side_make(&d, 0, 4, 0, 0, 64, 12, 0);
	/* runs: (3,4)->(7,8) | 9->2 | (0,1)->(5,6): 3 copies per buffer */
	assert_int_equal(check_pages(&s, &d, SP, DP, 5), 8 * 3);
	side_done(&s);
	side_done(&d);
}

static void test_decode_draft_layers_prefill_pp1_v_lands_in_target_v(void **st)
{
	struct side s, d;

	(void)st;
	side_make(&s, 0, 4, 0, 0, 64, 12, 0);
	side_make(&d, 0, 4, 2, 0, 64, 12, 0); /* K0-3 V0-3 dK0-1 dV0-1 */
	check_pages(&s, &d, SP, DP, 5);	      /* draft buffers stay zero */
	side_done(&s);
	side_done(&d);
}

static void test_uneven_pp_stage1_v_lands_in_v7_to_v14_never_k(void **st)
{
	struct side s0, s1, d;
	uint8_t *e0, *e1;
	char err[256];

	(void)st;
	side_make(&d, 0, 15, 0, 0, 64, 12, 0);
	side_make(&s0, 0, 7, 0, 0, 64, 12, 0);
	side_make(&s1, 7, 8, 0, 0, 64, 12, 0);
	fill_src(&s0);
	fill_src(&s1);
	assert_true(
	    run_chunk(&s0, &d, NULL, SP, DP, 5, 0, 0, 0, err, sizeof err) > 0);
	assert_true(
	    run_chunk(&s1, &d, NULL, SP, DP, 5, 0, 0, 0, err, sizeof err) > 0);
	e0 = expect_pages(&s0, &d, SP, DP, 5, 0, 0, 0);
	e1 = expect_pages(&s1, &d, SP, DP, 5, 0, 0, 0);
	for (uint64_t i = 0; i < d.pool_size[0]; i++)
		e0[i] |= e1[i]; /* the two stages own disjoint buffers */
	assert_pool(&d, e0);
	/* and the explicit claim: K14 holds K data, V7 holds V data */
	assert_int_equal(d.pool[d.b[14].offset + 7 * 64],
			 pat(14, KVW_ROLE_K, 3, 0, 0));
	assert_int_equal(d.pool[d.b[15 + 7].offset + 7 * 64],
			 pat(7, KVW_ROLE_V, 3, 0, 0));
	free(e0);
	free(e1);
	side_done(&s0);
	side_done(&s1);
	side_done(&d);
}

static void
test_four_target_two_draft_prefill_pp2_v_lands_in_own_layers(void **st)
{
	struct side s0, s1, d;
	uint8_t *e0, *e1;
	char err[256];

	(void)st;
	side_make(&d, 0, 4, 2, 0, 64, 12, 0);
	side_make(&s0, 0, 2, 0, 0, 64, 12, 0);
	side_make(&s1, 2, 2, 0, 0, 64, 12, 0);
	fill_src(&s0);
	fill_src(&s1);
	assert_int_equal(
	    run_chunk(&s0, &d, NULL, SP, DP, 5, 0, 0, 0, err, sizeof err),
	    4 * 3);
	assert_int_equal(
	    run_chunk(&s1, &d, NULL, SP, DP, 5, 0, 0, 0, err, sizeof err),
	    4 * 3);
	e0 = expect_pages(&s0, &d, SP, DP, 5, 0, 0, 0);
	e1 = expect_pages(&s1, &d, SP, DP, 5, 0, 0, 0);
	for (uint64_t i = 0; i < d.pool_size[0]; i++)
		e0[i] |= e1[i];
	assert_pool(&d, e0); /* V base is 4 (not 6); draft K/V untouched */
	free(e0);
	free(e1);
	side_done(&s0);
	side_done(&s1);
	side_done(&d);
}

static void test_mla_pp_three_layers_from_5_land_in_kv5_to_kv7(void **st)
{
	struct side s, d;

	(void)st;
	side_make(&s, 5, 3, 0, 1, 64, 12, 0);
	side_make(&d, 0, 12, 0, 1, 64, 12, 0);
	assert_int_equal(check_pages(&s, &d, SP, DP, 5), 3 * 3);
	side_done(&s);
	side_done(&d);
}

static void test_aux_slot_copied_by_aux_order(void **st)
{
	struct side s, d;
	char err[256];
	uint8_t *e;

	(void)st;
	side_make(&s, 0, 2, 0, 0, 64, 12, 8);
	side_make(&d, 0, 2, 1, 0, 64, 12, 16);
	fill_src(&s);
	assert_int_equal(
	    run_chunk(&s, &d, NULL, SP, DP, 5, 1, 6, 13, err, sizeof err),
	    4 * 3 + 1);
	e = expect_pages(&s, &d, SP, DP, 5, 1, 6, 13);
	assert_pool(&d, e);
	free(e);
	side_done(&s);
	side_done(&d);
}

static void test_missing_destination_layer_error_names_layer_and_role(void **st)
{
	struct side s, d;
	struct plan *p = (struct plan *)&p;
	char err[256] = "";

	(void)st;
	side_make(&s, 7, 8, 0, 0, 64, 12, 0);
	side_make(&d, 0, 15, 0, 0, 64, 12, 0);
	/* drop V14 (the last buffer) from the decode layout */
	assert_int_equal(d.b[d.n - 1].layer_id, 14);
	assert_int_equal(d.b[d.n - 1].role, KVW_ROLE_V);
	d.n--;
	side_fix(&d);
	assert_int_equal(plan_build(&s.ps, &d.ps, NULL, &p, err, sizeof err),
			 KVW_EINVAL);
	assert_null(p);
	assert_string_equal(err, "layer 14 role V has no destination");
	side_done(&s);
	side_done(&d);
}

static void test_missing_source_aux_partner_is_error(void **st)
{
	struct side s, d;
	struct plan *p = NULL;
	char err[256] = "";

	(void)st;
	side_make(&s, 0, 2, 0, 0, 64, 12, 4);
	side_make(&d, 0, 2, 0, 0, 64, 12, 0);
	assert_int_equal(plan_build(&s.ps, &d.ps, NULL, &p, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "AUX"));
	side_done(&s);
	side_done(&d);
}

static void test_duplicate_layer_role_is_error(void **st)
{
	struct side s, d;
	struct plan *p = NULL;
	char err[256] = "";

	(void)st;
	side_make(&s, 0, 2, 0, 0, 64, 12, 0);
	side_make(&d, 0, 2, 0, 0, 64, 12, 0);
	d.b[1].layer_id = 0; /* K0 twice */
	assert_int_equal(plan_build(&s.ps, &d.ps, NULL, &p, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "layer 0 role K twice"));
	side_done(&s);
	side_done(&d);
}

static void test_item_length_mismatch_without_slice_is_error(void **st)
{
	struct side s, d;
	struct plan *p = NULL;
	char err[256] = "";

	(void)st;
	side_make(&s, 0, 2, 0, 0, 64, 12, 0);
	side_make(&d, 0, 2, 0, 0, 32, 12, 0);
	assert_int_equal(plan_build(&s.ps, &d.ps, NULL, &p, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(
	    strstr(err, "item length 64 on source, 32 on destination"));
	side_done(&s);
	side_done(&d);
}

static void test_buffer_outside_pool_is_error(void **st)
{
	struct side s, d;
	struct plan *p = NULL;
	char err[256] = "";

	(void)st;
	side_make(&s, 0, 2, 0, 0, 64, 12, 0);
	side_make(&d, 0, 2, 0, 0, 64, 12, 0);
	d.pool_size[0] -= 1; /* last buffer overhangs by one byte */
	assert_int_equal(plan_build(&s.ps, &d.ps, NULL, &p, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "outside pool 0"));
	d.pool_size[0] += 1;
	d.b[0].offset = UINT64_MAX - 10; /* offset + length overflows */
	assert_int_equal(plan_build(&s.ps, &d.ps, NULL, &p, err, sizeof err),
			 KVW_EINVAL);
	d.b[0].offset = 0;
	d.b[0].pool = 1; /* no such pool */
	assert_int_equal(plan_build(&s.ps, &d.ps, NULL, &p, err, sizeof err),
			 KVW_EINVAL);
	assert_null(p);
	side_done(&s);
	side_done(&d);
}

static void test_models_page_size_or_dtype_mismatch_rejected(void **st)
{
	struct kvw_model a = {.page_tokens = 16, .dtype = 1};
	struct kvw_model b = a;
	char err[128];

	(void)st;
	assert_int_equal(plan_models_compat(&a, &b, err, sizeof err), 0);
	b.page_tokens = 32;
	assert_int_equal(plan_models_compat(&a, &b, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "page size"));
	b = a;
	b.dtype = 2;
	assert_int_equal(plan_models_compat(&a, &b, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "dtype"));
	b.dtype = 0; /* unstated on one side: accepted */
	assert_int_equal(plan_models_compat(&a, &b, err, sizeof err), 0);
	b.flags = KVW_MODEL_MLA;
	assert_int_equal(plan_models_compat(&a, &b, err, sizeof err),
			 KVW_EINVAL);
}

/* --- coalescing, ranges, capacity ------------------------------------ */

static void test_coalesce_runs_need_both_sides_consecutive(void **st)
{
	struct side s, d;
	struct plan *p = NULL;
	struct plan_copy c[8];
	size_t n;
	char err[256];
	const uint32_t s1[] = {10, 11, 20}, d1[] = {5, 6, 7};
	const uint32_t s2[] = {1, 2, 3}, d2[] = {1, 3, 4};
	const uint32_t s3[] = {0, 1, 2, 3}, d3[] = {4, 5, 6, 7};

	(void)st;
	side_make(&s, 0, 1, 0, 1, 64, 32, 0); /* one MLA buffer */
	side_make(&d, 0, 1, 0, 1, 64, 32, 0);
	assert_int_equal(plan_build(&s.ps, &d.ps, NULL, &p, err, sizeof err),
			 0);
	assert_int_equal(
	    plan_chunk(p, s1, d1, 3, 0, 0, 0, c, 8, &n, err, sizeof err), 0);
	assert_int_equal(n, 2);
	assert_int_equal(c[0].src_off, 10 * 64);
	assert_int_equal(c[0].dst_off, 5 * 64);
	assert_int_equal(c[0].len, 2 * 64);
	assert_int_equal(c[1].src_off, 20 * 64);
	assert_int_equal(c[1].dst_off, 7 * 64);
	assert_int_equal(c[1].len, 64);
	assert_int_equal(
	    plan_chunk(p, s2, d2, 3, 0, 0, 0, c, 8, &n, err, sizeof err), 0);
	assert_int_equal(n, 2);
	assert_int_equal(c[1].src_off, 2 * 64);
	assert_int_equal(c[1].len, 2 * 64);
	assert_int_equal(
	    plan_chunk(p, s3, d3, 4, 0, 0, 0, c, 8, &n, err, sizeof err), 0);
	assert_int_equal(n, 1);
	assert_int_equal(c[0].len, 4 * 64);
	assert_int_equal(
	    plan_chunk(p, NULL, NULL, 0, 0, 0, 0, c, 8, &n, err, sizeof err),
	    0);
	assert_int_equal(n, 0);
	plan_free(&p);
	side_done(&s);
	side_done(&d);
}

static void test_page_index_out_of_range_is_erange_naming_index(void **st)
{
	struct side s, d;
	struct plan *p = NULL;
	struct plan_copy c[16];
	size_t n = 99;
	char err[256];
	const uint32_t ok[] = {0, 11}, bad[] = {0, 12},
		       huge[] = {UINT32_MAX, 0};

	(void)st;
	side_make(&s, 0, 2, 0, 0, 64, 12, 4);
	side_make(&d, 0, 2, 0, 0, 64, 16, 4);
	assert_int_equal(plan_build(&s.ps, &d.ps, NULL, &p, err, sizeof err),
			 0);
	assert_int_equal(
	    plan_chunk(p, ok, ok, 2, 0, 0, 0, c, 16, &n, err, sizeof err), 0);
	assert_int_equal(
	    plan_chunk(p, bad, ok, 2, 0, 0, 0, c, 16, &n, err, sizeof err),
	    KVW_ERANGE);
	assert_int_equal(n, 0);
	assert_non_null(strstr(err, "source page index 12 (position 1)"));
	assert_int_equal(
	    plan_chunk(p, huge, ok, 2, 0, 0, 0, c, 16, &n, err, sizeof err),
	    KVW_ERANGE);
	/* decode has 16 pages: 12 fits there, 16 does not */
	assert_int_equal(
	    plan_chunk(p, ok, bad, 2, 0, 0, 0, c, 16, &n, err, sizeof err), 0);
	{
		const uint32_t d16[] = {16, 0};

		assert_int_equal(plan_chunk(p, ok, d16, 2, 0, 0, 0, c, 16, &n,
					    err, sizeof err),
				 KVW_ERANGE);
		assert_non_null(
		    strstr(err, "destination page index 16 (position 0)"));
	}
	assert_int_equal(
	    plan_chunk(p, ok, ok, 2, 1, 4, 0, c, 16, &n, err, sizeof err),
	    KVW_ERANGE);
	assert_non_null(strstr(err, "source aux slot 4"));
	assert_int_equal(
	    plan_chunk(p, ok, ok, 2, 1, 3, 3, c, 16, &n, err, sizeof err), 0);
	assert_int_equal(n, 4 * 2 + 1);
	plan_free(&p);
	side_done(&s);
	side_done(&d);
}

static void test_capacity_short_is_enomem_with_needed_count(void **st)
{
	struct side s, d;
	struct plan *p = NULL;
	struct plan_copy c[64];
	size_t n = 0;
	char err[256];

	(void)st;
	side_make(&s, 0, 4, 0, 0, 64, 12, 0);
	side_make(&d, 0, 4, 0, 0, 64, 12, 0);
	assert_int_equal(plan_build(&s.ps, &d.ps, NULL, &p, err, sizeof err),
			 0);
	assert_int_equal(plan_npairs(p), 8);
	assert_int_equal(
	    plan_chunk(p, SP, DP, 5, 0, 0, 0, c, 23, &n, err, sizeof err),
	    KVW_ENOMEM);
	assert_int_equal(n, 24);
	assert_int_equal(
	    plan_chunk(p, SP, DP, 5, 0, 0, 0, c, n, &n, err, sizeof err), 0);
	assert_int_equal(n, 24);
	assert_true(plan_chunk_max(p, 5, 0) >= 24);
	plan_free(&p);
	plan_free(&p); /* NULL after the first: harmless */
	side_done(&s);
	side_done(&d);
}

/* --- head slicing ---------------------------------------------------- */

static void test_heads_tp2_to_tp4_rank1_serving_3_src2_n2_dst0(void **st)
{
	struct kvw_model m = {
	    .page_tokens = 4, .total_kv_heads = 8, .head_bytes = 8};
	struct plan_heads h;
	char err[128];

	(void)st;
	assert_int_equal(
	    plan_heads_compute(&m, 2, 1, 4, 3, &h, err, sizeof err), 0);
	assert_int_equal(h.src_head_start, 2);
	assert_int_equal(h.n_heads, 2);
	assert_int_equal(h.dst_head_start, 0);
	assert_int_equal(h.head_bytes, 8);
}

static void test_heads_tp4_to_tp2_each_prefill_writes_2_at_0_or_2(void **st)
{
	struct kvw_model m = {
	    .page_tokens = 4, .total_kv_heads = 8, .head_bytes = 8};
	const uint32_t want[4] = {0, 2, 0, 2};
	struct plan_heads h;
	char err[128];

	(void)st;
	for (uint32_t r = 0; r < 4; r++) {
		assert_int_equal(
		    plan_heads_compute(&m, 4, r, 2, r / 2, &h, err, sizeof err),
		    0);
		assert_int_equal(h.src_head_start, 0);
		assert_int_equal(h.n_heads, 2);
		assert_int_equal(h.dst_head_start, want[r]);
	}
}

static void test_heads_gqa_2_heads_over_tp4_ranks_share_by_division(void **st)
{
	struct kvw_model m = {
	    .page_tokens = 4, .total_kv_heads = 2, .head_bytes = 8};
	const uint32_t want[4] = {0, 0, 1, 1};
	struct plan_heads h;
	char err[128];

	(void)st;
	for (uint32_t d = 0; d < 4; d++) {
		assert_int_equal(
		    plan_heads_compute(&m, 1, 0, 4, d, &h, err, sizeof err), 0);
		assert_int_equal(h.src_head_start, want[d]);
		assert_int_equal(h.n_heads, 1);
		assert_int_equal(h.dst_head_start, 0);
	}
}

static void test_heads_bad_sizes_rejected(void **st)
{
	struct kvw_model m = {
	    .page_tokens = 4, .total_kv_heads = 8, .head_bytes = 8};
	struct plan_heads h = {.n_heads = 77};
	char err[128];

	(void)st;
	assert_int_equal(
	    plan_heads_compute(&m, 3, 0, 2, 0, &h, err, sizeof err),
	    KVW_EINVAL);
	assert_non_null(strstr(err, "do not divide"));
	m.total_kv_heads = 6;
	assert_int_equal(
	    plan_heads_compute(&m, 4, 0, 2, 0, &h, err, sizeof err),
	    KVW_EINVAL);
	m.total_kv_heads = 8;
	m.head_bytes = 0;
	assert_int_equal(
	    plan_heads_compute(&m, 2, 0, 4, 0, &h, err, sizeof err),
	    KVW_EINVAL);
	assert_int_equal(h.n_heads, 77); /* unchanged on error */
}

/* The one split rule: a multiple of tp, or a divisor of it. */
static void test_heads_split_rule_multiple_or_divisor_of_tp(void **st)
{
	(void)st;
	assert_true(plan_heads_split(8, 4));  /* 2 heads a rank */
	assert_true(plan_heads_split(2, 4));  /* each head on 2 ranks */
	assert_true(plan_heads_split(1, 8));  /* MLA: one head everywhere */
	assert_false(plan_heads_split(6, 4)); /* 6 over 4 */
	assert_false(plan_heads_split(3, 4)); /* 4 ranks, 3 heads */
	assert_false(plan_heads_split(0, 4));
	assert_false(plan_heads_split(8, 0));
}

/* Head h (0-based) of a rank r in tp T holds this global head. */
static uint32_t ghead(uint32_t H, uint32_t T, uint32_t r, uint32_t h)
{
	return H >= T ? r * (H / T) + h : r / (T / H);
}

/* A per-rank MHA layout: 2 layers, K and V, 6 pages of 4 tokens. */
static void side_heads(struct side *s, uint32_t H, uint32_t tp, uint32_t hb)
{
	uint32_t heads = H / tp ? H / tp : 1;

	side_make(s, 0, 2, 0, 0, 4 * heads * hb, 6, 0);
	s->m.total_kv_heads = H;
	s->m.rank_kv_heads = heads;
	s->m.head_bytes = hb;
}

/* Fills prefill rank r's pool: byte = pattern of (layer, role, page,
 * token * 1000 + global head, byte in head). */
static void fill_heads(struct side *s, uint32_t H, uint32_t tp, uint32_t r)
{
	uint32_t hb = s->m.head_bytes, heads = s->m.rank_kv_heads;

	for (uint32_t i = 0; i < s->n; i++) {
		const struct kvw_buf *b = &s->b[i];

		for (uint32_t p = 0; p < b->pages; p++)
			for (uint32_t t = 0; t < 4; t++)
				for (uint32_t h = 0; h < heads; h++)
					for (uint32_t k = 0; k < hb; k++)
						s->pool[b->offset +
							(uint64_t)p *
							    b->item_len +
							(t * heads + h) * hb +
							k] =
						    pat(b->layer_id, b->role, p,
							t * 1000 +
							    ghead(H, tp, r, h),
							k);
	}
}

/* Moves pages SPH -> DPH from every prefill rank decode rank d targets
 * (per rankmap) into d's layout with head slicing, then checks every byte
 * of d's pool against the global-head reference. */
static const uint32_t SPH[] = {5, 0, 1}, DPH[] = {2, 3, 0};

static void check_heads(uint32_t H, uint32_t ptp, uint32_t dtp, uint32_t d)
{
	struct rankmap_in in = {.prefill = {ptp, 1, 1, 1},
				.decode = {dtp, 1, 1, 1},
				.decode_rank = {.tp = d}};
	static struct rankmap m;
	struct side dst, src;
	uint32_t hb = 6, dheads;
	char err[256] = "";
	uint8_t *e;

	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), 0);
	side_heads(&dst, H, dtp, hb);
	dheads = dst.m.rank_kv_heads;
	for (uint32_t i = 0; i < m.ntargets; i++) {
		uint32_t r = m.targets[i].coord.tp;
		struct plan_heads h;

		assert_false(m.targets[i].dummy);
		side_heads(&src, H, ptp, hb);
		fill_heads(&src, H, ptp, r);
		assert_int_equal(plan_heads_compute(&src.m, ptp, r, dtp, d, &h,
						    err, sizeof err),
				 0);
		if (run_chunk(&src, &dst, &h, SPH, DPH, 3, 0, 0, 0, err,
			      sizeof err) < 0)
			fail_msg("%s", err);
		side_done(&src);
	}
	e = calloc(1, dst.pool_size[0]);
	assert_non_null(e);
	for (uint32_t i = 0; i < dst.n; i++) {
		const struct kvw_buf *b = &dst.b[i];

		for (uint32_t q = 0; q < 3; q++)
			for (uint32_t t = 0; t < 4; t++)
				for (uint32_t h = 0; h < dheads; h++)
					for (uint32_t k = 0; k < hb; k++)
						e[b->offset +
						  (uint64_t)DPH[q] *
						      b->item_len +
						  (t * dheads + h) * hb + k] =
						    pat(b->layer_id, b->role,
							SPH[q],
							t * 1000 +
							    ghead(H, dtp, d, h),
							k);
	}
	assert_pool(&dst, e);
	free(e);
	side_done(&dst);
}

static void test_heads_bytes_exact_tp2_to_tp4_h8(void **st)
{
	(void)st;
	for (uint32_t d = 0; d < 4; d++)
		check_heads(8, 2, 4, d);
}

static void test_heads_bytes_exact_tp4_to_tp2_h8(void **st)
{
	(void)st;
	for (uint32_t d = 0; d < 2; d++)
		check_heads(8, 4, 2, d);
}

static void test_heads_bytes_exact_gqa_h2_tp1_and_tp2_to_tp4(void **st)
{
	(void)st;
	for (uint32_t d = 0; d < 4; d++) {
		check_heads(2, 1, 4, d);
		check_heads(2, 2, 4, d);
	}
}

static void test_heads_bytes_exact_gqa_h2_tp4_to_tp1(void **st)
{
	(void)st;
	check_heads(2, 4, 1, 0);
}

static void test_heads_equal_tp_is_planned_as_page_copies(void **st)
{
	struct side s, d;
	struct plan_heads h;
	char err[256];

	(void)st;
	side_heads(&s, 8, 2, 6);
	side_heads(&d, 8, 2, 6);
	assert_int_equal(
	    plan_heads_compute(&s.m, 2, 1, 2, 1, &h, err, sizeof err), 0);
	/* 4 buffers x 3 page runs (5->2, 0->3, 1->0), not x 4 token slots */
	assert_int_equal(
	    run_chunk(&s, &d, &h, SPH, DPH, 3, 0, 0, 0, err, sizeof err), 12);
	side_done(&s);
	side_done(&d);
}

static void test_heads_slice_not_fitting_destination_slot_rejected(void **st)
{
	struct side s, d;
	struct plan *p = NULL;
	struct plan_heads h;
	char err[256] = "";

	(void)st;
	side_heads(&s, 8, 2, 6); /* 4 heads per slot */
	side_heads(&d, 8, 4, 6); /* 2 heads per slot */
	assert_int_equal(
	    plan_heads_compute(&s.m, 2, 1, 4, 3, &h, err, sizeof err), 0);
	assert_int_equal(plan_build(&s.ps, &d.ps, &h, &p, err, sizeof err), 0);
	plan_free(&p);
	h.dst_head_start = 1; /* 2 heads at 1 overrun a 2-head slot */
	assert_int_equal(plan_build(&s.ps, &d.ps, &h, &p, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "does not fit"));
	assert_null(p);
	h = (struct plan_heads){.n_heads = 4,
				.head_bytes = 6}; /* whole src slot */
	assert_int_equal(plan_build(&s.ps, &d.ps, &h, &p, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "does not fit"));
	h = (struct plan_heads){.n_heads = 2,
				.head_bytes = 5}; /* not the model's */
	assert_int_equal(plan_build(&s.ps, &d.ps, &h, &p, err, sizeof err),
			 KVW_EINVAL);
	side_done(&s);
	side_done(&d);
}

static void test_cp_split_10_over_4_is_3_3_2_2(void **st)
{
	const uint32_t starts[] = {0, 3, 6, 8}, counts[] = {3, 3, 2, 2};
	uint32_t a, c;

	(void)st;
	for (uint32_t r = 0; r < 4; r++) {
		assert_int_equal(plan_cp_split(10, 4, r, &a, &c), 0);
		assert_int_equal(a, starts[r]);
		assert_int_equal(c, counts[r]);
	}
	for (uint32_t tot = 0; tot < 40; tot++)
		for (uint32_t cp = 1; cp < 9; cp++) {
			uint32_t next = 0;

			for (uint32_t r = 0; r < cp; r++) {
				assert_int_equal(
				    plan_cp_split(tot, cp, r, &a, &c), 0);
				assert_int_equal(a,
						 next); /* contiguous, no gap */
				next = a + c;
			}
			assert_int_equal(next, tot); /* and covers all */
		}
	assert_int_equal(plan_cp_split(10, 4, 4, &a, &c), KVW_EINVAL);
	assert_int_equal(plan_cp_split(10, 0, 0, &a, &c), KVW_EINVAL);
}

/* Issue 36: every buffer of a layout with draft layers named by layer and
 * role: target K then V (layers first..), then draft K then V (ids from
 * LAYOUT_DRAFT_BASE, the same ids for K and V), back to back. A V layer id
 * off by one, target or draft, is a buffer the other side pairs with the
 * wrong layer. */
static void test_layout_make_names_draft_v_buffers_by_their_draft_layer(void **st)
{
	struct layout_spec sp = {.first_layer = 3,
				 .layers = 2,
				 .draft_layers = 2,
				 .item_len = 10,
				 .pages = 4,
				 .pool = 1,
				 .base = 0};
	const struct {
		uint32_t layer;
		uint8_t role;
	} want[8] = {
	    {3, KVW_ROLE_K},
	    {4, KVW_ROLE_K},
	    {3, KVW_ROLE_V},
	    {4, KVW_ROLE_V},
	    {LAYOUT_DRAFT_BASE, KVW_ROLE_K},
	    {LAYOUT_DRAFT_BASE + 1, KVW_ROLE_K},
	    {LAYOUT_DRAFT_BASE, KVW_ROLE_V},
	    {LAYOUT_DRAFT_BASE + 1, KVW_ROLE_V},
	};
	struct kvw_buf b[8];
	uint32_t n = 0;
	uint64_t end = 0;
	char err[128];

	(void)st;
	assert_int_equal(layout_make(&sp, b, 8, &n, &end, err, sizeof err), 0);
	assert_int_equal(n, 8);
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(b[i].layer_id, want[i].layer);
		assert_int_equal(b[i].role, want[i].role);
		assert_int_equal(b[i].offset, 40 * i);
	}
	assert_int_equal(end, 8 * 40);
}

static void test_layout_make_orders_target_draft_aux_back_to_back(void **st)
{
	struct layout_spec sp = {.first_layer = 3,
				 .layers = 2,
				 .draft_layers = 1,
				 .item_len = 10,
				 .pages = 4,
				 .aux_slots = 2,
				 .naux = 1, .aux_item_lens = (const uint32_t[]){ 8 },
				 .pool = 2,
				 .base = 100};
	struct kvw_buf b[8];
	struct kvw_model m = {
	    .page_tokens = 16, .rank_kv_heads = 4, .head_bytes = 128};
	uint32_t n = 0;
	uint64_t end = 0;
	char err[128];

	(void)st;
	assert_int_equal(layout_make(&sp, b, 8, &n, &end, err, sizeof err), 0);
	assert_int_equal(n, 7);
	assert_int_equal(b[0].layer_id, 3);
	assert_int_equal(b[0].role, KVW_ROLE_K);
	assert_int_equal(b[0].offset, 100);
	assert_int_equal(b[2].layer_id, 3);
	assert_int_equal(b[2].role, KVW_ROLE_V);
	assert_int_equal(b[2].offset, 180);
	assert_int_equal(b[4].layer_id, LAYOUT_DRAFT_BASE);
	assert_int_equal(b[5].role, KVW_ROLE_V);
	assert_int_equal(b[6].role, KVW_ROLE_AUX);
	assert_int_equal(b[6].pool, 2);
	assert_int_equal(end, 100 + 6 * 40 + 16);
	assert_int_equal(layout_make(&sp, b, 3, &n, &end, err, sizeof err),
			 KVW_ENOMEM);
	assert_int_equal(n, 7);
	assert_int_equal(layout_item_len(&m), 16 * 4 * 128);
	m.flags = KVW_MODEL_MLA;
	assert_int_equal(layout_item_len(&m), 16 * 128);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_same_layout_pairs_k_to_k_and_v_to_v),
	    cmocka_unit_test(
		test_decode_draft_layers_prefill_pp1_v_lands_in_target_v),
	    cmocka_unit_test(
		test_uneven_pp_stage1_v_lands_in_v7_to_v14_never_k),
	    cmocka_unit_test(
		test_four_target_two_draft_prefill_pp2_v_lands_in_own_layers),
	    cmocka_unit_test(
		test_mla_pp_three_layers_from_5_land_in_kv5_to_kv7),
	    cmocka_unit_test(test_aux_slot_copied_by_aux_order),
	    cmocka_unit_test(
		test_missing_destination_layer_error_names_layer_and_role),
	    cmocka_unit_test(test_missing_source_aux_partner_is_error),
	    cmocka_unit_test(test_duplicate_layer_role_is_error),
	    cmocka_unit_test(test_item_length_mismatch_without_slice_is_error),
	    cmocka_unit_test(test_buffer_outside_pool_is_error),
	    cmocka_unit_test(test_models_page_size_or_dtype_mismatch_rejected),
	    cmocka_unit_test(test_coalesce_runs_need_both_sides_consecutive),
	    cmocka_unit_test(
		test_page_index_out_of_range_is_erange_naming_index),
	    cmocka_unit_test(test_capacity_short_is_enomem_with_needed_count),
	    cmocka_unit_test(
		test_heads_tp2_to_tp4_rank1_serving_3_src2_n2_dst0),
	    cmocka_unit_test(
		test_heads_tp4_to_tp2_each_prefill_writes_2_at_0_or_2),
	    cmocka_unit_test(
		test_heads_gqa_2_heads_over_tp4_ranks_share_by_division),
	    cmocka_unit_test(test_heads_bad_sizes_rejected),
	    cmocka_unit_test(test_heads_split_rule_multiple_or_divisor_of_tp),
	    cmocka_unit_test(test_heads_bytes_exact_tp2_to_tp4_h8),
	    cmocka_unit_test(test_heads_bytes_exact_tp4_to_tp2_h8),
	    cmocka_unit_test(test_heads_bytes_exact_gqa_h2_tp1_and_tp2_to_tp4),
	    cmocka_unit_test(test_heads_bytes_exact_gqa_h2_tp4_to_tp1),
	    cmocka_unit_test(test_heads_equal_tp_is_planned_as_page_copies),
	    cmocka_unit_test(
		test_heads_slice_not_fitting_destination_slot_rejected),
	    cmocka_unit_test(test_cp_split_10_over_4_is_3_3_2_2),
	    cmocka_unit_test(
		test_layout_make_orders_target_draft_aux_back_to_back),
	    cmocka_unit_test(
		test_layout_make_names_draft_v_buffers_by_their_draft_layer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
