/*
 * gpool.h - engine-owned GPU pools. An engine keeps its KV cache in device
 * memory it allocated itself (SGLang: kv_data_ptrs, kv_data_lens,
 * kv_item_lens, one buffer per layer and K/V). It exports each buffer as a
 * CUDA IPC handle into a record file beside its control process's host pool
 * (/dev/shm/kvwire.<name>.pool -> /dev/shm/kvwire.<name>.gpu, mode 0600,
 * written whole and renamed into place). The buffers stand for the pool's
 * layout in order: buffer i holds pool bytes [sum of lens before i, + len i);
 * pool bytes past the last buffer (the AUX slots) stay in the host pool.
 *
 * The cuda transport (xport_cuda.c) reads the record in the processes that
 * copy (kv-sender's workers), opens the handles once per record (one record
 * = one engine epoch: a re-registration or a restarted engine writes a new
 * file, with a new epoch) and closes them when the record changes, goes
 * away, or the peer is disconnected.
 *
 * Record: a 64-byte header (magic "KVGP", version, count, device, pid,
 * epoch, pool size, bytes of all buffers), then per buffer 96 bytes (len,
 * item_len, offset inside its allocation, allocation size, 64-byte IPC
 * handle of the allocation), all little-endian.
 */
#ifndef KVW_GPOOL_H
#define KVW_GPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

#define GPOOL_MAX KVW_MAX_BUFFERS /* buffers in one GPU pool */

struct gpool; /* opaque: one parsed record */

/* One buffer of a record. */
struct gpool_buf {
	uint64_t len;        /* bytes */
	uint32_t item_len;   /* bytes per page (divides len) */
	uint64_t start;      /* first pool byte it holds */
	uint64_t alloc_off;  /* buffer start - allocation start */
	uint64_t alloc_size; /* bytes of the allocation the handle maps */
	uint8_t handle[64];  /* cudaIpcMemHandle_t of the allocation */
};

/* Checks an engine's registration without touching CUDA: n in
 * 1..GPOOL_MAX, no NULL array, every pointer non-zero, every len > 0,
 * item_len > 0 dividing len, ptr + len without overflow, no two buffers
 * overlapping, and the sum of lens (no overflow) at most pool_size (the
 * host pool whose layout the buffers stand for). 0, or KVW_EINVAL with the
 * first problem in err. */
int gpool_check(const uint64_t *ptrs, const uint64_t *lens,
		const uint32_t *item_lens, uint32_t n, uint64_t pool_size,
		char *err, size_t errlen);

/* The record path for a host pool path ("....pool" -> "....gpu") into
 * buf[len]. 0, or KVW_EINVAL (not a pool path, or too long). */
int gpool_path_for(const char *pool_path, char *buf, size_t len);

/* gpool_check, then (only then) loads the CUDA runtime, exports an IPC
 * handle for each buffer's allocation on `device` and writes the record to
 * `path` (atomically: a temporary file renamed over it) with this engine's
 * epoch. 0; KVW_EINVAL (arguments), KVW_ENODEV ("cuda: not available:
 * ..."), KVW_ESYS (a CUDA call or the file). Nothing is left at path's
 * temporary name on failure; an older record at path stays. */
int gpool_export(const char *path, int device, const uint64_t *ptrs,
		 const uint64_t *lens, const uint32_t *item_lens, uint32_t n,
		 uint64_t pool_size, uint64_t epoch, char *err, size_t errlen);

/* Reads and fully checks a record (untrusted bytes; a symlink is refused).
 * On success *out is the caller's (gpool_free). KVW_ENOENT (no record),
 * KVW_EVERSION, KVW_EINVAL (malformed), KVW_ENOMEM, KVW_ESYS. */
int gpool_read(const char *path, struct gpool **out, char *err,
	       size_t errlen);

/* Getters; the record keeps owning what they return. */
uint32_t gpool_count(const struct gpool *g);
const struct gpool_buf *gpool_buf_at(const struct gpool *g, uint32_t i);
int gpool_device(const struct gpool *g);
uint64_t gpool_epoch(const struct gpool *g);
uint64_t gpool_pool_size(const struct gpool *g);
uint64_t gpool_bytes(const struct gpool *g); /* sum of lens */
/* The file's identity when it was read (a rename makes a new one). */
void gpool_ident(const struct gpool *g, uint64_t *dev, uint64_t *ino);
/* The index of the buffer holding pool byte off, or -1 (off past the
 * buffers: host memory). */
int64_t gpool_find(const struct gpool *g, uint64_t off);

/* Frees *g, sets it NULL; accepts NULL and *g == NULL. */
void gpool_free(struct gpool **g);

#endif
