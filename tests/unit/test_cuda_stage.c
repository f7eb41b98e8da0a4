/*
 * test_cuda_stage.c - GPU pools over tcp: device bytes staged through the
 * host pool (cuda_stage.h), over the CPU stand-in runtime (tests/fakecuda/,
 * KVW_CUDART; it proves the plumbing, not the GPU). A pool without a GPU
 * record stays a host pool and loads nothing; with one, device pages go to
 * the host pool at their own offsets and back, byte-exact, AUX bytes are
 * left alone, the pool is registered (pinned) once, a removed record turns
 * the pool back into a host pool and a new epoch is opened again.
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
#include "mem/cuda_stage.h"
#include "mem/gpool.h"
#include "mem/pool.h"

static char err[512];

#define KV 4096u  /* GPU bytes: two buffers of 2048 */
#define AUX 256u  /* host bytes after them */
#define ITEM 256u

struct fx {
	const struct curt *rt;
	char path[128], rec[128];
	struct pool *p;
	uint8_t *host;
	void *alloc;   /* both buffers, 64 bytes apart */
	uint8_t *dev[2];
	struct cstage *s;
};

static void export(struct fx *f, uint64_t epoch)
{
	uint64_t ptrs[2] = { (uint64_t)(uintptr_t)f->dev[0],
			     (uint64_t)(uintptr_t)f->dev[1] };
	uint64_t lens[2] = { KV / 2, KV / 2 };
	uint32_t items[2] = { ITEM, ITEM };

	assert_int_equal(gpool_export(f->rec, 0, ptrs, lens, items, 2, KV + AUX,
				      epoch, err, sizeof err), 0);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);

	assert_non_null(f);
	assert_int_equal(curt_get(&f->rt, err, sizeof err), 0);
	snprintf(f->path, sizeof f->path, "/dev/shm/kvwire.test-cst.%d.pool",
		 (int)getpid());
	assert_int_equal(gpool_path_for(f->path, f->rec, sizeof f->rec), 0);
	unlink(f->path);
	assert_int_equal(pool_create(f->path, KV + AUX, &f->p, err, sizeof err),
			 0);
	f->host = pool_base(f->p);
	assert_int_equal(f->rt->malloc_(&f->alloc, KV + 64), 0);
	f->dev[0] = f->alloc;
	f->dev[1] = (uint8_t *)f->alloc + 64 + KV / 2;
	for (uint32_t i = 0; i < KV / 2; i++) {
		f->dev[0][i] = (uint8_t)(i * 7 + 1);
		f->dev[1][i] = (uint8_t)(i * 13 + 5);
	}
	assert_int_equal(cstage_open(&f->s, f->path, KV + AUX, err, sizeof err),
			 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	cstage_close(&f->s);
	assert_null(f->s);
	cstage_close(&f->s); /* twice: nothing */
	pool_close(&f->p);
	unlink(f->path);
	unlink(f->rec);
	f->rt->free_(f->alloc);
	free(f);
	return 0;
}

static void no_record_is_a_host_pool(void **state)
{
	struct fx *f = *state;
	int gpu = 7;

	assert_int_equal(cstage_fresh(f->s, &gpu, err, sizeof err), 0);
	assert_int_equal(gpu, 0);
	assert_int_equal(cstage_pinned(f->s), 0);
	assert_int_equal(cstage_sync(f->s, err, sizeof err), 0);
}

static void device_pages_go_to_the_host_pool_and_back(void **state)
{
	struct fx *f = *state;
	int gpu = 0;

	export(f, 1);
	memset(f->host, 0xEE, KV + AUX);
	assert_int_equal(cstage_fresh(f->s, &gpu, err, sizeof err), 0);
	assert_int_equal(gpu, 1);
	assert_int_equal(cstage_pinned(f->s), 1);
	/* Two adjacent pages (grown into one copy), one across the buffer
	 * boundary, one running into the AUX bytes. */
	assert_int_equal(cstage_queue(f->s, 0, ITEM, 1, err, sizeof err), 0);
	assert_int_equal(cstage_queue(f->s, ITEM, ITEM, 1, err, sizeof err), 0);
	assert_int_equal(cstage_queue(f->s, KV / 2 - 128, 256, 1, err,
				      sizeof err), 0);
	assert_int_equal(cstage_queue(f->s, KV - 64, 128, 1, err, sizeof err),
			 0);
	assert_int_equal(cstage_sync(f->s, err, sizeof err), 0);
	assert_memory_equal(f->host, f->dev[0], 2 * ITEM);
	assert_int_equal(f->host[2 * ITEM], 0xEE);
	assert_memory_equal(f->host + KV / 2 - 128, f->dev[0] + KV / 2 - 128,
			    128);
	assert_memory_equal(f->host + KV / 2, f->dev[1], 128);
	assert_memory_equal(f->host + KV - 64, f->dev[1] + KV / 2 - 64, 64);
	for (uint32_t i = 0; i < 64; i++) /* AUX: left alone */
		assert_int_equal(f->host[KV + i], 0xEE);
	/* Back: the host pool's page onto the GPU. */
	memset(f->host + KV / 2 + ITEM, 0x3c, ITEM);
	assert_int_equal(cstage_queue(f->s, KV / 2 + ITEM, ITEM, 0, err,
				      sizeof err), 0);
	assert_int_equal(cstage_sync(f->s, err, sizeof err), 0);
	for (uint32_t i = 0; i < ITEM; i++)
		assert_int_equal(f->dev[1][ITEM + i], 0x3c);
	assert_int_equal(f->dev[1][2 * ITEM], (uint8_t)(2 * ITEM * 13 + 5));
}

static void a_removed_record_is_a_host_pool_again_and_a_new_epoch_reopens(
	void **state)
{
	struct fx *f = *state;
	int gpu = 0;

	export(f, 1);
	assert_int_equal(cstage_fresh(f->s, &gpu, err, sizeof err), 0);
	assert_int_equal(gpu, 1);
	unlink(f->rec); /* the engine went away */
	assert_int_equal(cstage_fresh(f->s, &gpu, err, sizeof err), 0);
	assert_int_equal(gpu, 0);
	export(f, 2); /* it came back: a new file, a new epoch */
	assert_int_equal(cstage_fresh(f->s, &gpu, err, sizeof err), 0);
	assert_int_equal(gpu, 1);
	memset(f->host, 0, ITEM);
	assert_int_equal(cstage_queue(f->s, 0, ITEM, 1, err, sizeof err), 0);
	assert_int_equal(cstage_sync(f->s, err, sizeof err), 0);
	assert_memory_equal(f->host, f->dev[0], ITEM);
	/* Pinned once, across epochs (a second cudaHostRegister of the
	 * same range would fail in the stand-in as in the runtime). */
	assert_int_equal(cstage_pinned(f->s), 1);
}

static void a_record_of_another_size_or_malformed_is_refused(void **state)
{
	struct fx *f = *state;
	uint64_t ptrs[1] = { (uint64_t)(uintptr_t)f->dev[0] };
	uint64_t lens[1] = { KV / 2 };
	uint32_t items[1] = { ITEM };
	FILE *w;
	int gpu = 7;

	assert_int_equal(gpool_export(f->rec, 0, ptrs, lens, items, 1, KV / 2,
				      1, err, sizeof err), 0);
	assert_int_equal(cstage_fresh(f->s, &gpu, err, sizeof err),
			 KVW_ESTALE);
	assert_int_equal(gpu, 0);
	unlink(f->rec);
	w = fopen(f->rec, "w");
	assert_non_null(w);
	fputs("not a record", w);
	fclose(w);
	assert_int_not_equal(cstage_fresh(f->s, &gpu, err, sizeof err), 0);
	assert_int_equal(gpu, 0);
}

static void not_a_pool_path_is_refused(void **state)
{
	struct cstage *s = (struct cstage *)0x1;

	(void)state;
	assert_int_equal(cstage_open(&s, "/tmp/whatever", 16, err, sizeof err),
			 KVW_EINVAL);
	assert_null(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(no_record_is_a_host_pool, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			device_pages_go_to_the_host_pool_and_back, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			a_removed_record_is_a_host_pool_again_and_a_new_epoch_reopens,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			a_record_of_another_size_or_malformed_is_refused, setup,
			teardown),
		cmocka_unit_test(not_a_pool_path_is_refused),
	};

	if (fakecuda_use() != 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
