/*
 * hostmem.c - engine host memory (see hostmem.h): allocation files, the
 * record of which allocation holds which pool bytes, and laying those
 * allocations over a pool mapping.
 */
#include "hostmem.h"

#include <dirent.h>
#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/le.h"

#define HM_MAGIC "KVHM"
#define HM_VERSION 2u
#define HM_HDR 64u
#define HM_ENT 48u

uint64_t hostmem_page(void)
{
	long p = sysconf(_SC_PAGESIZE);

	return p > 0 ? (uint64_t)p : 4096u;
}

/* The pool path without its ".pool", checked. */
static int stem(const char *pool_path, size_t *n)
{
	*n = pool_path ? strlen(pool_path) : 0;
	if (*n < 6 || strcmp(pool_path + *n - 5, ".pool") != 0)
		return KVW_EINVAL;
	*n -= 5;
	return 0;
}

int hostmem_rec_path(const char *pool_path, char *buf, size_t len)
{
	size_t n;
	int w;

	if (stem(pool_path, &n) != 0)
		return KVW_EINVAL;
	w = snprintf(buf, len, "%.*s.host", (int)n, pool_path);
	return w < 0 || (size_t)w >= len ? KVW_EINVAL : 0;
}

int hostmem_alloc_path(const char *pool_path, uint64_t key, char *buf,
		       size_t len)
{
	size_t n;
	int w;

	/* Beside the pool and never a pool: a name ending in .pool is one. */
	if (stem(pool_path, &n) != 0)
		return KVW_EINVAL;
	w = snprintf(buf, len, "%s.m%016llx", pool_path,
		     (unsigned long long)key);
	return w < 0 || (size_t)w >= len ? KVW_EINVAL : 0;
}

int hostmem_alloc(const char *pool_path, uint64_t key, uint64_t size,
		  void **base, uint64_t *dev, uint64_t *ino, char *err,
		  size_t errlen)
{
	char path[4096];
	struct stat st;
	void *m;
	int fd, e, rc;

	*base = NULL;
	if (size == 0 || size % hostmem_page() != 0 || size > INT64_MAX ||
	    size > SIZE_MAX)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"host memory: %llu bytes is not a positive "
				"multiple of the %llu-byte page",
				(unsigned long long)size,
				(unsigned long long)hostmem_page());
	if (hostmem_alloc_path(pool_path, key, path, sizeof path) != 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"host memory: %s is not a pool path",
				pool_path ? pool_path : "(null)");
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
		  0600);
	if (fd < 0)
		return kvw_errf(err, errlen,
				errno == EEXIST ? KVW_EEXIST : KVW_ESYS,
				"host memory: unable to create %s: %s", path,
				strerror(errno));
	/* Reserve every byte: a full /dev/shm fails here, not as a SIGBUS
	 * in some worker's copy. */
	if (fchmod(fd, 0600) != 0 || fstat(fd, &st) != 0) {
		e = errno;
		rc = kvw_errf(err, errlen, KVW_ESYS, "host memory: %s: %s",
			      path, strerror(e));
		goto fail;
	}
	e = posix_fallocate(fd, 0, (off_t)size);
	if (e != 0) {
		rc = kvw_errf(err, errlen,
			      e == ENOSPC || e == EFBIG ? KVW_ENOMEM : KVW_ESYS,
			      "host memory: unable to reserve %llu bytes for "
			      "%s: %s",
			      (unsigned long long)size, path, strerror(e));
		goto fail;
	}
	m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_POPULATE, fd, 0);
	if (m == MAP_FAILED) {
		e = errno;
		rc = kvw_errf(err, errlen, e == ENOMEM ? KVW_ENOMEM : KVW_ESYS,
			      "host memory: unable to map %s: %s", path,
			      strerror(e));
		goto fail;
	}
	close(fd);
	*base = m;
	*dev = (uint64_t)st.st_dev;
	*ino = (uint64_t)st.st_ino;
	return 0;
fail:
	unlink(path);
	close(fd);
	return rc;
}

int hostmem_rec_check(const struct hostmem_map *maps, uint32_t n,
		      uint64_t pool_size, char *err, size_t errlen)
{
	uint64_t pg = hostmem_page(), end = 0;

	if (n == 0 || n > HOSTMEM_MAX || maps == NULL)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"host memory: %u mappings (1..%u)", n,
				HOSTMEM_MAX);
	for (uint32_t i = 0; i < n; i++) {
		const struct hostmem_map *m = &maps[i];

		if (m->len == 0 || m->start % pg || m->len % pg ||
		    m->file_off % pg)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"host memory: mapping %u (pool byte "
					"%llu, %llu bytes, file byte %llu) is "
					"not whole %llu-byte pages",
					i, (unsigned long long)m->start,
					(unsigned long long)m->len,
					(unsigned long long)m->file_off,
					(unsigned long long)pg);
		if (m->len > pool_size || m->start > pool_size - m->len ||
		    m->file_off > UINT64_MAX - m->len)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"host memory: mapping %u ends past "
					"the %llu-byte pool",
					i, (unsigned long long)pool_size);
		if (i > 0 && m->start < end)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"host memory: mapping %u overlaps or "
					"precedes the one before it",
					i);
		end = m->start + m->len;
	}
	return 0;
}

#define HM_SIZE (HM_HDR + HOSTMEM_MAX * HM_ENT)
#define HM_GEN 8 /* the generation's offset: 8-byte aligned */

struct hostmem_view {
	uint8_t *b; /* HM_SIZE bytes */
};

static _Atomic uint64_t *gen_word(const struct hostmem_view *v)
{
	return (_Atomic uint64_t *)(void *)(v->b + HM_GEN);
}

int hostmem_view_create(const char *path, uint64_t pool_size, char *err,
			size_t errlen)
{
	uint8_t hdr[HM_HDR] = { 0 };
	int fd, rc = 0;

	memcpy(hdr, HM_MAGIC, 4);
	le_put(hdr + 4, HM_VERSION, 2);
	le_put(hdr + 20, hostmem_page(), 4);
	le_put(hdr + 32, pool_size, 8);
	(void)unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
		  0600);
	if (fd < 0 || fchmod(fd, 0600) != 0 ||
	    posix_fallocate(fd, 0, HM_SIZE) != 0 ||
	    pwrite(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr)
		rc = kvw_errf(err, errlen, KVW_ESYS,
			      "host memory: making %s: %s", path,
			      strerror(errno));
	if (fd >= 0)
		close(fd);
	if (rc)
		unlink(path);
	return rc;
}

int hostmem_view_open(const char *path, int writable,
		      struct hostmem_view **out, char *err, size_t errlen)
{
	struct hostmem_view *v;
	struct stat st;
	void *m;
	int fd;

	*out = NULL;
	fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC |
				O_NOFOLLOW);
	if (fd < 0)
		return kvw_errf(err, errlen,
				errno == ENOENT ? KVW_ENOENT : KVW_ESYS,
				"host memory: %s: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size != HM_SIZE) {
		close(fd);
		return kvw_errf(err, errlen, KVW_EINVAL,
				"host memory: %s is not a record file", path);
	}
	m = mmap(NULL, HM_SIZE, PROT_READ | (writable ? PROT_WRITE : 0),
		 MAP_SHARED, fd, 0);
	close(fd);
	v = m == MAP_FAILED ? NULL : malloc(sizeof *v);
	if (v == NULL) {
		if (m != MAP_FAILED)
			munmap(m, HM_SIZE);
		return kvw_errf(err, errlen, KVW_ESYS,
				"host memory: mapping %s failed", path);
	}
	v->b = m;
	*out = v;
	return 0;
}

uint64_t hostmem_view_gen(const struct hostmem_view *v)
{
	return atomic_load_explicit(gen_word(v), memory_order_acquire);
}

int hostmem_view_write(struct hostmem_view *v, const struct hostmem_map *maps,
		       uint32_t n, uint64_t pool_size, uint64_t epoch,
		       char *err, size_t errlen)
{
	uint64_t g;
	int rc;

	if (n > 0 && (rc = hostmem_rec_check(maps, n, pool_size, err, errlen)))
		return rc;
	/* Odd while writing: a reader that sees it, or sees it change,
	 * reads again later. */
	g = atomic_load_explicit(gen_word(v), memory_order_relaxed);
	g += g & 1 ? 2 : 1;
	atomic_store_explicit(gen_word(v), g, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	le_put(v->b + 16, n, 4);
	le_put(v->b + 20, hostmem_page(), 4);
	le_put(v->b + 24, epoch, 8);
	le_put(v->b + 32, pool_size, 8);
	le_put(v->b + 40, (uint64_t)getpid(), 4);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *p = v->b + HM_HDR + (size_t)i * HM_ENT;

		le_put(p, maps[i].start, 8);
		le_put(p + 8, maps[i].len, 8);
		le_put(p + 16, maps[i].file_off, 8);
		le_put(p + 24, maps[i].key, 8);
		le_put(p + 32, maps[i].dev, 8);
		le_put(p + 40, maps[i].ino, 8);
	}
	atomic_store_explicit(gen_word(v), g + 1, memory_order_release);
	return 0;
}

/* Checks a copy of the record's bytes. */
static int parse(const uint8_t *b, uint64_t pool_size,
		 struct hostmem_rec **out, char *err, size_t errlen)
{
	struct hostmem_rec *r;
	uint32_t n;
	int rc;

	if (memcmp(b, HM_MAGIC, 4) != 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"host memory: not a record");
	if (le_get(b + 4, 2) != HM_VERSION)
		return kvw_errf(err, errlen, KVW_EVERSION,
				"host memory: record version %llu, expected "
				"%u",
				(unsigned long long)le_get(b + 4, 2),
				HM_VERSION);
	n = (uint32_t)le_get(b + 16, 4);
	if (n == 0)
		return 0; /* nothing registered */
	if (n > HOSTMEM_MAX)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"host memory: record of %u mappings (at most "
				"%u)",
				n, HOSTMEM_MAX);
	if (le_get(b + 20, 4) != hostmem_page())
		return kvw_errf(err, errlen, KVW_EINVAL,
				"host memory: record made with %llu-byte "
				"pages, this process has %llu",
				(unsigned long long)le_get(b + 20, 4),
				(unsigned long long)hostmem_page());
	if (le_get(b + 32, 8) != pool_size)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"host memory: record for a pool of %llu "
				"bytes, this one has %llu",
				(unsigned long long)le_get(b + 32, 8),
				(unsigned long long)pool_size);
	r = calloc(1, sizeof *r + (size_t)n * sizeof r->map[0]);
	if (r == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	r->n = n;
	r->epoch = le_get(b + 24, 8);
	r->pid = (uint32_t)le_get(b + 40, 4);
	r->pool_size = pool_size;
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *p = b + HM_HDR + (size_t)i * HM_ENT;

		r->map[i] = (struct hostmem_map){
			le_get(p, 8),	   le_get(p + 8, 8),
			le_get(p + 16, 8), le_get(p + 24, 8),
			le_get(p + 32, 8), le_get(p + 40, 8),
		};
	}
	rc = hostmem_rec_check(r->map, n, pool_size, err, errlen);
	if (rc) {
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

int hostmem_view_read(const struct hostmem_view *v, uint64_t pool_size,
		      struct hostmem_rec **out, uint64_t *gen, char *err,
		      size_t errlen)
{
	uint8_t *copy;
	uint64_t g1, g2;
	size_t len;
	int rc;

	*out = NULL;
	copy = malloc(HM_SIZE);
	if (copy == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	for (int tries = 0; tries < 64; tries++) {
		g1 = hostmem_view_gen(v);
		if (g1 & 1)
			continue;
		len = HM_HDR + (size_t)HM_ENT *
				       (le_get(v->b + 16, 4) < HOSTMEM_MAX
						? le_get(v->b + 16, 4)
						: HOSTMEM_MAX);
		memcpy(copy, v->b, len);
		atomic_thread_fence(memory_order_acquire);
		g2 = atomic_load_explicit(gen_word(v), memory_order_relaxed);
		if (g1 != g2)
			continue;
		/* The count copied, not the one read before: they agree
		 * unless the engine wrote meanwhile, which g2 rules out. */
		rc = parse(copy, pool_size, out, err, errlen);
		free(copy);
		*gen = g1;
		return rc;
	}
	free(copy);
	return kvw_errf(err, errlen, KVW_EAGAIN,
			"host memory: the engine is rewriting its record");
}

void hostmem_view_close(struct hostmem_view **v)
{
	if (v == NULL || *v == NULL)
		return;
	munmap((*v)->b, HM_SIZE);
	free(*v);
	*v = NULL;
}

/* Opens allocation m->key for m and checks it is the file the record
 * names and reaches past m's bytes: the fd, or a negative error. */
static int open_alloc(const char *pool_path, const struct hostmem_map *m,
		      int writable, char *err, size_t errlen)
{
	char path[4096];
	struct stat st;
	int fd;

	if (hostmem_alloc_path(pool_path, m->key, path, sizeof path) != 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"host memory: %s is not a pool path",
				pool_path);
	fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC |
				O_NOFOLLOW);
	if (fd < 0)
		return kvw_errf(err, errlen,
				errno == ENOENT ? KVW_ESTALE : KVW_ESYS,
				"host memory: engine allocation %s: %s", path,
				strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_dev != m->dev || (uint64_t)st.st_ino != m->ino ||
	    st.st_uid != geteuid() || (st.st_mode & 077) != 0 ||
	    (uint64_t)st.st_size < m->file_off + m->len) {
		close(fd);
		return kvw_errf(err, errlen, KVW_ESTALE,
				"host memory: %s is not the engine allocation "
				"its record names (replaced, another user's, "
				"open to others, or shorter than %llu bytes)",
				path,
				(unsigned long long)(m->file_off + m->len));
	}
	return fd;
}

/* Lays the pool's own pages back over rec's first n mappings. */
static int restore_n(void *base, int writable, int pool_fd,
		     const struct hostmem_rec *rec, uint32_t n, char *err,
		     size_t errlen)
{
	int prot = PROT_READ | (writable ? PROT_WRITE : 0);
	int rc = 0;

	for (uint32_t i = 0; i < n; i++) {
		const struct hostmem_map *m = &rec->map[i];

		if (mmap((uint8_t *)base + m->start, (size_t)m->len, prot,
			 MAP_SHARED | MAP_FIXED | MAP_POPULATE, pool_fd,
			 (off_t)m->start) == MAP_FAILED && rc == 0)
			rc = kvw_errf(err, errlen, KVW_ESYS,
				      "host memory: restoring pool bytes "
				      "%llu..: %s",
				      (unsigned long long)m->start,
				      strerror(errno));
	}
	return rc;
}

int hostmem_restore(void *base, int writable, int pool_fd,
		    const struct hostmem_rec *rec, char *err, size_t errlen)
{
	return restore_n(base, writable, pool_fd, rec, rec->n, err, errlen);
}

int hostmem_overlay(void *base, int writable, int pool_fd,
		    const char *pool_path, const struct hostmem_rec *rec,
		    char *err, size_t errlen)
{
	int prot = PROT_READ | (writable ? PROT_WRITE : 0);
	uint32_t i;
	int rc = 0;

	for (i = 0; i < rec->n; i++) {
		const struct hostmem_map *m = &rec->map[i];
		int fd = open_alloc(pool_path, m, writable, err, errlen);

		if (fd < 0) {
			rc = fd;
			break;
		}
		if (mmap((uint8_t *)base + m->start, (size_t)m->len, prot,
			 MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd,
			 (off_t)m->file_off) == MAP_FAILED)
			rc = kvw_errf(err, errlen, KVW_ESYS,
				      "host memory: mapping allocation "
				      "%016llx: %s",
				      (unsigned long long)m->key,
				      strerror(errno));
		close(fd);
		if (rc)
			break;
	}
	/* The ranges laid so far go back to the pool's own pages: a copy
	 * must never reach half an engine's memory. */
	if (rc)
		(void)restore_n(base, writable, pool_fd, rec, i, NULL, 0);
	return rc;
}

void hostmem_remove_allocs(const char *pool_path)
{
	const char *slash = strrchr(pool_path, '/');
	char dir[4096], path[4096];
	size_t blen;
	struct dirent *d;
	DIR *dp;

	if (slash == NULL || (size_t)(slash - pool_path) >= sizeof dir)
		return;
	snprintf(dir, sizeof dir, "%.*s", (int)(slash - pool_path) + 1,
		 pool_path);
	blen = strlen(slash + 1);
	dp = opendir(dir);
	if (dp == NULL)
		return;
	while ((d = readdir(dp)) != NULL)
		if (strncmp(d->d_name, slash + 1, blen) == 0 &&
		    strncmp(d->d_name + blen, ".m", 2) == 0 &&
		    strlen(d->d_name + blen) == 18 &&
		    snprintf(path, sizeof path, "%s%s", dir, d->d_name) <
			    (int)sizeof path)
			unlink(path);
	closedir(dp);
}

void hostmem_remove_all(const char *pool_path)
{
	char path[4096];

	if (hostmem_rec_path(pool_path, path, sizeof path) == 0)
		unlink(path);
	hostmem_remove_allocs(pool_path);
}
