/*
 * xport_tcp.c - the network transport (protocol: tcp_proto.h). On the
 * prefill side a worker connects once per decode pool and keeps the
 * connection (tcp_client.c: batches sent with writev straight from the
 * source pool, several in flight before xport_wait collects their ACKs,
 * the unacked ones resent over a re-dialled connection). On the decode
 * side the registration opens the listening socket (xport_tcp_listen) and
 * draws a fresh secret; sink processes (tcp_sink.c, run by kv-receiver)
 * accept on it and write into the pool themselves.
 *
 * Every copy is checked against the registered source and the remote's
 * pool size before a byte is sent, and the sink checks the list again
 * against its own pool before it reads the payload (it trusts nothing).
 * Sockets are blocking with send and receive timeouts, so a sink that
 * stops reading breaks the connection instead of hanging a worker.
 */
#include "xport/xport_impl.h"
#include "xport_tcp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "tcp_auth.h"
#include "tcp_client.h"
#include "tcp_proto.h"
#include "mem/mem.h"
#include "mem/pool.h"
#include "xport/xnet.h"

#define XTCP_MAX_LOCAL 8u

struct xtcp_local {
	uint8_t *base; /* NULL: free */
	uint64_t size;
	struct mem_region *mem; /* the engine's memory behind the pool */
};

struct xtcp_remote {
	struct tcp_client *cl; /* NULL: free slot */
	uint64_t size;  /* the decode pool's size, from the descriptor */
	uint8_t *desc;  /* owned copy, to give the same id back */
	size_t desclen;
};

struct xtcp_xport {
	struct xport base;
	struct xtcp_local loc[XTCP_MAX_LOCAL];
	struct xtcp_remote *rmt;
	uint32_t nrmt, caprmt;
	uint64_t room;  /* tag of the batches (xport_set_room) */
	uint64_t inc;   /* and their room's incarnation
			 * (xport_tcp_set_incarnation) */
	int encrypt;    /* ask every sink for ENCRYPT */
	/* What closed clients had counted (their remotes disconnected). */
	uint64_t gone_redials, gone_resent, gone_integrity;
	int lfd;        /* decode side: the listening socket, or -1 */
	char host[TCP_HOST_MAX + 1];
	uint16_t port;
	uint8_t secret[TCP_SECRET_LEN];
	uint8_t group[TCP_GROUP_KEY_LEN]; /* the group's data key, if any */
	int has_group;
	struct tcp_span span[TCP_MAX_COPIES];
};

static int xtcp_probe(char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	return 0;
}

static int xtcp_open(struct xport **out, char *err, size_t errlen)
{
	struct xtcp_xport *t = calloc(1, sizeof *t);

	*out = NULL;
	if (!t)
		return kvw_errf(err, errlen, KVW_ENOMEM, "tcp: out of memory");
	t->base.ops = &xport_tcp_ops;
	t->lfd = -1;
	t->encrypt = xport_encrypt_env();
	*out = &t->base;
	return 0;
}

/* Splits "HOST:PORT" (or "HOST", port 0). 0 or KVW_EINVAL. */
int xport_tcp_listen(struct xport *x, const char *hostport, char *err,
		     size_t errlen)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);
	char why[200];
	int fd;

	if (x->ops != &xport_tcp_ops)
		return kvw_errf(err, errlen, KVW_EINVAL, "not a tcp transport");
	if (t->lfd >= 0)
		return kvw_errf(err, errlen, KVW_EEXIST, "tcp: listening already");
	if (xnet_split(hostport, t->host, sizeof t->host, &t->port) < 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"tcp: want HOST[:PORT] with a numeric host, "
				"got %.100s",
				hostport);
	fd = xnet_listen(t->host, &t->port, 0, why, sizeof why);
	if (fd < 0)
		return kvw_errf(err, errlen, fd, "tcp: listen on %.100s: %s",
				hostport, why);
	if (getrandom(t->secret, sizeof t->secret, 0) != sizeof t->secret) {
		close(fd);
		return kvw_errf(err, errlen, KVW_ESYS, "tcp: getrandom: %s",
				strerror(errno));
	}
	t->lfd = fd;
	return 0;
}

/* The tcp instance behind x, or NULL for another transport. */
static const struct xtcp_xport *tcp_of(const struct xport *x)
{
	if (x->ops != &xport_tcp_ops)
		return NULL;
	return (const struct xtcp_xport *)(const void *)((const char *)x -
		offsetof(struct xtcp_xport, base));
}

int xport_tcp_set_group_key(struct xport *x, const uint8_t key[32])
{
	struct xtcp_xport *t;

	if (x->ops != &xport_tcp_ops)
		return KVW_EINVAL;
	t = XPORT_SELF(struct xtcp_xport, x);
	memcpy(t->group, key, TCP_GROUP_KEY_LEN);
	t->has_group = 1;
	return 0;
}

int xport_tcp_set_encrypt(struct xport *x, int on)
{
	if (x->ops != &xport_tcp_ops)
		return KVW_EINVAL;
	XPORT_SELF(struct xtcp_xport, x)->encrypt = !!on;
	return 0;
}

void xport_tcp_set_incarnation(struct xport *x, uint64_t inc)
{
	if (x && x->ops == &xport_tcp_ops)
		XPORT_SELF(struct xtcp_xport, x)->inc = inc;
}

void xport_tcp_counts(const struct xport *x, uint64_t *redials,
		      uint64_t *resent, uint64_t *integrity)
{
	const struct xtcp_xport *t = tcp_of(x);

	*redials = *resent = *integrity = 0;
	if (!t)
		return;
	*redials = t->gone_redials;
	*resent = t->gone_resent;
	*integrity = t->gone_integrity;
	for (uint32_t i = 0; i < t->nrmt; i++)
		if (t->rmt[i].cl) {
			*redials += tcp_client_redials(t->rmt[i].cl);
			*resent += tcp_client_resent(t->rmt[i].cl);
			*integrity += tcp_client_integrity(t->rmt[i].cl);
		}
}

int xport_tcp_address(const struct xport *x, char *buf, size_t len)
{
	const struct xtcp_xport *t = tcp_of(x);

	if (!t || t->lfd < 0)
		return KVW_ENOENT;
	snprintf(buf, len, "%s:%u", t->host, t->port);
	return 0;
}

int xport_tcp_sink_info(const struct xport *x, int *listen_fd,
			uint8_t secret[16])
{
	const struct xtcp_xport *t = tcp_of(x);

	if (!t)
		return KVW_EINVAL;
	if (t->lfd < 0)
		return KVW_ENOENT;
	*listen_fd = t->lfd;
	memcpy(secret, t->secret, TCP_SECRET_LEN);
	return 0;
}

static int xtcp_reg(struct xport *x, const struct pool *p, uint32_t *id,
		    uint8_t *desc, size_t desccap, size_t *desclen, char *err,
		    size_t errlen)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);
	size_t hl = strlen(t->host), need = TCP_DESC_FIXED + hl;
	uint32_t i;
	int rc;

	for (i = 0; i < XTCP_MAX_LOCAL && t->loc[i].base; i++)
		;
	if (i == XTCP_MAX_LOCAL)
		return kvw_errf(err, errlen, KVW_ENOMEM,
				"tcp: more than %u local pools", XTCP_MAX_LOCAL);
	if (need > desccap || need > KVW_MAX_DESC)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"tcp: descriptor does not fit");
	/* Without a listening socket (the prefill side's source pool) the
	 * descriptor says port 0: nobody can connect to it. */
	le_put(desc, TCP_MAGIC_DESC, 4);
	le_put(desc + 4, TCP_VERSION, 2);
	le_put(desc + 6, t->lfd >= 0 ? t->port : 0, 2);
	le_put(desc + 8, pool_size(p), 8);
	memcpy(desc + 16, t->secret, TCP_SECRET_LEN);
	le_put(desc + 32, hl, 2);
	memcpy(desc + TCP_DESC_FIXED, t->host, hl);
	*desclen = need;
	t->loc[i] = (struct xtcp_local){ pool_base(p), pool_size(p), NULL };
	/* A source engine may keep its KV on a GPU: then each batch's
	 * device pages are copied into the pool before they are sent. */
	rc = mem_region_open(&t->loc[i].mem, pool_path(p), pool_size(p),
			     MEM_STAGE, err, errlen);
	if (rc) {
		t->loc[i].base = NULL;
		return rc;
	}
	*id = i;
	return 0;
}

/* The descriptor's fields; 0 or KVW_EINVAL. */
static int parse_desc(const uint8_t *d, size_t len, uint16_t *port,
		      uint64_t *size, const uint8_t **secret, char *host)
{
	size_t hl;

	if (len < TCP_DESC_FIXED || le_get(d, 4) != TCP_MAGIC_DESC ||
	    le_get(d + 4, 2) != TCP_VERSION)
		return KVW_EINVAL;
	hl = le_get(d + 32, 2);
	if (hl == 0 || hl > TCP_HOST_MAX || len != TCP_DESC_FIXED + hl ||
	    memchr(d + TCP_DESC_FIXED, '\0', hl))
		return KVW_EINVAL;
	*port = (uint16_t)le_get(d + 6, 2);
	*size = le_get(d + 8, 8);
	*secret = d + 16;
	memcpy(host, d + TCP_DESC_FIXED, hl);
	host[hl] = '\0';
	return *port && *size ? 0 : KVW_EINVAL;
}

static int xtcp_connect(struct xport *x, const uint8_t *desc, size_t desclen,
			uint32_t *id, char *err, size_t errlen)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);
	char host[TCP_HOST_MAX + 1];
	const uint8_t *secret;
	struct xtcp_remote *r;
	uint64_t size;
	uint16_t port;
	uint32_t i;
	int rc;

	for (i = 0; i < t->nrmt; i++)
		if (t->rmt[i].cl && t->rmt[i].desclen == desclen &&
		    memcmp(t->rmt[i].desc, desc, desclen) == 0) {
			*id = i;
			return 0;
		}
	if (parse_desc(desc, desclen, &port, &size, &secret, host) < 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"tcp: malformed descriptor (%zu bytes)",
				desclen);
	for (i = 0; i < t->nrmt && t->rmt[i].cl; i++)
		;
	if (i == t->caprmt) {
		uint32_t cap = t->caprmt ? 2 * t->caprmt : 4;
		struct xtcp_remote *v = realloc(t->rmt, cap * sizeof *v);

		if (!v)
			return kvw_errf(err, errlen, KVW_ENOMEM,
					"tcp: out of memory");
		t->rmt = v;
		t->caprmt = cap;
	}
	r = &t->rmt[i];
	*r = (struct xtcp_remote){ .size = size, .desc = malloc(desclen) };
	if (!r->desc)
		return kvw_errf(err, errlen, KVW_ENOMEM, "tcp: out of memory");
	rc = tcp_client_open(&r->cl, host, port, secret,
			     t->has_group ? t->group : NULL, t->encrypt, err,
			     errlen);
	if (rc) {
		free(r->desc);
		r->desc = NULL;
		return rc;
	}
	memcpy(r->desc, desc, desclen);
	r->desclen = desclen;
	if (i == t->nrmt)
		t->nrmt++;
	*id = i;
	return 0;
}

static void xtcp_disconnect(struct xport *x, uint32_t id)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);

	if (id >= t->nrmt || !t->rmt[id].cl)
		return;
	t->gone_redials += tcp_client_redials(t->rmt[id].cl);
	t->gone_resent += tcp_client_resent(t->rmt[id].cl);
	t->gone_integrity += tcp_client_integrity(t->rmt[id].cl);
	tcp_client_close(&t->rmt[id].cl);
	free(t->rmt[id].desc);
	t->rmt[id] = (struct xtcp_remote){ 0 };
}

static void xtcp_set_room(struct xport *x, uint64_t room)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);

	t->room = room;
	t->inc = 0; /* until xport_tcp_set_incarnation names it */
}

/* The source engine's memory made current and its device pages (where it
 * keeps its KV on a GPU: mem.h) copied into the pool, done, before a byte
 * is sent or hashed. For a host pool both are nothing but one stat. A
 * batch has one source pool in practice. */
static int stage_gpu_pages(struct xtcp_xport *t, const struct xport_copy *c,
			   size_t n, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		struct mem_region *m = t->loc[c[i].src].mem;
		int rc, r2;

		if (i > 0 && c[i].src == c[i - 1].src)
			continue;
		if ((rc = mem_region_refresh(m, err, errlen)))
			return rc;
		for (size_t j = i; rc == 0 && j < n; j++)
			if (c[j].src == c[i].src)
				rc = mem_region_stage_to_host(
				    m, c[j].src_off, c[j].len, err, errlen);
		/* Also after a failed enqueue: nothing stays queued. */
		r2 = mem_region_sync(m, rc ? NULL : err, errlen);
		if ((rc = rc ? rc : r2))
			return rc;
	}
	return 0;
}

static int xtcp_write_batch(struct xport *x, const struct xport_copy *c,
			    size_t n, char *err, size_t errlen)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);
	struct xtcp_remote *r;
	int rc;

	if (n == 0)
		return 0;
	if (n > TCP_MAX_COPIES)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"tcp: %zu copies in one batch (max %u)", n,
				TCP_MAX_COPIES);
	if (c[0].dst >= t->nrmt || !t->rmt[c[0].dst].cl)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"tcp: unknown remote %u", c[0].dst);
	r = &t->rmt[c[0].dst];
	/* Every copy against both regions before a byte is sent. */
	for (size_t i = 0; i < n; i++) {
		const struct xtcp_local *l = c[i].src < XTCP_MAX_LOCAL
						     ? &t->loc[c[i].src] : NULL;
		uint64_t se, de;

		if (c[i].dst != c[0].dst || !l || !l->base)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"tcp: copy %zu: unknown region or a "
					"second remote in one batch",
					i);
		if (__builtin_add_overflow(c[i].src_off, c[i].len, &se) ||
		    __builtin_add_overflow(c[i].dst_off, c[i].len, &de) ||
		    se > l->size || de > r->size)
			return kvw_errf(err, errlen, KVW_ERANGE,
					"tcp: copy %zu outside its region", i);
		t->span[i] = (struct tcp_span){ l->base + c[i].src_off,
						c[i].dst_off, c[i].len };
	}
	rc = stage_gpu_pages(t, c, n, err, errlen);
	if (rc)
		return rc;
	return tcp_client_send(r->cl, t->room, t->inc, t->span, n, err, errlen);
}

static int xtcp_wait(struct xport *x, int timeout_ms, char *err,
		     size_t errlen)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);
	int first = 0;

	(void)timeout_ms; /* bounded by the sockets' timeouts and the resend
			   * window */
	for (uint32_t i = 0; i < t->nrmt; i++) {
		char why[256];
		int rc;

		if (!t->rmt[i].cl)
			continue;
		rc = tcp_client_wait(t->rmt[i].cl, why, sizeof why);
		if (rc && first == 0) {
			first = rc;
			kvw_seterr(err, errlen, "%s", why);
		}
	}
	return first;
}

static uint64_t xtcp_mark(struct xport *x, uint32_t dst)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);

	return dst < t->nrmt && t->rmt[dst].cl ? tcp_client_mark(t->rmt[dst].cl)
					       : 0;
}

static int xtcp_wait_for(struct xport *x, uint32_t dst, uint64_t lo,
			 uint64_t hi, char *err, size_t errlen)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);

	/* Its batches went with the connection (disconnect forgets them). */
	if (dst >= t->nrmt || !t->rmt[dst].cl)
		return lo < hi ? kvw_errf(err, errlen, KVW_ESYS,
					  "tcp: remote %u disconnected with "
					  "batches in flight", dst)
			       : 0;
	return tcp_client_wait_for(t->rmt[dst].cl, lo, hi, err, errlen);
}

static void xtcp_close(struct xport **x)
{
	struct xtcp_xport *t;

	if (!x || !*x)
		return;
	t = XPORT_SELF(struct xtcp_xport, *x);
	for (uint32_t i = 0; i < t->nrmt; i++)
		xtcp_disconnect(*x, i);
	for (uint32_t i = 0; i < XTCP_MAX_LOCAL; i++)
		mem_region_close(&t->loc[i].mem);
	free(t->rmt);
	if (t->lfd >= 0)
		close(t->lfd);
	free(t);
	*x = NULL;
}

const struct xport_ops xport_tcp_ops = {
	.name = "tcp",
	.probe = xtcp_probe,
	.open = xtcp_open,
	.reg = xtcp_reg,
	.connect = xtcp_connect,
	.disconnect = xtcp_disconnect,
	.write_batch = xtcp_write_batch,
	.wait = xtcp_wait,
	.close = xtcp_close,
	.set_room = xtcp_set_room,
	.mark = xtcp_mark,
	.wait_for = xtcp_wait_for,
	.listen = xport_tcp_listen,
	.listen_what = "data port",
	.address = xport_tcp_address,
	.sink_info = xport_tcp_sink_info,
	.set_group_key = xport_tcp_set_group_key,
	.set_incarnation = xport_tcp_set_incarnation,
	.counts = xport_tcp_counts,
};
