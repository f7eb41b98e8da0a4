/*
 * xport_tcp.c - the network transport (protocol: tcp_proto.h). On the
 * prefill side a worker connects once per decode pool and keeps the
 * connection; a batch is one header, its copy list and the payload, sent
 * with writev straight from the source pool (no staging copy), several
 * batches in flight before xport_wait collects their ACKs. On the decode
 * side the registration opens the listening socket (xport_tcp_listen) and
 * draws a fresh secret; sink processes (tcp_sink.c, run by kv-receiver)
 * accept on it and write into the pool themselves.
 *
 * Every copy is checked against the registered source and the remote's
 * pool size before a byte is sent, and the sink checks the list again
 * against its own pool before it reads the payload (it trusts nothing).
 * Sockets are blocking with send and receive timeouts, so a sink that
 * stops reading fails the batch instead of hanging a worker.
 */
#include "xport_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
/* XXH3_state_t on the stack: its size must be known here. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "pool.h"
#include "tcp_proto.h"

#define XTCP_MAX_LOCAL 8u
#define XTCP_IO_TIMEOUT_S 30 /* a sink silent this long fails the batch */
#define XTCP_CONNECT_MS 5000
#define XTCP_IOV 512u /* iovecs per writev call (IOV_MAX is 1024) */

struct xtcp_local {
	uint8_t *base; /* NULL: free */
	uint64_t size;
};

struct xtcp_remote {
	int fd;         /* -1: free slot */
	uint64_t size;  /* the decode pool's size, from the descriptor */
	uint64_t next_batch;
	uint32_t outstanding; /* batches sent, not acked yet */
	uint8_t *desc;  /* owned copy, to give the same id back */
	size_t desclen;
};

struct xtcp_xport {
	struct xport base;
	struct xtcp_local loc[XTCP_MAX_LOCAL];
	struct xtcp_remote *rmt;
	uint32_t nrmt, caprmt;
	uint64_t room;  /* tag of the batches (xport_set_room) */
	int lfd;        /* decode side: the listening socket, or -1 */
	char host[TCP_HOST_MAX + 1];
	uint16_t port;
	uint8_t secret[TCP_SECRET_LEN];
	uint8_t hdr[TCP_BATCH_LEN + TCP_MAX_COPIES * TCP_COPY_LEN];
	struct iovec iov[XTCP_IOV];
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
	*out = &t->base;
	return 0;
}

/* Splits "HOST:PORT" (or "HOST", port 0). 0 or KVW_EINVAL. */
static int split_hostport(const char *s, char *host, size_t hostcap,
			  uint16_t *port)
{
	const char *c = strrchr(s, ':');
	size_t n = c ? (size_t)(c - s) : strlen(s);
	char *end;
	unsigned long p = 0;

	if (n == 0 || n >= hostcap)
		return KVW_EINVAL;
	if (c) {
		errno = 0;
		p = strtoul(c + 1, &end, 10);
		if (errno || *end || end == c + 1 || p > 65535)
			return KVW_EINVAL;
	}
	memcpy(host, s, n);
	host[n] = '\0';
	*port = (uint16_t)p;
	return 0;
}

int xport_tcp_listen(struct xport *x, const char *hostport, char *err,
		     size_t errlen)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_PASSIVE };
	struct addrinfo *ai = NULL;
	struct sockaddr_storage sa;
	socklen_t salen = sizeof sa;
	char port[8];
	int fd = -1, one = 1, rc;

	if (x->ops != &xport_tcp_ops)
		return kvw_errf(err, errlen, KVW_EINVAL, "not a tcp transport");
	if (t->lfd >= 0)
		return kvw_errf(err, errlen, KVW_EEXIST, "tcp: listening already");
	if (split_hostport(hostport, t->host, sizeof t->host, &t->port) < 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"tcp: want HOST[:PORT] with a numeric host, "
				"got %.100s",
				hostport);
	snprintf(port, sizeof port, "%u", t->port);
	rc = getaddrinfo(t->host, port, &hints, &ai);
	if (rc != 0)
		return kvw_errf(err, errlen, KVW_EINVAL, "tcp: %s: %s", t->host,
				gai_strerror(rc));
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
	    listen(fd, SOMAXCONN) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &salen) < 0) {
		kvw_seterr(err, errlen, "tcp: listen on %.100s: %s", hostport,
			   strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return KVW_ESYS;
	}
	freeaddrinfo(ai);
	t->port = ntohs(sa.ss_family == AF_INET6
				? ((struct sockaddr_in6 *)&sa)->sin6_port
				: ((struct sockaddr_in *)&sa)->sin_port);
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
	tcp_put(desc, TCP_MAGIC_DESC, 4);
	tcp_put(desc + 4, TCP_VERSION, 2);
	tcp_put(desc + 6, t->lfd >= 0 ? t->port : 0, 2);
	tcp_put(desc + 8, pool_size(p), 8);
	memcpy(desc + 16, t->secret, TCP_SECRET_LEN);
	tcp_put(desc + 32, hl, 2);
	memcpy(desc + TCP_DESC_FIXED, t->host, hl);
	*desclen = need;
	t->loc[i] = (struct xtcp_local){ pool_base(p), pool_size(p) };
	*id = i;
	return 0;
}

/* Sends (out != 0) or receives exactly len bytes: 0, or KVW_ESYS on a
 * timeout, a closed or a broken connection. */
static int io_all(int fd, uint8_t *buf, size_t len, int out)
{
	while (len > 0) {
		ssize_t k = out ? send(fd, buf, len, MSG_NOSIGNAL)
				: recv(fd, buf, len, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return KVW_ESYS;
		buf += k;
		len -= (size_t)k;
	}
	return 0;
}

/* Connects to host:port within XTCP_CONNECT_MS; the fd or -1 (why set). */
static int dial(const char *host, uint16_t port, char *why, size_t whylen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST };
	struct timeval tv = { XTCP_IO_TIMEOUT_S, 0 };
	struct addrinfo *ai = NULL;
	struct pollfd pfd;
	char ps[8];
	int fd, one = 1, soerr = 0, rc;
	socklen_t sl = sizeof soerr;

	snprintf(ps, sizeof ps, "%u", port);
	rc = getaddrinfo(host, ps, &hints, &ai);
	if (rc != 0) {
		snprintf(why, whylen, "%.64s: %s", host, gai_strerror(rc));
		return -1;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
		    0);
	if (fd < 0) {
		snprintf(why, whylen, "socket: %s", strerror(errno));
		freeaddrinfo(ai);
		return -1;
	}
	rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (rc < 0 && errno == EINPROGRESS) {
		pfd = (struct pollfd){ .fd = fd, .events = POLLOUT };
		rc = poll(&pfd, 1, XTCP_CONNECT_MS);
		if (rc == 1 &&
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
		    soerr == 0)
			rc = 0;
		else
			errno = rc == 0 ? ETIMEDOUT : soerr ? soerr : errno;
	}
	if (rc != 0 || fcntl(fd, F_SETFL, 0) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0) {
		snprintf(why, whylen, "connect %.64s:%u: %s", host, port,
			 strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* The descriptor's fields; 0 or KVW_EINVAL. */
static int parse_desc(const uint8_t *d, size_t len, uint16_t *port,
		      uint64_t *size, const uint8_t **secret, char *host)
{
	size_t hl;

	if (len < TCP_DESC_FIXED || tcp_get(d, 4) != TCP_MAGIC_DESC ||
	    tcp_get(d + 4, 2) != TCP_VERSION)
		return KVW_EINVAL;
	hl = tcp_get(d + 32, 2);
	if (hl == 0 || hl > TCP_HOST_MAX || len != TCP_DESC_FIXED + hl ||
	    memchr(d + TCP_DESC_FIXED, '\0', hl))
		return KVW_EINVAL;
	*port = (uint16_t)tcp_get(d + 6, 2);
	*size = tcp_get(d + 8, 8);
	*secret = d + 16;
	memcpy(host, d + TCP_DESC_FIXED, hl);
	host[hl] = '\0';
	return *port && *size ? 0 : KVW_EINVAL;
}

static int xtcp_connect(struct xport *x, const uint8_t *desc, size_t desclen,
			uint32_t *id, char *err, size_t errlen)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);
	uint8_t hello[TCP_HELLO_LEN], wel[TCP_WELCOME_LEN];
	char host[TCP_HOST_MAX + 1], why[200];
	const uint8_t *secret;
	struct xtcp_remote *r = NULL;
	uint64_t size;
	uint16_t port;
	uint32_t i;
	int fd;

	for (i = 0; i < t->nrmt; i++)
		if (t->rmt[i].fd >= 0 && t->rmt[i].desclen == desclen &&
		    memcmp(t->rmt[i].desc, desc, desclen) == 0) {
			*id = i;
			return 0;
		}
	if (parse_desc(desc, desclen, &port, &size, &secret, host) < 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"tcp: malformed descriptor (%zu bytes)",
				desclen);
	for (i = 0; i < t->nrmt && t->rmt[i].fd >= 0; i++)
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
	fd = dial(host, port, why, sizeof why);
	if (fd < 0)
		return kvw_errf(err, errlen, KVW_ESYS, "tcp: %s", why);
	tcp_put(hello, TCP_MAGIC_HELLO, 4);
	tcp_put(hello + 4, TCP_VERSION, 2);
	tcp_put(hello + 6, 0, 2);
	memcpy(hello + 8, secret, TCP_SECRET_LEN);
	if (io_all(fd, hello, sizeof hello, 1) < 0 ||
	    io_all(fd, wel, sizeof wel, 0) < 0 ||
	    tcp_get(wel, 4) != TCP_MAGIC_WELCOME || tcp_get(wel + 4, 4)) {
		close(fd);
		return kvw_errf(err, errlen, KVW_ESYS,
				"tcp: %s:%u did not accept the connection",
				host, port);
	}
	r = &t->rmt[i];
	*r = (struct xtcp_remote){ .fd = fd, .size = size };
	r->desc = malloc(desclen);
	if (!r->desc) {
		close(fd);
		r->fd = -1;
		return kvw_errf(err, errlen, KVW_ENOMEM, "tcp: out of memory");
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

	if (id >= t->nrmt || t->rmt[id].fd < 0)
		return;
	close(t->rmt[id].fd);
	free(t->rmt[id].desc);
	t->rmt[id] = (struct xtcp_remote){ .fd = -1 };
}

static void xtcp_set_room(struct xport *x, uint64_t room)
{
	XPORT_SELF(struct xtcp_xport, x)->room = room;
}

/* The status of one ACK read from r (blocking): TCP_* or -1 when the
 * connection broke. */
static int read_ack(struct xtcp_remote *r)
{
	uint8_t a[TCP_ACK_LEN];

	if (io_all(r->fd, a, sizeof a, 0) < 0 || tcp_get(a, 4) != TCP_MAGIC_ACK)
		return -1;
	r->outstanding--;
	return (int)tcp_get(a + 4, 4);
}

/* Maps a sink's refusal to an error. */
static int ack_error(int st, char *err, size_t errlen)
{
	switch (st) {
	case TCP_CHECKSUM:
		return kvw_errf(err, errlen, KVW_ECORRUPT,
				"tcp: checksum mismatch at the decode "
				"(integrity)");
	case TCP_NOT_LIVE:
		return kvw_errf(err, errlen, KVW_ENOENT,
				"tcp: the room is not live at the decode");
	case -1:
		return kvw_errf(err, errlen, KVW_ESYS,
				"tcp: connection to the decode lost");
	default:
		return kvw_errf(err, errlen, KVW_EINVAL,
				"tcp: the decode refused a batch (status %d)",
				st);
	}
}

/* A broken connection: closed, its slot kept so the id stays invalid
 * until the caller disconnects and connects again. */
static void broken(struct xtcp_remote *r)
{
	close(r->fd);
	r->fd = -1;
	free(r->desc);
	r->desc = NULL;
	r->desclen = 0;
	r->outstanding = 0;
}

static int xtcp_write_batch(struct xport *x, const struct xport_copy *c,
			    size_t n, char *err, size_t errlen)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);
	struct xtcp_remote *r;
	XXH3_state_t hs;
	uint64_t total = 0;
	size_t nio = 0, off;

	if (n == 0)
		return 0;
	if (n > TCP_MAX_COPIES)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"tcp: %zu copies in one batch (max %u)", n,
				TCP_MAX_COPIES);
	if (c[0].dst >= t->nrmt || t->rmt[c[0].dst].fd < 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"tcp: unknown remote %u", c[0].dst);
	r = &t->rmt[c[0].dst];
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
		total += c[i].len;
	}
	XXH3_64bits_reset(&hs);
	for (size_t i = 0; i < n; i++)
		XXH3_64bits_update(&hs, t->loc[c[i].src].base + c[i].src_off,
				   c[i].len);
	tcp_put(t->hdr, TCP_MAGIC_BATCH, 4);
	tcp_put(t->hdr + 4, n, 4);
	tcp_put(t->hdr + 8, r->next_batch++, 8);
	tcp_put(t->hdr + 16, t->room, 8);
	tcp_put(t->hdr + 24, total, 8);
	tcp_put(t->hdr + 32, XXH3_64bits_digest(&hs), 8);
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = t->hdr + TCP_BATCH_LEN + i * TCP_COPY_LEN;

		tcp_put(p, c[i].dst_off, 8);
		tcp_put(p + 8, c[i].len, 8);
	}
	/* Header and copy list, then the payload straight from the pool, in
	 * as few writev calls as XTCP_IOV allows. */
	t->iov[nio++] = (struct iovec){ t->hdr, TCP_BATCH_LEN + n * TCP_COPY_LEN };
	for (size_t i = 0; i <= n; i++) {
		if (nio == XTCP_IOV || (i == n && nio > 0)) {
			struct iovec *v = t->iov;
			size_t cnt = nio;

			while (cnt > 0) {
				ssize_t k = writev(r->fd, v, (int)cnt);

				if (k < 0 && errno == EINTR)
					continue;
				if (k <= 0) {
					broken(r);
					return kvw_errf(err, errlen, KVW_ESYS,
							"tcp: send: %s",
							k < 0 ? strerror(errno)
							      : "closed");
				}
				for (off = (size_t)k; cnt && off >= v->iov_len;
				     cnt--, v++)
					off -= v->iov_len;
				if (cnt) {
					v->iov_base = (uint8_t *)v->iov_base + off;
					v->iov_len -= off;
				}
			}
			nio = 0;
		}
		if (i < n && c[i].len)
			t->iov[nio++] = (struct iovec){
				t->loc[c[i].src].base + c[i].src_off,
				(size_t)c[i].len };
	}
	r->outstanding++;
	return 0;
}

static int xtcp_wait(struct xport *x, int timeout_ms, char *err,
		     size_t errlen)
{
	struct xtcp_xport *t = XPORT_SELF(struct xtcp_xport, x);
	int first = 0;

	(void)timeout_ms; /* bounded by the sockets' receive timeout */
	for (uint32_t i = 0; i < t->nrmt; i++) {
		struct xtcp_remote *r = &t->rmt[i];

		while (r->fd >= 0 && r->outstanding > 0) {
			int st = read_ack(r);

			if (st == TCP_OK)
				continue;
			if (first == 0)
				first = ack_error(st, err, errlen);
			if (st < 0 || st == TCP_BAD) {
				broken(r);
				break;
			}
		}
	}
	return first;
}

static void xtcp_close(struct xport **x)
{
	struct xtcp_xport *t;

	if (!x || !*x)
		return;
	t = XPORT_SELF(struct xtcp_xport, *x);
	for (uint32_t i = 0; i < t->nrmt; i++)
		if (t->rmt[i].fd >= 0)
			broken(&t->rmt[i]);
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
};
