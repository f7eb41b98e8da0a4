/*
 * mem.c - regions (mem.h): the choice of backend per engine epoch, the
 * dispatch to it, and the host backend, for which there is nothing to map
 * (the transport maps the pool file itself) and nothing to stage.
 */
#include "mem_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mem_region_open(struct mem_region **out, const char *pool_path,
		    uint64_t size, unsigned flags, char *err, size_t errlen)
{
	struct mem_region *r;

	*out = NULL;
	if (pool_path == NULL || strlen(pool_path) > POOL_PATH_MAX)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"mem: not a pool path");
	r = calloc(1, sizeof *r);
	if (r == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "mem: out of memory");
	if (gmap_init(&r->m, pool_path, size) != 0) {
		free(r);
		return kvw_errf(err, errlen, KVW_EINVAL,
				"mem: %s is not a pool path", pool_path);
	}
	strcpy(r->path, pool_path);
	r->flags = flags;
	*out = r;
	return 0;
}

static const struct mem_backend *const backends[] = {
	&mem_host_backend,
	&mem_cuda_backend,
};

/* The engine registers device buffers by writing a record beside the
 * pool; without one its KV lives in the pool file. */
static const struct mem_backend *backend_now(const struct mem_region *r)
{
	return gmap_stale(&r->m) == KVW_ENOENT ? &mem_host_backend
					       : &mem_cuda_backend;
}

int mem_region_stale(const struct mem_region *r)
{
	int s;

	if (r->be == NULL)
		return 1;
	s = gmap_stale(&r->m);
	/* host: current while there is no record; cuda: while the record
	 * on disk is the one opened. */
	return r->be == &mem_host_backend ? s != KVW_ENOENT : s != 0;
}

void mem_region_unmap(struct mem_region *r)
{
	if (r->be != NULL)
		r->be->unmap(r);
	free(r->bufs);
	r->bufs = NULL;
	r->nbufs = 0;
	r->be = NULL;
}

int mem_region_map(struct mem_region *r, int device, char *err,
		   size_t errlen)
{
	const struct mem_backend *be;
	int rc;

	mem_region_unmap(r);
	be = backend_now(r);
	if ((rc = be->map(r, device, err, errlen))) {
		mem_region_unmap(r);
		return rc;
	}
	r->be = be;
	return 0;
}

int mem_region_refresh(struct mem_region *r, char *err, size_t errlen)
{
	return mem_region_stale(r) ? mem_region_map(r, MEM_DEV_RECORD, err,
						    errlen)
				   : 0;
}

uint32_t mem_region_bufs(const struct mem_region *r,
			 const struct mem_buf **bufs)
{
	*bufs = r->bufs;
	return r->nbufs;
}

const char *mem_region_backend(const struct mem_region *r)
{
	return r->be ? r->be->name : NULL;
}

int mem_region_on_gpu(const struct mem_region *r)
{
	return r->be == &mem_cuda_backend;
}

int mem_region_device(const struct mem_region *r)
{
	return mem_region_on_gpu(r) ? gpool_device(r->m.g) : -1;
}

uint64_t mem_region_epoch(const struct mem_region *r)
{
	return mem_region_on_gpu(r) ? gpool_epoch(r->m.g) : 0;
}

uint64_t mem_region_size(const struct mem_region *r)
{
	return r->m.size;
}

const char *mem_region_name(const struct mem_region *r)
{
	return mem_region_on_gpu(r) ? r->m.rec : r->path;
}

void *mem_region_device_at(const struct mem_region *r, uint64_t off,
			   uint64_t *run)
{
	if (r->be == NULL) {
		*run = off < r->m.size ? r->m.size - off : 0;
		return NULL;
	}
	return r->be->device_at(r, off, run);
}

static int stage(struct mem_region *r, uint64_t off, uint64_t len,
		 int to_host, char *err, size_t errlen)
{
	if (r->be == NULL)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"mem: %s is not mapped", r->path);
	return r->be->stage(r, off, len, to_host, err, errlen);
}

int mem_region_stage_to_host(struct mem_region *r, uint64_t off,
			     uint64_t len, char *err, size_t errlen)
{
	return stage(r, off, len, 1, err, errlen);
}

int mem_region_copy_to_device(struct mem_region *r, uint64_t off,
			      uint64_t len, char *err, size_t errlen)
{
	return stage(r, off, len, 0, err, errlen);
}

int mem_region_sync(struct mem_region *r, char *err, size_t errlen)
{
	return r->be ? r->be->sync(r, err, errlen) : 0;
}

int mem_region_dmabuf_fd(const struct mem_region *r, uint64_t base,
			 uint64_t size, int *fd, char *why, size_t whylen)
{
	*fd = -1;
	if (r->be == NULL) {
		snprintf(why, whylen, "%s is not mapped", r->path);
		return -1;
	}
	return r->be->dmabuf_fd(r, base, size, fd, why, whylen);
}

void mem_region_close(struct mem_region **rp)
{
	struct mem_region *r;

	if (rp == NULL || *rp == NULL)
		return;
	r = *rp;
	mem_region_unmap(r);
	/* What a backend kept across maps (cuda: the staging stream and its
	 * pinned view) goes with the region, whichever backend maps it now. */
	for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
		if (backends[i]->release)
			backends[i]->release(r);
	free(r);
	*rp = NULL;
}

/* ---- the host backend: the pool file is the memory ---- */

static int host_map(struct mem_region *r, int device, char *err,
		    size_t errlen)
{
	(void)device;
	r->bufs = calloc(1, sizeof *r->bufs);
	if (r->bufs == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "mem: out of memory");
	r->bufs[0] = (struct mem_buf){ .len = r->m.size,
				       .where = MEM_POOL,
				       .share = MEM_SHARE_SHM_PATH,
				       .device = -1 };
	r->nbufs = 1;
	return 0;
}

static void host_unmap(struct mem_region *r)
{
	(void)r;
}

static void *host_device_at(const struct mem_region *r, uint64_t off,
			    uint64_t *run)
{
	*run = off < r->m.size ? r->m.size - off : 0;
	return NULL;
}

static int host_stage(struct mem_region *r, uint64_t off, uint64_t len,
		      int to_host, char *err, size_t errlen)
{
	(void)r, (void)off, (void)len, (void)to_host, (void)err, (void)errlen;
	return 0;
}

static int host_sync(struct mem_region *r, char *err, size_t errlen)
{
	(void)r, (void)err, (void)errlen;
	return 0;
}

static int host_dmabuf_fd(const struct mem_region *r, uint64_t base,
			  uint64_t size, int *fd, char *why, size_t whylen)
{
	(void)base, (void)size, (void)fd;
	snprintf(why, whylen, "%s holds no GPU memory", r->path);
	return -1;
}

const struct mem_backend mem_host_backend = {
	.name = "host",
	.map = host_map,
	.unmap = host_unmap,
	.device_at = host_device_at,
	.stage = host_stage,
	.sync = host_sync,
	.dmabuf_fd = host_dmabuf_fd,
	.release = NULL,
};
