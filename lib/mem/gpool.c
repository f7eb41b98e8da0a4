/*
 * gpool.c - GPU pool records (see gpool.h): the argument check an engine's
 * registration goes through before CUDA is touched, the export that writes
 * a record, and the checked read the copying processes use.
 */
#include "gpool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_rt.h"
#include "base/le.h"

#define GPOOL_MAGIC "KVGP"
#define GPOOL_VERSION 1u
#define GPOOL_HDR 64u
#define GPOOL_ENT 96u

struct gpool {
	uint32_t n;
	int device;
	uint64_t epoch, pool_size, bytes, dev, ino;
	struct gpool_buf buf[]; /* n */
};

int gpool_check(const uint64_t *ptrs, const uint64_t *lens,
		const uint32_t *item_lens, uint32_t n, uint64_t pool_size,
		char *err, size_t errlen)
{
	uint64_t sum = 0;

	if (n == 0 || n > GPOOL_MAX)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"gpu pool: %u buffers (1..%u)", n, GPOOL_MAX);
	if (ptrs == NULL || lens == NULL || item_lens == NULL)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"gpu pool: pointers, lengths and item lengths "
				"are required");
	for (uint32_t i = 0; i < n; i++) {
		if (ptrs[i] == 0 || lens[i] == 0 || item_lens[i] == 0)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"gpu pool: buffer %u: NULL pointer or "
					"zero length",
					i);
		if (lens[i] % item_lens[i] != 0)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"gpu pool: buffer %u: length %llu is "
					"not a multiple of its item length %u",
					i, (unsigned long long)lens[i],
					item_lens[i]);
		if (ptrs[i] > UINT64_MAX - lens[i] || sum > UINT64_MAX - lens[i])
			return kvw_errf(err, errlen, KVW_EINVAL,
					"gpu pool: buffer %u: length overflows",
					i);
		sum += lens[i];
	}
	if (sum > pool_size)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"gpu pool: buffers hold %llu bytes, more than "
				"the pool's layout (%llu)",
				(unsigned long long)sum,
				(unsigned long long)pool_size);
	/* n <= 1024: the plain pairwise check is cheap enough for a
	 * registration. */
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = i + 1; j < n; j++)
			if (ptrs[i] < ptrs[j] + lens[j] &&
			    ptrs[j] < ptrs[i] + lens[i])
				return kvw_errf(err, errlen, KVW_EINVAL,
						"gpu pool: buffers %u and %u "
						"overlap",
						i, j);
	return 0;
}

int gpool_path_for(const char *pool_path, char *buf, size_t len)
{
	size_t n = pool_path ? strlen(pool_path) : 0;

	if (n < 5 || strcmp(pool_path + n - 5, ".pool") != 0 || n >= len)
		return KVW_EINVAL;
	memcpy(buf, pool_path, n - 5);
	memcpy(buf + n - 5, ".gpu", 5);
	return 0;
}

/* Fills one entry: the allocation holding the buffer and its handle. */
static int gp_export_one(const struct curt *rt, uint8_t *e, uint64_t ptr,
			 uint64_t len, uint32_t item_len, char *err,
			 size_t errlen)
{
	struct curt_ipc h;
	uint64_t base;
	size_t size;
	int rc;

	rc = curt_ok(rt, rt->mem_range(&base, &size, ptr),
		     "cuMemGetAddressRange", err, errlen);
	if (rc)
		return rc;
	if (ptr < base || ptr - base > size || len > size - (ptr - base))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"gpu pool: buffer at 0x%llx (%llu bytes) runs "
				"past its allocation",
				(unsigned long long)ptr,
				(unsigned long long)len);
	rc = curt_ok(rt, rt->ipc_get(&h, (void *)(uintptr_t)base),
		     "cudaIpcGetMemHandle", err, errlen);
	if (rc)
		return rc;
	le_put(e, len, 8);
	le_put(e + 8, item_len, 4);
	le_put(e + 16, ptr - base, 8);
	le_put(e + 24, size, 8);
	memcpy(e + 32, h.reserved, sizeof h.reserved);
	return 0;
}

static int gp_write(const char *path, const uint8_t *rec, size_t len,
		    char *err, size_t errlen)
{
	char tmp[KVW_MAX_STR * 4 + 32];
	int fd, rc = 0;

	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
		  0600);
	if (fd < 0)
		return kvw_errf(err, errlen, KVW_ESYS, "gpu pool: %s: %s", tmp,
				strerror(errno));
	if (write(fd, rec, len) != (ssize_t)len || close(fd) != 0 ||
	    rename(tmp, path) != 0) {
		rc = kvw_errf(err, errlen, KVW_ESYS, "gpu pool: write %s: %s",
			      path, strerror(errno));
		unlink(tmp);
	}
	return rc;
}

int gpool_export(const char *path, int device, const uint64_t *ptrs,
		 const uint64_t *lens, const uint32_t *item_lens, uint32_t n,
		 uint64_t pool_size, uint64_t epoch, char *err, size_t errlen)
{
	const struct curt *rt;
	uint64_t sum = 0;
	uint8_t *rec;
	size_t len;
	int rc, prev = 0;

	rc = gpool_check(ptrs, lens, item_lens, n, pool_size, err, errlen);
	if (rc)
		return rc;
	if (path == NULL || strlen(path) > KVW_MAX_STR * 4)
		return kvw_errf(err, errlen, KVW_EINVAL, "gpu pool: bad path");
	if (device < 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"gpu pool: device %d", device);
	rc = curt_get(&rt, err, errlen);
	if (rc)
		return rc;
	if (device >= rt->ndev)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"gpu pool: device %d of %d", device, rt->ndev);
	/* The engine's current device is its own: put it back after. */
	if ((rc = curt_ok(rt, rt->get_device(&prev), "cudaGetDevice", err,
			  errlen)) ||
	    (rc = curt_ok(rt, rt->set_device(device), "cudaSetDevice", err,
			  errlen)))
		return rc;
	len = GPOOL_HDR + (size_t)n * GPOOL_ENT;
	rec = calloc(1, len);
	if (rec == NULL) {
		rt->set_device(prev);
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < n && rc == 0; i++) {
		rc = gp_export_one(rt, rec + GPOOL_HDR + (size_t)i * GPOOL_ENT,
				   ptrs[i], lens[i], item_lens[i], err, errlen);
		sum += lens[i];
	}
	if (rc == 0) {
		memcpy(rec, GPOOL_MAGIC, 4);
		le_put(rec + 4, GPOOL_VERSION, 2);
		le_put(rec + 8, n, 4);
		le_put(rec + 12, (uint32_t)device, 4);
		le_put(rec + 16, (uint64_t)getpid(), 4);
		le_put(rec + 24, epoch, 8);
		le_put(rec + 32, pool_size, 8);
		le_put(rec + 40, sum, 8);
		rc = gp_write(path, rec, len, err, errlen);
	}
	free(rec);
	rt->set_device(prev);
	return rc;
}

/* Parses rec[len] (already read) into a new struct gpool. */
static int gp_parse(const uint8_t *rec, size_t len, struct gpool **out,
		    char *err, size_t errlen)
{
	uint64_t n, sum = 0;
	struct gpool *g;

	if (len < GPOOL_HDR || memcmp(rec, GPOOL_MAGIC, 4) != 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"gpu pool: not a record (%zu bytes)", len);
	if (le_get(rec + 4, 2) != GPOOL_VERSION)
		return kvw_errf(err, errlen, KVW_EVERSION,
				"gpu pool: record version %u, expected %u",
				(unsigned)le_get(rec + 4, 2), GPOOL_VERSION);
	n = le_get(rec + 8, 4);
	if (n == 0 || n > GPOOL_MAX || len != GPOOL_HDR + n * GPOOL_ENT)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"gpu pool: record of %zu bytes for %llu buffers",
				len, (unsigned long long)n);
	g = calloc(1, sizeof *g + n * sizeof g->buf[0]);
	if (g == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	g->n = (uint32_t)n;
	g->device = (int)(int32_t)le_get(rec + 12, 4);
	g->epoch = le_get(rec + 24, 8);
	g->pool_size = le_get(rec + 32, 8);
	g->bytes = le_get(rec + 40, 8);
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *e = rec + GPOOL_HDR + (size_t)i * GPOOL_ENT;
		struct gpool_buf *b = &g->buf[i];

		b->len = le_get(e, 8);
		b->item_len = (uint32_t)le_get(e + 8, 4);
		b->alloc_off = le_get(e + 16, 8);
		b->alloc_size = le_get(e + 24, 8);
		memcpy(b->handle, e + 32, sizeof b->handle);
		b->start = sum;
		if (b->len == 0 || b->item_len == 0 || b->len % b->item_len ||
		    b->alloc_off > b->alloc_size ||
		    b->len > b->alloc_size - b->alloc_off ||
		    sum > UINT64_MAX - b->len) {
			free(g);
			return kvw_errf(err, errlen, KVW_EINVAL,
					"gpu pool: record buffer %u is "
					"malformed",
					i);
		}
		sum += b->len;
	}
	if (g->device < 0 || sum != g->bytes || sum > g->pool_size) {
		free(g);
		return kvw_errf(err, errlen, KVW_EINVAL,
				"gpu pool: record totals do not add up");
	}
	*out = g;
	return 0;
}

int gpool_read(const char *path, struct gpool **out, char *err,
	       size_t errlen)
{
	uint8_t *rec = NULL;
	struct stat st;
	int fd, rc;

	*out = NULL;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return kvw_errf(err, errlen,
				errno == ENOENT ? KVW_ENOENT : KVW_ESYS,
				"gpu pool: %s: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > (off_t)(GPOOL_HDR + GPOOL_MAX * GPOOL_ENT)) {
		rc = kvw_errf(err, errlen, KVW_EINVAL,
			      "gpu pool: %s is not a record", path);
		goto out;
	}
	rec = malloc((size_t)st.st_size + 1);
	if (rec == NULL) {
		rc = kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
		goto out;
	}
	if (read(fd, rec, (size_t)st.st_size) != (ssize_t)st.st_size) {
		rc = kvw_errf(err, errlen, KVW_ESYS, "gpu pool: read %s: %s",
			      path, strerror(errno));
		goto out;
	}
	rc = gp_parse(rec, (size_t)st.st_size, out, err, errlen);
	if (rc == 0) {
		(*out)->dev = (uint64_t)st.st_dev;
		(*out)->ino = (uint64_t)st.st_ino;
	}
out:
	free(rec);
	close(fd);
	return rc;
}

uint32_t gpool_count(const struct gpool *g) { return g->n; }
const struct gpool_buf *gpool_buf_at(const struct gpool *g, uint32_t i)
{
	return i < g->n ? &g->buf[i] : NULL;
}
int gpool_device(const struct gpool *g) { return g->device; }
uint64_t gpool_epoch(const struct gpool *g) { return g->epoch; }
uint64_t gpool_pool_size(const struct gpool *g) { return g->pool_size; }
uint64_t gpool_bytes(const struct gpool *g) { return g->bytes; }

void gpool_ident(const struct gpool *g, uint64_t *dev, uint64_t *ino)
{
	*dev = g->dev;
	*ino = g->ino;
}

int64_t gpool_find(const struct gpool *g, uint64_t off)
{
	uint32_t lo = 0, hi = g->n;

	if (off >= g->bytes)
		return -1;
	while (hi - lo > 1) { /* last buffer whose start <= off */
		uint32_t mid = lo + (hi - lo) / 2;

		if (g->buf[mid].start <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

void gpool_free(struct gpool **g)
{
	if (g == NULL || *g == NULL)
		return;
	free(*g);
	*g = NULL;
}
