/*
 * test_gpool.c - engine-owned GPU pools with the CUDA runtime absent
 * (KVW_CUDART points at a file that does not exist, so this proves the same
 * on a machine with a GPU): every argument error of the registration
 * (gpool_check, kvw_register_gpu_pool) is KVW_EINVAL, decided before the
 * runtime is looked for, and leaves no record; good arguments reach the
 * runtime and get KVW_ENODEV "cuda: not available"; records read back from
 * disk are checked field by field (magic, version, counts, lengths, totals,
 * symlinks); buffer lookup by pool offset at its boundaries; the cuda
 * transport's probe and open say why they are not available.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "mem/gpool.h"
#include "mem/pool.h"
#include "table/rtab.h"
#include "xport/xport.h"

static char err[512];

#define POOL 4096u

/* Three buffers of 1 KiB (item 256) at distinct device addresses. */
static const uint64_t ptrs[3] = { 0x10000, 0x20000, 0x30000 };
static const uint64_t lens[3] = { 1024, 1024, 1024 };
static const uint32_t items[3] = { 256, 256, 256 };

static void check_accepts_a_good_registration(void **state)
{
	(void)state;
	assert_int_equal(gpool_check(ptrs, lens, items, 3, POOL, err,
				     sizeof err), 0);
	/* Buffers exactly as big as the pool: still fine. */
	assert_int_equal(gpool_check(ptrs, lens, items, 3, 3072, err,
				     sizeof err), 0);
}

static void check_refuses_counts_and_null_arrays(void **state)
{
	(void)state;
	assert_int_equal(gpool_check(ptrs, lens, items, 0, POOL, err,
				     sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "0 buffers"));
	assert_int_equal(gpool_check(ptrs, lens, items, GPOOL_MAX + 1, POOL,
				     err, sizeof err), KVW_EINVAL);
	assert_int_equal(gpool_check(NULL, lens, items, 3, POOL, err,
				     sizeof err), KVW_EINVAL);
	assert_int_equal(gpool_check(ptrs, NULL, items, 3, POOL, err,
				     sizeof err), KVW_EINVAL);
	assert_int_equal(gpool_check(ptrs, lens, NULL, 3, POOL, err,
				     sizeof err), KVW_EINVAL);
}

static void check_refuses_bad_buffers(void **state)
{
	uint64_t p[2] = { 0x10000, 0x20000 }, l[2] = { 1024, 1024 };
	uint32_t it[2] = { 256, 256 };

	(void)state;
	p[1] = 0;
	assert_int_equal(gpool_check(p, l, it, 2, POOL, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "buffer 1"));
	p[1] = 0x20000;
	l[0] = 0;
	assert_int_equal(gpool_check(p, l, it, 2, POOL, err, sizeof err),
			 KVW_EINVAL);
	l[0] = 1024;
	it[1] = 0;
	assert_int_equal(gpool_check(p, l, it, 2, POOL, err, sizeof err),
			 KVW_EINVAL);
	it[1] = 300; /* 1024 is not a multiple of 300 */
	assert_int_equal(gpool_check(p, l, it, 2, POOL, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "multiple"));
	it[1] = 256;
	p[1] = UINT64_MAX - 512; /* runs off the address space */
	assert_int_equal(gpool_check(p, l, it, 2, POOL, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "overflows"));
	p[1] = 0x10200; /* inside buffer 0 */
	assert_int_equal(gpool_check(p, l, it, 2, POOL, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "overlap"));
	p[1] = 0x10400; /* right after buffer 0: adjacent is fine */
	assert_int_equal(gpool_check(p, l, it, 2, POOL, err, sizeof err), 0);
}

static void check_refuses_buffers_larger_than_the_pool(void **state)
{
	uint64_t l[2] = { 0x7fffffffffffff00ull, 0x7fffffffffffff00ull };
	uint64_t p[2] = { 0x100, 0x8000000000000000ull };
	uint32_t it[2] = { 256, 256 };

	(void)state;
	assert_int_equal(gpool_check(ptrs, lens, items, 3, 3071, err,
				     sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "more than the pool"));
	/* Two halves of the address space: fine against a pool that big. */
	assert_int_equal(gpool_check(p, l, it, 2, UINT64_MAX, err, sizeof err),
			 0);
	assert_int_equal(gpool_check(p, l, it, 2, 0xfffffffffffffdffull, err,
				     sizeof err), KVW_EINVAL);
}

static void path_for_turns_pool_into_gpu(void **state)
{
	char buf[64];

	(void)state;
	assert_int_equal(gpool_path_for("/dev/shm/kvwire.a.pool", buf,
					sizeof buf), 0);
	assert_string_equal(buf, "/dev/shm/kvwire.a.gpu");
	assert_int_equal(gpool_path_for("/dev/shm/kvwire.a.rooms", buf,
					sizeof buf), KVW_EINVAL);
	assert_int_equal(gpool_path_for(NULL, buf, sizeof buf), KVW_EINVAL);
	assert_int_equal(gpool_path_for("/dev/shm/kvwire.a.pool", buf, 8),
			 KVW_EINVAL);
}

static void export_checks_arguments_before_the_runtime(void **state)
{
	char path[128];
	uint64_t l2[3] = { 1024, 0, 1024 };

	(void)state;
	snprintf(path, sizeof path, "/dev/shm/kvwire.test-gpool.%d.gpu",
		 (int)getpid());
	assert_int_equal(gpool_export(path, 0, ptrs, l2, items, 3, POOL, 7,
				      err, sizeof err), KVW_EINVAL);
	assert_null(strstr(err, "not available"));
	assert_int_equal(gpool_export(path, -1, ptrs, lens, items, 3, POOL, 7,
				      err, sizeof err), KVW_EINVAL);
	/* Good arguments: now the (absent) runtime decides. */
	assert_int_equal(gpool_export(path, 0, ptrs, lens, items, 3, POOL, 7,
				      err, sizeof err), KVW_ENODEV);
	assert_non_null(strstr(err, "cuda: not available: libcudart not found"));
	assert_int_equal(access(path, F_OK), -1);
}

/* A hand-made record of n buffers of `len` bytes each. */
static size_t make_record(uint8_t *r, uint32_t n, uint64_t len,
			  uint64_t pool)
{
	memset(r, 0, 64 + 96 * (size_t)n);
	memcpy(r, "KVGP", 4);
	r[4] = 1;
	r[8] = (uint8_t)n;
	for (int i = 0; i < 8; i++) {
		r[24 + i] = (uint8_t)(0x55 + i);
		r[32 + i] = (uint8_t)(pool >> (8 * i));
		r[40 + i] = (uint8_t)((len * n) >> (8 * i));
	}
	for (uint32_t b = 0; b < n; b++) {
		uint8_t *e = r + 64 + 96 * (size_t)b;

		for (int i = 0; i < 8; i++) {
			e[i] = (uint8_t)(len >> (8 * i));
			e[24 + i] = (uint8_t)((len * 2) >> (8 * i));
		}
		e[8] = 0; /* item 256 */
		e[9] = 1;
		e[32] = (uint8_t)b; /* handle */
	}
	return 64 + 96 * (size_t)n;
}

static void write_file(const char *path, const uint8_t *b, size_t n)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static void read_checks_every_field(void **state)
{
	uint8_t r[64 + 96 * 3];
	struct gpool *g = NULL;
	char path[128], link[140];
	size_t n;

	(void)state;
	snprintf(path, sizeof path, "/dev/shm/kvwire.test-gpool-r.%d.gpu",
		 (int)getpid());
	unlink(path);
	assert_int_equal(gpool_read(path, &g, err, sizeof err), KVW_ENOENT);
	n = make_record(r, 3, 1024, POOL);
	write_file(path, r, n);
	assert_int_equal(gpool_read(path, &g, err, sizeof err), 0);
	assert_int_equal(gpool_count(g), 3);
	assert_int_equal(gpool_bytes(g), 3072);
	assert_int_equal(gpool_pool_size(g), POOL);
	assert_int_equal(gpool_epoch(g), 0x5c5b5a5958575655ull);
	assert_int_equal(gpool_buf_at(g, 2)->start, 2048);
	assert_int_equal(gpool_buf_at(g, 1)->handle[0], 1);
	assert_null(gpool_buf_at(g, 3));
	assert_int_equal(gpool_find(g, 0), 0);
	assert_int_equal(gpool_find(g, 1023), 0);
	assert_int_equal(gpool_find(g, 1024), 1);
	assert_int_equal(gpool_find(g, 3071), 2);
	assert_int_equal(gpool_find(g, 3072), -1); /* host (AUX) bytes */
	gpool_free(&g);
	assert_null(g);

	r[0] = 'X'; /* magic */
	write_file(path, r, n);
	assert_int_equal(gpool_read(path, &g, err, sizeof err), KVW_EINVAL);
	n = make_record(r, 3, 1024, POOL);
	r[4] = 2; /* version */
	write_file(path, r, n);
	assert_int_equal(gpool_read(path, &g, err, sizeof err), KVW_EVERSION);
	n = make_record(r, 3, 1024, POOL);
	write_file(path, r, n - 1); /* truncated */
	assert_int_equal(gpool_read(path, &g, err, sizeof err), KVW_EINVAL);
	r[8] = 0; /* zero buffers */
	write_file(path, r, 64);
	assert_int_equal(gpool_read(path, &g, err, sizeof err), KVW_EINVAL);
	n = make_record(r, 3, 1024, 2048); /* buffers exceed the pool */
	write_file(path, r, n);
	assert_int_equal(gpool_read(path, &g, err, sizeof err), KVW_EINVAL);
	n = make_record(r, 3, 1024, POOL);
	r[40] ^= 1; /* total disagrees with the buffers */
	write_file(path, r, n);
	assert_int_equal(gpool_read(path, &g, err, sizeof err), KVW_EINVAL);
	n = make_record(r, 3, 1024, POOL);
	r[64 + 96 + 9] = 3; /* item 768 does not divide 1024 */
	write_file(path, r, n);
	assert_int_equal(gpool_read(path, &g, err, sizeof err), KVW_EINVAL);
	n = make_record(r, 3, 1024, POOL);
	r[64 + 16] = 0xff; /* offset past its allocation */
	r[64 + 17] = 0xff;
	write_file(path, r, n);
	assert_int_equal(gpool_read(path, &g, err, sizeof err), KVW_EINVAL);
	assert_null(g);

	n = make_record(r, 3, 1024, POOL);
	write_file(path, r, n);
	snprintf(link, sizeof link, "%s.lnk", path);
	unlink(link);
	assert_int_equal(symlink(path, link), 0);
	assert_int_not_equal(gpool_read(link, &g, err, sizeof err), 0);
	assert_null(g);
	unlink(link);
	unlink(path);
}

struct efx {
	char table[128], pool[128], rec[128];
	struct rtab *t;
	struct pool *p;
	struct kvw_engine *e;
};

static int engine_setup(void **state)
{
	struct efx *f = calloc(1, sizeof *f);
	int existed;

	assert_non_null(f);
	snprintf(f->table, sizeof f->table,
		 "/dev/shm/kvwire.test-gpool.%d.rooms", (int)getpid());
	snprintf(f->pool, sizeof f->pool, "/dev/shm/kvwire.test-gpool.%d.pool",
		 (int)getpid());
	snprintf(f->rec, sizeof f->rec, "/dev/shm/kvwire.test-gpool.%d.gpu",
		 (int)getpid());
	unlink(f->table);
	unlink(f->pool);
	assert_int_equal(rtab_create(f->table, 16, 2, 0x77, &f->t, &existed,
				     err, sizeof err), 0);
	assert_int_equal(pool_create(f->pool, POOL, &f->p, err, sizeof err), 0);
	assert_int_equal(kvw_engine_open("ipc:///tmp/kvw-test-gpool.eng",
					 f->table, f->pool, &f->e, err,
					 sizeof err), 0);
	*state = f;
	return 0;
}

static int engine_teardown(void **state)
{
	struct efx *f = *state;

	kvw_engine_close(&f->e);
	rtab_close(&f->t);
	pool_close(&f->p);
	unlink(f->table);
	unlink(f->pool);
	free(f);
	return 0;
}

static void api_register_refuses_bad_arguments_and_leaves_no_record(void **state)
{
	struct efx *f = *state;
	uint32_t bad_items[3] = { 256, 256, 100 };

	assert_int_equal(kvw_register_gpu_pool(NULL, 0, ptrs, lens, items, 3,
					       err, sizeof err), KVW_EINVAL);
	assert_int_equal(kvw_register_gpu_pool(f->e, 0, ptrs, lens, items, 0,
					       err, sizeof err), KVW_EINVAL);
	assert_int_equal(kvw_register_gpu_pool(f->e, 0, NULL, lens, items, 3,
					       err, sizeof err), KVW_EINVAL);
	assert_int_equal(kvw_register_gpu_pool(f->e, 0, ptrs, lens, bad_items,
					       3, err, sizeof err), KVW_EINVAL);
	assert_int_equal(kvw_register_gpu_pool(f->e, 0, ptrs, lens, items, 3,
					       NULL, 0), KVW_ENODEV);
	/* Larger than this engine's pool (4 KiB): refused before CUDA. */
	{
		uint64_t big[3] = { 2048, 2048, 2048 };

		assert_int_equal(kvw_register_gpu_pool(f->e, 0, ptrs, big,
						       items, 3, err,
						       sizeof err),
				 KVW_EINVAL);
		assert_null(strstr(err, "not available"));
	}
	assert_int_equal(kvw_register_gpu_pool(f->e, 0, ptrs, lens, items, 3,
					       err, sizeof err), KVW_ENODEV);
	assert_non_null(strstr(err, "cuda: not available"));
	assert_int_equal(access(f->rec, F_OK), -1);
}

static void cuda_transport_says_why_not_available(void **state)
{
	struct xport *x = (struct xport *)0x1;

	(void)state;
	assert_int_equal(xport_probe("cuda", err, sizeof err), KVW_ENODEV);
	assert_string_equal(err, "cuda: not available: libcudart not found at "
				 "KVW_CUDART=/nonexistent/libcudart.so");
	assert_int_equal(xport_open(xport_find("cuda"), &x, err, sizeof err),
			 KVW_ENODEV);
	assert_null(x);
	assert_non_null(strstr(err, "cuda: not available"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(check_accepts_a_good_registration),
		cmocka_unit_test(check_refuses_counts_and_null_arrays),
		cmocka_unit_test(check_refuses_bad_buffers),
		cmocka_unit_test(check_refuses_buffers_larger_than_the_pool),
		cmocka_unit_test(path_for_turns_pool_into_gpu),
		cmocka_unit_test(export_checks_arguments_before_the_runtime),
		cmocka_unit_test(read_checks_every_field),
		cmocka_unit_test_setup_teardown(
		    api_register_refuses_bad_arguments_and_leaves_no_record,
		    engine_setup, engine_teardown),
		cmocka_unit_test(cuda_transport_says_why_not_available),
	};

	/* The runtime is absent for this whole process, GPU or not. */
	setenv("KVW_CUDART", "/nonexistent/libcudart.so", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
