/*
 * test_pool.c - KV pools on real files in /dev/shm, each test with its own
 * name (pid + counter) and every file removed at the end: create maps and
 * reserves the size with mode 0600, open sees the same bytes and size,
 * unlink removes the file; create refuses zero, absurd and existing sizes
 * or files cleanly (no file left behind, *out NULL, a message); open of a
 * missing file, an empty file or a symlink fails cleanly.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mem/hostmem.h"
#include "mem/pool.h"

static char path_a[POOL_PATH_MAX + 1];

static int fresh_path(void **state)
{
	static unsigned n;

	(void)state;
	snprintf(path_a, sizeof path_a, "/dev/shm/kvwire.tpool-%d-%u.pool",
		 (int)getpid(), n++);
	unlink(path_a);
	return 0;
}

static int remove_path(void **state)
{
	(void)state;
	(void)pool_unlink(path_a); /* with the record pool_adopt makes */
	return 0;
}

static int exists(const char *p)
{
	struct stat st;

	return lstat(p, &st) == 0;
}

static void create_maps_reserves_and_open_sees_same_bytes(void **state)
{
	struct pool *p = NULL, *q = NULL;
	char err[256] = "";
	struct stat st;
	uint8_t *b;

	(void)state;
	assert_int_equal(pool_create(path_a, 1 << 20, &p, err, sizeof err), 0);
	assert_non_null(p);
	assert_int_equal(pool_size(p), 1 << 20);
	assert_string_equal(pool_path(p), path_a);
	assert_int_equal(stat(path_a, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_size, 1 << 20);
	/* Reserved, not sparse: every block is allocated at create. */
	assert_true((uint64_t)st.st_blocks * 512 >= (1u << 20));

	b = pool_base(p);
	for (size_t i = 0; i < (1u << 20); i += 4093)
		b[i] = (uint8_t)(i * 7);
	b[(1u << 20) - 1] = 0x5a;

	assert_int_equal(pool_open(path_a, 0, &q, err, sizeof err), 0);
	assert_int_equal(pool_size(q), 1 << 20);
	assert_ptr_not_equal(pool_base(q), pool_base(p));
	assert_memory_equal(pool_base(q), pool_base(p), 1 << 20);
	pool_close(&q);
	assert_null(q);
	pool_close(&p);
	assert_null(p);

	assert_int_equal(pool_unlink(path_a), 0);
	assert_false(exists(path_a));
	assert_int_equal(pool_unlink(path_a), KVW_ENOENT);
}

static void writable_open_shares_bytes_with_creator(void **state)
{
	struct pool *p = NULL, *q = NULL;
	char err[256];

	(void)state;
	assert_int_equal(pool_create(path_a, 8192, &p, err, sizeof err), 0);
	assert_int_equal(pool_open(path_a, 1, &q, err, sizeof err), 0);
	memset(pool_base(q), 0xc3, 8192);
	assert_int_equal(((uint8_t *)pool_base(p))[8191], 0xc3);
	pool_close(&q);
	pool_close(&p);
}

static void name_without_slash_lives_in_dev_shm(void **state)
{
	char buf[POOL_PATH_MAX + 1], name[64], big[POOL_PATH_MAX + 8];

	(void)state;
	assert_int_equal(pool_path_for("dec0", buf, sizeof buf), 0);
	assert_string_equal(buf, "/dev/shm/kvwire.dec0.pool");
	assert_int_equal(pool_path_for("/tmp/x/kvwire.a.pool", buf, sizeof buf), 0);
	assert_string_equal(buf, "/tmp/x/kvwire.a.pool");
	assert_int_equal(pool_path_for("", buf, sizeof buf), KVW_EINVAL);
	assert_int_equal(pool_path_for(NULL, buf, sizeof buf), KVW_EINVAL);
	assert_int_equal(pool_path_for("dec0", buf, 10), KVW_EINVAL);
	memset(big, 'a', sizeof big - 1);
	big[0] = '/';
	big[sizeof big - 1] = '\0';
	assert_int_equal(pool_path_for(big, buf, sizeof buf), KVW_EINVAL);

	/* pool_create/open/unlink take the same names. */
	snprintf(name, sizeof name, "tpool-name-%d", (int)getpid());
	assert_int_equal(pool_path_for(name, path_a, sizeof path_a), 0);
	{
		struct pool *p = NULL;
		char err[256];

		assert_int_equal(pool_create(name, 4096, &p, err, sizeof err), 0);
		assert_string_equal(pool_path(p), path_a);
		pool_close(&p);
		assert_int_equal(pool_unlink(name), 0);
		assert_false(exists(path_a));
	}
}

static void create_refuses_zero_and_absurd_sizes_leaving_no_file(void **state)
{
	struct pool *p = (struct pool *)&p; /* must be reset to NULL */
	char err[256] = "";

	(void)state;
	assert_int_equal(pool_create(path_a, 0, &p, err, sizeof err), KVW_EINVAL);
	assert_null(p);
	assert_false(exists(path_a));

	err[0] = '\0';
	assert_int_equal(pool_create(path_a, UINT64_MAX, &p, err, sizeof err),
			 KVW_EINVAL);
	assert_null(p);
	assert_non_null(strstr(err, "size"));
	assert_false(exists(path_a));

	/* 1 PiB: accepted by the types, refused by the file system at create
	 * time (not later as a SIGBUS), with nothing left behind. */
	err[0] = '\0';
	assert_int_equal(pool_create(path_a, 1ull << 50, &p, err, sizeof err),
			 KVW_ENOMEM);
	assert_null(p);
	assert_non_null(strstr(err, "unable to reserve"));
	assert_false(exists(path_a));
}

static void create_refuses_existing_file_and_leaves_it_intact(void **state)
{
	struct pool *p = NULL, *q = (struct pool *)&q;
	char err[256] = "";

	(void)state;
	assert_int_equal(pool_create(path_a, 4096, &p, err, sizeof err), 0);
	((uint8_t *)pool_base(p))[0] = 0x77;
	assert_int_equal(pool_create(path_a, 8192, &q, err, sizeof err),
			 KVW_EEXIST);
	assert_null(q);
	assert_non_null(strstr(err, path_a));
	assert_int_equal(((uint8_t *)pool_base(p))[0], 0x77);
	assert_true(exists(path_a));
	pool_close(&p);
}

static void open_missing_file_fails_cleanly(void **state)
{
	struct pool *p = (struct pool *)&p;
	char err[256] = "";

	(void)state;
	assert_int_equal(pool_open(path_a, 1, &p, err, sizeof err), KVW_ENOENT);
	assert_null(p);
	assert_non_null(strstr(err, path_a));
	assert_int_equal(pool_open("", 1, &p, err, sizeof err), KVW_EINVAL);
	assert_null(p);
}

static void open_refuses_empty_file_and_symlink(void **state)
{
	char link[POOL_PATH_MAX + 8];
	struct pool *p = NULL;
	char err[256];
	int fd;

	(void)state;
	fd = open(path_a, O_CREAT | O_EXCL | O_RDWR, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(pool_open(path_a, 1, &p, err, sizeof err), KVW_EINVAL);
	assert_null(p);

	snprintf(link, sizeof link, "%s.lnk", path_a);
	unlink(link);
	assert_int_equal(symlink(path_a, link), 0);
	assert_true(pool_open(link, 1, &p, err, sizeof err) < 0);
	assert_null(p);
	unlink(link);
}

/* pool_close takes NULL and a NULL pool, and NULLs the caller's pointer
 * of an open pool (the file stays). */
static void close_accepts_null_and_nulls_the_pointer(void **state)
{
	struct pool *p = NULL;
	char err[256] = "";

	(void)state;
	pool_close(NULL);
	pool_close(&p);
	assert_int_equal(pool_create(path_a, 8192, &p, err, sizeof err), 0);
	assert_non_null(p);
	pool_close(&p);
	assert_null(p);
	assert_true(exists(path_a));
	assert_int_equal(pool_unlink(path_a), 0);
}

/* A restarted control keeps the pool its engine maps: same file, same
 * bytes. A pool of another size is replaced by a fresh one. */
static void adopt_keeps_a_same_size_pool_and_replaces_another(void **state)
{
	struct pool *a = NULL, *b = NULL, *c = NULL;
	struct stat st1, st2;
	char err[256];
	int reused = -1;

	(void)state;
	assert_int_equal(pool_adopt(path_a, 8192, &a, &reused, err, sizeof err), 0);
	assert_int_equal(reused, 0); /* nothing there: created */
	((unsigned char *)pool_base(a))[100] = 0xab;
	assert_int_equal(fstat(pool_fd(a), &st1), 0);
	assert_int_equal(pool_adopt(path_a, 8192, &b, &reused, err, sizeof err), 0);
	assert_int_equal(reused, 1);
	assert_int_equal(fstat(pool_fd(b), &st2), 0);
	assert_true(st1.st_ino == st2.st_ino);
	assert_int_equal(((unsigned char *)pool_base(b))[100], 0xab);
	pool_close(&b);
	assert_int_equal(pool_adopt(path_a, 16384, &c, &reused, err, sizeof err), 0);
	assert_int_equal(reused, 0);
	assert_int_equal(pool_size(c), 16384);
	assert_int_equal(((unsigned char *)pool_base(c))[100], 0);
	pool_close(&c);
	pool_close(&a);
	/* A control process's pool has its engine's host memory record
	 * beside it; pool_unlink removes both. */
	{
		char rec[sizeof path_a + 8];

		assert_int_equal(hostmem_rec_path(path_a, rec, sizeof rec), 0);
		assert_int_equal(access(rec, F_OK), 0);
		assert_int_equal(pool_unlink(path_a), 0);
		assert_int_equal(access(rec, F_OK), -1);
	}
}

static void only_absolute_kvwire_pool_names_are_pools(void **state)
{
	(void)state;
	assert_true(pool_name_ok("/dev/shm/kvwire.d0.pool"));
	assert_true(pool_name_ok("/tmp/x/kvwire.a.b.pool"));
	assert_false(pool_name_ok("kvwire.d0.pool"));      /* relative */
	assert_false(pool_name_ok("/dev/shm/kvwire..pool")); /* no name */
	assert_false(pool_name_ok("/dev/shm/kvwire.d0.rooms"));
	assert_false(pool_name_ok("/etc/passwd"));
	assert_false(pool_name_ok("/tmp/kvwire.d0.pool/x"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, fresh_path, remove_path)
		T(create_maps_reserves_and_open_sees_same_bytes),
		T(writable_open_shares_bytes_with_creator),
		T(name_without_slash_lives_in_dev_shm),
		T(create_refuses_zero_and_absurd_sizes_leaving_no_file),
		T(create_refuses_existing_file_and_leaves_it_intact),
		T(open_missing_file_fails_cleanly),
		T(open_refuses_empty_file_and_symlink),
		T(close_accepts_null_and_nulls_the_pointer),
		T(adopt_keeps_a_same_size_pool_and_replaces_another),
		T(only_absolute_kvwire_pool_names_are_pools),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
