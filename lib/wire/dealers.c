/*
 * dealers.c - the DEALER cache of dealers.h: an array of entries searched
 * by endpoint. A role asks for a given endpoint once per peer (cap 0: the
 * holder keeps the pointer) or per send to a handful of endpoints (cap > 0),
 * so a linear search is cheaper than any index it would need.
 */
#include "dealers.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "wire.h"
#include "base/kvw.h"

struct dealer {
	char ep[KVW_MAX_STR + 1];
	void *sock;
	uint64_t used; /* d->tick at the last dealers_get */
};

struct dealers {
	void *ctx;
	uint32_t cap; /* 0: unbounded */
	uint32_t n, alloc;
	uint64_t tick;
	struct dealer *v;
};

int dealers_open(void *ctx, uint32_t cap, struct dealers **out)
{
	struct dealers *d = calloc(1, sizeof *d);

	*out = NULL;
	if (!d)
		return KVW_ENOMEM;
	d->ctx = ctx;
	d->cap = cap;
	*out = d;
	return 0;
}

/* The entry a new DEALER goes into: a fresh one, or (at cap) the least
 * recently used, closed. NULL when memory runs out. */
static struct dealer *room_for_one(struct dealers *d)
{
	struct dealer *lru;

	for (uint32_t i = 0; i < d->n; i++) /* one dealers_drop emptied */
		if (!d->v[i].sock)
			return &d->v[i];
	if (d->cap && d->n >= d->cap) {
		lru = &d->v[0];
		for (uint32_t i = 1; i < d->n; i++)
			if (d->v[i].used < lru->used)
				lru = &d->v[i];
		wire_close(&lru->sock);
		lru->ep[0] = '\0';
		return lru;
	}
	if (d->n == d->alloc) {
		uint32_t na = d->alloc ? d->alloc * 2 : 8;
		struct dealer *v = realloc(d->v, (size_t)na * sizeof *v);

		if (!v)
			return NULL;
		d->v = v;
		d->alloc = na;
	}
	memset(&d->v[d->n], 0, sizeof d->v[d->n]);
	return &d->v[d->n++];
}

void *dealers_get(struct dealers *d, const char *ep, char *err, size_t errlen)
{
	struct dealer *e;
	void *s;

	for (uint32_t i = 0; i < d->n; i++) {
		if (d->v[i].sock && strcmp(d->v[i].ep, ep) == 0) {
			d->v[i].used = ++d->tick;
			return d->v[i].sock;
		}
	}
	if (strlen(ep) > KVW_MAX_STR) {
		kvw_seterr(err, errlen, "endpoint longer than %u bytes",
			   KVW_MAX_STR);
		return NULL;
	}
	s = wire_socket(d->ctx, ZMQ_DEALER, 0, err, errlen);
	if (!s)
		return NULL;
	if (wire_connect(s, ep, err, errlen) != 0) {
		wire_close(&s);
		return NULL;
	}
	e = room_for_one(d);
	if (!e) {
		kvw_seterr(err, errlen, "out of memory");
		wire_close(&s);
		return NULL;
	}
	memcpy(e->ep, ep, strlen(ep) + 1);
	e->sock = s;
	e->used = ++d->tick;
	return s;
}

void dealers_drop(struct dealers *d, const char *ep)
{
	for (uint32_t i = 0; i < d->n; i++)
		if (d->v[i].sock && strcmp(d->v[i].ep, ep) == 0) {
			wire_close(&d->v[i].sock);
			d->v[i].ep[0] = '\0';
			return;
		}
}

uint32_t dealers_count(const struct dealers *d)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < d->n; i++)
		k += d->v[i].sock != NULL;
	return k;
}

void dealers_close(struct dealers **d)
{
	if (!d || !*d)
		return;
	for (uint32_t i = 0; i < (*d)->n; i++)
		wire_close(&(*d)->v[i].sock);
	free((*d)->v);
	free(*d);
	*d = NULL;
}
