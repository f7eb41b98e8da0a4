/*
 * xport_shm.c - the one-host transport: the decode rank's pools are files in
 * /dev/shm; a prefill worker maps each peer pool read-write once (connect)
 * and a batch is a checked list of memcpy calls, with no system call or
 * allocation per copy. A descriptor names the pool file by path, size and
 * identity (st_dev, st_ino), so connect refuses a pool that disappeared,
 * shrank or was replaced by a restarted peer.
 *
 * A pool that disappears under a mapping: connect checks the size with
 * fstat and pool_create reserves every page, but the peer (or anyone with
 * access) may later unlink or truncate the file. An unlinked pool stays
 * valid memory while mapped, yet nobody will read it again; a truncated one
 * makes any access past the new end fault with SIGBUS (MAP_POPULATE would
 * not help: truncation unmaps those pages from every mapping). So before
 * each batch, every remote the batch writes to is checked with one fstat:
 * unlinked (st_nlink 0) -> KVW_ENOENT, shrunk below its mapped size ->
 * KVW_ERANGE, and no byte moves. That leaves the window between the fstat
 * and the memcpy; a process that must survive it (the kv-sender worker)
 * calls xport_shm_catch_sigbus() once: a SIGBUS raised inside a batch's
 * copies on a connected remote's mapping then ends that batch with
 * KVW_ERANGE, and any other SIGBUS still kills the process as before. The
 * library never installs the handler by itself.
 *
 * A decode engine that keeps its KV in its own host memory (api.h's
 * kvw_register_host) has it laid over the pool mapping at the same
 * addresses (pool_refresh, one load a remote a batch): the copies below
 * do not change.
 */
#include "xport/xport_impl.h"
#include "xport_shm.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mem/pool.h"
#include "xport/xcopy.h"

#define SHM_MAGIC "KVSH"
#define SHM_VERSION 1u
#define SHM_HDR 32u          /* magic 4, version 2, pathlen 2, size/dev/ino 8 each */
#define SHM_MAX_REGIONS 1024u /* per instance, locals and remotes each */

/* A local registration (pool borrowed from the caller) or a remote mapping
 * (pool owned here). base == NULL marks a free slot. */
struct xshm_region {
	uint8_t *base;
	uint64_t size;
	struct pool *owned; /* remotes only */
	uint64_t dev, ino;  /* remotes only */
};

struct xshm_xport {
	struct xport base;
	struct xshm_region *loc, *rmt;
	uint32_t nloc, nrmt;     /* slots in use or freed, i.e. highest id + 1 */
	uint32_t caploc, caprmt; /* allocated slots */
};

static int xshm_probe(char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	return 0;
}

static int xshm_open(struct xport **out, char *err, size_t errlen)
{
	struct xshm_xport *s;

	*out = NULL;
	s = calloc(1, sizeof *s);
	if (s == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "shm: out of memory");
	s->base.ops = &xport_shm_ops;
	*out = &s->base;
	return 0;
}

/* Finds a free slot in *arr (growing it up to SHM_MAX_REGIONS). Returns the
 * id, or -1 when full or out of memory. */
static int64_t xshm_slot(struct xshm_region **arr, uint32_t *n, uint32_t *cap)
{
	struct xshm_region *grown;
	uint32_t i, ncap;

	for (i = 0; i < *n; i++)
		if ((*arr)[i].base == NULL)
			return i;
	if (*n == SHM_MAX_REGIONS)
		return -1;
	if (*n == *cap) {
		ncap = *cap ? *cap * 2 : 8;
		if (ncap > SHM_MAX_REGIONS)
			ncap = SHM_MAX_REGIONS;
		grown = realloc(*arr, ncap * sizeof *grown);
		if (grown == NULL)
			return -1;
		*arr = grown;
		*cap = ncap;
	}
	memset(&(*arr)[*n], 0, sizeof **arr);
	return (*n)++;
}

static int xshm_reg(struct xport *x, const struct pool *p, uint32_t *id,
		   uint8_t *desc, size_t desccap, size_t *desclen, char *err,
		   size_t errlen)
{
	struct xshm_xport *s = XPORT_SELF(struct xshm_xport, x);
	const char *path = pool_path(p);
	size_t plen = strlen(path);
	struct stat st;
	int64_t slot;

	/* A descriptor is untrusted: it must never make this process write
	 * into some other file it can open. Only kvwire pools are pools. */
	if (!pool_name_ok(path))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"shm: %s: pool files must be absolute and "
				"named kvwire.<name>.pool",
				path);
	if (SHM_HDR + plen > desccap || SHM_HDR + plen > KVW_MAX_DESC)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"shm: descriptor for %s does not fit", path);
	if (fstat(pool_fd(p), &st) != 0)
		return kvw_errf(err, errlen, KVW_ESYS, "shm: stat %s: %s", path,
				strerror(errno));
	slot = xshm_slot(&s->loc, &s->nloc, &s->caploc);
	if (slot < 0)
		return kvw_errf(err, errlen, KVW_ENOMEM,
				"shm: too many registered pools");
	s->loc[slot].base = pool_base(p);
	s->loc[slot].size = pool_size(p);

	memcpy(desc, SHM_MAGIC, 4);
	le_put(desc + 4, SHM_VERSION, 2);
	le_put(desc + 6, plen, 2);
	le_put(desc + 8, pool_size(p), 8);
	le_put(desc + 16, (uint64_t)st.st_dev, 8);
	le_put(desc + 24, (uint64_t)st.st_ino, 8);
	memcpy(desc + SHM_HDR, path, plen);
	*desclen = SHM_HDR + plen;
	*id = (uint32_t)slot;
	return 0;
}

int xport_shm_desc_parse(const uint8_t *desc, size_t len,
			 struct xport_desc_file *out, char *err, size_t errlen)
{
	uint64_t plen;

	_Static_assert(sizeof out->path == POOL_PATH_MAX + 1, "path size");
	if (desc == NULL || len < SHM_HDR || len > KVW_MAX_DESC ||
	    memcmp(desc, SHM_MAGIC, 4) != 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"shm: malformed descriptor (%zu bytes)", len);
	if (le_get(desc + 4, 2) != SHM_VERSION)
		return kvw_errf(err, errlen, KVW_EVERSION,
				"shm: descriptor version %llu, expected %u",
				(unsigned long long)le_get(desc + 4, 2),
				SHM_VERSION);
	plen = le_get(desc + 6, 2);
	out->size = le_get(desc + 8, 8);
	out->dev = le_get(desc + 16, 8);
	out->ino = le_get(desc + 24, 8);
	if (plen == 0 || plen > POOL_PATH_MAX || SHM_HDR + plen != len ||
	    memchr(desc + SHM_HDR, '\0', plen) != NULL || out->size == 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"shm: malformed descriptor (path or size)");
	memcpy(out->path, desc + SHM_HDR, plen);
	out->path[plen] = '\0';
	if (!pool_name_ok(out->path))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"shm: descriptor path is not a kvwire pool");
	return 0;
}

/* Opens and maps the pool a descriptor names, checking it is the very file
 * (dev, ino) and size the peer registered. On success *out owns the map. */
static int xshm_map_peer(const uint8_t *desc, size_t len, struct pool **out,
			uint64_t *dev, uint64_t *ino, char *err, size_t errlen)
{
	struct xport_desc_file d;
	const char *path = d.path;
	uint64_t size;
	struct stat st;
	int rc;

	*out = NULL;
	rc = xport_shm_desc_parse(desc, len, &d, err, errlen);
	if (rc != 0)
		return rc;
	size = d.size;
	*dev = d.dev;
	*ino = d.ino;

	/* pool_open does not follow a symlink in the last component; the
	 * identity check then proves it is the very file the peer registered. */
	rc = pool_open(path, 1, out, err, errlen);
	if (rc != 0)
		return rc;
	if (fstat(pool_fd(*out), &st) != 0) {
		rc = kvw_errf(err, errlen, KVW_ESYS, "shm: stat %s: %s", path,
			      strerror(errno));
		pool_close(out);
		return rc;
	}
	if ((uint64_t)st.st_dev != *dev || (uint64_t)st.st_ino != *ino) {
		pool_close(out);
		return kvw_errf(err, errlen, KVW_ESTALE,
				"shm: peer pool %s was replaced", path);
	}
	if (pool_size(*out) != size) {
		rc = kvw_errf(err, errlen, KVW_ESTALE,
			      "shm: peer pool %s is %llu bytes, descriptor "
			      "says %llu",
			      path, (unsigned long long)pool_size(*out),
			      (unsigned long long)size);
		pool_close(out);
		return rc;
	}
	return 0;
}

static int xshm_connect(struct xport *x, const uint8_t *desc, size_t desclen,
		       uint32_t *id, char *err, size_t errlen)
{
	struct xshm_xport *s = XPORT_SELF(struct xshm_xport, x);
	struct pool *p;
	uint64_t dev, ino;
	int64_t slot;
	uint32_t i;
	int rc;

	rc = xshm_map_peer(desc, desclen, &p, &dev, &ino, err, errlen);
	if (rc != 0)
		return rc;
	/* The same pool connected twice keeps its first mapping and id. */
	for (i = 0; i < s->nrmt; i++) {
		if (s->rmt[i].base != NULL && s->rmt[i].dev == dev &&
		    s->rmt[i].ino == ino) {
			pool_close(&p);
			*id = i;
			return 0;
		}
	}
	slot = xshm_slot(&s->rmt, &s->nrmt, &s->caprmt);
	if (slot < 0) {
		pool_close(&p);
		return kvw_errf(err, errlen, KVW_ENOMEM,
				"shm: too many connected pools");
	}
	s->rmt[slot] = (struct xshm_region){
		.base = pool_base(p), .size = pool_size(p), .owned = p,
		.dev = dev, .ino = ino,
	};
	*id = (uint32_t)slot;
	return 0;
}

static void xshm_disconnect(struct xport *x, uint32_t id)
{
	struct xshm_xport *s = XPORT_SELF(struct xshm_xport, x);

	if (id >= s->nrmt || s->rmt[id].base == NULL)
		return;
	pool_close(&s->rmt[id].owned);
	memset(&s->rmt[id], 0, sizeof s->rmt[id]);
}

/* True when [off, off + len) lies inside a region of `size` bytes; written
 * so that off + len cannot overflow. */
static inline int xshm_in(uint64_t off, uint64_t len, uint64_t size)
{
	return len <= size && off <= size - len;
}

/* The SIGBUS guard (see the top of the file). Per thread: the batch in
 * progress and where to jump back to. */
static _Thread_local struct xshm_xport *volatile xshm_guard_x;
static _Thread_local sigjmp_buf xshm_guard_jb;
static volatile sig_atomic_t xshm_guard_installed;

/* 1 when addr lies inside a mapping of a connected remote of s. */
static int xshm_addr_remote(const struct xshm_xport *s, const void *addr)
{
	const uint8_t *a = addr;

	for (uint32_t i = 0; i < s->nrmt; i++)
		if (s->rmt[i].base && a >= s->rmt[i].base &&
		    (uint64_t)(a - s->rmt[i].base) < s->rmt[i].size)
			return 1;
	return 0;
}

static void xshm_on_sigbus(int sig, siginfo_t *si, void *uc)
{
	struct xshm_xport *s = xshm_guard_x;

	(void)uc;
	if (s && xshm_addr_remote(s, si->si_addr)) {
		xshm_guard_x = NULL;
		siglongjmp(xshm_guard_jb, 1);
	}
	/* Not a guarded copy: let the fault kill the process as it would
	 * have without the handler (the instruction faults again). */
	signal(sig, SIG_DFL);
}

int xport_shm_catch_sigbus(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = xshm_on_sigbus;
	/* NODEFER: leaving by siglongjmp must not leave SIGBUS blocked, and
	 * sigsetjmp(.., 0) then saves no signal mask (no syscall a batch). */
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, NULL) != 0)
		return KVW_ESYS;
	xshm_guard_installed = 1;
	return 0;
}

/* The remote's file is still linked and at least as big as its mapping:
 * 0, or KVW_ENOENT / KVW_ERANGE / KVW_ESYS with the reason in err. */
static int xshm_remote_intact(const struct xshm_region *r, char *err,
			      size_t errlen)
{
	struct stat st;

	if (fstat(pool_fd(r->owned), &st) != 0)
		return kvw_errf(err, errlen, KVW_ESYS, "shm: stat %s: %s",
				pool_path(r->owned), strerror(errno));
	if (st.st_nlink == 0)
		return kvw_errf(err, errlen, KVW_ENOENT,
				"shm: peer pool %s was removed",
				pool_path(r->owned));
	if ((uint64_t)st.st_size < r->size)
		return kvw_errf(err, errlen, KVW_ERANGE,
				"shm: peer pool %s shrank to %llu bytes "
				"(mapped %llu)",
				pool_path(r->owned),
				(unsigned long long)st.st_size,
				(unsigned long long)r->size);
	return 0;
}

/* Runs the (already checked) copies; KVW_ERANGE when a guarded SIGBUS cut
 * them short. */
static int xshm_copy(struct xshm_xport *s, const struct xport_copy *c,
		     size_t n, char *err, size_t errlen)
{
	if (xshm_guard_installed) {
		if (sigsetjmp(xshm_guard_jb, 0) != 0)
			return kvw_errf(err, errlen, KVW_ERANGE,
					"shm: peer pool truncated during a "
					"copy (SIGBUS caught)");
		xshm_guard_x = s;
	}
	for (size_t i = 0; i < n; i++)
		xcopy_stream(s->rmt[c[i].dst].base + c[i].dst_off,
			     s->loc[c[i].src].base + c[i].src_off, c[i].len);
	xcopy_drain();
	xshm_guard_x = NULL;
	return 0;
}

static int xshm_write_batch(struct xport *x, const struct xport_copy *c,
			   size_t n, char *err, size_t errlen)
{
	struct xshm_xport *s = XPORT_SELF(struct xshm_xport, x);
	uint32_t checked = UINT32_MAX;
	size_t i;
	int rc;

	/* Check everything first: a bad copy anywhere moves no byte at all. */
	for (i = 0; i < n; i++) {
		if (c[i].src >= s->nloc || s->loc[c[i].src].base == NULL ||
		    c[i].dst >= s->nrmt || s->rmt[c[i].dst].base == NULL)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"shm: copy %zu: unknown region "
					"(src %u, dst %u)",
					i, c[i].src, c[i].dst);
		if (!xshm_in(c[i].src_off, c[i].len, s->loc[c[i].src].size) ||
		    !xshm_in(c[i].dst_off, c[i].len, s->rmt[c[i].dst].size))
			return kvw_errf(err, errlen, KVW_ERANGE,
					"shm: copy %zu out of range (src_off "
					"%llu, dst_off %llu, len %llu)",
					i, (unsigned long long)c[i].src_off,
					(unsigned long long)c[i].dst_off,
					(unsigned long long)c[i].len);
		/* One fstat per remote run of the batch (usually one). */
		if (c[i].dst != checked) {
			rc = xshm_remote_intact(&s->rmt[c[i].dst], err, errlen);
			/* The decode engine's own host memory, when it
			 * registered some, is where the pages go. */
			if (rc == 0)
				rc = pool_refresh(s->rmt[c[i].dst].owned, err,
						  errlen);
			if (rc < 0)
				return rc;
			checked = c[i].dst;
		}
	}
	return xshm_copy(s, c, n, err, errlen);
}

/* Copies are done when write_batch returns. */
static int xshm_wait(struct xport *x, int timeout_ms, char *err, size_t errlen)
{
	(void)x;
	(void)timeout_ms;
	(void)err;
	(void)errlen;
	return 0;
}

static void xshm_close(struct xport **xp)
{
	struct xshm_xport *s;
	uint32_t i;

	if (xp == NULL || *xp == NULL)
		return;
	s = XPORT_SELF(struct xshm_xport, *xp);
	for (i = 0; i < s->nrmt; i++)
		pool_close(&s->rmt[i].owned);
	free(s->rmt);
	free(s->loc);
	free(s);
	*xp = NULL;
}

const struct xport_ops xport_shm_ops = {
	.name = "shm",
	.probe = xshm_probe,
	.open = xshm_open,
	.reg = xshm_reg,
	.connect = xshm_connect,
	.disconnect = xshm_disconnect,
	.write_batch = xshm_write_batch,
	.wait = xshm_wait,
	.close = xshm_close,
	.desc_file = xport_shm_desc_parse,
	.writer_setup = xport_shm_catch_sigbus,
};
