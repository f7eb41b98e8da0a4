/*
 * test_hostmem.c - engine host memory laid over a pool (mem/hostmem.h,
 * pool_refresh): the record made with the pool is checked field by field
 * when it is read (another process wrote it), and a read during a write
 * is told to come back; a good one lays the engine's allocation over a
 * second mapping of the pool at the same addresses, so bytes written
 * through the pool reach the allocation and the pool file's own bytes stay
 * as they were; a record that changes is followed, one emptied gives the
 * pool's own pages back; an allocation replaced under its name, or gone,
 * is refused with nothing laid; hostmem_remove_all leaves none of the
 * files. Through the API (kvw_alloc, kvw_register_host): every refusal
 * with its code and reason, nothing laid after one; a registration that
 * places buffers in its own order shows through kvw_pool_base and a
 * second mapping, gives the pool file's pages under it back (a mapping
 * made later does not take them again) and takes them again when it is
 * undone; a registered allocation cannot be freed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "base/le.h"
#include "mem/hostmem.h"
#include "mem/pool.h"
#include "table/rtab.h"

static char err[512];
static char path[256], rec[300];
static struct pool *mine; /* the pool as its maker maps it */
static uint64_t pg;

#define PAGES 8u

static int setup(void **state)
{
	int reused;

	(void)state;
	pg = hostmem_page();
	snprintf(path, sizeof path, "/dev/shm/kvwire.thm%d.pool",
		 (int)getpid());
	(void)pool_unlink(path);
	assert_int_equal(pool_adopt(path, PAGES * pg, &mine, &reused, err,
				    sizeof err), 0);
	assert_int_equal(reused, 0);
	assert_int_equal(hostmem_rec_path(path, rec, sizeof rec), 0);
	return 0;
}

static int teardown(void **state)
{
	char table[128];

	(void)state;
	pool_close(&mine);
	(void)pool_unlink(path);
	/* The API test's table, also when it stopped half-way. */
	snprintf(table, sizeof table, "/dev/shm/kvwire.thm%d.rooms",
		 (int)getpid());
	unlink(table);
	return 0;
}

/* An allocation of n pages filled with byte v; *m describes pool pages
 * [at, at + n) as its bytes from page `from`. */
static uint8_t *alloc_pages(uint64_t key, uint32_t n, uint8_t v,
			    uint64_t at, uint64_t from, struct hostmem_map *m)
{
	void *base;
	uint64_t dev, ino;

	assert_int_equal(hostmem_alloc(path, key, (n + from) * pg, &base, &dev,
				       &ino, err, sizeof err), 0);
	memset(base, v, (n + from) * pg);
	*m = (struct hostmem_map){ at * pg, n * pg, from * pg, key, dev, ino };
	return base;
}

static void records_are_checked_field_by_field(void **state)
{
	struct hostmem_map m[2] = {
		{ 0, pg, 0, 1, 2, 3 }, { 2 * pg, pg, pg, 1, 2, 3 },
	};
	struct hostmem_rec *r = NULL;
	struct hostmem_view *v;
	uint64_t g0, gen;
	uint8_t b[64 + 2 * 48];
	int fd;

	(void)state;
	assert_int_equal(hostmem_rec_check(m, 2, PAGES * pg, err, sizeof err),
			 0);
	/* Every rule: count, whole pages, inside the pool, in order. */
	assert_int_equal(hostmem_rec_check(m, 0, PAGES * pg, err, sizeof err),
			 KVW_EINVAL);
	m[1].start = 2 * pg + 1;
	assert_int_equal(hostmem_rec_check(m, 2, PAGES * pg, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "not whole"));
	m[1].start = 2 * pg;
	m[1].file_off = 3;
	assert_int_equal(hostmem_rec_check(m, 2, PAGES * pg, err, sizeof err),
			 KVW_EINVAL);
	m[1].file_off = pg;
	m[1].len = PAGES * pg;
	assert_int_equal(hostmem_rec_check(m, 2, PAGES * pg, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "past"));
	m[1].len = pg;
	m[1].start = 0;
	assert_int_equal(hostmem_rec_check(m, 2, PAGES * pg, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "overlaps"));
	m[1].start = 2 * pg;

	/* Read back: good, then each field broken in the shared file. */
	v = pool_host_record(mine);
	assert_non_null(v);
	g0 = hostmem_view_gen(v);
	assert_int_equal(hostmem_view_read(v, PAGES * pg, &r, &gen, err,
					   sizeof err), 0);
	assert_null(r); /* nothing registered yet */
	assert_int_equal(hostmem_view_write(v, m, 2, PAGES * pg, 9, err,
					    sizeof err), 0);
	assert_true(hostmem_view_gen(v) != g0);
	assert_int_equal(hostmem_view_read(v, PAGES * pg, &r, &gen, err,
					   sizeof err), 0);
	assert_int_equal(gen, hostmem_view_gen(v));
	assert_int_equal(r->n, 2);
	assert_int_equal(r->epoch, 9);
	assert_int_equal(r->pid, (uint32_t)getpid());
	assert_memory_equal(r->map, m, sizeof m);
	free(r);
	assert_int_equal(hostmem_view_read(v, PAGES * pg + pg, &r, &gen, err,
					   sizeof err), KVW_EINVAL);
	/* A bad write changes nothing. */
	m[1].start = 1;
	assert_int_equal(hostmem_view_write(v, m, 2, PAGES * pg, 10, err,
					    sizeof err), KVW_EINVAL);
	m[1].start = 2 * pg;
	fd = open(rec, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, b, sizeof b, 0), (ssize_t)sizeof b);
	struct {
		size_t at, width;
		uint64_t v;
		int rc;
	} bad[] = {
		{ 0, 4, 0x58585858, KVW_EINVAL },   /* magic */
		{ 4, 2, 9, KVW_EVERSION },          /* version */
		{ 16, 4, HOSTMEM_MAX + 1, KVW_EINVAL }, /* count */
		{ 20, 4, 512, KVW_EINVAL },         /* page size */
		{ 64 + 48 + 8, 8, 7, KVW_EINVAL },  /* a length not whole pages */
		{ 64 + 48, 8, 0, KVW_EINVAL },      /* overlapping the first */
		{ 8, 8, 1, KVW_EAGAIN },            /* mid-write (odd) */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint8_t c[sizeof b];

		memcpy(c, b, sizeof b);
		le_put(c + bad[i].at, bad[i].v, bad[i].width);
		assert_int_equal(pwrite(fd, c, sizeof c, 0), (ssize_t)sizeof c);
		assert_int_equal(hostmem_view_read(v, PAGES * pg, &r, &gen,
						   err, sizeof err),
				 bad[i].rc);
		assert_null(r);
	}
	assert_int_equal(pwrite(fd, b, sizeof b, 0), (ssize_t)sizeof b);
	close(fd);
	/* Not a record file: a symlink, another size; none at all. */
	{
		struct hostmem_view *w = NULL;
		char other[320];

		snprintf(other, sizeof other, "%s.x", rec);
		assert_int_equal(symlink(rec, other), 0);
		assert_int_equal(hostmem_view_open(other, 0, &w, err,
						   sizeof err), KVW_ESYS);
		unlink(other);
		fd = open(other, O_RDWR | O_CREAT | O_EXCL, 0600);
		assert_int_equal(write(fd, "x", 1), 1);
		close(fd);
		assert_int_equal(hostmem_view_open(other, 0, &w, err,
						   sizeof err), KVW_EINVAL);
		unlink(other);
		assert_int_equal(hostmem_view_open(other, 0, &w, err,
						   sizeof err), KVW_ENOENT);
		assert_null(w);
	}
}

static void a_record_lays_the_allocation_over_the_pool(void **state)
{
	struct hostmem_map m[2];
	struct pool *peer = NULL;
	uint8_t *a, *b, *pb, *own;

	(void)state;
	a = alloc_pages(0xa1, 2, 0xAA, 1, 0, &m[0]);
	b = alloc_pages(0xb2, 1, 0xBB, 5, 1, &m[1]);
	memset(pool_base(mine), 0x11, PAGES * pg);
	assert_int_equal(pool_open(path, 1, &peer, err, sizeof err), 0);
	pb = pool_base(peer);
	assert_int_equal(pool_refresh(peer, err, sizeof err), 0);
	assert_int_equal(pool_overlaid(peer), 0); /* no record yet */

	assert_int_equal(hostmem_view_write(pool_host_record(mine), m, 2,
					    PAGES * pg, 1, err, sizeof err), 0);
	assert_int_equal(pool_refresh(peer, err, sizeof err), 0);
	assert_int_equal(pool_overlaid(peer), 1);
	assert_ptr_equal(pool_base(peer), pb); /* same addresses */
	assert_int_equal(pb[0], 0x11);
	assert_int_equal(pb[pg], 0xAA);
	assert_int_equal(pb[3 * pg - 1], 0xAA);
	assert_int_equal(pb[3 * pg], 0x11);
	assert_int_equal(pb[5 * pg], 0xBB);
	/* Writes through the pool land in the allocations (b from its
	 * second page on), and the pool file's own bytes stay. */
	memset(pb + pg, 0x5A, 2 * pg);
	memset(pb + 5 * pg, 0x6B, pg);
	assert_int_equal(a[0], 0x5A);
	assert_int_equal(a[2 * pg - 1], 0x5A);
	assert_int_equal(b[0], 0xBB);
	assert_int_equal(b[pg], 0x6B);
	own = pool_base(mine);
	assert_int_equal(own[pg], 0x11);
	assert_int_equal(own[5 * pg], 0x11);

	/* A new record is followed; the old ranges get the pool's pages. */
	m[0].start = 6 * pg;
	m[0].len = pg;
	{
		struct hostmem_map one = m[0];

		assert_int_equal(hostmem_view_write(pool_host_record(mine),
						    &one, 1, PAGES * pg, 2,
						    err, sizeof err), 0);
	}
	assert_int_equal(pool_refresh(peer, err, sizeof err), 0);
	assert_int_equal(pb[pg], 0x11);
	assert_int_equal(pb[5 * pg], 0x11);
	assert_int_equal(pb[6 * pg], 0x5A);

	/* The engine caught mid-write (an odd generation): the batch fails
	 * and what was laid goes, until the record reads whole again. */
	{
		uint8_t g[8];
		uint64_t now = hostmem_view_gen(pool_host_record(mine));
		int fd = open(rec, O_RDWR);

		assert_true(fd >= 0);
		le_put(g, now + 1, 8);
		assert_int_equal(pwrite(fd, g, 8, 8), 8);
		assert_int_equal(pool_refresh(peer, err, sizeof err),
				 KVW_EAGAIN);
		assert_int_equal(pool_overlaid(peer), 0);
		assert_int_equal(pb[6 * pg], 0x11);
		le_put(g, now + 2, 8);
		assert_int_equal(pwrite(fd, g, 8, 8), 8);
		close(fd);
		assert_int_equal(pool_refresh(peer, err, sizeof err), 0);
		assert_int_equal(pb[6 * pg], 0x5A);
	}

	/* Nothing registered: every page is the pool's again. */
	assert_int_equal(hostmem_view_write(pool_host_record(mine), NULL, 0,
					    PAGES * pg, 3, err, sizeof err), 0);
	assert_int_equal(pool_refresh(peer, err, sizeof err), 0);
	assert_int_equal(pool_overlaid(peer), 0);
	assert_int_equal(pb[6 * pg], 0x11);

	munmap(a, 2 * pg);
	munmap(b, 2 * pg);
	pool_close(&peer);
	hostmem_remove_all(path);
}

static void a_replaced_or_missing_allocation_lays_nothing(void **state)
{
	struct hostmem_map m[2];
	struct pool *peer = NULL;
	char apath[300];
	uint8_t *a, *b, *pb;
	int fd;

	(void)state;
	a = alloc_pages(0xc3, 1, 0xCC, 0, 0, &m[0]);
	b = alloc_pages(0xd4, 1, 0xDD, 2, 0, &m[1]);
	memset(pool_base(mine), 0x22, PAGES * pg);
	assert_int_equal(pool_open(path, 1, &peer, err, sizeof err), 0);
	pb = pool_base(peer);
	assert_int_equal(hostmem_view_write(pool_host_record(mine), m, 2,
					    PAGES * pg, 1, err, sizeof err), 0);
	/* The second allocation replaced by another file of its name. */
	assert_int_equal(hostmem_alloc_path(path, 0xd4, apath, sizeof apath),
			 0);
	unlink(apath);
	fd = open(apath, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)pg), 0);
	close(fd);
	assert_int_equal(pool_refresh(peer, err, sizeof err), KVW_ESTALE);
	assert_non_null(strstr(err, "not the engine allocation"));
	/* Nothing laid, the first range included: a copy must not reach
	 * half of an engine's memory. */
	assert_int_equal(pool_overlaid(peer), 0);
	assert_int_equal(pb[0], 0x22);
	/* Still refused at the next batch; gone is refused too. */
	assert_int_equal(pool_refresh(peer, err, sizeof err), KVW_ESTALE);
	unlink(apath);
	assert_int_equal(pool_refresh(peer, err, sizeof err), KVW_ESTALE);
	assert_non_null(strstr(err, "engine allocation"));
	assert_int_equal(pool_overlaid(peer), 0);

	/* Removed with the pool: the record and every allocation file. */
	assert_int_equal(access(rec, F_OK), 0);
	hostmem_remove_all(path);
	assert_int_equal(access(rec, F_OK), -1);
	assert_int_equal(hostmem_alloc_path(path, 0xc3, apath, sizeof apath),
			 0);
	assert_int_equal(access(apath, F_OK), -1);
	munmap(a, pg);
	munmap(b, pg);
	pool_close(&peer);
}

static void allocations_are_whole_pages_beside_the_pool(void **state)
{
	char p[300];
	void *base;
	uint64_t dev, ino;

	(void)state;
	assert_int_equal(hostmem_alloc(path, 1, pg + 1, &base, &dev, &ino, err,
				       sizeof err), KVW_EINVAL);
	assert_int_equal(hostmem_alloc("/dev/shm/not-a-pool", 1, pg, &base,
				       &dev, &ino, err, sizeof err),
			 KVW_EINVAL);
	assert_int_equal(hostmem_alloc_path(path, 0x1f, p, sizeof p), 0);
	assert_non_null(strstr(p, ".pool.m000000000000001f"));
	assert_int_equal(pool_name_ok(p), 0); /* never taken for a pool */
	assert_int_equal(hostmem_alloc(path, 0x1f, pg, &base, &dev, &ino, err,
				       sizeof err), 0);
	assert_int_equal(hostmem_alloc(path, 0x1f, pg, &base, &dev, &ino, err,
				       sizeof err), KVW_EEXIST);
	munmap(base, pg);
	hostmem_remove_all(path);
}

/* The API's refusals: each returns its code, names the reason, and
 * leaves the pool's own bytes where they were. */
static void refused(struct kvw_engine *e, const struct kvw_buf *lay,
		    uint32_t nlay, const struct kvw_host_buf *b, uint32_t n,
		    int rc, const char *why)
{
	err[0] = '\0';
	assert_int_equal(kvw_register_host(e, lay, nlay, b, n, err,
					   sizeof err), rc);
	if (why && strstr(err, why) == NULL)
		fail_msg("\"%s\" lacks \"%s\"", err, why);
}

static void api_registers_in_place_and_refuses_with_reasons(void **state)
{
	char table[128];
	struct rtab *t = NULL;
	struct kvw_engine *e = NULL;
	struct pool *peer = NULL;
	struct stat st0, st1, st2;
	uint8_t *a, *own;
	void *p, *m;
	int existed;
	/* K0 and V0 of one page each (4 items of pg / 4), then AUX rows. */
	const uint32_t it = (uint32_t)pg / 4;
	const struct kvw_buf lay[3] = {
		{ 0, KVW_ROLE_K, 0, 0, it, 4 },
		{ 0, KVW_ROLE_V, 0, pg, it, 4 },
		{ 0, KVW_ROLE_AUX, 0, 2 * pg, 64, 4 },
	};
	struct kvw_host_buf b[2];

	(void)state;
	snprintf(table, sizeof table, "/dev/shm/kvwire.thm%d.rooms",
		 (int)getpid());
	unlink(table);
	assert_int_equal(rtab_create(table, 16, 2, 0x77, &t, &existed, err,
				     sizeof err), 0);
	assert_int_equal(kvw_engine_open("ipc:///tmp/kvw-test-hostmem.eng",
					 table, path, &e, err, sizeof err), 0);
	assert_int_equal(kvw_alloc(e, 0, &p, err, sizeof err), KVW_EINVAL);
	assert_int_equal(kvw_alloc(e, pg + 1, &p, err, sizeof err), 0);
	a = p; /* two pages: whole pages, zeroed */
	assert_int_equal(a[2 * pg - 1], 0);
	memset(a, 0x4B, pg);          /* the engine's K0 is its first page */
	memset(a + pg, 0x56, pg);     /* and V0 its second */

	/* V0 first in the engine's memory, K0 after it: its own order. */
	b[0] = (struct kvw_host_buf){ (uint64_t)(uintptr_t)(a + pg), pg, it,
				      0, KVW_ROLE_V };
	b[1] = (struct kvw_host_buf){ (uint64_t)(uintptr_t)a, pg, it, 0,
				      KVW_ROLE_K };
	refused(e, lay, 3, b, 0, KVW_EINVAL, "0 buffers");
	refused(e, lay, 1, b, 2, KVW_EINVAL, "2 buffers for a layout of 1");
	refused(e, NULL, 3, b, 2, KVW_EINVAL, "required");
	{
		struct kvw_host_buf x[2] = { b[0], b[1] };

		x[1].layer_id = 7;
		refused(e, lay, 3, x, 2, KVW_EINVAL, "no such buffer");
		x[1] = b[0];
		refused(e, lay, 3, x, 2, KVW_EINVAL, "named twice");
		x[1] = b[1];
		x[1].ptr = x[0].ptr; /* K0 on V0's bytes */
		refused(e, lay, 3, x, 2, KVW_EINVAL, "overlap");
		x[1] = b[1];
		x[1].item_len = it / 2;
		refused(e, lay, 3, x, 2, KVW_EINVAL, "item length");
		x[1].item_len = it;
		x[1].len = pg - it;
		refused(e, lay, 3, x, 2, KVW_EINVAL, "pages");
		x[1].len = pg - 1;
		refused(e, lay, 3, x, 2, KVW_EINVAL, "not a multiple");
		x[1].len = pg;
		m = malloc(2 * pg);
		assert_non_null(m);
		x[1].ptr = (uint64_t)(uintptr_t)m;
		refused(e, lay, 3, x, 2, KVW_EINVAL, "kvw_alloc");
		free(m);
		/* K0 inside a, not on a page; V0 in an allocation of its
		 * own. */
		assert_int_equal(kvw_alloc(e, pg, &p, err, sizeof err), 0);
		x[0].ptr = (uint64_t)(uintptr_t)p;
		x[1].ptr = (uint64_t)(uintptr_t)(a + it);
		x[1].len = pg;
		refused(e, lay, 3, x, 2, KVW_EINVAL, "whole");
		assert_int_equal(kvw_free(e, p), 0);
	}
	assert_int_equal(kvw_unregister_host(e), KVW_ENOENT);
	own = kvw_pool_base(e);
	assert_int_equal(own[0], 0); /* nothing laid after the refusals */

	assert_int_equal(fstat(pool_fd(mine), &st0), 0);
	assert_int_equal(kvw_register_host(e, lay, 3, b, 2, err, sizeof err),
			 0);
	/* The pool file's pages under it went back to /dev/shm. */
	assert_int_equal(fstat(pool_fd(mine), &st1), 0);
	assert_true(st1.st_blocks < st0.st_blocks);
	/* kvw_pool_base shows the engine's memory at the layout's offsets,
	 * and so does any other mapping of the pool once refreshed. */
	assert_int_equal(own[0], 0x4B);
	assert_int_equal(own[pg], 0x56);
	assert_int_equal(own[2 * pg], 0); /* AUX stays the pool's */
	assert_int_equal(pool_open(path, 0, &peer, err, sizeof err), 0);
	assert_int_equal(pool_refresh(peer, err, sizeof err), 0);
	assert_int_equal(((uint8_t *)pool_base(peer))[pg + 9], 0x56);
	/* A mapping made after the registration populates the pool's own
	 * ranges only: the pages given back stay given back. */
	assert_int_equal(fstat(pool_fd(mine), &st2), 0);
	assert_true(st2.st_blocks == st1.st_blocks);
	assert_int_equal(kvw_free(e, a), KVW_ESTATE);
	assert_int_equal(kvw_free(e, a + 1), KVW_ENOENT);

	assert_int_equal(kvw_unregister_host(e), 0);
	assert_int_equal(own[0], 0); /* the pool's own pages, zeroed */
	assert_int_equal(pool_refresh(peer, err, sizeof err), 0);
	assert_int_equal(pool_overlaid(peer), 0);
	assert_int_equal(fstat(pool_fd(mine), &st1), 0);
	assert_true(st1.st_blocks == st0.st_blocks); /* reserved again */
	assert_int_equal(kvw_free(e, a), 0);
	pool_close(&peer);
	kvw_engine_close(&e);
	rtab_close(&t);
	unlink(table);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    records_are_checked_field_by_field, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    a_record_lays_the_allocation_over_the_pool, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    a_replaced_or_missing_allocation_lays_nothing, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    allocations_are_whole_pages_beside_the_pool, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    api_registers_in_place_and_refuses_with_reasons, setup,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
