/*
 * mem.h - the memory a transport reads and writes: a *region*, the bytes
 * of one kvwire pool as this process reaches them, described as a list of
 * buffers and served by a memory backend.
 *
 * A pool's bytes [0, size) are laid out by the group plan (plan/layout.h).
 * Where they live is the engine's choice, made per engine epoch:
 *   - "host": in the pool file itself, which another process maps by its
 *     shm path (pool.h);
 *   - "cuda": in the engine's own device buffers, exported as CUDA IPC
 *     handles in a record beside the pool (gpool.h); pool bytes past the
 *     buffers (the AUX slots) stay in the pool file.
 * A transport never asks which. It maps the region before a batch (one
 * stat says whether the engine registered anew), and calls the operations
 * below; an operation that does not apply to the backend does nothing
 * (a host region has no device bytes to stage). The backends are an ops
 * table (mem_impl.h): a new kind of memory adds a backend there, and the
 * transports stay as they are.
 *
 * The CUDA runtime stays behind lib/mem: no transport includes a CUDA
 * header (mk/check-tree.sh rule 5).
 */
#ifndef KVW_MEM_H
#define KVW_MEM_H

#include <stddef.h>
#include <stdint.h>

/* Where a buffer lives. */
enum mem_where {
	MEM_POOL = 0, /* a kvwire pool file (host memory) */
	MEM_GPU = 1,  /* device memory an engine allocated */
};

/* How another process maps a buffer. */
enum mem_share {
	MEM_SHARE_SHM_PATH = 0, /* opens the pool file by its path */
	MEM_SHARE_CUDA_IPC = 1, /* opens its allocation's CUDA IPC handle */
};

/* One buffer of a region: pool bytes [start, start + len). */
struct mem_buf {
	uint64_t start;
	uint64_t len;
	uint32_t item_len; /* bytes per page; 0: not paged (AUX, the rest) */
	uint8_t where;     /* enum mem_where */
	uint8_t share;     /* enum mem_share */
	int32_t device;    /* GPU ordinal; -1 in host memory */
	/* Where this process reaches the first byte once mapped (a device
	 * address for MEM_GPU; 0 for the pool, which the transport maps
	 * itself), and the allocation holding the buffer, which a handle or
	 * a NIC registration covers whole. */
	uint64_t addr;
	uint64_t alloc_addr;
	uint64_t alloc_size;
};

/* The device mem_region_map opens GPU buffers on. */
#define MEM_DEV_RECORD (-1)  /* the engine's own device, made current */
#define MEM_DEV_CURRENT (-2) /* the calling thread's current device */

/* mem_region_open's flags. */
#define MEM_STAGE 1u /* this process moves device bytes through the pool
		      * file (tcp: stage-to-host, copy-to-device) */

struct mem_region; /* opaque */

/* For the pool at pool_path (size bytes); maps nothing yet. 0,
 * KVW_EINVAL (not a pool path) or KVW_ENOMEM; *out is the caller's
 * (mem_region_close). */
int mem_region_open(struct mem_region **out, const char *pool_path,
		    uint64_t size, unsigned flags, char *err, size_t errlen);

/* 0 when what is mapped is what the engine registered last; 1 when not
 * (nothing mapped yet, a new engine epoch, or the engine's GPU record
 * gone). One stat. */
int mem_region_stale(const struct mem_region *r);

/* Unmaps what was mapped (the caller waited for its own copies touching
 * it; the region's staging copies it waits for itself), then maps what
 * the engine registered last, through the backend that serves it; GPU
 * buffers are opened on `device` (MEM_DEV_RECORD or MEM_DEV_CURRENT).
 * 0, or the error (CUDA not available: KVW_ENODEV; a malformed record, a
 * record of another pool size: KVW_ESTALE; a handle that does not open)
 * with nothing mapped. */
int mem_region_map(struct mem_region *r, int device, char *err,
		   size_t errlen);

/* mem_region_map when mem_region_stale says so, on the engine's device:
 * the one call a transport that stages makes before each batch. */
int mem_region_refresh(struct mem_region *r, char *err, size_t errlen);

/* Unmaps (the same waits as mem_region_map); accepts an unmapped r. */
void mem_region_unmap(struct mem_region *r);

/* What is mapped: its buffers in pool order (none before the first map),
 * its backend's name ("host", "cuda"; NULL unmapped), 1 when some bytes
 * are on a GPU, that GPU, the engine epoch (0 for a host pool), the pool
 * size, and a name for messages (the record's path, or the pool's). */
uint32_t mem_region_bufs(const struct mem_region *r,
			 const struct mem_buf **bufs);
const char *mem_region_backend(const struct mem_region *r);
int mem_region_on_gpu(const struct mem_region *r);
int mem_region_device(const struct mem_region *r);
uint64_t mem_region_epoch(const struct mem_region *r);
uint64_t mem_region_size(const struct mem_region *r);
const char *mem_region_name(const struct mem_region *r);

/* The device address of pool byte off, and in *run how many bytes from
 * it lie in the same buffer; NULL where off is host memory (*run then
 * reaches the next device buffer or the pool's end). */
void *mem_region_device_at(const struct mem_region *r, uint64_t off,
			   uint64_t *run);

/* Staging (MEM_STAGE regions): queue the copies of the device bytes of
 * pool range [off, off + len) into the pool file at the same offsets
 * (stage-to-host: before a prefill sends them) or from it (copy-to-
 * device: after a decode received them); host bytes of the range are left
 * as they are. The range is inside the pool (the caller checked it).
 * mem_region_sync waits for every queued copy: only then may the bytes
 * count as moved. 0 or the CUDA error. */
int mem_region_stage_to_host(struct mem_region *r, uint64_t off,
			     uint64_t len, char *err, size_t errlen);
int mem_region_copy_to_device(struct mem_region *r, uint64_t off,
			      uint64_t len, char *err, size_t errlen);
int mem_region_sync(struct mem_region *r, char *err, size_t errlen);
/* 1 when the staging view is pinned (page-locked for DMA). */
int mem_region_pinned(const struct mem_region *r);

/* A dmabuf fd for the device range [base, base + size) of a mapped GPU
 * buffer, for a NIC to register: 0 and *fd (the caller closes it), or -1
 * with why (no GPU bytes, or the runtime or driver lacks it). */
int mem_region_dmabuf_fd(const struct mem_region *r, uint64_t base,
			 uint64_t size, int *fd, char *why, size_t whylen);

/* Unmaps and frees; *r = NULL. Accepts NULL and *r == NULL. */
void mem_region_close(struct mem_region **r);

#endif
