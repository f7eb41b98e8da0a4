/*
 * pool.h - KV pools: shared-memory files that hold an engine rank's KV cache.
 * A pool is a regular file (by default /dev/shm/kvwire.<name>.pool, mode
 * 0600) of a fixed size, mapped MAP_SHARED. The decode side creates its
 * pools; a prefill worker maps them through the shm transport (xport.h) and
 * copies pages straight into them. Creation reserves every byte up front, so
 * a full /dev/shm is a clean error at create time instead of a SIGBUS on the
 * first copy.
 */
#ifndef KVW_POOL_H
#define KVW_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

struct pool; /* opaque: one open, mapped pool file */
struct hostmem_view; /* hostmem.h */

/* Longest path a pool may have (bytes, without the NUL). */
#define POOL_PATH_MAX 1023u

/* Turns a pool `name` into a path: a name holding a '/' is used as given;
 * any other name becomes "/dev/shm/kvwire.<name>.pool". A pool that the shm
 * transport registers must be an absolute path whose last component is
 * kvwire.<something>.pool (a peer's descriptor may name no other file).
 * Writes the NUL-ended
 * path into buf[len]. Returns 0, or KVW_EINVAL (NULL or empty name, result
 * longer than POOL_PATH_MAX or than len-1). */
int pool_path_for(const char *name, char *buf, size_t len);

/* 1 when path is absolute and its file is named kvwire.<name>.pool (the
 * only files kvwire makes or maps as pools), else 0. */
int pool_name_ok(const char *path);

/* Creates a pool file of `size` bytes (a name or a path, as pool_path_for),
 * mode 0600, refusing to replace an existing file (O_EXCL: a live pool is
 * never clobbered; a stale one must be pool_unlink'ed first), reserves all
 * of it (posix_fallocate) and maps it read-write with every page in place
 * (MAP_POPULATE, which zeroes them now). On success *out owns the
 * mapping and the fd; free with pool_close. On failure *out is NULL, no file
 * is left behind and err says why. Returns 0, KVW_EINVAL (size 0, size beyond
 * off_t/size_t, bad name), KVW_EEXIST, KVW_ENOMEM (no space to reserve
 * `size`), KVW_ESYS (other system call failure, errno kept). */
int pool_create(const char *path, uint64_t size, struct pool **out, char *err,
		size_t errlen);

/* Opens and maps an existing pool, populated (a symlink as the last
 * component is refused); its size comes from fstat. writable = 0
 * maps it read-only. On success *out owns the mapping; free with
 * pool_close. Returns 0, KVW_ENOENT (no such file), KVW_EINVAL (bad name,
 * empty file, not a regular file), KVW_ESYS; *out is NULL on failure. */
int pool_open(const char *path, int writable, struct pool **out, char *err,
	      size_t errlen);

/* A control process's pool, with the record of its engine's host memory
 * (hostmem.h; pool_create makes none), across its own restarts: an existing pool
 * file of exactly `size` bytes, owned by this user and closed to others
 * (mode & 077 == 0), is opened read-write and kept (*reused = 1), so an
 * engine that still maps it and peers that map it by name keep seeing the
 * same memory after the control restarts. Anything else at the path is
 * removed and a fresh pool is created as pool_create (*reused = 0).
 * Returns as pool_create; *out is NULL on failure. */
int pool_adopt(const char *path, uint64_t size, struct pool **out,
	       int *reused, char *err, size_t errlen);

/* Getters; the pool keeps owning what they return (valid until close). */
void *pool_base(const struct pool *p);
uint64_t pool_size(const struct pool *p);
const char *pool_path(const struct pool *p);
/* The open fd (for fstat / identity checks); never close it yourself. */
int pool_fd(const struct pool *p);

/* Engine host memory (hostmem.h): when the engine registered its own
 * allocations for some of this pool's bytes (its record, made and mapped
 * with the pool), lays them over this mapping at the same addresses, so
 * pool_base() + offset reaches the engine's bytes; when it took them back,
 * the pool's own pages return. One load when nothing changed. A process
 * that moves bytes through the mapping calls it before each batch. 0, or
 * the error (a malformed record, an allocation gone or replaced, the
 * engine mid-write): then nothing is laid over the pool, and the caller
 * must not count bytes it moves as the engine's. */
int pool_refresh(struct pool *p, char *err, size_t errlen);

/* The pool's host memory record, or NULL (a pool made without one: not
 * by pool_adopt). The engine writes it (kvw_register_host). */
struct hostmem_view *pool_host_record(struct pool *p);

/* 1 while engine host memory is laid over the mapping. */
int pool_overlaid(const struct pool *p);

/* Unmaps and closes *p, sets *p to NULL. Accepts NULL and *p == NULL. The
 * file itself stays (see pool_unlink). */
void pool_close(struct pool **p);

/* Removes the pool file (a name or a path), with the host memory an engine
 * registered for it (hostmem.h). Mappings that are still open stay
 * valid until closed. Returns 0, KVW_ENOENT, KVW_EINVAL or KVW_ESYS. */
int pool_unlink(const char *path);

#endif
