/*
 * mem_cuda.c - the cuda memory backend: an engine's device buffers, opened
 * from the IPC handles of its record (gpool_map.h), and, for a region
 * opened with MEM_STAGE, their bytes moved through the pool file of the
 * same layout. An engine's record stands for pool bytes [0, bytes of its
 * buffers); the pool file has room for exactly those bytes, unused while
 * the KV lives on the GPU. So a prefill worker over tcp copies a batch's
 * device pages into the pool at the same offsets and sends them from
 * there as it sends any host page, and the decode sink lands a batch in
 * its pool as always and copies the device part on to the GPU before it
 * acks. Everything the host path checks and hashes is checked and hashed
 * the same way; a batch kept for a resend keeps its bytes (they sit in the
 * pool, not in a ring slot that could be reused).
 *
 * The staging writes go through a read-write view of the pool file that
 * the region maps itself when a record is first mapped (a prefill worker
 * maps its source pool read-only; the same shared pages, so what it sends
 * from its own mapping is what was staged). That view is registered with
 * the runtime (cudaHostRegister), so the copies are DMA from pinned
 * memory; where registration is refused the copies still work, from
 * pageable memory (slower; mem_region_pinned says which). One stream and
 * one event per region: sync returns when every queued copy is done.
 */
#include "mem_impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cuda_rt.h"

struct mem_stage {
	const struct curt *rt;
	struct pool *view; /* read-write */
	uint8_t *base;     /* its bytes */
	int device;        /* of the stream; -1: none yet */
	curt_stream stream;
	curt_event ev;
	int pending; /* copies queued since the last sync */
	int pin_tried, pinned;
	/* The piece being grown: adjacent pages become one copy. */
	uint8_t *pdst;
	const uint8_t *psrc;
	uint64_t plen;
};

/* Queues the grown piece. */
static int flush_piece(struct mem_stage *s, char *err, size_t errlen)
{
	int rc;

	if (s->plen == 0)
		return 0;
	rc = curt_ok(s->rt,
		     s->rt->memcpy_async(s->pdst, s->psrc, s->plen,
					 CURT_MEMCPY_DEFAULT, s->stream),
		     "cudaMemcpyAsync", err, errlen);
	s->plen = 0;
	s->pending = 1;
	return rc;
}

static int stage_sync(struct mem_stage *s, char *err, size_t errlen)
{
	int rc, r2;

	if (s == NULL || s->rt == NULL)
		return 0;
	rc = flush_piece(s, err, errlen);
	if (!s->pending)
		return rc;
	/* Even after a failed enqueue: what was queued must be done before
	 * the caller moves on. */
	r2 = s->rt->event_record(s->ev, s->stream);
	r2 = r2 == CURT_SUCCESS ? s->rt->event_sync(s->ev)
				: s->rt->stream_sync(s->stream);
	s->pending = 0;
	if (rc == 0)
		rc = curt_ok(s->rt, r2, "cudaEventSynchronize", err, errlen);
	return rc;
}

/* Drops the stream and event (after they drained). */
static void stream_drop(struct mem_stage *s)
{
	if (s->ev)
		s->rt->event_destroy(s->ev);
	if (s->stream)
		s->rt->stream_destroy(s->stream);
	s->ev = NULL;
	s->stream = NULL;
	s->device = -1;
}

/* A stream and event on the record's device (made again if the engine
 * came back on another one); the device is made current either way. */
static int stream_on(struct mem_stage *s, int device, char *err,
		     size_t errlen)
{
	int rc;

	if (s->device == device)
		return curt_ok(s->rt, s->rt->set_device(device),
			       "cudaSetDevice", err, errlen);
	stream_drop(s);
	if ((rc = curt_ok(s->rt, s->rt->set_device(device), "cudaSetDevice",
			  err, errlen)) ||
	    (rc = curt_ok(s->rt,
			  s->rt->stream_create(&s->stream,
					       CURT_STREAM_NONBLOCKING),
			  "cudaStreamCreateWithFlags", err, errlen)) ||
	    (rc = curt_ok(s->rt,
			  s->rt->event_create(&s->ev, CURT_EVENT_NO_TIMING),
			  "cudaEventCreateWithFlags", err, errlen))) {
		stream_drop(s);
		return rc;
	}
	s->device = device;
	return 0;
}

/* The staging state, made once: the read-write view of the pool (a pool
 * of another size than the one registered is refused). */
static int stage_make(struct mem_region *r, const struct curt *rt, char *err,
		      size_t errlen)
{
	struct mem_stage *s = r->st;
	int rc;

	if (s == NULL) {
		if ((s = calloc(1, sizeof *s)) == NULL)
			return kvw_errf(err, errlen, KVW_ENOMEM,
					"cuda: out of memory");
		s->device = -1;
		s->rt = rt;
		r->st = s;
	}
	if (s->view != NULL)
		return 0;
	rc = pool_open(r->path, 1, &s->view, err, errlen);
	if (rc == 0 && pool_size(s->view) != r->m.size) {
		pool_close(&s->view);
		return kvw_errf(err, errlen, KVW_ESTALE, "cuda: %s changed size",
				r->path);
	}
	if (rc == 0)
		s->base = pool_base(s->view);
	return rc;
}

/* Pins the view once; a refusal only costs speed. */
static void pin(struct mem_region *r)
{
	struct mem_stage *s = r->st;
	int rc;

	if (s->pin_tried)
		return;
	s->pin_tried = 1;
	rc = s->rt->host_register(s->base, r->m.size,
				  CURT_HOST_REGISTER_PORTABLE);
	s->pinned = rc == CURT_SUCCESS;
	if (!s->pinned)
		log_msg(LOG_WARN,
			"cuda: %s not pinned (cudaHostRegister: %s); GPU "
			"pages are staged from pageable memory",
			r->m.rec, s->rt->get_error_string(rc));
}

/* The record's buffers, then the pool bytes past them (AUX). */
static int describe(struct mem_region *r, char *err, size_t errlen)
{
	uint32_t n = gpool_count(r->m.g);
	uint64_t bytes = gpool_bytes(r->m.g);
	int dev = gpool_device(r->m.g);

	r->bufs = calloc(n + 1, sizeof *r->bufs);
	if (r->bufs == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "cuda: out of memory");
	for (uint32_t i = 0; i < n; i++) {
		const struct gpool_buf *b = gpool_buf_at(r->m.g, i);
		uint64_t at = (uint64_t)(uintptr_t)r->m.at[i];

		r->bufs[i] = (struct mem_buf){
			.start = b->start, .len = b->len,
			.item_len = b->item_len, .where = MEM_GPU,
			.share = MEM_SHARE_CUDA_IPC, .device = dev,
			.addr = at, .alloc_addr = at - b->alloc_off,
			.alloc_size = b->alloc_size };
	}
	r->nbufs = n;
	if (bytes < r->m.size)
		r->bufs[r->nbufs++] = (struct mem_buf){
			.start = bytes, .len = r->m.size - bytes,
			.where = MEM_POOL, .share = MEM_SHARE_SHM_PATH,
			.device = -1 };
	return 0;
}

static int cuda_map(struct mem_region *r, int device, char *err,
		    size_t errlen)
{
	const struct curt *rt;
	int rc;

	if ((rc = curt_get(&rt, err, errlen)) ||
	    ((r->flags & MEM_STAGE) && (rc = stage_make(r, rt, err, errlen))) ||
	    (rc = gmap_read(&r->m, err, errlen)))
		return rc;
	/* A staging region copies on the record's device, on its stream. */
	if (r->st != NULL)
		rc = stream_on(r->st, gpool_device(r->m.g), err, errlen);
	else if (device == MEM_DEV_RECORD)
		rc = gmap_set_device(&r->m, err, errlen);
	if (rc == 0)
		rc = gmap_open(&r->m, err, errlen);
	if (rc == 0)
		rc = describe(r, err, errlen);
	if (rc) {
		gmap_unload(&r->m);
		return rc;
	}
	if (r->st != NULL)
		pin(r);
	return 0;
}

/* A new engine epoch or the end: nothing queued may outlive the handles. */
static void cuda_unmap(struct mem_region *r)
{
	stage_sync(r->st, NULL, 0);
	gmap_unload(&r->m);
}

static void *cuda_device_at(const struct mem_region *r, uint64_t off,
			    uint64_t *run)
{
	return gmap_at(&r->m, off, run);
}

static int cuda_stage(struct mem_region *r, uint64_t off, uint64_t len,
		      int to_host, char *err, size_t errlen)
{
	struct mem_stage *s = r->st;

	if (s == NULL || s->base == NULL)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"cuda: %s was not opened for staging",
				r->path);
	while (len > 0) {
		uint64_t run, n;
		uint8_t *dev = gmap_at(&r->m, off, &run);
		uint8_t *host = s->base + off, *dst;
		const uint8_t *src;
		int rc;

		n = len < run ? len : run;
		if (n == 0)
			return kvw_errf(err, errlen, KVW_ERANGE,
					"cuda: range outside the pool");
		if (dev != NULL) {
			dst = to_host ? host : dev;
			src = to_host ? dev : host;
			if (s->plen && s->pdst + s->plen == dst &&
			    s->psrc + s->plen == src) {
				s->plen += n;
			} else {
				if ((rc = flush_piece(s, err, errlen)))
					return rc;
				s->pdst = dst;
				s->psrc = src;
				s->plen = n;
			}
		}
		off += n;
		len -= n;
	}
	return 0;
}

static int cuda_sync(struct mem_region *r, char *err, size_t errlen)
{
	return stage_sync(r->st, err, errlen);
}

static int cuda_dmabuf_fd(const struct mem_region *r, uint64_t base,
			  uint64_t size, int *fd, char *why, size_t whylen)
{
	return gmap_dmabuf_fd(&r->m, base, size, fd, why, whylen);
}

/* The staging state outlives epochs (one stream, one pinning); it goes
 * with the region. */
static void cuda_release(struct mem_region *r)
{
	struct mem_stage *s = r->st;

	if (s == NULL)
		return;
	stage_sync(s, NULL, 0);
	if (s->pinned)
		s->rt->host_unregister(s->base);
	stream_drop(s);
	pool_close(&s->view);
	free(s);
	r->st = NULL;
}

int mem_region_pinned(const struct mem_region *r)
{
	return r->st != NULL && r->st->pinned;
}

const struct mem_backend mem_cuda_backend = {
	.name = "cuda",
	.map = cuda_map,
	.unmap = cuda_unmap,
	.device_at = cuda_device_at,
	.stage = cuda_stage,
	.sync = cuda_sync,
	.dmabuf_fd = cuda_dmabuf_fd,
	.release = cuda_release,
};
