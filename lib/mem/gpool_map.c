/*
 * gpool_map.c - a pool's GPU record opened in a copying process (see
 * gpool_map.h).
 */
#include "gpool_map.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cuda_rt.h"

int gmap_init(struct gmap *m, const char *pool_path, uint64_t size)
{
	*m = (struct gmap){ .size = size };
	return gpool_path_for(pool_path, m->rec, sizeof m->rec) ? KVW_EINVAL
								 : 0;
}

int gmap_stale(const struct gmap *m)
{
	uint64_t dev = 0, ino = 0;
	struct stat st;

	if (stat(m->rec, &st) != 0)
		return KVW_ENOENT;
	if (m->g == NULL)
		return 1;
	gpool_ident(m->g, &dev, &ino);
	return dev == (uint64_t)st.st_dev && ino == (uint64_t)st.st_ino ? 0
									 : 1;
}

int gmap_read(struct gmap *m, char *err, size_t errlen)
{
	struct gpool *g = NULL;
	int rc = gpool_read(m->rec, &g, err, errlen);

	if (rc)
		return rc;
	if (gpool_pool_size(g) != m->size) {
		gpool_free(&g);
		return kvw_errf(err, errlen, KVW_ESTALE,
				"cuda: %s was registered for another pool size",
				m->rec);
	}
	m->g = g;
	return 0;
}

int gmap_open(struct gmap *m, char *err, size_t errlen)
{
	uint32_t n = gpool_count(m->g);
	const struct curt *rt;
	int rc = curt_get(&rt, err, errlen);

	if (rc)
		return rc;
	m->rt = rt;
	m->map = calloc(n, sizeof *m->map);
	m->at = calloc(n, sizeof *m->at);
	if (!m->map || !m->at)
		rc = kvw_errf(err, errlen, KVW_ENOMEM, "cuda: out of memory");
	for (uint32_t i = 0; i < n && rc == 0; i++) {
		const struct gpool_buf *b = gpool_buf_at(m->g, i);
		struct curt_ipc h;
		uint8_t *base = NULL;

		/* Buffers of one allocation share its handle: open it once. */
		for (uint32_t j = 0; j < i && !base; j++)
			if (!memcmp(gpool_buf_at(m->g, j)->handle, b->handle,
				    sizeof b->handle))
				base = m->at[j] - gpool_buf_at(m->g, j)->alloc_off;
		if (base == NULL) {
			memcpy(h.reserved, b->handle, sizeof h.reserved);
			rc = curt_ok(rt,
				     rt->ipc_open(&m->map[i], h,
						  CURT_IPC_LAZY_PEER),
				     "cudaIpcOpenMemHandle", err, errlen);
			base = m->map[i];
		}
		if (rc == 0)
			m->at[i] = base + b->alloc_off;
	}
	if (rc)
		gmap_unload(m);
	return rc;
}

void gmap_unload(struct gmap *m)
{
	if (m->g != NULL && m->map != NULL && m->rt != NULL)
		for (uint32_t i = 0; i < gpool_count(m->g); i++)
			if (m->map[i] != NULL)
				m->rt->ipc_close(m->map[i]);
	free(m->map);
	free(m->at);
	m->map = NULL;
	m->at = NULL;
	gpool_free(&m->g);
}

uint8_t *gmap_at(const struct gmap *m, uint64_t off, uint64_t *run)
{
	int64_t i = gpool_find(m->g, off);
	const struct gpool_buf *b;

	if (i < 0) {
		*run = off < m->size ? m->size - off : 0;
		return NULL;
	}
	b = gpool_buf_at(m->g, (uint32_t)i);
	*run = b->start + b->len - off;
	return m->at[i] + (off - b->start);
}

int gmap_set_device(const struct gmap *m, char *err, size_t errlen)
{
	const struct curt *rt;
	int rc = curt_get(&rt, err, errlen);

	return rc ? rc
		  : curt_ok(rt, rt->set_device(gpool_device(m->g)),
			    "cudaSetDevice", err, errlen);
}

int gmap_dmabuf_fd(const struct gmap *m, uint64_t base, uint64_t size,
		   int *fd, char *why, size_t whylen)
{
	curt_range_handle_fn fn;
	void *p = NULL;
	int rc, status = 0;

	*fd = -1;
	if (m->rt == NULL || !m->rt->get_driver_entry) {
		snprintf(why, whylen,
			 "the CUDA runtime has no cudaGetDriverEntryPoint");
		return -1;
	}
	rc = m->rt->get_driver_entry("cuMemGetHandleForAddressRange", &p,
				     CURT_ENTRY_DEFAULT, &status);
	if (rc != CURT_SUCCESS || status != 0 || p == NULL) {
		snprintf(why, whylen,
			 "the driver has no cuMemGetHandleForAddressRange "
			 "(cudaGetDriverEntryPoint: error %d, status %d)",
			 rc, status);
		return -1;
	}
	memcpy(&fn, &p, sizeof fn);
	rc = fn(fd, base, (size_t)size, CURT_RANGE_DMA_BUF_FD, 0);
	if (rc != 0 || *fd < 0) {
		snprintf(why, whylen,
			 "cuMemGetHandleForAddressRange(DMA_BUF_FD) failed "
			 "(CUresult %d)",
			 rc);
		*fd = -1;
		return -1;
	}
	return 0;
}
