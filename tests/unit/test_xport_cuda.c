/*
 * test_xport_cuda.c - the cuda transport's plumbing on CPU, over the test
 * stand-in runtime (tests/fakecuda/, loaded by KVW_CUDART; its "device
 * memory" is shared host memory, so this proves the control flow, not the
 * GPU): GPU pool records exported and read back, device pieces split at
 * buffer boundaries on both sides and landed byte-exact, AUX bytes copied
 * through the host pools, a copy that would move GPU bytes into host
 * memory refused with nothing moved, bad ids and ranges refused, a record
 * removed (engine gone) failing the batch, a record replaced (new engine
 * epoch) reopened, and malformed descriptors refused.
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
#include "mem/cuda_rt.h"
#include "mem/gpool.h"
#include "mem/pool.h"
#include "xport/xport.h"

static char err[512];

#define KV 4096u   /* GPU bytes of each pool: two buffers of 2048 */
#define AUX 256u   /* host bytes after them */
#define ITEM 256u

struct side {
	char pool[128], rec[128];
	struct pool *p;
	uint8_t *dev[2]; /* buffer starts */
	void *alloc;     /* the one allocation both buffers live in */
};

struct fx {
	const struct curt *rt;
	struct side a, b; /* a: prefill (source), b: decode (destination) */
	struct xport *xa, *xb;
	uint32_t src, dst;
	uint8_t desc[KVW_MAX_DESC];
	size_t desclen;
};

/* One allocation with a 64-byte gap before each buffer, exported. */
static void side_make(struct fx *f, struct side *s, const char *tag,
		      uint64_t epoch)
{
	uint64_t ptrs[2], lens[2] = { KV / 2, KV / 2 };
	uint32_t items[2] = { ITEM, ITEM };

	snprintf(s->pool, sizeof s->pool, "/dev/shm/kvwire.test-xcu.%d.%s.pool",
		 (int)getpid(), tag);
	assert_int_equal(gpool_path_for(s->pool, s->rec, sizeof s->rec), 0);
	unlink(s->pool);
	assert_int_equal(pool_create(s->pool, KV + AUX, &s->p, err, sizeof err),
			 0);
	assert_int_equal(f->rt->malloc_(&s->alloc, KV + 128), 0);
	s->dev[0] = (uint8_t *)s->alloc + 64;
	s->dev[1] = (uint8_t *)s->alloc + 128 + KV / 2;
	ptrs[0] = (uint64_t)(uintptr_t)s->dev[0];
	ptrs[1] = (uint64_t)(uintptr_t)s->dev[1];
	assert_int_equal(gpool_export(s->rec, 0, ptrs, lens, items, 2, KV + AUX,
				      epoch, err, sizeof err), 0);
}

static void side_free(struct fx *f, struct side *s)
{
	pool_close(&s->p);
	unlink(s->pool);
	unlink(s->rec);
	f->rt->free_(s->alloc);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	uint8_t own[KVW_MAX_DESC];
	size_t ownlen;
	uint32_t bid;

	assert_non_null(f);
	assert_int_equal(curt_get(&f->rt, err, sizeof err), 0);
	side_make(f, &f->a, "a", 1);
	side_make(f, &f->b, "b", 2);
	for (uint32_t i = 0; i < KV / 2; i++) {
		f->a.dev[0][i] = (uint8_t)(i * 7 + 1);
		f->a.dev[1][i] = (uint8_t)(i * 13 + 5);
	}
	memset((uint8_t *)pool_base(f->a.p) + KV, 0xa5, AUX);
	assert_int_equal(xport_open(xport_find("cuda"), &f->xa, err, sizeof err),
			 0);
	assert_int_equal(xport_open(xport_find("cuda"), &f->xb, err, sizeof err),
			 0);
	assert_int_equal(xport_register(f->xb, f->b.p, &bid, f->desc,
					sizeof f->desc, &f->desclen, err,
					sizeof err), 0);
	assert_int_equal(xport_register(f->xa, f->a.p, &f->src, own, sizeof own,
					&ownlen, err, sizeof err), 0);
	assert_int_equal(xport_connect(f->xa, f->desc, f->desclen, &f->dst, err,
				       sizeof err), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	xport_close(&f->xa);
	xport_close(&f->xb);
	side_free(f, &f->a);
	side_free(f, &f->b);
	free(f);
	return 0;
}

static void device_and_aux_pieces_land_byte_exact(void **state)
{
	struct fx *f = *state;
	/* 1: inside buffer 0 into buffer 1; 2: across a's buffer boundary
	 * into b's buffer 0; 3: AUX host to host. */
	struct xport_copy c[3] = {
		{ 0, 2048 + 256, 512, f->src, f->dst },
		{ 1792, 0, 512, f->src, f->dst },
		{ KV + 16, KV + 32, 64, f->src, f->dst },
	};
	uint8_t *aux = (uint8_t *)pool_base(f->b.p) + KV;

	assert_int_equal(xport_write_batch(f->xa, c, 3, err, sizeof err), 0);
	assert_int_equal(xport_wait(f->xa, 1000, err, sizeof err), 0);
	assert_memory_equal(f->b.dev[1] + 256, f->a.dev[0], 512);
	assert_memory_equal(f->b.dev[0], f->a.dev[0] + 1792, 256);
	assert_memory_equal(f->b.dev[0] + 256, f->a.dev[1], 256);
	for (uint32_t i = 0; i < 64; i++)
		assert_int_equal(aux[32 + i], 0xa5);
	assert_int_equal(aux[31], 0);
	assert_int_equal(aux[96], 0);
	assert_int_equal(f->b.dev[0][512], 0);
	/* Nothing in flight: wait at once. */
	assert_int_equal(xport_wait(f->xa, -1, err, sizeof err), 0);
}

static void gpu_bytes_into_host_memory_move_nothing(void **state)
{
	struct fx *f = *state;
	uint8_t before[KV / 2];
	struct xport_copy c[2] = {
		{ 0, 0, 256, f->src, f->dst },         /* fine */
		{ KV - 64, KV - 64, 128, f->src, f->dst }, /* ends in AUX: fine */
	};

	memcpy(before, f->b.dev[0], sizeof before);
	c[1].dst_off = 1024; /* GPU bytes then host bytes into GPU bytes */
	assert_int_equal(xport_write_batch(f->xa, c, 2, err, sizeof err),
			 KVW_ERANGE);
	assert_non_null(strstr(err, "layouts disagree"));
	assert_memory_equal(before, f->b.dev[0], sizeof before);
	c[1].dst_off = KV - 64; /* same split on both sides: fine */
	assert_int_equal(xport_write_batch(f->xa, c, 2, err, sizeof err), 0);
	assert_int_equal(xport_wait(f->xa, 1000, err, sizeof err), 0);
	assert_memory_equal(f->b.dev[1] + KV / 2 - 64, f->a.dev[1] + KV / 2 - 64,
			    64);
}

static void bad_ids_and_ranges_move_nothing(void **state)
{
	struct fx *f = *state;
	struct xport_copy c = { 0, 0, 64, f->src, f->dst };

	c.dst = f->dst + 7;
	assert_int_equal(xport_write_batch(f->xa, &c, 1, err, sizeof err),
			 KVW_EINVAL);
	c.dst = f->dst;
	c.dst_off = KV + AUX - 63;
	assert_int_equal(xport_write_batch(f->xa, &c, 1, err, sizeof err),
			 KVW_ERANGE);
	c.dst_off = UINT64_MAX - 10;
	assert_int_equal(xport_write_batch(f->xa, &c, 1, err, sizeof err),
			 KVW_ERANGE);
	assert_int_equal(f->b.dev[0][0], 0);
}

static void removed_record_fails_and_a_new_epoch_is_reopened(void **state)
{
	struct fx *f = *state;
	struct xport_copy c = { 0, 0, 128, f->src, f->dst };
	uint64_t ptrs[2], lens[2] = { KV / 2, KV / 2 };
	uint32_t items[2] = { ITEM, ITEM };
	void *fresh;

	assert_int_equal(xport_write_batch(f->xa, &c, 1, err, sizeof err), 0);
	unlink(f->b.rec); /* the decode engine went away */
	assert_int_equal(xport_write_batch(f->xa, &c, 1, err, sizeof err),
			 KVW_ENOENT);
	assert_non_null(strstr(err, "no GPU pool registered"));
	/* It comes back with new memory: copies go there, not to the old. */
	assert_int_equal(f->rt->malloc_(&fresh, KV), 0);
	ptrs[0] = (uint64_t)(uintptr_t)fresh;
	ptrs[1] = ptrs[0] + KV / 2;
	assert_int_equal(gpool_export(f->b.rec, 0, ptrs, lens, items, 2,
				      KV + AUX, 3, err, sizeof err), 0);
	memset(f->b.dev[0], 0, 128);
	c.len = 256;
	assert_int_equal(xport_write_batch(f->xa, &c, 1, err, sizeof err), 0);
	assert_int_equal(xport_wait(f->xa, -1, err, sizeof err), 0);
	assert_memory_equal(fresh, f->a.dev[0], 256);
	assert_int_equal(f->b.dev[0][0], 0);
	/* Registered for another pool size: stale. */
	assert_int_equal(gpool_export(f->b.rec, 0, ptrs, lens, items, 2,
				      KV + AUX + 1, 4, err, sizeof err), 0);
	assert_int_equal(xport_write_batch(f->xa, &c, 1, err, sizeof err),
			 KVW_ESTALE);
	xport_disconnect(f->xa, f->dst);
	f->rt->free_(fresh);
}

static void malformed_descriptors_are_refused(void **state)
{
	struct fx *f = *state;
	uint8_t d[KVW_MAX_DESC];
	uint32_t id;

	memcpy(d, f->desc, f->desclen);
	assert_int_equal(xport_connect(f->xa, d, 12, &id, err, sizeof err),
			 KVW_EINVAL);
	assert_int_equal(xport_connect(f->xa, d, f->desclen - 1, &id, err,
				       sizeof err), KVW_EINVAL);
	d[4] = 9;
	assert_int_equal(xport_connect(f->xa, d, f->desclen, &id, err,
				       sizeof err), KVW_EVERSION);
	memcpy(d, f->desc, f->desclen);
	d[0] = 'X';
	assert_int_equal(xport_connect(f->xa, d, f->desclen, &id, err,
				       sizeof err), KVW_EINVAL);
	/* The same descriptor again: the same remote. */
	assert_int_equal(xport_connect(f->xa, f->desc, f->desclen, &id, err,
				       sizeof err), 0);
	assert_int_equal(id, f->dst);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    device_and_aux_pieces_land_byte_exact, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    gpu_bytes_into_host_memory_move_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(bad_ids_and_ranges_move_nothing,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
		    removed_record_fails_and_a_new_epoch_is_reopened, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    malformed_descriptors_are_refused, setup, teardown),
	};

	if (fakecuda_use() != 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
