/*
 * gpu_queue.c - an ordered queue of device copies on one GPU (see
 * gpu_queue.h).
 */
#include "gpu_queue.h"

#include <stdlib.h>
#include <time.h>

#include "cuda_rt.h"

struct gpu_queue {
	const struct curt *rt;
	int device; /* -1 until bound */
	curt_stream stream;
	curt_event ev;
	int pending; /* a mark is recorded and not yet seen reached */
};

int gpu_queue_probe(char *err, size_t errlen)
{
	const struct curt *rt;

	return curt_get(&rt, err, errlen);
}

int gpu_queue_open(struct gpu_queue **out, char *err, size_t errlen)
{
	const struct curt *rt;
	struct gpu_queue *q;
	int rc;

	*out = NULL;
	rc = curt_get(&rt, err, errlen);
	if (rc)
		return rc;
	q = calloc(1, sizeof *q);
	if (q == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "cuda: out of memory");
	q->rt = rt;
	q->device = -1;
	*out = q;
	return 0;
}

int gpu_queue_bind(struct gpu_queue *q, int device, char *err,
		   size_t errlen)
{
	const struct curt *rt = q->rt;
	int rc;

	if (q->device == device)
		return 0;
	if (q->device >= 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"cuda: pools on device %d and %d in one "
				"instance",
				q->device, device);
	if ((rc = curt_ok(rt, rt->set_device(device), "cudaSetDevice", err,
			  errlen)) ||
	    (rc = curt_ok(rt,
			  rt->stream_create(&q->stream,
					    CURT_STREAM_NONBLOCKING),
			  "cudaStreamCreateWithFlags", err, errlen)))
		return rc;
	rc = curt_ok(rt, rt->event_create(&q->ev, CURT_EVENT_NO_TIMING),
		     "cudaEventCreateWithFlags", err, errlen);
	if (rc) {
		rt->stream_destroy(q->stream);
		q->stream = NULL;
		return rc;
	}
	q->device = device;
	return 0;
}

int gpu_queue_copy(struct gpu_queue *q, void *dst, const void *src,
		   uint64_t len, char *err, size_t errlen)
{
	return curt_ok(q->rt,
		       q->rt->memcpy_async(dst, src, (size_t)len,
					   CURT_MEMCPY_DEFAULT, q->stream),
		       "cudaMemcpyAsync", err, errlen);
}

int gpu_queue_mark(struct gpu_queue *q, char *err, size_t errlen)
{
	int rc = curt_ok(q->rt, q->rt->event_record(q->ev, q->stream),
			 "cudaEventRecord", err, errlen);

	if (rc == 0)
		q->pending = 1;
	else /* no event: quiesce the stream itself */
		q->rt->stream_sync(q->stream);
	return rc;
}

int gpu_queue_wait(struct gpu_queue *q, int timeout_ms, char *err,
		   size_t errlen)
{
	const struct timespec nap = { 0, 20000 };
	struct timespec t0, t;
	int rc;

	if (!q->pending)
		return 0;
	if (timeout_ms < 0) {
		rc = q->rt->event_sync(q->ev);
		q->pending = 0;
		return curt_ok(q->rt, rc, "cudaEventSynchronize", err, errlen);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((rc = q->rt->event_query(q->ev)) == CURT_NOT_READY) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 +
			    (t.tv_nsec - t0.tv_nsec) / 1000000 >=
		    timeout_ms)
			return kvw_errf(err, errlen, KVW_ETIMEDOUT,
					"cuda: copies still running after %d ms",
					timeout_ms);
		nanosleep(&nap, NULL);
	}
	q->pending = 0;
	return curt_ok(q->rt, rc, "cudaEventQuery", err, errlen);
}

void gpu_queue_close(struct gpu_queue **qp)
{
	struct gpu_queue *q;

	if (qp == NULL || *qp == NULL)
		return;
	q = *qp;
	if (q->pending)
		q->rt->event_sync(q->ev);
	if (q->ev)
		q->rt->event_destroy(q->ev);
	if (q->stream)
		q->rt->stream_destroy(q->stream);
	free(q);
	*qp = NULL;
}
