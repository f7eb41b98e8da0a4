/*
 * xport.c - the transport registry (lookup by name, probe of all) and the
 * thin wrappers that dispatch through an instance's ops table, answering
 * for a transport without an optional entry.
 */
#include "xport_impl.h"

#include <stdio.h>
#include <stdlib.h>
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

int xport_encrypt_env(void)
{
	const char *e = getenv("KVW_TCP_ENCRYPT");

	return e && strcmp(e, "1") == 0;
}

int xport_listen(struct xport *x, const char *hostport, char *err,
		 size_t errlen)
{
	if (!x->ops->listen)
		return 0;
	return x->ops->listen(x, hostport, err, errlen);
}

int xport_address(const struct xport *x, char *buf, size_t len)
{
	if (!x || !x->ops->address)
		return KVW_ENOENT;
	return x->ops->address(x, buf, len);
}

int xport_sink_info(const struct xport *x, int *listen_fd,
		    uint8_t secret[16])
{
	if (!x || !x->ops->sink_info)
		return KVW_EINVAL;
	return x->ops->sink_info(x, listen_fd, secret);
}

int xport_refresh(struct xport *x, uint32_t id, uint8_t *desc,
		  size_t desccap, size_t *desclen, int *changed, char *err,
		  size_t errlen)
{
	*changed = 0;
	if (!x->ops->refresh)
		return 0;
	return x->ops->refresh(x, id, desc, desccap, desclen, changed, err,
			       errlen);
}

int xport_summary(const struct xport *x, char *buf, size_t len)
{
	if (!x || !x->ops->summary)
		return KVW_ENOENT;
	return x->ops->summary(x, buf, len);
}

int xport_set_group_key(struct xport *x, const uint8_t key[32])
{
	if (!x->ops->set_group_key)
		return KVW_EINVAL;
	return x->ops->set_group_key(x, key);
}

void xport_set_incarnation(struct xport *x, uint64_t inc)
{
	if (x && x->ops->set_incarnation)
		x->ops->set_incarnation(x, inc);
}

void xport_counts(const struct xport *x, uint64_t *redials,
		  uint64_t *resent, uint64_t *integrity)
{
	*redials = *resent = *integrity = 0;
	if (x && x->ops->counts)
		x->ops->counts(x, redials, resent, integrity);
}

int xport_writer_setup(const struct xport_ops *ops)
{
	if (!ops || !ops->writer_setup)
		return 0;
	return ops->writer_setup();
}
