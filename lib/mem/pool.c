/*
 * pool.c - KV pools as shared-memory files. Creation is exclusive and
 * reserves the whole size with posix_fallocate before mapping, so a pool
 * that exists is fully backed: a later copy into it never faults for lack of
 * space in /dev/shm. Every mapping is populated up front (pool_map; an
 * engine's laid host memory aside, map_existing). Any
 * failure unwinds completely (no half-made file).
 */
#include "pool.h"
#include "hostmem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct pool {
	int fd;
	int writable;
	void *base;
	uint64_t size;
	char path[POOL_PATH_MAX + 1];
	/* Engine host memory laid over the pool (hostmem.h): the record
	 * (NULL: the pool has none), what is laid and the record's
	 * generation it was read at. */
	struct hostmem_view *rec;
	struct hostmem_rec *laid;
	uint64_t laid_gen;
};

int pool_path_for(const char *name, char *buf, size_t len)
{
	int n;

	if (name == NULL || name[0] == '\0' || buf == NULL || len == 0)
		return KVW_EINVAL;
	if (strchr(name, '/') != NULL)
		n = snprintf(buf, len, "%s", name);
	else
		n = snprintf(buf, len, "/dev/shm/kvwire.%s.pool", name);
	if (n < 0 || (size_t)n >= len || (size_t)n > POOL_PATH_MAX)
		return KVW_EINVAL;
	return 0;
}

int pool_name_ok(const char *path)
{
	const char *b = strrchr(path, '/');
	size_t n;

	if (path[0] != '/' || !b)
		return 0;
	b++;
	n = strlen(b);
	return n > 12 && strncmp(b, "kvwire.", 7) == 0 &&
	       strcmp(b + n - 5, ".pool") == 0;
}

/* Maps a pool with every page in place (MAP_POPULATE). Workers and engines
 * copy into pools page by page; faulting a mapping in 4 KiB at a time costs a
 * trap per page in each process that maps it (about 11 us per write fault in
 * a VM here: 2.9 s per GiB, against 0.03 s to populate a GiB whose pages
 * exist), and the demo workload spent a fifth of its CPU on those faults.
 * The creator's mapping also zeroes every page, once, when the pool is made
 * (0.67 s per GiB here) instead of on some room's first copy. */
static void *pool_map(int fd, uint64_t size, int writable)
{
	return mmap(NULL, (size_t)size,
		    PROT_READ | (writable ? PROT_WRITE : 0),
		    MAP_SHARED | MAP_POPULATE, fd, 0);
}

/* Allocates a pool with its path filled and nothing open. */
static int pool_new(const char *name, struct pool **out, char *err,
		    size_t errlen)
{
	struct pool *p;

	*out = NULL;
	p = calloc(1, sizeof *p);
	if (p == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "pool: out of memory");
	p->fd = -1;
	p->base = MAP_FAILED;
	if (pool_path_for(name, p->path, sizeof p->path) != 0) {
		free(p);
		return kvw_errf(err, errlen, KVW_EINVAL,
				"pool: bad name or path too long");
	}
	*out = p;
	return 0;
}

/* Makes and maps the pool's host memory record (fresh: nothing
 * registered). */
static int record_make(struct pool *p, char *err, size_t errlen)
{
	char rec[POOL_PATH_MAX + 8];
	int rc;

	if (hostmem_rec_path(p->path, rec, sizeof rec) != 0)
		return 0; /* a pool path kvwire made no record for */
	rc = hostmem_view_create(rec, p->size, err, errlen);
	if (rc == 0)
		rc = hostmem_view_open(rec, 1, &p->rec, err, errlen);
	return rc;
}

/* Maps the pool's record where it has one (a pool a control process
 * made); none is not an error (host memory can then not be laid). */
static int record_open(struct pool *p, char *err, size_t errlen)
{
	char rec[POOL_PATH_MAX + 8];
	int rc;

	if (hostmem_rec_path(p->path, rec, sizeof rec) != 0)
		return 0;
	rc = hostmem_view_open(rec, p->writable, &p->rec, err, errlen);
	return rc == KVW_ENOENT ? 0 : rc;
}

int pool_create(const char *path, uint64_t size, struct pool **out, char *err,
		size_t errlen)
{
	struct pool *p;
	int rc, e;

	*out = NULL;
	if (size == 0 || size > (uint64_t)INT64_MAX || size > SIZE_MAX)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"pool: invalid size %llu",
				(unsigned long long)size);
	rc = pool_new(path, &p, err, errlen);
	if (rc != 0)
		return rc;
	p->size = size;
	p->writable = 1;

	p->fd = open(p->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (p->fd < 0) {
		e = errno;
		rc = kvw_errf(err, errlen, e == EEXIST ? KVW_EEXIST : KVW_ESYS,
			      "pool: unable to create %s: %s", p->path,
			      strerror(e));
		goto fail_free;
	}
	if (fchmod(p->fd, 0600) != 0) { /* umask may have taken bits away */
		e = errno;
		rc = kvw_errf(err, errlen, KVW_ESYS, "pool: chmod %s: %s",
			      p->path, strerror(e));
		goto fail_unlink;
	}
	/* Reserve every page now: a full /dev/shm fails here, not as a SIGBUS
	 * on the first copy. posix_fallocate returns the error number. */
	e = posix_fallocate(p->fd, 0, (off_t)size);
	if (e != 0) {
		rc = kvw_errf(err, errlen,
			      e == ENOSPC || e == EFBIG ? KVW_ENOMEM : KVW_ESYS,
			      "pool: unable to reserve %llu bytes for %s: %s",
			      (unsigned long long)size, p->path, strerror(e));
		goto fail_unlink;
	}
	p->base = pool_map(p->fd, size, 1);
	if (p->base == MAP_FAILED) {
		e = errno;
		rc = kvw_errf(err, errlen, e == ENOMEM ? KVW_ENOMEM : KVW_ESYS,
			      "pool: unable to map %s: %s", p->path,
			      strerror(e));
		goto fail_unlink;
	}
	*out = p;
	return 0;

fail_unlink:
	unlink(p->path);
fail_free:
	pool_close(&p);
	errno = e;
	return rc;
}

/* Populates [off, off + len) of p's mapping as pool_map would have. */
static void populate(struct pool *p, uint64_t off, uint64_t len)
{
	volatile const uint8_t *b = (const uint8_t *)p->base + off;

	if (len == 0 ||
	    madvise((uint8_t *)p->base + off, (size_t)len,
		    p->writable ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) ==
		    0)
		return;
	/* A kernel without MADV_POPULATE_* (before 5.14): a read a page. */
	for (uint64_t i = 0; i < len; i += hostmem_page())
		(void)b[i];
}

/* Maps an existing pool for pool_open: where the engine has registered
 * host memory for some of it (the record), those ranges are laid first
 * and only the pool's own ranges are populated, so a process that maps the
 * pool after the registration does not take back the pages the engine
 * gave back to /dev/shm (api_mem.c). */
static int map_existing(struct pool *p, char *err, size_t errlen)
{
	uint64_t at = 0;
	int rc;

	p->base = mmap(NULL, (size_t)p->size,
		       PROT_READ | (p->writable ? PROT_WRITE : 0), MAP_SHARED,
		       p->fd, 0);
	if (p->base == MAP_FAILED) {
		int e = errno;

		return kvw_errf(err, errlen,
				e == ENOMEM ? KVW_ENOMEM : KVW_ESYS,
				"pool: unable to map %s: %s", p->path,
				strerror(e));
	}
	rc = record_open(p, err, errlen);
	if (rc)
		return rc;
	/* A record that does not lay now is told at the first batch. */
	if (p->rec && pool_refresh(p, NULL, 0) == 0 && p->laid)
		for (uint32_t i = 0; i < p->laid->n; i++) {
			populate(p, at, p->laid->map[i].start - at);
			at = p->laid->map[i].start + p->laid->map[i].len;
		}
	populate(p, at, p->size - at);
	return 0;
}

int pool_open(const char *path, int writable, struct pool **out, char *err,
	      size_t errlen)
{
	struct pool *p;
	struct stat st;
	int rc, e;

	*out = NULL;
	rc = pool_new(path, &p, err, errlen);
	if (rc != 0)
		return rc;
	p->writable = writable;
	p->fd = open(p->path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC |
			     O_NOFOLLOW);
	if (p->fd < 0) {
		e = errno;
		rc = kvw_errf(err, errlen, e == ENOENT ? KVW_ENOENT : KVW_ESYS,
			      "pool: unable to open %s: %s", p->path,
			      strerror(e));
		goto fail;
	}
	if (fstat(p->fd, &st) != 0) {
		e = errno;
		rc = kvw_errf(err, errlen, KVW_ESYS, "pool: stat %s: %s",
			      p->path, strerror(e));
		goto fail;
	}
	if (!S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    (uint64_t)st.st_size > SIZE_MAX) {
		rc = kvw_errf(err, errlen, KVW_EINVAL,
			      "pool: %s is not a non-empty regular file",
			      p->path);
		goto fail;
	}
	p->size = (uint64_t)st.st_size;
	rc = map_existing(p, err, errlen);
	if (rc)
		goto fail;
	*out = p;
	return 0;

fail:
	pool_close(&p);
	return rc;
}

void *pool_base(const struct pool *p)
{
	return p->base;
}

uint64_t pool_size(const struct pool *p)
{
	return p->size;
}

const char *pool_path(const struct pool *p)
{
	return p->path;
}

int pool_fd(const struct pool *p)
{
	return p->fd;
}

void pool_close(struct pool **pp)
{
	struct pool *p;

	if (pp == NULL || *pp == NULL)
		return;
	p = *pp;
	if (p->base != MAP_FAILED)
		munmap(p->base, (size_t)p->size); /* overlays with it */
	if (p->fd >= 0)
		close(p->fd);
	free(p->laid);
	hostmem_view_close(&p->rec);
	free(p);
	*pp = NULL;
}

/* Drops what is laid over p: the pool's own pages back. */
static int unlay(struct pool *p, char *err, size_t errlen)
{
	int rc = 0;

	if (p->laid)
		rc = hostmem_restore(p->base, p->writable, p->fd, p->laid, err,
				     errlen);
	free(p->laid);
	p->laid = NULL;
	return rc;
}

int pool_refresh(struct pool *p, char *err, size_t errlen)
{
	struct hostmem_rec *rec;
	uint64_t gen;
	int rc, r2;

	/* The steady state: one load, no system call. */
	if (p->rec == NULL || hostmem_view_gen(p->rec) == p->laid_gen)
		return 0;
	rc = hostmem_view_read(p->rec, p->size, &rec, &gen, err, errlen);
	/* What was laid goes whatever the record says now: a batch never
	 * moves bytes by a registration the engine has replaced. */
	r2 = unlay(p, rc ? NULL : err, errlen);
	if (rc == 0)
		rc = r2;
	if (rc == 0 && rec)
		rc = hostmem_overlay(p->base, p->writable, p->fd, p->path, rec,
				     err, errlen);
	if (rc) {
		/* Nothing laid, and the next batch tries again. */
		free(rec);
		return rc;
	}
	p->laid = rec;
	p->laid_gen = gen;
	return 0;
}

struct hostmem_view *pool_host_record(struct pool *p)
{
	return p->rec;
}

int pool_overlaid(const struct pool *p)
{
	return p->laid != NULL;
}

int pool_unlink(const char *path)
{
	char buf[POOL_PATH_MAX + 1];

	if (pool_path_for(path, buf, sizeof buf) != 0)
		return KVW_EINVAL;
	/* An engine's host memory goes with its pool (hostmem.h). */
	hostmem_remove_all(buf);
	if (unlink(buf) != 0)
		return errno == ENOENT ? KVW_ENOENT : KVW_ESYS;
	return 0;
}

int pool_adopt(const char *path, uint64_t size, struct pool **out,
	       int *reused, char *err, size_t errlen)
{
	struct stat st;
	int rc;

	*out = NULL;
	*reused = 0;
	if (pool_open(path, 1, out, NULL, 0) == 0) {
		if (pool_size(*out) == size && fstat(pool_fd(*out), &st) == 0 &&
		    st.st_uid == geteuid() && (st.st_mode & 0077) == 0 &&
		    ((*out)->rec || record_make(*out, NULL, 0) == 0)) {
			*reused = 1;
			return 0;
		}
		pool_close(out);
	}
	rc = pool_unlink(path);
	if (rc < 0 && rc != KVW_ENOENT)
		return kvw_errf(err, errlen, rc,
				"pool: unable to remove the "
				"stale pool %s",
				path);
	rc = pool_create(path, size, out, err, errlen);
	/* A control process's pool gets the record of the engine's host
	 * memory with it, so every process that maps the pool maps the
	 * record too (hostmem.h). */
	if (rc == 0 && (rc = record_make(*out, err, errlen)) != 0) {
		pool_close(out);
		(void)pool_unlink(path);
	}
	return rc;
}
