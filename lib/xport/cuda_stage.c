/*
 * cuda_stage.c - the pinned staging ring (cuda_stage.h).
 */
#include "cuda_stage.h"

#include <stdlib.h>
#include <time.h>

#include "cuda_rt.h"

struct cstage_slot {
	uint8_t *buf;
	curt_stream st;
	curt_event ev;
	int busy;    /* acquired, not yet released */
	int pending; /* an event recorded, not yet seen done */
};

struct cstage {
	const struct curt *rt;
	uint64_t slot_bytes;
	uint32_t n, next;
	struct cstage_slot s[CSTAGE_MAX_SLOTS];
};

int cstage_open(struct cstage **out, int device, uint32_t slots,
		uint64_t slot_bytes, char *err, size_t errlen)
{
	struct cstage *s;
	int rc;

	*out = NULL;
	if (slots < 2 || slots > CSTAGE_MAX_SLOTS || slot_bytes == 0 ||
	    slot_bytes > SIZE_MAX || device < 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"cuda stage: %u slots of %llu bytes on device "
				"%d",
				slots, (unsigned long long)slot_bytes, device);
	s = calloc(1, sizeof *s);
	if (s == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	s->n = slots;
	s->slot_bytes = slot_bytes;
	if ((rc = curt_get(&s->rt, err, errlen)) ||
	    (rc = curt_ok(s->rt, s->rt->set_device(device), "cudaSetDevice",
			  err, errlen)))
		goto fail;
	for (uint32_t i = 0; i < slots; i++) {
		struct cstage_slot *x = &s->s[i];

		if ((rc = curt_ok(s->rt,
				  s->rt->host_alloc((void **)&x->buf,
						    (size_t)slot_bytes,
						    CURT_HOST_PORTABLE),
				  "cudaHostAlloc", err, errlen)) ||
		    (rc = curt_ok(s->rt,
				  s->rt->stream_create(&x->st,
						       CURT_STREAM_NONBLOCKING),
				  "cudaStreamCreateWithFlags", err, errlen)) ||
		    (rc = curt_ok(s->rt,
				  s->rt->event_create(&x->ev,
						      CURT_EVENT_NO_TIMING),
				  "cudaEventCreateWithFlags", err, errlen)))
			goto fail;
	}
	*out = s;
	return 0;
fail:
	cstage_close(&s);
	return rc;
}

int cstage_acquire(struct cstage *s, uint32_t *slot)
{
	if (s->s[s->next].busy)
		return KVW_EAGAIN;
	s->s[s->next].busy = 1;
	*slot = s->next;
	s->next = (s->next + 1) % s->n;
	return 0;
}

uint8_t *cstage_buf(const struct cstage *s, uint32_t slot)
{
	return slot < s->n ? s->s[slot].buf : NULL;
}

uint64_t cstage_slot_bytes(const struct cstage *s)
{
	return s->slot_bytes;
}

/* Checks pieces against a slot: 0 or KVW_EINVAL / KVW_ERANGE. */
static int cstage_check(const struct cstage *s, uint32_t slot,
			const struct cstage_piece *p, size_t n,
			uint64_t *total, char *err, size_t errlen)
{
	uint64_t sum = 0;

	if (slot >= s->n || !s->s[slot].busy || (n && p == NULL))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"cuda stage: slot %u not acquired", slot);
	for (size_t i = 0; i < n; i++) {
		if (p[i].dev == NULL)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"cuda stage: piece %zu has no address",
					i);
		if (p[i].len > s->slot_bytes - sum)
			return kvw_errf(err, errlen, KVW_ERANGE,
					"cuda stage: pieces up to %zu do not "
					"fit a slot of %llu bytes",
					i, (unsigned long long)s->slot_bytes);
		sum += p[i].len;
	}
	*total = sum;
	return 0;
}

static int cstage_move(struct cstage *s, uint32_t slot,
		       const struct cstage_piece *p, size_t n, int d2h,
		       uint64_t *bytes, char *err, size_t errlen)
{
	struct cstage_slot *x;
	uint64_t total = 0, off = 0;
	int rc;

	rc = cstage_check(s, slot, p, n, &total, err, errlen);
	if (rc)
		return rc;
	x = &s->s[slot];
	for (size_t i = 0; i < n && rc == 0; i++) {
		rc = curt_ok(s->rt,
			     d2h ? s->rt->memcpy_async(x->buf + off, p[i].dev,
						       p[i].len,
						       CURT_MEMCPY_DEFAULT, x->st)
				 : s->rt->memcpy_async(p[i].dev, x->buf + off,
						       p[i].len,
						       CURT_MEMCPY_DEFAULT, x->st),
			     "cudaMemcpyAsync", err, errlen);
		off += p[i].len;
	}
	/* The event covers whatever was queued, even after a failure. */
	if (s->rt->event_record(x->ev, x->st) == CURT_SUCCESS)
		x->pending = 1;
	else
		s->rt->stream_sync(x->st);
	if (bytes)
		*bytes = total;
	return rc;
}

int cstage_d2h(struct cstage *s, uint32_t slot, const struct cstage_piece *p,
	       size_t n, uint64_t *bytes, char *err, size_t errlen)
{
	return cstage_move(s, slot, p, n, 1, bytes, err, errlen);
}

int cstage_h2d(struct cstage *s, uint32_t slot, const struct cstage_piece *p,
	       size_t n, char *err, size_t errlen)
{
	return cstage_move(s, slot, p, n, 0, NULL, err, errlen);
}

int cstage_wait(struct cstage *s, uint32_t slot, int timeout_ms, char *err,
		size_t errlen)
{
	const struct timespec nap = { 0, 20000 };
	struct cstage_slot *x;
	long waited_us = 0;
	int rc;

	if (slot >= s->n)
		return kvw_errf(err, errlen, KVW_EINVAL, "cuda stage: slot %u",
				slot);
	x = &s->s[slot];
	if (!x->pending)
		return 0;
	if (timeout_ms < 0) {
		rc = s->rt->event_sync(x->ev);
	} else {
		while ((rc = s->rt->event_query(x->ev)) == CURT_NOT_READY) {
			if (waited_us / 1000 >= timeout_ms)
				return kvw_errf(err, errlen, KVW_ETIMEDOUT,
						"cuda stage: slot %u busy after "
						"%d ms",
						slot, timeout_ms);
			nanosleep(&nap, NULL);
			waited_us += 20;
		}
	}
	x->pending = 0;
	return curt_ok(s->rt, rc, "cudaEventSynchronize", err, errlen);
}

void cstage_release(struct cstage *s, uint32_t slot)
{
	if (slot < s->n)
		s->s[slot].busy = 0;
}

void cstage_close(struct cstage **sp)
{
	struct cstage *s;

	if (sp == NULL || *sp == NULL)
		return;
	s = *sp;
	for (uint32_t i = 0; s->rt && i < s->n; i++) {
		struct cstage_slot *x = &s->s[i];

		if (x->pending)
			s->rt->event_sync(x->ev);
		if (x->ev)
			s->rt->event_destroy(x->ev);
		if (x->st)
			s->rt->stream_destroy(x->st);
		if (x->buf)
			s->rt->free_host(x->buf);
	}
	free(s);
	*sp = NULL;
}
