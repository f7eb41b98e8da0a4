/*
 * test_rankmap.c - truth table for decode-side rank mapping
 * (PROTOCOL-NOTES section 3, test matrix E1-E5): targets, dummies,
 * required_dst_info_num, required_prefill_response_num, the CP page split,
 * and the topologies that must be refused.
 */
/* cmocka.h needs these first, in this order */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <string.h>

#include "plan/rankmap.h"

static struct rankmap m;
static char err[256];

static struct rankmap_in in_tp(uint32_t dtp, uint32_t ptp, uint32_t rank,
			       int mla)
{
	return (struct rankmap_in){.prefill = {ptp, 1, 1, 1},
				   .decode = {dtp, 1, 1, 1},
				   .decode_rank = {.tp = rank},
				   .model_flags = mla ? KVW_MODEL_MLA : 0};
}

static void test_e1_equal_tp_rank6_targets_tp2(void **st)
{
	struct rankmap_in in = in_tp(4, 4, 6, 0); /* engine rank 6 -> e = 2 */

	(void)st;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), 0);
	assert_int_equal(m.ntargets, 1);
	assert_int_equal(m.targets[0].coord.tp, 2);
	assert_int_equal(m.target_tp, 2);
	assert_false(m.targets[0].dummy);
	assert_int_equal(m.required_dst_info_num, 1);
	assert_int_equal(m.required_prefill_response_num, 1);
}

static void
test_e2_decode_tp8_prefill_tp2_mla_rank5_targets_1_dst_info_4(void **st)
{
	struct rankmap_in in = in_tp(8, 2, 5, 1);

	(void)st;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), 0);
	assert_int_equal(m.ntargets, 1);
	assert_int_equal(m.targets[0].coord.tp, 1);
	assert_false(m.targets[0].dummy);
	assert_int_equal(m.required_dst_info_num, 4);
	assert_int_equal(m.required_prefill_response_num, 1);
}

static void test_e3_decode_tp2_prefill_tp8_mla_one_real_three_dummies(void **st)
{
	struct rankmap_in in = in_tp(2, 8, 1, 1);

	(void)st;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), 0);
	assert_int_equal(m.ntargets, 4);
	for (uint32_t i = 0; i < 4; i++) {
		assert_int_equal(m.targets[i].coord.tp, 4 + i);
		assert_int_equal(m.targets[i].dummy, i != 0);
	}
	assert_int_equal(m.target_tp, 4);
	assert_int_equal(m.required_dst_info_num, 1);
	assert_int_equal(m.required_prefill_response_num, 1);
}

static void test_e3_decode_tp2_prefill_tp8_mha_all_real_resp4(void **st)
{
	struct rankmap_in in = in_tp(2, 8, 1, 0);

	(void)st;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), 0);
	assert_int_equal(m.ntargets, 4);
	for (uint32_t i = 0; i < 4; i++) {
		assert_int_equal(m.targets[i].coord.tp, 4 + i);
		assert_false(m.targets[i].dummy);
	}
	assert_int_equal(m.required_dst_info_num, 1);
	assert_int_equal(m.required_prefill_response_num, 4);
}

static void test_e4_prefill_cp4_default_contacts_only_cp0(void **st)
{
	struct rankmap_in in = in_tp(4, 4, 1, 0);
	uint32_t a, c;

	(void)st;
	in.prefill.cp = 4;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), 0);
	assert_int_equal(m.ntargets, 1);
	assert_int_equal(m.targets[0].coord.cp, 0);
	assert_false(m.targets[0].cp_split);
	assert_int_equal(m.required_prefill_response_num, 1);
	assert_int_equal(rankmap_target_pages(&m, 0, 10, &a, &c), 0);
	assert_int_equal(a, 0);
	assert_int_equal(c, 10);
}

static void
test_e4_prefill_cp4_all_ranks_four_targets_resp4_page_split(void **st)
{
	struct rankmap_in in = in_tp(4, 4, 1, 0);
	const uint32_t starts[] = {0, 3, 6, 8}, counts[] = {3, 3, 2, 2};
	uint32_t a, c;

	(void)st;
	in.prefill.cp = 4;
	in.all_cp_ranks = 1;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), 0);
	assert_int_equal(m.ntargets, 4);
	assert_int_equal(m.required_prefill_response_num, 4);
	for (uint32_t i = 0; i < 4; i++) {
		assert_int_equal(m.targets[i].coord.cp, i);
		assert_int_equal(m.targets[i].coord.tp, 1);
		assert_true(m.targets[i].cp_split);
		assert_int_equal(rankmap_target_pages(&m, i, 10, &a, &c), 0);
		assert_int_equal(a, starts[i]);
		assert_int_equal(c, counts[i]);
	}
	assert_int_equal(rankmap_target_pages(&m, 4, 10, &a, &c), KVW_EINVAL);
}

/* Success is counted by distinct unique rank: the four CP ranks that share
 * (tp 1, pp 0) must have four distinct ones, and CP rank 0 keeps the
 * pp * tp_size + tp numbering. */
static void test_unique_ranks_distinct_over_cp_and_pp(void **st)
{
	struct rankmap_in in = in_tp(4, 4, 1, 0);
	uint32_t seen[4];

	(void)st;
	in.prefill.cp = 4;
	in.all_cp_ranks = 1;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), 0);
	assert_int_equal(m.prefill.cp, 4);
	for (uint32_t i = 0; i < 4; i++) {
		seen[i] = rankmap_unique(&m.prefill, &m.targets[i].coord);
		for (uint32_t j = 0; j < i; j++)
			assert_int_not_equal(seen[i], seen[j]);
	}
	assert_int_equal(seen[0], 1);
	{
		/* (cp, pp, tp) from outer to inner; coordinates whose rank
		 * differs under a tp-major order (which gives 3 and 19). */
		struct kvw_topo t = {4, 2, 3, 1};
		struct kvw_coord c0 = {.tp = 1, .pp = 1}, c2 = {.tp = 1, .pp = 1,
								 .cp = 2};

		assert_int_equal(rankmap_unique(&t, &c0), 1 * 4 + 1);
		assert_int_equal(rankmap_unique(&t, &c2), (2 * 2 + 1) * 4 + 1);
	}
}

static void test_e5_prefill_pp4_decode_pp1_targets_all_stages_resp4(void **st)
{
	struct rankmap_in in = in_tp(2, 2, 0, 0);

	(void)st;
	in.prefill.pp = 4;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), 0);
	assert_int_equal(m.ntargets, 4);
	for (uint32_t i = 0; i < 4; i++) /* higher stages first */
		assert_int_equal(m.targets[i].coord.pp, 3 - i);
	assert_int_equal(m.required_prefill_response_num, 4);
}

static void test_equal_pp_targets_own_stage_only(void **st)
{
	struct rankmap_in in = in_tp(2, 2, 0, 0);

	(void)st;
	in.prefill.pp = in.decode.pp = 4;
	in.decode_rank.pp = 2;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), 0);
	assert_int_equal(m.ntargets, 1);
	assert_int_equal(m.targets[0].coord.pp, 2);
	assert_int_equal(m.required_prefill_response_num, 1);
}

static void test_counters_multiply_tp_cp_pp_and_carry_dp(void **st)
{
	struct rankmap_in in = in_tp(2, 4, 1, 0); /* tp fan-in 2 */

	(void)st;
	in.prefill.cp = 2;
	in.all_cp_ranks = 1;
	in.prefill.pp = 3;
	in.prefill.dp = 2;
	in.prefill_dp = 1;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), 0);
	assert_int_equal(m.ntargets, 2 * 2 * 3);
	assert_int_equal(m.required_prefill_response_num, 2 * 2 * 3);
	for (uint32_t i = 0; i < m.ntargets; i++) {
		assert_int_equal(m.targets[i].coord.dp, 1);
		assert_true(m.targets[i].coord.tp == 2 ||
			    m.targets[i].coord.tp == 3);
	}
}

static void test_e5_decode_pp2_vs_prefill_pp4_refused(void **st)
{
	struct rankmap_in in = in_tp(2, 2, 0, 0);

	(void)st;
	in.prefill.pp = 4;
	in.decode.pp = 2;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), KVW_EINVAL);
	assert_non_null(
	    strstr(err, "decode pp 2 must be 1 or equal prefill pp 4"));
}

static void test_decode_cp_above_1_refused(void **st)
{
	struct rankmap_in in = in_tp(2, 2, 0, 0);

	(void)st;
	in.decode.cp = 2;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "decode cp 2"));
}

static void test_non_divisible_tp_refused(void **st)
{
	struct rankmap_in in = in_tp(3, 2, 0, 0);

	(void)st;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "not a multiple"));
	in = in_tp(4, 6, 0, 0);
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), KVW_EINVAL);
}

static void test_zero_sizes_and_out_of_range_coords_refused(void **st)
{
	struct rankmap_in in = in_tp(2, 2, 0, 0);

	(void)st;
	in.prefill.dp = 0;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), KVW_EINVAL);
	in = in_tp(2, 2, 0, 0);
	in.prefill_dp = 1; /* prefill has one dp group */
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), KVW_EINVAL);
	in = in_tp(2, 2, 0, 0);
	in.decode_rank.pp = 1;
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), KVW_EINVAL);
	assert_int_equal(rankmap_compute(NULL, &m, err, sizeof err),
			 KVW_EINVAL);
}

static void test_too_many_targets_refused(void **st)
{
	struct rankmap_in in = in_tp(1, 64, 0, 0);

	(void)st;
	in.prefill.cp = 8;
	in.all_cp_ranks = 1;
	/* 64 tp x 8 cp = 512 targets > RANKMAP_MAX_TARGETS */
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "512 targets"));
	in.prefill.cp = 4; /* 256: exactly the cap */
	assert_int_equal(rankmap_compute(&in, &m, err, sizeof err), 0);
	assert_int_equal(m.ntargets, RANKMAP_MAX_TARGETS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_e1_equal_tp_rank6_targets_tp2),
	    cmocka_unit_test(
		test_e2_decode_tp8_prefill_tp2_mla_rank5_targets_1_dst_info_4),
	    cmocka_unit_test(
		test_e3_decode_tp2_prefill_tp8_mla_one_real_three_dummies),
	    cmocka_unit_test(test_e3_decode_tp2_prefill_tp8_mha_all_real_resp4),
	    cmocka_unit_test(test_e4_prefill_cp4_default_contacts_only_cp0),
	    cmocka_unit_test(
		test_e4_prefill_cp4_all_ranks_four_targets_resp4_page_split),
	    cmocka_unit_test(
		test_e5_prefill_pp4_decode_pp1_targets_all_stages_resp4),
	    cmocka_unit_test(test_unique_ranks_distinct_over_cp_and_pp),
	    cmocka_unit_test(test_equal_pp_targets_own_stage_only),
	    cmocka_unit_test(test_counters_multiply_tp_cp_pp_and_carry_dp),
	    cmocka_unit_test(test_e5_decode_pp2_vs_prefill_pp4_refused),
	    cmocka_unit_test(test_decode_cp_above_1_refused),
	    cmocka_unit_test(test_non_divisible_tp_refused),
	    cmocka_unit_test(test_zero_sizes_and_out_of_range_coords_refused),
	    cmocka_unit_test(test_too_many_targets_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
