/*
 * test_cuda_stage.c - the pinned staging ring for GPU pools over tcp, over
 * the CPU stand-in runtime (tests/fakecuda/, KVW_CUDART; it proves the
 * ring's bookkeeping, not the GPU): device pieces gathered into a slot back
 * to back and scattered back out byte-exact, slots handed out in ring order
 * and never twice before release, pieces that overflow a slot or have no
 * address refused with nothing queued, bad sizes refused at open.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"
#include "xport/cuda_rt.h"
#include "xport/cuda_stage.h"

static char err[512];

static void open_refuses_bad_sizes(void **state)
{
	struct cstage *s = (struct cstage *)0x1;

	(void)state;
	assert_int_equal(cstage_open(&s, 0, 1, 4096, err, sizeof err),
			 KVW_EINVAL);
	assert_null(s);
	assert_int_equal(cstage_open(&s, 0, CSTAGE_MAX_SLOTS + 1, 4096, err,
				     sizeof err), KVW_EINVAL);
	assert_int_equal(cstage_open(&s, 0, 2, 0, err, sizeof err), KVW_EINVAL);
	assert_int_equal(cstage_open(&s, -1, 2, 4096, err, sizeof err),
			 KVW_EINVAL);
	assert_int_equal(cstage_open(&s, 5, 2, 4096, err, sizeof err),
			 KVW_ESYS); /* the stand-in has one device */
	assert_null(s);
}

static void slots_go_round_in_order_and_only_once(void **state)
{
	struct cstage *s;
	uint32_t a, b, c;

	(void)state;
	assert_int_equal(cstage_open(&s, 0, 2, 4096, err, sizeof err), 0);
	assert_int_equal(cstage_slot_bytes(s), 4096);
	assert_int_equal(cstage_acquire(s, &a), 0);
	assert_int_equal(cstage_acquire(s, &b), 0);
	assert_int_not_equal(a, b);
	assert_int_equal(cstage_acquire(s, &c), KVW_EAGAIN);
	cstage_release(s, a);
	assert_int_equal(cstage_acquire(s, &c), 0);
	assert_int_equal(c, a);
	assert_non_null(cstage_buf(s, a));
	assert_null(cstage_buf(s, 7));
	cstage_close(&s);
	assert_null(s);
}

static void pieces_gather_and_scatter_byte_exact(void **state)
{
	const struct curt *rt;
	struct cstage *s;
	uint8_t *src, *dst;
	uint32_t k;
	uint64_t bytes = 0;

	(void)state;
	assert_int_equal(curt_get(&rt, err, sizeof err), 0);
	assert_int_equal(rt->malloc_((void **)&src, 8192), 0);
	assert_int_equal(rt->malloc_((void **)&dst, 8192), 0);
	for (int i = 0; i < 8192; i++)
		src[i] = (uint8_t)(i * 31 + 7);
	memset(dst, 0, 8192);
	assert_int_equal(cstage_open(&s, 0, 2, 4096, err, sizeof err), 0);
	assert_int_equal(cstage_acquire(s, &k), 0);
	{
		struct cstage_piece in[2] = { { src + 4096, 1000 },
					      { src + 16, 3000 } };
		struct cstage_piece out[2] = { { dst, 1000 },
					       { dst + 5000, 3000 } };
		struct cstage_piece big[2] = { { src, 4000 }, { src, 97 } };
		struct cstage_piece none[1] = { { NULL, 8 } };

		assert_int_equal(cstage_d2h(s, k, big, 2, &bytes, err,
					    sizeof err), KVW_ERANGE);
		assert_int_equal(cstage_d2h(s, k, none, 1, &bytes, err,
					    sizeof err), KVW_EINVAL);
		assert_int_equal(cstage_d2h(s, k, in, 2, &bytes, err,
					    sizeof err), 0);
		assert_int_equal(bytes, 4000);
		assert_int_equal(cstage_wait(s, k, 1000, err, sizeof err), 0);
		assert_memory_equal(cstage_buf(s, k), src + 4096, 1000);
		assert_memory_equal(cstage_buf(s, k) + 1000, src + 16, 3000);
		assert_int_equal(cstage_h2d(s, k, out, 2, err, sizeof err), 0);
		assert_int_equal(cstage_wait(s, k, -1, err, sizeof err), 0);
		assert_memory_equal(dst, src + 4096, 1000);
		assert_memory_equal(dst + 5000, src + 16, 3000);
		assert_int_equal(dst[1000], 0);
		assert_int_equal(dst[4999], 0);
		cstage_release(s, k);
		/* A released slot takes no more copies until acquired. */
		assert_int_equal(cstage_h2d(s, k, out, 2, err, sizeof err),
				 KVW_EINVAL);
	}
	cstage_close(&s);
	rt->free_(src);
	rt->free_(dst);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(open_refuses_bad_sizes),
		cmocka_unit_test(slots_go_round_in_order_and_only_once),
		cmocka_unit_test(pieces_gather_and_scatter_byte_exact),
	};

	if (fakecuda_use() != 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
