/*
 * test_rdma_chain.c - copy lists into RDMA WRITE chains
 * (lib/xport/rdma/rdma_chain.h), with no device: the check refuses an unknown
 * or empty local region, a second remote, off + len overflowing or past
 * either region, and passes copies that end exactly at a region's end;
 * one copy is one signalled WRITE WITH IMMEDIATE carrying the batch id;
 * copies whose remote bytes follow on share a WR (one entry each, up to
 * max_sge), sources that follow on too share an entry; a copy over max_msg
 * is split; empty copies make nothing; small WRs go inline; at least every
 * signal_every-th WR and the last of each chain are signalled; a chain cut
 * by max_wr or the entry room resumes where it stopped and only the
 * batch's last WR carries the immediate. A property run replays random
 * chains (random limits, random cuts) on real memory and gets exactly the
 * bytes the copy list describes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvw.h"
#include "xport/rdma/rdma_chain.h"

#define CAP_WR 64u
#define CAP_SGE 256u

static struct ibv_send_wr wr[CAP_WR];
static struct ibv_sge sge[CAP_SGE];

static struct rdma_chain chain(void)
{
	return (struct rdma_chain){ wr, CAP_WR, sge, CAP_SGE, 0, 0 };
}

static const struct rdma_region SRC[2] = {
	{ 0x10000, 4096, 0x11 },
	{ 0x90000, 8192, 0x22 },
};
/* Indexed by the copies' dst id (3, as cp makes them). */
static const struct rdma_region DSTS[4] = { [3] = { 0x500000, 16384, 0x77 } };
#define DST (DSTS[3])

static struct xport_copy cp(uint32_t src, uint64_t so, uint64_t dof,
			    uint64_t len)
{
	return (struct xport_copy){ so, dof, len, src, 3 };
}

static void test_the_check_refuses_ids_and_ranges_and_passes_exact_ends(void **state)
{
	struct rdma_region two[2] = { SRC[0], { 0, 0, 0 } };
	struct xport_copy c[2];
	char err[200];

	(void)state;
	c[0] = cp(0, 0, 0, 4096);
	c[1] = cp(1, 4096, 16384 - 4096, 4096);
	assert_int_equal(rdma_chain_check(c, 2, SRC, 2, 3, DST.size, err,
					  sizeof err), 0);
	c[1].src = 2;
	assert_int_equal(rdma_chain_check(c, 2, SRC, 2, 3, DST.size, err,
					  sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "copy 1"));
	c[1] = cp(1, 0, 0, 1);
	assert_int_equal(rdma_chain_check(c, 2, two, 2, 3, DST.size, err,
					  sizeof err), KVW_EINVAL);
	c[1].dst = 4;
	assert_int_equal(rdma_chain_check(c, 2, SRC, 2, 3, DST.size, err,
					  sizeof err), KVW_EINVAL);
	c[1] = cp(1, 8192, 0, 1);
	assert_int_equal(rdma_chain_check(c, 2, SRC, 2, 3, DST.size, err,
					  sizeof err), KVW_ERANGE);
	c[1] = cp(1, 0, 16384, 1);
	assert_int_equal(rdma_chain_check(c, 2, SRC, 2, 3, DST.size, err,
					  sizeof err), KVW_ERANGE);
	c[1] = cp(1, UINT64_MAX, 0, 2);
	assert_int_equal(rdma_chain_check(c, 2, SRC, 2, 3, DST.size, err,
					  sizeof err), KVW_ERANGE);
	c[1] = cp(1, 0, UINT64_MAX - 1, 4);
	assert_int_equal(rdma_chain_check(c, 2, SRC, 2, 3, DST.size, err,
					  sizeof err), KVW_ERANGE);
	c[1] = cp(1, 8192, 16384, 0); /* empty, at both ends: fine */
	assert_int_equal(rdma_chain_check(c, 2, SRC, 2, 3, DST.size, err,
					  sizeof err), 0);
}

static const struct rdma_chain_cfg CFG = { .max_sge = 4, .max_inline = 0,
					   .signal_every = 1000,
					   .max_msg = 1u << 20 };

static void test_one_copy_is_one_signalled_write_with_the_batch_immediate(void **state)
{
	struct xport_copy c = cp(1, 100, 200, 300);
	struct rdma_cursor cur = { 0, 0 };
	struct rdma_chain ch = chain();

	(void)state;
	assert_int_equal(rdma_chain_build(&CFG, &c, 1, SRC, DSTS, &cur, 16, 41,
					  0xdeadbeef, &ch), 1);
	assert_int_equal(cur.i, 1);
	assert_int_equal(wr[0].wr_id, 41);
	assert_null(wr[0].next);
	assert_int_equal(wr[0].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
	assert_int_equal(wr[0].imm_data, htonl(0xdeadbeef));
	assert_true(wr[0].send_flags & IBV_SEND_SIGNALED);
	assert_false(wr[0].send_flags & IBV_SEND_INLINE);
	assert_int_equal(wr[0].wr.rdma.remote_addr, DST.addr + 200);
	assert_int_equal(wr[0].wr.rdma.rkey, 0x77);
	assert_int_equal(wr[0].num_sge, 1);
	assert_int_equal(wr[0].sg_list[0].addr, SRC[1].addr + 100);
	assert_int_equal(wr[0].sg_list[0].length, 300);
	assert_int_equal(wr[0].sg_list[0].lkey, 0x22);
	/* Nothing left: a second call builds nothing. */
	assert_int_equal(rdma_chain_build(&CFG, &c, 1, SRC, DSTS, &cur, 16, 42,
					  1, &ch), 0);
}

static void test_remote_runs_share_a_wr_up_to_max_sge_and_local_runs_an_entry(void **state)
{
	/* Six copies writing one remote run 0..600; sources scattered,
	 * except copies 1 and 2 whose sources follow on too. */
	struct xport_copy c[6] = {
		cp(0, 1000, 0, 100), cp(1, 0, 100, 100), cp(1, 100, 200, 100),
		cp(0, 0, 300, 100), cp(1, 500, 400, 100), cp(0, 2000, 500, 100),
	};
	struct rdma_cursor cur = { 0, 0 };
	struct rdma_chain ch = chain();

	(void)state;
	/* Entries: [c0] [c1+c2] [c3] [c4] | [c5]: max_sge 4 cuts after c4. */
	assert_int_equal(rdma_chain_build(&CFG, c, 6, SRC, DSTS, &cur, 16, 1, 9,
					  &ch), 2);
	assert_int_equal(wr[0].num_sge, 4);
	assert_int_equal(wr[0].wr.rdma.remote_addr, DST.addr);
	assert_int_equal(wr[0].sg_list[1].addr, SRC[1].addr);
	assert_int_equal(wr[0].sg_list[1].length, 200);
	assert_int_equal(wr[0].opcode, IBV_WR_RDMA_WRITE);
	assert_ptr_equal(wr[0].next, &wr[1]);
	assert_int_equal(wr[1].num_sge, 1);
	assert_int_equal(wr[1].wr.rdma.remote_addr, DST.addr + 500);
	assert_int_equal(wr[1].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
	assert_int_equal(wr[1].wr_id, 2);
}

static void test_a_gap_on_the_remote_side_starts_a_new_wr(void **state)
{
	struct xport_copy c[3] = { cp(0, 0, 0, 64), cp(0, 64, 128, 64),
				   cp(0, 128, 192, 64) };
	struct rdma_cursor cur = { 0, 0 };
	struct rdma_chain ch = chain();

	(void)state;
	/* c0 alone (gap 64..128), then c1 and c2 in one entry. */
	assert_int_equal(rdma_chain_build(&CFG, c, 3, SRC, DSTS, &cur, 16, 1, 9,
					  &ch), 2);
	assert_int_equal(wr[0].sg_list[0].length, 64);
	assert_int_equal(wr[1].wr.rdma.remote_addr, DST.addr + 128);
	assert_int_equal(wr[1].num_sge, 1);
	assert_int_equal(wr[1].sg_list[0].length, 128);
}

static void test_a_copy_over_max_msg_is_split_and_empty_copies_make_nothing(void **state)
{
	struct rdma_chain_cfg cfg = CFG;
	struct xport_copy c[4] = { cp(0, 0, 0, 0), cp(1, 10, 20, 2500),
				   cp(0, 0, 9000, 0), cp(0, 5, 9000, 0) };
	struct rdma_cursor cur = { 0, 0 };
	struct rdma_chain ch = chain();

	(void)state;
	cfg.max_msg = 1000;
	assert_int_equal(rdma_chain_build(&cfg, c, 4, SRC, DSTS, &cur, 16, 7, 9,
					  &ch), 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(wr[i].num_sge, 1);
		assert_int_equal(wr[i].wr.rdma.remote_addr, DST.addr + 20 + 1000u * i);
		assert_int_equal(wr[i].sg_list[0].addr, SRC[1].addr + 10 + 1000u * i);
		assert_int_equal(wr[i].sg_list[0].length, i < 2 ? 1000 : 500);
		assert_int_equal(wr[i].wr_id, 7 + i);
	}
	assert_int_equal(wr[2].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
	assert_int_equal(cur.i, 4);
	/* A batch of empty copies: no WR, and the cursor is at its end. */
	cur = (struct rdma_cursor){ 0, 0 };
	assert_int_equal(rdma_chain_build(&cfg, &c[2], 2, SRC, DSTS, &cur, 16, 1,
					  9, &ch), 0);
	assert_int_equal(cur.i, 2);
}

static void test_small_wrs_go_inline_and_signals_come_every_n_and_at_the_end(void **state)
{
	struct rdma_chain_cfg cfg = CFG;
	struct xport_copy c[10];
	struct rdma_cursor cur = { 0, 0 };
	struct rdma_chain ch = chain();

	(void)state;
	cfg.max_inline = 64;
	cfg.signal_every = 4;
	for (int i = 0; i < 10; i++) /* gaps: one WR each; even ones small */
		c[i] = cp(0, 0, 1000u * i, i % 2 ? 65 : 64);
	assert_int_equal(rdma_chain_build(&cfg, c, 10, SRC, DSTS, &cur, 16, 1, 9,
					  &ch), 10);
	for (int i = 0; i < 10; i++) {
		int sig = (i + 1) % 4 == 0 || i == 9;

		assert_int_equal(!!(wr[i].send_flags & IBV_SEND_SIGNALED), sig);
		assert_int_equal(!!(wr[i].send_flags & IBV_SEND_INLINE), i % 2 == 0);
	}
	assert_int_equal(ch.since_signal, 0);
}

static void test_a_chain_cut_by_max_wr_resumes_and_only_the_last_carries_the_immediate(void **state)
{
	struct rdma_chain_cfg cfg = CFG;
	struct xport_copy c[7];
	struct rdma_cursor cur = { 0, 0 };
	struct rdma_chain ch = chain();
	uint64_t id = 1;
	int chains = 0, imms = 0;

	(void)state;
	cfg.signal_every = 100;
	for (int i = 0; i < 7; i++)
		c[i] = cp(0, 0, 1000u * i, 10);
	for (uint32_t k; (k = rdma_chain_build(&cfg, c, 7, SRC, DSTS, &cur, 3,
					       id, 5, &ch)) > 0;) {
		chains++;
		assert_true(k <= 3);
		assert_true(wr[k - 1].send_flags & IBV_SEND_SIGNALED);
		for (uint32_t i = 0; i < k; i++) {
			assert_int_equal(wr[i].wr_id, id + i);
			assert_int_equal(wr[i].wr.rdma.remote_addr,
					 DST.addr + 1000u * (id + i - 1));
			imms += wr[i].opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
		}
		id += k;
	}
	assert_int_equal(chains, 3);
	assert_int_equal(id, 8);
	assert_int_equal(imms, 1);
	assert_int_equal(wr[0].opcode, IBV_WR_RDMA_WRITE_WITH_IMM); /* 3rd: 1 WR */
	/* max_wr 0 builds nothing and moves nothing. */
	cur = (struct rdma_cursor){ 0, 0 };
	assert_int_equal(rdma_chain_build(&cfg, c, 7, SRC, DSTS, &cur, 0, 1, 5,
					  &ch), 0);
	assert_int_equal(cur.i, 0);
}

static void test_running_out_of_entry_room_ends_the_chain_cleanly(void **state)
{
	struct xport_copy c[5];
	struct rdma_cursor cur = { 0, 0 };
	struct rdma_chain ch = { wr, CAP_WR, sge, 3, 0, 0 };
	uint32_t k;

	(void)state;
	for (int i = 0; i < 5; i++) /* one remote run, scattered sources */
		c[i] = cp(0, 200u * i, 100u * i, 100);
	k = rdma_chain_build(&CFG, c, 5, SRC, DSTS, &cur, 16, 1, 5, &ch);
	assert_int_equal(k, 1);
	assert_int_equal(wr[0].num_sge, 3);
	assert_int_equal(wr[0].opcode, IBV_WR_RDMA_WRITE);
	assert_int_equal(cur.i, 3);
	assert_int_equal(cur.off, 0);
}

/* ---- property: random lists, limits and cuts replayed on memory ----- */

static uint64_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

static void test_random_chains_replayed_write_exactly_the_listed_bytes(void **state)
{
	enum { SRC_N = 3, SRC_SZ = 8192, DST_SZ = 65536, MAXC = 40 };
	uint8_t *srcm[SRC_N], *want = malloc(DST_SZ), *got = malloc(DST_SZ);
	struct rdma_region src[SRC_N], dst;
	uint64_t s = 7;

	(void)state;
	assert_non_null(want);
	assert_non_null(got);
	for (int k = 0; k < SRC_N; k++) {
		srcm[k] = malloc(SRC_SZ);
		assert_non_null(srcm[k]);
		for (int i = 0; i < SRC_SZ; i++)
			srcm[k][i] = (uint8_t)rnd(&s);
		src[k] = (struct rdma_region){ (uintptr_t)srcm[k], SRC_SZ,
					       (uint32_t)(100 + k) };
	}
	dst = (struct rdma_region){ (uintptr_t)got, DST_SZ, 9 };
	for (int round = 0; round < 3000; round++) {
		struct rdma_chain_cfg cfg = {
			.max_sge = 1 + (uint32_t)(rnd(&s) % 5),
			.max_inline = (uint32_t)(rnd(&s) % 3) * 48,
			.signal_every = 1 + (uint32_t)(rnd(&s) % 6),
			.max_msg = 1 + rnd(&s) % 3000,
		};
		struct xport_copy c[MAXC];
		struct rdma_cursor cur = { 0, 0 };
		struct rdma_chain ch = chain();
		size_t n = 1 + rnd(&s) % MAXC;
		uint64_t doff = rnd(&s) % 512, id = 1, imm = 0;
		uint32_t run = 0;

		memset(want, 0, DST_SZ);
		memset(got, 0, DST_SZ);
		/* Non-overlapping destinations, often adjacent; sources
		 * often adjacent too. */
		for (size_t i = 0; i < n; i++) {
			uint64_t len = rnd(&s) % 4 == 0 ? 0 : 1 + rnd(&s) % 700;
			uint32_t k = (uint32_t)(rnd(&s) % SRC_N);
			uint64_t so = i && rnd(&s) % 2 && c[i - 1].src == k &&
					      c[i - 1].src_off + c[i - 1].len + len <= SRC_SZ
					      ? c[i - 1].src_off + c[i - 1].len
					      : rnd(&s) % (SRC_SZ - len + 1);

			if (rnd(&s) % 3 == 0)
				doff += 1 + rnd(&s) % 300;
			c[i] = (struct xport_copy){ so, doff, len, k, 0 };
			memcpy(want + doff, srcm[k] + so, len);
			doff += len;
		}
		assert_true(doff <= DST_SZ);
		assert_int_equal(rdma_chain_check(c, n, src, SRC_N, 0, DST_SZ,
						  NULL, 0), 0);
		for (;;) {
			uint32_t lim = 1 + (uint32_t)(rnd(&s) % 8);
			uint32_t k = rdma_chain_build(&cfg, c, n, src, &dst, &cur,
						      lim, id, 77, &ch);

			if (k == 0)
				break;
			assert_true(k <= lim);
			assert_true(wr[k - 1].send_flags & IBV_SEND_SIGNALED);
			assert_null(wr[k - 1].next);
			for (uint32_t w = 0; w < k; w++) {
				uint64_t ra = wr[w].wr.rdma.remote_addr, tot = 0;

				assert_int_equal(wr[w].wr_id, id + w);
				assert_true(wr[w].num_sge >= 1 &&
					    (uint32_t)wr[w].num_sge <= cfg.max_sge);
				if (w + 1 < k)
					assert_ptr_equal(wr[w].next, &wr[w + 1]);
				for (int e = 0; e < wr[w].num_sge; e++) {
					const struct ibv_sge *g = &wr[w].sg_list[e];

					assert_true(g->length > 0);
					memcpy((uint8_t *)(uintptr_t)ra + tot,
					       (const uint8_t *)(uintptr_t)g->addr,
					       g->length);
					tot += g->length;
				}
				assert_true(tot <= cfg.max_msg);
				assert_int_equal(!!(wr[w].send_flags & IBV_SEND_INLINE),
						 tot <= cfg.max_inline);
				run = wr[w].send_flags & IBV_SEND_SIGNALED ? 0
									   : run + 1;
				assert_true(run < cfg.signal_every);
				imm += wr[w].opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
			}
			id += k;
		}
		assert_int_equal(cur.i, n);
		assert_int_equal(imm, id > 1 ? 1 : 0);
		assert_memory_equal(got, want, DST_SZ);
	}
	for (int k = 0; k < SRC_N; k++)
		free(srcm[k]);
	free(want);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_the_check_refuses_ids_and_ranges_and_passes_exact_ends),
		cmocka_unit_test(test_one_copy_is_one_signalled_write_with_the_batch_immediate),
		cmocka_unit_test(test_remote_runs_share_a_wr_up_to_max_sge_and_local_runs_an_entry),
		cmocka_unit_test(test_a_gap_on_the_remote_side_starts_a_new_wr),
		cmocka_unit_test(test_a_copy_over_max_msg_is_split_and_empty_copies_make_nothing),
		cmocka_unit_test(test_small_wrs_go_inline_and_signals_come_every_n_and_at_the_end),
		cmocka_unit_test(test_a_chain_cut_by_max_wr_resumes_and_only_the_last_carries_the_immediate),
		cmocka_unit_test(test_running_out_of_entry_room_ends_the_chain_cleanly),
		cmocka_unit_test(test_random_chains_replayed_write_exactly_the_listed_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
