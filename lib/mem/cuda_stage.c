/*
 * cuda_stage.c - GPU pools over tcp, staged through the host pool (see
 * cuda_stage.h).
 */
#include "cuda_stage.h"

#include <stdlib.h>
#include <string.h>

#include "cuda_rt.h"
#include "gpool_map.h"
#include "pool.h"
#include "base/log.h"

struct cstage {
	const struct curt *rt; /* NULL until a record is first seen */
	struct gmap m;
	char path[POOL_PATH_MAX + 1];
	struct pool *view; /* read-write, mapped with the first record */
	uint8_t *base;     /* its bytes */
	int device;     /* of the stream; -1: none yet */
	curt_stream stream;
	curt_event ev;
	int pending;    /* copies queued since the last sync */
	int pin_tried, pinned;
	/* The piece being grown: adjacent pages become one copy. */
	uint8_t *pdst;
	const uint8_t *psrc;
	uint64_t plen;
};

int cstage_open(struct cstage **out, const char *pool_path, uint64_t size,
		char *err, size_t errlen)
{
	struct cstage *s;

	*out = NULL;
	s = calloc(1, sizeof *s);
	if (s == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "cuda: out of memory");
	if (gmap_init(&s->m, pool_path, size) != 0 ||
	    strlen(pool_path) >= sizeof s->path) {
		free(s);
		return kvw_errf(err, errlen, KVW_EINVAL,
				"cuda: %s is not a pool path", pool_path);
	}
	strcpy(s->path, pool_path);
	s->device = -1;
	*out = s;
	return 0;
}

/* Queues the grown piece. */
static int flush_piece(struct cstage *s, char *err, size_t errlen)
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

int cstage_sync(struct cstage *s, char *err, size_t errlen)
{
	int rc, r2;

	if (s->rt == NULL)
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
static void stream_drop(struct cstage *s)
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
 * came back on another one). */
static int stream_on(struct cstage *s, int device, char *err, size_t errlen)
{
	int rc;

	if (s->device == device)
		return 0;
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

/* Maps the read-write view of the pool once; a pool of another size than
 * the one registered is refused. */
static int view(struct cstage *s, char *err, size_t errlen)
{
	int rc;

	if (s->view != NULL)
		return 0;
	rc = pool_open(s->path, 1, &s->view, err, errlen);
	if (rc == 0 && pool_size(s->view) != s->m.size) {
		pool_close(&s->view);
		return kvw_errf(err, errlen, KVW_ESTALE,
				"cuda: %s changed size", s->path);
	}
	if (rc == 0)
		s->base = pool_base(s->view);
	return rc;
}

/* Pins the view once; a refusal only costs speed. */
static void pin(struct cstage *s)
{
	int rc;

	if (s->pin_tried)
		return;
	s->pin_tried = 1;
	rc = s->rt->host_register(s->base, s->m.size,
				  CURT_HOST_REGISTER_PORTABLE);
	s->pinned = rc == CURT_SUCCESS;
	if (!s->pinned)
		log_msg(LOG_WARN,
			"cuda: %s not pinned (cudaHostRegister: %s); GPU "
			"pages are staged from pageable memory",
			s->m.rec, s->rt->get_error_string(rc));
}

int cstage_fresh(struct cstage *s, int *gpu, char *err, size_t errlen)
{
	int rc = gmap_stale(&s->m);

	*gpu = 0;
	if (rc == 0) {
		*gpu = 1;
		return 0;
	}
	if (s->m.g != NULL) { /* the engine is gone or came back: a new
			       * epoch; nothing queued may outlive the
			       * handles */
		cstage_sync(s, NULL, 0);
		gmap_unload(&s->m);
	}
	if (rc == KVW_ENOENT)
		return 0;
	if ((s->rt == NULL && (rc = curt_get(&s->rt, err, errlen))) ||
	    (rc = view(s, err, errlen)))
		return rc;
	if ((rc = gmap_read(&s->m, err, errlen)))
		return rc;
	if ((rc = stream_on(s, gpool_device(s->m.g), err, errlen)) ||
	    (rc = gmap_open(&s->m, err, errlen))) {
		gmap_unload(&s->m);
		return rc;
	}
	pin(s);
	*gpu = 1;
	return 0;
}

int cstage_queue(struct cstage *s, uint64_t off, uint64_t len, int to_host,
		 char *err, size_t errlen)
{
	while (len > 0) {
		uint64_t run, n;
		uint8_t *dev = gmap_at(&s->m, off, &run);
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

int cstage_pinned(const struct cstage *s)
{
	return s->pinned;
}

void cstage_close(struct cstage **sp)
{
	struct cstage *s;

	if (sp == NULL || *sp == NULL)
		return;
	s = *sp;
	if (s->rt != NULL) {
		cstage_sync(s, NULL, 0);
		gmap_unload(&s->m);
		if (s->pinned)
			s->rt->host_unregister(s->base);
		stream_drop(s);
	}
	pool_close(&s->view);
	free(s);
	*sp = NULL;
}
