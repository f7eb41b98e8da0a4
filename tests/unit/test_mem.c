/*
 * test_mem.c - regions (mem.h) over the CPU stand-in runtime
 * (tests/fakecuda/, KVW_CUDART; it proves the plumbing, not the GPU). A
 * pool without a GPU record is served by the host backend, one buffer,
 * nothing to stage; with a record, by the cuda backend: the engine's
 * buffers as it registered them then the AUX bytes, device pages staged to
 * the pool at their own offsets and copied back, byte-exact, AUX bytes
 * left alone, the pool pinned once; a removed record makes it a host pool
 * again and a new epoch is mapped anew.
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
#include "mem/mem.h"
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
	struct mem_region *s;
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
	assert_int_equal(mem_region_open(&f->s, f->path, KV + AUX, MEM_STAGE,
					 err, sizeof err),
			 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	mem_region_close(&f->s);
	assert_null(f->s);
	mem_region_close(&f->s); /* twice: nothing */
	pool_close(&f->p);
	unlink(f->path);
	unlink(f->rec);
	f->rt->free_(f->alloc);
	free(f);
	return 0;
}

/* 0 with the region mapped; *gpu says whether by the cuda backend. */
static int fresh(struct fx *f, int *gpu)
{
	int rc = mem_region_refresh(f->s, err, sizeof err);

	*gpu = mem_region_on_gpu(f->s);
	return rc;
}

static void no_record_is_a_host_pool(void **state)
{
	struct fx *f = *state;
	const struct mem_buf *b;
	uint64_t run = 0;
	int gpu = 7;

	assert_int_equal(mem_region_stale(f->s), 1); /* nothing mapped */
	assert_null(mem_region_backend(f->s));
	assert_int_equal(fresh(f, &gpu), 0);
	assert_int_equal(gpu, 0);
	assert_int_equal(mem_region_stale(f->s), 0);
	assert_string_equal(mem_region_backend(f->s), "host");
	assert_int_equal(mem_region_bufs(f->s, &b), 1);
	assert_int_equal(b[0].start, 0);
	assert_int_equal(b[0].len, KV + AUX);
	assert_int_equal(b[0].where, MEM_POOL);
	assert_int_equal(b[0].share, MEM_SHARE_SHM_PATH);
	assert_int_equal(b[0].device, -1);
	assert_null(mem_region_device_at(f->s, 100, &run));
	assert_int_equal(run, KV + AUX - 100);
	/* Staging a host pool is nothing, and leaves it as it was. */
	memset(f->host, 0x5a, KV + AUX);
	assert_int_equal(mem_region_stage_to_host(f->s, 0, KV, err, sizeof err),
			 0);
	assert_int_equal(mem_region_sync(f->s, err, sizeof err), 0);
	assert_int_equal(f->host[0], 0x5a);
	assert_int_equal(mem_region_pinned(f->s), 0);
	assert_int_equal(mem_region_epoch(f->s), 0);
}

static void the_engines_buffers_describe_the_region(void **state)
{
	struct fx *f = *state;
	const struct mem_buf *b;
	uint64_t run = 0;
	uint8_t *at;
	int gpu = 0;

	export(f, 41);
	assert_int_equal(mem_region_stale(f->s), 1);
	assert_int_equal(fresh(f, &gpu), 0);
	assert_int_equal(gpu, 1);
	assert_string_equal(mem_region_backend(f->s), "cuda");
	assert_int_equal(mem_region_epoch(f->s), 41);
	assert_int_equal(mem_region_device(f->s), 0);
	assert_int_equal(mem_region_bufs(f->s, &b), 3);
	for (uint32_t i = 0; i < 2; i++) {
		assert_int_equal(b[i].start, i * (KV / 2));
		assert_int_equal(b[i].len, KV / 2);
		assert_int_equal(b[i].item_len, ITEM);
		assert_int_equal(b[i].where, MEM_GPU);
		assert_int_equal(b[i].share, MEM_SHARE_CUDA_IPC);
		assert_int_equal(b[i].device, 0);
		/* One allocation holds both: one handle, one base. */
		assert_int_equal(b[i].alloc_addr, b[0].alloc_addr);
		assert_int_equal(b[i].alloc_size, KV + 64);
	}
	/* The addresses reach the engine's bytes (the stand-in opens a
	 * handle as a second mapping of the allocation). */
	assert_int_equal(b[1].addr - b[1].alloc_addr, 64 + KV / 2);
	assert_memory_equal((void *)(uintptr_t)b[1].addr, f->dev[1], KV / 2);
	assert_int_equal(b[2].start, KV); /* the AUX bytes stay in the pool */
	assert_int_equal(b[2].len, AUX);
	assert_int_equal(b[2].where, MEM_POOL);
	at = mem_region_device_at(f->s, KV / 2 + 10, &run);
	assert_ptr_equal(at, (uint8_t *)(uintptr_t)b[1].addr + 10);
	assert_int_equal(run, KV / 2 - 10);
	assert_null(mem_region_device_at(f->s, KV + 1, &run));
	assert_int_equal(run, AUX - 1);
}

static void device_pages_go_to_the_host_pool_and_back(void **state)
{
	struct fx *f = *state;
	int gpu = 0;

	export(f, 1);
	memset(f->host, 0xEE, KV + AUX);
	assert_int_equal(fresh(f, &gpu), 0);
	assert_int_equal(gpu, 1);
	assert_int_equal(mem_region_pinned(f->s), 1);
	/* Two adjacent pages (grown into one copy), one across the buffer
	 * boundary, one running into the AUX bytes. */
	assert_int_equal(mem_region_stage_to_host(f->s, 0, ITEM, err, sizeof err), 0);
	assert_int_equal(mem_region_stage_to_host(f->s, ITEM, ITEM, err, sizeof err), 0);
	assert_int_equal(mem_region_stage_to_host(f->s, KV / 2 - 128, 256, err, sizeof err), 0);
	assert_int_equal(mem_region_stage_to_host(f->s, KV - 64, 128, err, sizeof err),
			 0);
	assert_int_equal(mem_region_sync(f->s, err, sizeof err), 0);
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
	assert_int_equal(mem_region_copy_to_device(f->s, KV / 2 + ITEM, ITEM, err, sizeof err), 0);
	assert_int_equal(mem_region_sync(f->s, err, sizeof err), 0);
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
	assert_int_equal(fresh(f, &gpu), 0);
	assert_int_equal(gpu, 1);
	unlink(f->rec); /* the engine went away */
	assert_int_equal(fresh(f, &gpu), 0);
	assert_int_equal(gpu, 0);
	export(f, 2); /* it came back: a new file, a new epoch */
	assert_int_equal(fresh(f, &gpu), 0);
	assert_int_equal(gpu, 1);
	memset(f->host, 0, ITEM);
	assert_int_equal(mem_region_stage_to_host(f->s, 0, ITEM, err, sizeof err), 0);
	assert_int_equal(mem_region_sync(f->s, err, sizeof err), 0);
	assert_memory_equal(f->host, f->dev[0], ITEM);
	/* Pinned once, across epochs (a second cudaHostRegister of the
	 * same range would fail in the stand-in as in the runtime). */
	assert_int_equal(mem_region_pinned(f->s), 1);
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
	assert_int_equal(fresh(f, &gpu),
			 KVW_ESTALE);
	assert_int_equal(gpu, 0);
	unlink(f->rec);
	w = fopen(f->rec, "w");
	assert_non_null(w);
	fputs("not a record", w);
	fclose(w);
	assert_int_not_equal(fresh(f, &gpu), 0);
	assert_int_equal(gpu, 0);
}

static void not_a_pool_path_is_refused(void **state)
{
	struct mem_region *s = (struct mem_region *)0x1;

	(void)state;
	assert_int_equal(mem_region_open(&s, "/tmp/whatever", 16, 0, err,
					 sizeof err),
			 KVW_EINVAL);
	assert_null(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(no_record_is_a_host_pool, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			the_engines_buffers_describe_the_region, setup,
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
