/*
 * api_mem.c - the engine's own host memory (api.h: kvw_alloc, kvw_free,
 * kvw_register_host, kvw_unregister_host). Allocations are files beside
 * the pool (mem/hostmem.h) that every process of the group, and a peer
 * group's workers on this host, can map; a registration is a record of
 * which allocation bytes hold which pool bytes, which those processes lay
 * over their mappings of the pool (pool_refresh). The pool's own pages
 * under a registration are given back to /dev/shm (a hole punched) and
 * reserved again when the registration is taken back (a process that maps
 * the pool later populates only its own ranges: pool.c's map_existing).
 */
#include "api.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "api_engine.h"
#include "mem/gpool.h"
#include "mem/hostmem.h"
#include "plan/plan.h"

struct api_alloc {
	uint8_t *base;
	uint64_t size, key, dev, ino;
};

static uint64_t new_key(void)
{
	uint64_t k = 0;

	while (k == 0)
		if (getrandom(&k, sizeof k, 0) != sizeof k)
			k = (uint64_t)getpid() << 32 ^ (uint64_t)rand();
	return k;
}

int kvw_alloc(struct kvw_engine *e, uint64_t size, void **ptr, char *err,
	      size_t errlen)
{
	uint64_t pg = hostmem_page();
	struct api_alloc a = { 0 };
	void *base;
	int rc;

	if (ptr)
		*ptr = NULL;
	if (e == NULL || ptr == NULL)
		return kvw_errf(err, errlen, KVW_EINVAL, "no engine or ptr");
	if (size == 0 || size > UINT64_MAX - pg)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"kvw_alloc: %llu bytes",
				(unsigned long long)size);
	a.size = (size + pg - 1) / pg * pg;
	if (e->nallocs == e->capallocs) {
		uint32_t cap = e->capallocs ? e->capallocs * 2 : 16;
		struct api_alloc *g = realloc(e->allocs, cap * sizeof *g);

		if (g == NULL)
			return kvw_errf(err, errlen, KVW_ENOMEM,
					"out of memory");
		e->allocs = g;
		e->capallocs = cap;
	}
	do { /* a key that another file already has: draw again */
		a.key = new_key();
		rc = hostmem_alloc(pool_path(e->pool), a.key, a.size, &base,
				   &a.dev, &a.ino, err, errlen);
	} while (rc == KVW_EEXIST);
	if (rc)
		return rc;
	a.base = base;
	e->allocs[e->nallocs++] = a;
	*ptr = base;
	return 0;
}

/* The allocation holding [ptr, ptr + len), or NULL. */
static const struct api_alloc *alloc_of(const struct kvw_engine *e,
					uint64_t ptr, uint64_t len)
{
	for (uint32_t i = 0; i < e->nallocs; i++) {
		uint64_t b = (uint64_t)(uintptr_t)e->allocs[i].base;

		if (ptr >= b && len <= e->allocs[i].size &&
		    ptr - b <= e->allocs[i].size - len)
			return &e->allocs[i];
	}
	return NULL;
}

static void drop_alloc(const char *pool, struct api_alloc *a)
{
	char path[4096];

	munmap(a->base, (size_t)a->size);
	if (hostmem_alloc_path(pool, a->key, path, sizeof path) == 0)
		unlink(path);
}

/* The pool's current record (NULL: none, or unreadable). */
static struct hostmem_rec *own_record_any(const struct kvw_engine *e)
{
	struct hostmem_view *v = pool_host_record(e->pool);
	struct hostmem_rec *r = NULL;
	uint64_t gen;

	if (v == NULL || hostmem_view_read(v, pool_size(e->pool), &r, &gen,
					   NULL, 0) != 0)
		return NULL;
	return r;
}

/* This engine's registration, or NULL. */
static struct hostmem_rec *own_record(const struct kvw_engine *e)
{
	return e->host_registered ? own_record_any(e) : NULL;
}

int kvw_free(struct kvw_engine *e, void *ptr)
{
	struct hostmem_rec *r;
	uint32_t i;

	if (e == NULL || ptr == NULL)
		return KVW_EINVAL;
	for (i = 0; i < e->nallocs && e->allocs[i].base != ptr; i++)
		;
	if (i == e->nallocs)
		return KVW_ENOENT;
	r = own_record(e);
	for (uint32_t j = 0; r && j < r->n; j++)
		if (r->map[j].key == e->allocs[i].key) {
			free(r);
			return KVW_ESTATE;
		}
	free(r);
	drop_alloc(pool_path(e->pool), &e->allocs[i]);
	e->allocs[i] = e->allocs[--e->nallocs];
	return 0;
}

static int by_start(const void *a, const void *b)
{
	const struct hostmem_map *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* Buffer i of bufs as a mapping of pool bytes, checked against layout. */
static int to_map(const struct kvw_engine *e, const struct kvw_buf *layout,
		  uint32_t nlayout, const struct kvw_host_buf *b, uint32_t i,
		  uint8_t *named, struct hostmem_map *m, char *err,
		  size_t errlen)
{
	const struct api_alloc *a;
	uint64_t need;
	uint32_t j;

	if (b->ptr == 0 || b->len == 0 || b->item_len == 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"buffer %u: NULL pointer or zero length", i);
	if (b->len % b->item_len != 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"buffer %u: length %llu is not a multiple of "
				"its item length %u",
				i, (unsigned long long)b->len, b->item_len);
	for (j = 0; j < nlayout; j++)
		if (layout[j].layer_id == b->layer_id &&
		    layout[j].role == b->role)
			break;
	if (j == nlayout)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"buffer %u (layer %u, %s): the group's layout "
				"of this rank has no such buffer",
				i, b->layer_id, plan_role_str(b->role));
	if (named[j]++)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"buffer %u (layer %u, %s) is named twice", i,
				b->layer_id, plan_role_str(b->role));
	if (b->item_len != layout[j].item_len)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"buffer %u (layer %u, %s): item length %u, "
				"the group's layout has %u",
				i, b->layer_id, plan_role_str(b->role),
				b->item_len, layout[j].item_len);
	need = (uint64_t)layout[j].pages * layout[j].item_len;
	if (b->len < need)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"buffer %u (layer %u, %s): %llu pages, the "
				"group's layout has %u",
				i, b->layer_id, plan_role_str(b->role),
				(unsigned long long)(b->len / b->item_len),
				layout[j].pages);
	if (layout[j].pool != 0 || layout[j].offset > pool_size(e->pool) ||
	    need > pool_size(e->pool) - layout[j].offset)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"buffer %u: the layout places it outside this "
				"engine's %llu-byte pool",
				i, (unsigned long long)pool_size(e->pool));
	if (b->ptr > UINT64_MAX - b->len ||
	    (a = alloc_of(e, b->ptr, need)) == NULL)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"buffer %u at 0x%llx: host memory that kvwire "
				"did not allocate; the group's processes "
				"cannot reach it. Allocate the KV cache with "
				"kvw_alloc (Python: KVManager.alloc) and "
				"register that memory",
				i, (unsigned long long)b->ptr);
	*m = (struct hostmem_map){
		.start = layout[j].offset, .len = need,
		.file_off = b->ptr - (uint64_t)(uintptr_t)a->base,
		.key = a->key, .dev = a->dev, .ino = a->ino,
	};
	return 0;
}

/* Joins mappings that continue each other in pool and file, then checks
 * that each joined run is whole pages. *n is updated. */
static int join_runs(struct hostmem_map *m, uint32_t *n, char *err,
		     size_t errlen)
{
	uint64_t pg = hostmem_page();
	uint32_t k = 0;

	/* Two buffers on the same bytes would make one layout buffer's
	 * writes the other's: the engine's mistake, said now. n <= 1024. */
	for (uint32_t i = 0; i < *n; i++)
		for (uint32_t j = i + 1; j < *n; j++)
			if (m[i].key == m[j].key &&
			    m[i].file_off < m[j].file_off + m[j].len &&
			    m[j].file_off < m[i].file_off + m[i].len)
				return kvw_errf(err, errlen, KVW_EINVAL,
						"buffers %u and %u overlap in "
						"their allocation",
						i, j);
	qsort(m, *n, sizeof *m, by_start);
	for (uint32_t i = 0; i < *n; i++) {
		struct hostmem_map *p = k ? &m[k - 1] : NULL;

		if (p && p->key == m[i].key && p->start + p->len == m[i].start &&
		    p->file_off + p->len == m[i].file_off)
			p->len += m[i].len;
		else
			m[k++] = m[i];
	}
	*n = k;
	for (uint32_t i = 0; i < k; i++)
		if (m[i].start % pg || m[i].len % pg || m[i].file_off % pg)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"pool bytes %llu..%llu, at byte %llu "
					"of their allocation, are not whole "
					"%llu-byte pages: kvwire lays engine "
					"memory over the pool page by page. "
					"Give buffers that share a page one "
					"allocation, back to back in the "
					"layout's order, or pick a page count "
					"that makes each buffer whole pages",
					(unsigned long long)m[i].start,
					(unsigned long long)(m[i].start +
							     m[i].len),
					(unsigned long long)m[i].file_off,
					(unsigned long long)pg);
	return 0;
}

/* Reserves (again) or gives back the pool's own pages under maps. */
static void pool_pages(struct kvw_engine *e, const struct hostmem_map *m,
		       uint32_t n, int give_back)
{
	for (uint32_t i = 0; i < n; i++) {
		if (give_back)
			(void)fallocate(pool_fd(e->pool),
					FALLOC_FL_PUNCH_HOLE |
						FALLOC_FL_KEEP_SIZE,
					(off_t)m[i].start, (off_t)m[i].len);
		else
			(void)posix_fallocate(pool_fd(e->pool),
					      (off_t)m[i].start,
					      (off_t)m[i].len);
	}
}

int kvw_register_host(struct kvw_engine *e, const struct kvw_buf *layout,
		      uint32_t nlayout, const struct kvw_host_buf *bufs,
		      uint32_t n, char *err, size_t errlen)
{
	char dummy[8];
	struct hostmem_map *m;
	struct hostmem_rec *old;
	uint8_t *named;
	int rc = 0;

	if (err == NULL) {
		err = dummy;
		errlen = sizeof dummy;
	}
	if (e == NULL || layout == NULL || bufs == NULL)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"an engine, a layout and buffers are "
				"required");
	if (n == 0 || n > nlayout || nlayout > KVW_MAX_BUFFERS)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"%u buffers for a layout of %u (1..%u)", n,
				nlayout, nlayout < KVW_MAX_BUFFERS
						 ? nlayout : KVW_MAX_BUFFERS);
	if (pool_host_record(e->pool) == NULL)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"pool %s has no host memory record: it was "
				"not made by a kvwire control process",
				pool_path(e->pool));
	m = calloc(n, sizeof *m);
	named = calloc(nlayout, 1);
	if (m == NULL || named == NULL) {
		free(m);
		free(named);
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	}
	for (uint32_t i = 0; rc == 0 && i < n; i++)
		rc = to_map(e, layout, nlayout, &bufs[i], i, named, &m[i], err,
			    errlen);
	if (rc == 0)
		rc = join_runs(m, &n, err, errlen);
	old = rc == 0 ? own_record(e) : NULL;
	if (rc == 0)
		rc = hostmem_view_write(pool_host_record(e->pool), m, n,
					pool_size(e->pool), e->epoch, err,
					errlen);
	if (rc == 0) {
		char rec[POOL_PATH_MAX + 1];

		/* Host memory replaces device memory: one registration. */
		if (e->gpu_registered &&
		    gpool_path_for(pool_path(e->pool), rec, sizeof rec) == 0)
			unlink(rec);
		e->gpu_registered = 0;
		e->host_registered = 1;
		if (old)
			pool_pages(e, old->map, old->n, 0);
		rc = pool_refresh(e->pool, err, errlen);
		if (rc == 0)
			pool_pages(e, m, n, 1);
	}
	free(old);
	free(named);
	free(m);
	return rc;
}

int kvw_unregister_host(struct kvw_engine *e)
{
	struct hostmem_rec *r;

	if (e == NULL)
		return KVW_EINVAL;
	r = e->host_registered ? own_record(e) : NULL;
	if (r == NULL)
		return KVW_ENOENT;
	(void)hostmem_view_write(pool_host_record(e->pool), NULL, 0,
				 pool_size(e->pool), e->epoch, NULL, 0);
	e->host_registered = 0;
	pool_pages(e, r->map, r->n, 0);
	free(r);
	return pool_refresh(e->pool, NULL, 0);
}

void api_mem_sweep(struct kvw_engine *e)
{
	struct hostmem_rec *r = own_record_any(e);
	pid_t pid;

	if (r == NULL)
		return;
	pid = (pid_t)r->pid;
	/* EPERM: another user's process has the pid, so it runs. */
	if (pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH)) {
		free(r);
		return;
	}
	(void)hostmem_view_write(pool_host_record(e->pool), NULL, 0,
				 pool_size(e->pool), e->epoch, NULL, 0);
	pool_pages(e, r->map, r->n, 0);
	free(r);
	hostmem_remove_allocs(pool_path(e->pool));
	(void)pool_refresh(e->pool, NULL, 0);
}

void api_mem_close(struct kvw_engine *e)
{
	if (e->pool == NULL)
		return; /* an open that failed: nothing was allocated */
	if (e->host_registered)
		(void)kvw_unregister_host(e);
	for (uint32_t i = 0; i < e->nallocs; i++)
		drop_alloc(pool_path(e->pool), &e->allocs[i]);
	free(e->allocs);
	e->allocs = NULL;
	e->nallocs = e->capallocs = 0;
}
