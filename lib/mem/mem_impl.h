/*
 * mem_impl.h - inside lib/mem: a region's fields and the memory backend's
 * operations (mem.h is the outside). mem.c holds the dispatch and the host
 * backend, mem_cuda.c the cuda backend.
 */
#ifndef KVW_MEM_IMPL_H
#define KVW_MEM_IMPL_H

#include "gpool_map.h"
#include "mem.h"
#include "pool.h"

/* A memory backend: how the buffers of one kind of memory are mapped in
 * a copying process and moved between it and the host. */
struct mem_backend {
	const char *name;
	/* Maps what the engine registered (r is unmapped); fills r->bufs. */
	int (*map)(struct mem_region *r, int device, char *err,
		   size_t errlen);
	/* Waits for the region's own queued copies, then unmaps. */
	void (*unmap)(struct mem_region *r);
	void *(*device_at)(const struct mem_region *r, uint64_t off,
			   uint64_t *run);
	int (*stage)(struct mem_region *r, uint64_t off, uint64_t len,
		     int to_host, char *err, size_t errlen);
	int (*sync)(struct mem_region *r, char *err, size_t errlen);
	int (*dmabuf_fd)(const struct mem_region *r, uint64_t base,
			 uint64_t size, int *fd, char *why, size_t whylen);
	/* Frees what the backend kept across maps (streams, pinning). */
	void (*release)(struct mem_region *r);
};

extern const struct mem_backend mem_host_backend;
extern const struct mem_backend mem_cuda_backend;

struct mem_stage; /* mem_cuda.c: the staging view and its stream */

struct mem_region {
	const struct mem_backend *be; /* of what is mapped; NULL: nothing */
	char path[POOL_PATH_MAX + 1];
	unsigned flags;
	struct gmap m;          /* the GPU record (its path, the pool size) */
	struct mem_buf *bufs;   /* what is mapped, in pool order */
	uint32_t nbufs;
	struct mem_stage *st;   /* MEM_STAGE, once a record was mapped */
};

#endif
