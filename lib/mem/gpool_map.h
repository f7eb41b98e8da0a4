/*
 * gpool_map.h - one host pool's GPU record (gpool.h), opened in a process
 * that copies: the record beside the pool, read and checked, and each of
 * its buffers' allocations opened with cudaIpcOpenMemHandle (an
 * allocation shared by several buffers once). The cuda transport keeps one
 * per local and remote pool; the tcp transport one per source pool (the
 * prefill worker) and the sink one for the decode pool.
 *
 * A record is an engine epoch: gmap_stale tells, with one stat, whether the
 * file on disk is still the one opened (a re-registration or a restarted
 * engine renames a new file into place). The caller quiesces its streams
 * before gmap_unload closes the handles: no queued copy may outlive the
 * mapping it reads or writes.
 *
 * The CUDA runtime stays behind this header (and gpu_queue.h): a transport
 * that copies to or from GPU memory includes no CUDA header (issue 31).
 */
#ifndef KVW_GPOOL_MAP_H
#define KVW_GPOOL_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "gpool.h"
#include "pool.h"

struct curt;

struct gmap {
	char rec[POOL_PATH_MAX + 1]; /* the record's path */
	uint64_t size;  /* host pool bytes: a record of another size is stale */
	struct gpool *g; /* NULL until loaded */
	void **map;      /* per buffer: the opened allocation (or NULL) */
	uint8_t **at;    /* per buffer: device address of its first byte */
	const struct curt *rt; /* the runtime that opened the handles */
};

/* Names the record of the pool at pool_path (of size bytes); loads
 * nothing. 0, or KVW_EINVAL (not a pool path). */
int gmap_init(struct gmap *m, const char *pool_path, uint64_t size);

/* 0: the loaded record is the one on disk; 1: there is a record and it is
 * not the loaded one (or none is loaded); KVW_ENOENT: there is no record
 * (the engine never registered a GPU pool, or it is gone). One stat. */
int gmap_stale(const struct gmap *m);

/* Reads the record on disk (untrusted: gpool_read checks it) into m, which
 * must be unloaded; a record for another pool size is KVW_ESTALE. Opens
 * nothing yet: the caller may pick the device first (gpool_device). */
int gmap_read(struct gmap *m, char *err, size_t errlen);

/* Opens every buffer's allocation of the record gmap_read loaded, on the
 * current device (gmap_set_device makes it the record's own). On failure
 * everything is unloaded. */
int gmap_open(struct gmap *m, char *err, size_t errlen);

/* Closes the handles and drops the record (m keeps its path and size).
 * The caller has waited for every copy touching it. Accepts an unloaded m. */
void gmap_unload(struct gmap *m);

/* Makes the loaded record's device the calling thread's current one. */
int gmap_set_device(const struct gmap *m, char *err, size_t errlen);

/* A dmabuf fd for the device range [base, base + size) of an opened
 * record (cuMemGetHandleForAddressRange through the runtime's driver entry
 * point), for a NIC to register. 0 and *fd (the caller closes it), or -1
 * with why (the runtime or driver lacks it, or it failed). */
int gmap_dmabuf_fd(const struct gmap *m, uint64_t base, uint64_t size,
		   int *fd, char *why, size_t whylen);

/* The device address of pool byte off and in *run how many bytes from it
 * lie in the same buffer; NULL (and *run the bytes up to the next buffer,
 * or to the pool's end) where off is host memory (the AUX slots). m is
 * loaded and opened. */
uint8_t *gmap_at(const struct gmap *m, uint64_t off, uint64_t *run);

#endif
