/*
 * xport_cuda.c - the GPU transport on one host: KV buffers live in the
 * engines' device memory (gpool.h records, one per host pool), the AUX
 * slots stay in the host pools. A region (local or remote) is a host pool
 * (an inner shm instance maps it, for the AUX bytes) plus the GPU record
 * beside it; its descriptor is "KVCU", a version, then the shm descriptor
 * (whose pool path names the record, so a peer cannot point us at any
 * other file).
 *
 * A batch is checked whole first (ids, ranges, both sides' records loaded
 * and their handles opened, every piece device-to-device or host-to-host),
 * then the host pieces are copied (memcpy, through shm) and the device
 * pieces are queued with cudaMemcpyAsync on the instance's stream (one
 * instance per worker process: a stream per worker), adjacent pieces
 * merged, and an event is recorded behind them. cudaMemcpyDefault lets the
 * driver pick peer-to-peer between two GPUs (handles are opened with lazy
 * peer access) or staging through the host where P2P is not possible.
 * wait returns when the last recorded event has completed: the stream is in
 * order, so no copy posted before it is queued or running any more (the
 * quiescence contract: a worker reports a job done only after wait).
 *
 * Records are checked before every batch with one stat: a record replaced
 * (the engine re-registered or restarted: a new epoch) has its handles
 * closed and the new one opened; a record removed (engine gone) fails the
 * batch with KVW_ENOENT. disconnect and close close the handles.
 *
 * The stream and event are lib/mem's gpu_queue, each side a lib/mem region
 * (mem.h) whose device addresses it asks for: this file includes no CUDA
 * header and knows no record format. libcudart is loaded at run time:
 * without it, a driver or a GPU, probe and open answer KVW_ENODEV "cuda:
 * not available: <why>".
 */
#include "xport/shm/xport_shm.h"
#include "xport/xport_impl.h"

#include <stdlib.h>
#include <string.h>

#include "mem/gpu_queue.h"
#include "mem/mem.h"
#include "mem/pool.h"

#define CU_MAGIC "KVCU"
#define CU_VERSION 1u
#define CU_HDR 8u            /* magic 4, version 2, reserved 2 */
#define CU_SHM_SIZE_OFF 8u   /* in the shm descriptor: pool size */
#define CU_SHM_PLEN_OFF 6u   /* path length */
#define CU_SHM_PATH_OFF 32u  /* path */
#define CU_MAX_REGIONS 256u  /* per instance, locals and remotes each */

/* One host pool and the engine memory behind it. used == 0 marks a free
 * slot. */
struct xcu_side {
	int used;
	uint32_t shm_id;
	struct mem_region *r; /* mapped when a batch needs it */
};

/* A device piece of a batch, ready to queue. */
struct xcu_piece {
	uint8_t *dst;
	const uint8_t *src;
	uint64_t len;
};

struct xcu_xport {
	struct xport base;
	struct xport *shm; /* host pools (AUX bytes) */
	struct xcu_side loc[CU_MAX_REGIONS], rmt[CU_MAX_REGIONS];
	struct gpu_queue *q; /* bound to the first local record's device */
	struct xcu_piece *dev;
	struct xport_copy *host;
	size_t ndev, nhost, capdev, caphost;
};

static int xcu_probe(char *err, size_t errlen)
{
	return gpu_queue_probe(err, errlen);
}

static int xcu_open(struct xport **out, char *err, size_t errlen)
{
	struct xcu_xport *c;
	int rc;

	*out = NULL;
	c = calloc(1, sizeof *c);
	if (c == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "cuda: out of memory");
	c->base.ops = &xport_cuda_ops;
	rc = gpu_queue_open(&c->q, err, errlen);
	if (rc == 0)
		rc = xport_open(xport_find("shm"), &c->shm, err, errlen);
	if (rc) {
		gpu_queue_close(&c->q);
		free(c);
		return rc;
	}
	*out = &c->base;
	return 0;
}

/* Unmaps a side's memory (kept: the slot and its region). */
static void xcu_unload(struct xcu_xport *c, struct xcu_side *s)
{
	if (s->r == NULL)
		return;
	/* No queued copy may outlive the mapping it reads or writes. */
	if (mem_region_on_gpu(s->r))
		gpu_queue_wait(c->q, -1, NULL, 0);
	mem_region_unmap(s->r);
}

/* Frees a side: unmapped, region closed, slot free. */
static void xcu_drop(struct xcu_xport *c, struct xcu_side *s)
{
	xcu_unload(c, s);
	mem_region_close(&s->r);
	memset(s, 0, sizeof *s);
}

/* Where the region's bytes live must be a GPU. */
static int xcu_on_gpu(const struct xcu_side *s, char *err, size_t errlen)
{
	return mem_region_on_gpu(s->r)
		       ? 0
		       : kvw_errf(err, errlen, KVW_ENOENT,
				  "cuda: no GPU pool registered for %s",
				  mem_region_name(s->r));
}

/* Makes s's memory current: what the engine registered last, mapped. 0;
 * KVW_ENOENT (no GPU record: the engine never registered or is gone), or
 * the map's error (a malformed record, another pool size: KVW_ESTALE;
 * CUDA's). */
static int xcu_fresh(struct xcu_xport *c, struct xcu_side *s, int local,
		     char *err, size_t errlen)
{
	int rc;

	if (!mem_region_stale(s->r))
		return xcu_on_gpu(s, err, errlen);
	xcu_unload(c, s); /* a new engine epoch: the old handles go */
	/* The local side decides the device, once per instance; a remote
	 * side is opened on it (peer access is lazy). */
	rc = mem_region_map(s->r, local ? MEM_DEV_RECORD : MEM_DEV_CURRENT,
			    err, errlen);
	if (rc == 0)
		rc = xcu_on_gpu(s, err, errlen);
	if (rc == 0 && local)
		rc = gpu_queue_bind(c->q, mem_region_device(s->r), err,
				    errlen);
	if (rc)
		mem_region_unmap(s->r);
	return rc;
}

/* A free slot of arr, or -1. */
static int64_t xcu_slot(struct xcu_side *arr)
{
	for (uint32_t i = 0; i < CU_MAX_REGIONS; i++)
		if (!arr[i].used)
			return i;
	return -1;
}

static int xcu_reg(struct xport *x, const struct pool *p, uint32_t *id,
		   uint8_t *desc, size_t desccap, size_t *desclen, char *err,
		   size_t errlen)
{
	struct xcu_xport *c = XPORT_SELF(struct xcu_xport, x);
	struct mem_region *r = NULL;
	size_t shmlen;
	uint32_t sid;
	int64_t slot = xcu_slot(c->loc);
	int rc;

	if (slot < 0)
		return kvw_errf(err, errlen, KVW_ENOMEM,
				"cuda: too many registered pools");
	if (desccap < CU_HDR + CU_SHM_PATH_OFF)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"cuda: descriptor does not fit");
	/* shm refuses a descriptor beyond the room it is given. */
	if (desccap > KVW_MAX_DESC)
		desccap = KVW_MAX_DESC;
	rc = mem_region_open(&r, pool_path(p), pool_size(p), 0, err, errlen);
	if (rc)
		return rc;
	rc = xport_register(c->shm, p, &sid, desc + CU_HDR, desccap - CU_HDR,
			    &shmlen, err, errlen);
	if (rc) {
		mem_region_close(&r);
		return rc;
	}
	memcpy(desc, CU_MAGIC, 4);
	le_put(desc + 4, CU_VERSION, 4); /* version 2, reserved 2 */
	*desclen = CU_HDR + shmlen;
	c->loc[slot] = (struct xcu_side){ .used = 1, .shm_id = sid, .r = r };
	*id = (uint32_t)slot;
	return 0;
}

static int xcu_connect(struct xport *x, const uint8_t *desc, size_t desclen,
		       uint32_t *id, char *err, size_t errlen)
{
	struct xcu_xport *c = XPORT_SELF(struct xcu_xport, x);
	char path[POOL_PATH_MAX + 1];
	const uint8_t *sd = desc + CU_HDR;
	struct mem_region *r = NULL;
	uint64_t plen;
	uint32_t sid;
	int64_t slot;
	int rc;

	if (desc == NULL || desclen < CU_HDR + CU_SHM_PATH_OFF ||
	    desclen > KVW_MAX_DESC || memcmp(desc, CU_MAGIC, 4) != 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"cuda: malformed descriptor (%zu bytes)",
				desclen);
	if (le_get(desc + 4, 2) != CU_VERSION)
		return kvw_errf(err, errlen, KVW_EVERSION,
				"cuda: descriptor version %u, expected %u",
				(unsigned)le_get(desc + 4, 2), CU_VERSION);
	/* shm checks the rest of its descriptor in connect; the path's
	 * bounds are needed here first, to name the record. */
	plen = le_get(sd + CU_SHM_PLEN_OFF, 2);
	if (plen == 0 || plen > POOL_PATH_MAX ||
	    CU_HDR + CU_SHM_PATH_OFF + plen != desclen)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"cuda: malformed descriptor (path)");
	memcpy(path, sd + CU_SHM_PATH_OFF, plen);
	path[plen] = '\0';
	/* shm checks the path names a pool; so does the region. */
	rc = xport_connect(c->shm, sd, desclen - CU_HDR, &sid, err, errlen);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < CU_MAX_REGIONS; i++)
		if (c->rmt[i].used && c->rmt[i].shm_id == sid) {
			*id = i; /* shm gave the same mapping back */
			return 0;
		}
	slot = xcu_slot(c->rmt);
	if (slot < 0 ||
	    (rc = mem_region_open(&r, path, le_get(sd + CU_SHM_SIZE_OFF, 8), 0,
				  err, errlen))) {
		xport_disconnect(c->shm, sid);
		return slot < 0 ? kvw_errf(err, errlen, KVW_ENOMEM,
					   "cuda: too many connected pools")
				: rc;
	}
	c->rmt[slot] = (struct xcu_side){ .used = 1, .shm_id = sid, .r = r };
	*id = (uint32_t)slot;
	return 0;
}

static void xcu_disconnect(struct xport *x, uint32_t id)
{
	struct xcu_xport *c = XPORT_SELF(struct xcu_xport, x);

	if (id >= CU_MAX_REGIONS || !c->rmt[id].used)
		return;
	xport_disconnect(c->shm, c->rmt[id].shm_id);
	/* Nothing of this remote may still be in flight when its handles
	 * close: the caller waited, but a failed batch may not have
	 * (xcu_drop waits for the queue first). */
	xcu_drop(c, &c->rmt[id]);
}

/* Appends to a growing array; 0 or -1 (out of memory). */
static int xcu_grow(void **arr, size_t *cap, size_t n, size_t size)
{
	void *g;
	size_t ncap;

	if (n < *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 256;
	g = realloc(*arr, ncap * size);
	if (g == NULL)
		return -1;
	*arr = g;
	*cap = ncap;
	return 0;
}

/* Splits copy k at the buffer boundaries of both sides into device pieces
 * (merged with the previous one when contiguous) and host copies. A piece
 * with GPU bytes on one side and host bytes on the other means the two
 * layouts disagree: KVW_ERANGE. */
static int xcu_split(struct xcu_xport *c, const struct xport_copy *k,
		     size_t idx, char *err, size_t errlen)
{
	const struct xcu_side *s = &c->loc[k->src], *d = &c->rmt[k->dst];
	uint64_t so = k->src_off, dof = k->dst_off, left = k->len;

	while (left > 0) {
		uint64_t n = left, srun, drun;
		const uint8_t *sp = mem_region_device_at(s->r, so, &srun);
		uint8_t *dp = mem_region_device_at(d->r, dof, &drun);

		if ((sp == NULL) != (dp == NULL))
			return kvw_errf(err, errlen, KVW_ERANGE,
					"cuda: copy %zu moves GPU bytes to host "
					"memory or back (layouts disagree)",
					idx);
		n = n < srun ? n : srun;
		n = n < drun ? n : drun;
		if (sp != NULL) {
			struct xcu_piece *last = c->ndev ? &c->dev[c->ndev - 1] : NULL;

			if (last && last->src + last->len == sp &&
			    last->dst + last->len == dp) {
				last->len += n;
			} else {
				if (xcu_grow((void **)&c->dev, &c->capdev, c->ndev,
					     sizeof *c->dev))
					return kvw_errf(err, errlen, KVW_ENOMEM,
							"cuda: out of memory");
				c->dev[c->ndev++] = (struct xcu_piece){ dp, sp, n };
			}
		} else {
			if (xcu_grow((void **)&c->host, &c->caphost, c->nhost,
				     sizeof *c->host))
				return kvw_errf(err, errlen, KVW_ENOMEM,
						"cuda: out of memory");
			c->host[c->nhost++] = (struct xport_copy){
				so, dof, n, s->shm_id, d->shm_id };
		}
		so += n;
		dof += n;
		left -= n;
	}
	return 0;
}

static inline int xcu_in(uint64_t off, uint64_t len, uint64_t size)
{
	return len <= size && off <= size - len;
}

/* Everything a batch needs, checked; the pieces in c->dev and c->host. */
static int xcu_check(struct xcu_xport *c, const struct xport_copy *k,
		     size_t n, char *err, size_t errlen)
{
	int rc;

	c->ndev = c->nhost = 0;
	for (size_t i = 0; i < n; i++) {
		if (k[i].src >= CU_MAX_REGIONS || !c->loc[k[i].src].used ||
		    k[i].dst >= CU_MAX_REGIONS || !c->rmt[k[i].dst].used)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"cuda: copy %zu: unknown region (src "
					"%u, dst %u)",
					i, k[i].src, k[i].dst);
		if (!xcu_in(k[i].src_off, k[i].len,
			    mem_region_size(c->loc[k[i].src].r)) ||
		    !xcu_in(k[i].dst_off, k[i].len,
			    mem_region_size(c->rmt[k[i].dst].r)))
			return kvw_errf(err, errlen, KVW_ERANGE,
					"cuda: copy %zu out of range", i);
	}
	/* Every side current before any piece points into it. One stat per
	 * side per run of the batch (usually one each). */
	for (size_t i = 0; i < n; i++) {
		if ((i == 0 || k[i].src != k[i - 1].src) &&
		    (rc = xcu_fresh(c, &c->loc[k[i].src], 1, err, errlen)))
			return rc;
		if ((i == 0 || k[i].dst != k[i - 1].dst) &&
		    (rc = xcu_fresh(c, &c->rmt[k[i].dst], 0, err, errlen)))
			return rc;
	}
	for (size_t i = 0; i < n; i++)
		if ((rc = xcu_split(c, &k[i], i, err, errlen)))
			return rc;
	return 0;
}

static int xcu_write_batch(struct xport *x, const struct xport_copy *k,
			   size_t n, char *err, size_t errlen)
{
	struct xcu_xport *c = XPORT_SELF(struct xcu_xport, x);
	int rc;

	rc = xcu_check(c, k, n, err, errlen);
	if (rc)
		return rc;
	if (c->nhost &&
	    (rc = xport_write_batch(c->shm, c->host, c->nhost, err, errlen)))
		return rc;
	for (size_t i = 0; i < c->ndev && rc == 0; i++)
		rc = gpu_queue_copy(c->q, c->dev[i].dst, c->dev[i].src,
				    c->dev[i].len, err, errlen);
	/* Even after a failed enqueue: the mark covers what was queued. */
	if (c->ndev) {
		int r2 = gpu_queue_mark(c->q, err, errlen);

		if (rc == 0)
			rc = r2;
	}
	return rc;
}

static int xcu_wait(struct xport *x, int timeout_ms, char *err,
		    size_t errlen)
{
	return gpu_queue_wait(XPORT_SELF(struct xcu_xport, x)->q, timeout_ms,
			      err, errlen);
}

static void xcu_close(struct xport **xp)
{
	struct xcu_xport *c;

	if (xp == NULL || *xp == NULL)
		return;
	c = XPORT_SELF(struct xcu_xport, *xp);
	gpu_queue_wait(c->q, -1, NULL, 0);
	for (uint32_t i = 0; i < CU_MAX_REGIONS; i++) {
		xcu_drop(c, &c->rmt[i]);
		xcu_drop(c, &c->loc[i]);
	}
	gpu_queue_close(&c->q);
	xport_close(&c->shm);
	free(c->dev);
	free(c->host);
	free(c);
	*xp = NULL;
}

const struct xport_ops xport_cuda_ops = {
	.name = "cuda",
	.probe = xcu_probe,
	.open = xcu_open,
	.reg = xcu_reg,
	.connect = xcu_connect,
	.disconnect = xcu_disconnect,
	.write_batch = xcu_write_batch,
	.wait = xcu_wait,
	.close = xcu_close,
	/* Its pools' AUX bytes are copied through shm mappings: a decode
	 * pool truncated under a copy fails that job, not the worker. */
	.writer_setup = xport_shm_catch_sigbus,
};
