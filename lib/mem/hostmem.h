/*
 * hostmem.h - engine host memory that the group's processes can map: the
 * allocations an engine gets from kvwire (kvw_alloc) and the record that
 * says which of them hold which bytes of its pool (kvw_register_host).
 *
 * An allocation is a file beside the pool: <pool path>.m<16 hex digits>
 * (mode 0600, every byte reserved, mapped MAP_SHARED), so a worker of
 * another process, even of the peer group on this host, opens it by a
 * name that only the pool's path and a key make; no descriptor has to be
 * passed and no record can name any other file.
 *
 * The record, <pool path without .pool>.host, is a shared-memory file of
 * fixed size that the control process makes with the pool (pool_adopt)
 * and every process maps once with it (pool_open): the engine writes it
 * under a sequence lock, and a process that moves bytes reads one word a
 * batch (the generation) and, only when it changed, a copy of the rest. It
 * lists *mappings*: pool bytes [start, start + len) are the allocation
 * key's bytes [file_off, file_off + len). Every number is a multiple of
 * the page size, so a process that maps the pool lays each allocation
 * range over the pool's own pages at the same address (MAP_FIXED, pool.h's
 * pool_refresh): the pool's base and offsets, the planner's copies and
 * every transport stay as they are, and the bytes they move are the
 * engine's.
 *
 * Record: a 64-byte header (magic "KVHM", version, the generation: even
 * when stable, odd while the engine writes; count (0: nothing registered),
 * page size, epoch, pool size, the writer's pid), then per mapping 48
 * bytes (start, len, file_off, key, and the allocation file's st_dev and
 * st_ino, so a file replaced under the name is refused), little-endian.
 * What is read is checked as untrusted bytes (another process wrote it).
 */
#ifndef KVW_HOSTMEM_H
#define KVW_HOSTMEM_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

#define HOSTMEM_MAX KVW_MAX_BUFFERS /* mappings in one record */

/* One mapping of a record. */
struct hostmem_map {
	uint64_t start;    /* first pool byte */
	uint64_t len;      /* bytes */
	uint64_t file_off; /* where in the allocation file */
	uint64_t key;      /* which allocation (its file name) */
	uint64_t dev, ino; /* that file's identity */
};

/* A parsed record. */
struct hostmem_rec {
	uint32_t n;
	uint32_t pid; /* the writer's */
	uint64_t epoch, pool_size;
	struct hostmem_map map[]; /* n, in pool order, not overlapping */
};

/* The page size every number of a record is a multiple of. */
uint64_t hostmem_page(void);

/* The record path for a pool path ("....pool" -> "....host"), and the
 * path of allocation `key`, into buf[len]. 0, or KVW_EINVAL (not a pool
 * path, or too long). */
int hostmem_rec_path(const char *pool_path, char *buf, size_t len);
int hostmem_alloc_path(const char *pool_path, uint64_t key, char *buf,
		       size_t len);

/* Makes allocation file `key` of `size` bytes (a multiple of the page
 * size) beside the pool, reserved whole and mapped read-write. 0 with
 * *base, *dev and *ino; KVW_EINVAL (size), KVW_EEXIST, KVW_ENOMEM (no
 * room in /dev/shm), KVW_ESYS. Nothing is left behind on failure. */
int hostmem_alloc(const char *pool_path, uint64_t key, uint64_t size,
		  void **base, uint64_t *dev, uint64_t *ino, char *err,
		  size_t errlen);

/* The rules a record's mappings keep, for a pool of pool_size bytes: n in
 * 1..HOSTMEM_MAX, every number a multiple of the page size, len > 0,
 * inside the pool without overflow, sorted by start and not overlapping.
 * 0, or KVW_EINVAL with the first broken rule in err. */
int hostmem_rec_check(const struct hostmem_map *maps, uint32_t n,
		      uint64_t pool_size, char *err, size_t errlen);

struct hostmem_view; /* a record file, mapped */

/* Makes the record file at path for a pool of pool_size bytes, with
 * nothing registered (replacing what was there). 0, or KVW_ESYS. */
int hostmem_view_create(const char *path, uint64_t pool_size, char *err,
			size_t errlen);

/* Maps the record file at path (writable: for the engine). 0 and *out;
 * KVW_ENOENT (no record file: a pool that was not made by a control
 * process), KVW_EINVAL (not a record file), KVW_ESYS. */
int hostmem_view_open(const char *path, int writable,
		      struct hostmem_view **out, char *err, size_t errlen);

/* The generation: a new value whenever the engine changed the record
 * (one load, no system call). */
uint64_t hostmem_view_gen(const struct hostmem_view *v);

/* A checked copy of the record, consistent with *gen (the generation it
 * was read at): 0 with *out (NULL when nothing is registered; else the
 * caller's, free()); KVW_EAGAIN (the engine is writing it: try at the next
 * batch), KVW_EVERSION, KVW_EINVAL (malformed, or for a pool of another
 * size), KVW_ENOMEM. */
int hostmem_view_read(const struct hostmem_view *v, uint64_t pool_size,
		      struct hostmem_rec **out, uint64_t *gen, char *err,
		      size_t errlen);

/* Writes maps[0..n) (n = 0: nothing registered) as the engine `epoch` of
 * this process, under the sequence lock. 0, or KVW_EINVAL (the mappings
 * break a rule of hostmem_rec_check; nothing changes). One writer at a
 * time: the pool's engine. */
int hostmem_view_write(struct hostmem_view *v, const struct hostmem_map *maps,
		       uint32_t n, uint64_t pool_size, uint64_t epoch,
		       char *err, size_t errlen);

/* Unmaps; *v = NULL. Accepts NULL and *v == NULL. */
void hostmem_view_close(struct hostmem_view **v);

/* Lays rec's mappings over the pool mapping at base (MAP_FIXED, populated,
 * read-write when writable): each allocation file is opened by its path
 * and must be the file the record names (identity), this user's, closed
 * to others and long enough. 0, or the error with every range it had laid
 * restored to the pool's own pages (hostmem_restore). */
int hostmem_overlay(void *base, int writable, int pool_fd,
		    const char *pool_path, const struct hostmem_rec *rec,
		    char *err, size_t errlen);

/* Lays the pool's own pages back over rec's mappings. 0, or KVW_ESYS
 * (the range is then left unmapped: an access faults instead of reading
 * the wrong memory). */
int hostmem_restore(void *base, int writable, int pool_fd,
		    const struct hostmem_rec *rec, char *err, size_t errlen);

/* Removes the record file and every allocation file of the pool at
 * pool_path (processes that map them keep the memory until they unmap
 * it). hostmem_remove_allocs: the allocation files only (what a dead
 * engine left). */
void hostmem_remove_all(const char *pool_path);
void hostmem_remove_allocs(const char *pool_path);

#endif
