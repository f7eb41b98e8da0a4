/*
 * test_rdma_pmap.c - a batch cut where registered regions end
 * (lib/xport/rdma/rdma_pmap.h): offsets find their region (a segment's first
 * and last byte, the host bytes past the segments, a host pool); a copy
 * crossing region ends on both sides becomes pieces that each lie in one
 * region on both sides, with region-relative offsets and flat-table
 * indices, whose bytes add up to the copy's; empty copies make nothing;
 * too little room returns the count needed and writes within cap; and the
 * chain builder never joins pieces of two remote regions into one WR even
 * where their offsets follow on.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "base/kvw.h"
#include "xport/rdma/rdma_pmap.h"

/* A GPU pool of 3 segments (100, 50, 200 bytes) in a host pool of 1000. */
static const struct rdma_pseg GSEG[3] = {
	{ 0, { 0x10000, 100, 0x11 } },
	{ 100, { 0x20000, 50, 0x12 } },
	{ 150, { 0x30000, 200, 0x13 } },
};

static struct rdma_pmap gpu_map(uint32_t base)
{
	return (struct rdma_pmap){ { 0x900000, 1000, 0x10 }, GSEG, 3, base };
}

static struct rdma_pmap host_map(uint32_t base)
{
	return (struct rdma_pmap){ { 0x700000, 1000, 0x20 }, NULL, 0, base };
}

static void test_offsets_find_their_region(void **state)
{
	struct rdma_pmap g = gpu_map(5), h = host_map(0);
	uint64_t rel, run;

	(void)state;
	assert_int_equal(rdma_pmap_at(&g, 0, &rel, &run), 6);
	assert_int_equal(rel, 0);
	assert_int_equal(run, 100);
	assert_int_equal(rdma_pmap_at(&g, 99, &rel, &run), 6);
	assert_int_equal(run, 1);
	assert_int_equal(rdma_pmap_at(&g, 100, &rel, &run), 7);
	assert_int_equal(rel, 0);
	assert_int_equal(rdma_pmap_at(&g, 349, &rel, &run), 8);
	assert_int_equal(rel, 199);
	assert_int_equal(run, 1);
	assert_int_equal(rdma_pmap_at(&g, 350, &rel, &run), 5); /* host */
	assert_int_equal(rel, 350);
	assert_int_equal(run, 650);
	assert_int_equal(rdma_pmap_at(&h, 0, &rel, &run), 0);
	assert_int_equal(run, 1000);
}

static void test_a_copy_is_cut_at_region_ends_on_both_sides(void **state)
{
	/* Local: the GPU pool at base 0 (indices 0 host, 1..3 segments);
	 * remote: a host pool (index 0) - and the other way round. */
	struct rdma_pmap g = gpu_map(0), h = host_map(0);
	struct xport_copy c = { 90, 500, 300, 0, 4 }, out[8];
	uint64_t sum = 0;
	size_t k;

	(void)state;
	k = rdma_pmap_split(&c, 1, &g, &h, out, 8);
	/* 90..100 seg 0, 100..150 seg 1, 150..350 seg 2, 350..390 host */
	assert_int_equal(k, 4);
	assert_int_equal(out[0].src, 1);
	assert_int_equal(out[0].src_off, 90);
	assert_int_equal(out[0].len, 10);
	assert_int_equal(out[1].src, 2);
	assert_int_equal(out[1].src_off, 0);
	assert_int_equal(out[1].len, 50);
	assert_int_equal(out[2].src, 3);
	assert_int_equal(out[2].len, 200);
	assert_int_equal(out[3].src, 0);
	assert_int_equal(out[3].src_off, 350);
	assert_int_equal(out[3].len, 40);
	for (size_t i = 0; i < k; i++) {
		assert_int_equal(out[i].dst, 0);
		assert_int_equal(out[i].dst_off, 500 + sum);
		sum += out[i].len;
	}
	assert_int_equal(sum, 300);
	/* Cut on the remote side too, at other places. */
	c = (struct xport_copy){ 40, 95, 20, 0, 0 };
	k = rdma_pmap_split(&c, 1, &g, &g, out, 8);
	assert_int_equal(k, 2); /* the remote's end at 100 */
	assert_int_equal(out[0].dst, 1);
	assert_int_equal(out[0].dst_off, 95);
	assert_int_equal(out[0].len, 5);
	assert_int_equal(out[1].src, 1);
	assert_int_equal(out[1].src_off, 45);
	assert_int_equal(out[1].dst, 2);
	assert_int_equal(out[1].dst_off, 0);
	assert_int_equal(out[1].len, 15);
}

static void test_empty_copies_make_nothing_and_short_room_says_the_need(void **state)
{
	struct rdma_pmap g = gpu_map(0), h = host_map(0);
	struct xport_copy c[3] = { { 0, 0, 0, 0, 0 }, { 0, 0, 1000, 0, 0 },
				   { 5, 5, 0, 0, 0 } };
	struct xport_copy out[2];
	size_t k;

	(void)state;
	memset(out, 0xee, sizeof out);
	k = rdma_pmap_split(c, 3, &g, &h, out, 1);
	assert_int_equal(k, 4); /* three segments and the host tail */
	assert_int_equal(out[0].len, 100);
	assert_int_equal(out[1].len, 0xeeeeeeeeeeeeeeeeull); /* untouched */
	assert_int_equal(rdma_pmap_split(c, 1, &g, &h, out, 2), 0);
}

static void test_the_chain_never_joins_two_remote_regions(void **state)
{
	/* Remote regions 0 and 1 whose region-relative offsets follow on
	 * (0..64 of one, 64..128 of the other): two WRs, each its key. */
	const struct rdma_region src[1] = { { 0x1000, 4096, 0x5 } };
	const struct rdma_region dst[2] = { { 0x80000, 64, 0x61 },
					    { 0x90000, 4096, 0x62 } };
	const struct xport_copy c[2] = { { 0, 0, 64, 0, 0 },
					 { 64, 64, 64, 0, 1 } };
	const struct rdma_chain_cfg cfg = { 4, 0, 8, 1u << 20 };
	struct ibv_send_wr wr[4];
	struct ibv_sge sge[8];
	struct rdma_chain ch = { wr, 4, sge, 8, 0, 0 };
	struct rdma_cursor cur = { 0, 0 };

	(void)state;
	assert_int_equal(rdma_chain_build(&cfg, c, 2, src, dst, &cur, 4, 1, 9,
					  &ch), 2);
	assert_int_equal(wr[0].wr.rdma.rkey, 0x61);
	assert_int_equal(wr[0].wr.rdma.remote_addr, 0x80000);
	assert_int_equal(wr[1].wr.rdma.rkey, 0x62);
	assert_int_equal(wr[1].wr.rdma.remote_addr, 0x90000 + 64);
	assert_int_equal(wr[0].num_sge, 1);
	assert_int_equal(wr[1].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_offsets_find_their_region),
		cmocka_unit_test(test_a_copy_is_cut_at_region_ends_on_both_sides),
		cmocka_unit_test(test_empty_copies_make_nothing_and_short_room_says_the_need),
		cmocka_unit_test(test_the_chain_never_joins_two_remote_regions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
