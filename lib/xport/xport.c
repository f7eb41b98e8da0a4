/*
 * xport.c - the transport registry (lookup by name, probe of all) and the
 * thin wrappers that dispatch through an instance's ops table.
 */
#include "xport_impl.h"

#include <stdio.h>
#include <string.h>

static const struct xport_ops *const xport_all[] = {
	&xport_shm_ops,
	&xport_tcp_ops,
	&xport_rdma_ops,
	&xport_cuda_ops,
};
#define XPORT_N (sizeof xport_all / sizeof xport_all[0])

const struct xport_ops *xport_find(const char *name)
{
	size_t i;

	if (name == NULL)
		return NULL;
	for (i = 0; i < XPORT_N; i++)
		if (strcmp(xport_all[i]->name, name) == 0)
			return xport_all[i];
	return NULL;
}

int xport_probe(const char *name, char *err, size_t errlen)
{
	const struct xport_ops *ops = xport_find(name);

	if (!ops)
		return kvw_errf(err, errlen, KVW_EINVAL, "unknown transport %s",
				name ? name : "(none)");
	return ops->probe(err, errlen);
}

size_t xport_probe_all(struct xport_avail *out, size_t cap)
{
	size_t i;

	for (i = 0; i < XPORT_N && i < cap; i++) {
		out[i].name = xport_all[i]->name;
		out[i].msg[0] = '\0';
		out[i].rc = xport_all[i]->probe(out[i].msg, sizeof out[i].msg);
		if (out[i].rc == 0)
			snprintf(out[i].msg, sizeof out[i].msg, "%s: available",
				 out[i].name);
	}
	return XPORT_N;
}

int xport_open(const struct xport_ops *ops, struct xport **out, char *err,
	       size_t errlen)
{
	*out = NULL;
	if (ops == NULL)
		return kvw_errf(err, errlen, KVW_EINVAL, "xport: no transport");
	if (ops->open == NULL || ops->close == NULL)
		return kvw_errf(err, errlen, KVW_ENODEV,
				"%s: not available: not implemented yet",
				ops->name);
	return ops->open(out, err, errlen);
}

const struct xport_ops *xport_ops_of(const struct xport *x)
{
	return x->ops;
}

/* An instance may come from a transport whose later stages are unfinished:
 * a missing entry answers like missing hardware. */
static int xport_missing(const struct xport *x, const char *what, char *err,
			 size_t errlen)
{
	return kvw_errf(err, errlen, KVW_ENODEV,
			"%s: not available: %s not implemented yet",
			x->ops->name, what);
}

int xport_register(struct xport *x, const struct pool *p, uint32_t *id,
		   uint8_t *desc, size_t desccap, size_t *desclen, char *err,
		   size_t errlen)
{
	if (x->ops->reg == NULL)
		return xport_missing(x, "register", err, errlen);
	return x->ops->reg(x, p, id, desc, desccap, desclen, err, errlen);
}

int xport_connect(struct xport *x, const uint8_t *desc, size_t desclen,
		  uint32_t *id, char *err, size_t errlen)
{
	if (x->ops->connect == NULL)
		return xport_missing(x, "connect", err, errlen);
	return x->ops->connect(x, desc, desclen, id, err, errlen);
}

void xport_disconnect(struct xport *x, uint32_t id)
{
	if (x->ops->disconnect != NULL)
		x->ops->disconnect(x, id);
}

int xport_write_batch(struct xport *x, const struct xport_copy *c, size_t n,
		      char *err, size_t errlen)
{
	if (x->ops->write_batch == NULL)
		return xport_missing(x, "write_batch", err, errlen);
	return x->ops->write_batch(x, c, n, err, errlen);
}

int xport_wait(struct xport *x, int timeout_ms, char *err, size_t errlen)
{
	if (x->ops->wait == NULL)
		return xport_missing(x, "wait", err, errlen);
	return x->ops->wait(x, timeout_ms, err, errlen);
}

void xport_close(struct xport **x)
{
	if (x == NULL || *x == NULL)
		return;
	(*x)->ops->close(x);
}

void xport_set_room(struct xport *x, uint64_t room)
{
	if (x && x->ops->set_room)
		x->ops->set_room(x, room);
}

int xport_pipelines(const struct xport *x)
{
	return x && x->ops->mark && x->ops->wait_for;
}

uint64_t xport_mark(struct xport *x, uint32_t dst)
{
	return xport_pipelines(x) ? x->ops->mark(x, dst) : 0;
}

int xport_wait_for(struct xport *x, uint32_t dst, uint64_t lo, uint64_t hi,
		   char *err, size_t errlen)
{
	if (!xport_pipelines(x))
		return xport_wait(x, -1, err, errlen);
	return x->ops->wait_for(x, dst, lo, hi, err, errlen);
}
