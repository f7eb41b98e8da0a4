/*
 * wire.c - the ZMQ side of the frame codec; see wire.h. The receive path
 * reads at most KVW_MAX_FRAMES parts into fixed storage and drains the rest
 * of an oversized message, so a hostile peer can never make it allocate
 * per part or leave half a message in the socket.
 */
#include "wire.h"

#include "wire_auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A socket of type; its failed handshakes watched as a server's (it
 * binds) or a client's (it dials). */
static void *make_socket(void *ctx, int type, int linger_ms, int server,
			 char *err, size_t errlen)
{
	void *s;
	int one = 1;

	if (wire_auth_zap_start(ctx, err, errlen) != 0)
		return NULL;
	s = zmq_socket(ctx, type);
	if (!s) {
		kvw_seterr(err, errlen, "zmq_socket: %s", zmq_strerror(errno));
		return NULL;
	}
	if (zmq_setsockopt(s, ZMQ_LINGER, &linger_ms, sizeof linger_ms) ||
	    (type == ZMQ_ROUTER &&
	     zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one))) {
		kvw_seterr(err, errlen, "zmq_setsockopt: %s",
			   zmq_strerror(errno));
		zmq_close(s);
		return NULL;
	}
	/* Failed handshakes are counted and logged (with keys only). */
	if ((type == ZMQ_ROUTER || type == ZMQ_DEALER || type == ZMQ_REQ) &&
	    wire_auth_watch(ctx, s, server, err, errlen) != 0) {
		zmq_close(s);
		return NULL;
	}
	return s;
}

void *wire_socket(void *ctx, int type, int linger_ms, char *err,
		  size_t errlen)
{
	/* ROUTERs are the servers; DEALERs and REQs dial. */
	return make_socket(ctx, type, linger_ms, type == ZMQ_ROUTER, err,
			   errlen);
}

void *wire_router_dialer(void *ctx, int linger_ms, char *err, size_t errlen)
{
	return make_socket(ctx, ZMQ_ROUTER, linger_ms, 0, err, errlen);
}

int wire_endpoint_check(const char *ep, char *err, size_t errlen)
{
	size_t n = ep ? strlen(ep) : 0;

	if (n == 0 || n > KVW_MAX_STR)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"endpoint empty or longer than %u bytes",
				KVW_MAX_STR);
	if (strncmp(ep, "ipc://", 6) == 0) {
		if (n == 6 || n - 6 > WIRE_IPC_PATH_MAX)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"ipc path of %zu bytes (1..%u allowed): "
					"%.120s",
					n - 6, WIRE_IPC_PATH_MAX, ep);
		return 0;
	}
	if (strncmp(ep, "inproc://", 9) == 0 && n > 9)
		return 0;
	if (strncmp(ep, "tcp://", 6) == 0 && strchr(ep + 6, ':'))
		return 0;
	return kvw_errf(err, errlen, KVW_EINVAL,
			"endpoint %.120s: want ipc://PATH, tcp://HOST:PORT or "
			"inproc://NAME",
			ep);
}

int wire_bind(void *sock, const char *endpoint, unsigned mode, char *err,
	      size_t errlen)
{
	const char *path = NULL;
	mode_t old = 0;
	int e, rc = wire_auth_server(sock, endpoint, err, errlen);

	if (rc)
		return rc;
	if (strncmp(endpoint, "ipc://", 6) == 0) {
		path = endpoint + 6;
		/* A socket file left by a dead process refuses the bind. */
		unlink(path);
	}
	/* The socket file is made by bind() inside zmq_bind, with 0777 less
	 * the umask: 0177 makes it 0600 from its first instant (issue 14),
	 * before the chmod below sets what the caller asked. */
	if (path)
		old = umask(0177);
	/* libzmq first runs its socket's pending commands, and a signal
	 * there fails the call with EINTR before anything is done: again. */
	while ((rc = zmq_bind(sock, endpoint)) != 0 && errno == EINTR)
		;
	e = errno;
	if (path)
		umask(old);
	if (rc != 0)
		return kvw_errf(err, errlen, KVW_ESYS, "bind %s: %s", endpoint,
				zmq_strerror(e));
	if (path && mode && chmod(path, mode) != 0)
		return kvw_errf(err, errlen, KVW_ESYS, "chmod %s: %s", path,
				strerror(errno));
	return 0;
}

int wire_connect(void *sock, const char *endpoint, char *err, size_t errlen)
{
	int rc = wire_auth_client(sock, endpoint, err, errlen);

	if (rc)
		return rc;
	/* EINTR: interrupted before anything was done (see wire_bind). */
	while ((rc = zmq_connect(sock, endpoint)) != 0 && errno == EINTR)
		;
	if (rc == 0)
		return 0;
	rc = errno == EINVAL || errno == EPROTONOSUPPORT ||
	     errno == ENOCOMPATPROTO ? KVW_EINVAL : KVW_ESYS;
	return kvw_errf(err, errlen, rc, "connect %s: %s", endpoint,
			zmq_strerror(errno));
}

void wire_close(void **sock)
{
	if (sock && *sock) {
		zmq_close(*sock);
		*sock = NULL;
	}
}

/* zmq_send / zmq_msg_recv without waiting, again when a signal
 * interrupted them: EINTR is not a dead socket (issue 12, item 9). */
int wire_send_part(void *sock, const void *p, size_t len, int more)
{
	int rc;

	do
		rc = zmq_send(sock, p, len, more | ZMQ_DONTWAIT);
	while (rc < 0 && errno == EINTR);
	return rc;
}

static int recv_part(zmq_msg_t *msg, void *sock)
{
	int rc;

	do
		rc = zmq_msg_recv(msg, sock, ZMQ_DONTWAIT);
	while (rc < 0 && errno == EINTR);
	return rc;
}

int wire_send(void *sock, const struct frame_msg *m, const void *id,
	      size_t idlen, char *err, size_t errlen)
{
	struct frame_out out;
	int rc = frame_encode(m, &out, err, errlen);

	if (rc)
		return rc;
	if (id && wire_send_part(sock, id, idlen, ZMQ_SNDMORE) < 0)
		goto fail;
	for (size_t i = 0; i < out.nparts; i++) {
		int more = i + 1 < out.nparts ? ZMQ_SNDMORE : 0;

		if (wire_send_part(sock, out.parts[i].data, out.parts[i].len,
				   more) < 0)
			goto fail;
	}
	return 0;
fail:
	if (errno == EAGAIN || errno == EHOSTUNREACH)
		return kvw_errf(err, errlen, KVW_EAGAIN,
				"send %s: peer unreachable or busy",
				frame_type_str(m->hdr.type));
	return kvw_errf(err, errlen, KVW_ESYS, "send %s: %s",
			frame_type_str(m->hdr.type), zmq_strerror(errno));
}

void wire_in_release(struct wire_in *in)
{
	for (size_t i = 0; i < in->n; i++)
		zmq_msg_close(&in->parts[i]);
	in->n = 0;
	in->idlen = 0;
}

/* Reads and drops the remaining parts of a message. */
static void drain(void *sock)
{
	zmq_msg_t junk;
	int more = 1;

	while (more) {
		zmq_msg_init(&junk);
		if (recv_part(&junk, sock) < 0) {
			zmq_msg_close(&junk);
			return;
		}
		more = zmq_msg_more(&junk);
		zmq_msg_close(&junk);
	}
}

int wire_recv(void *sock, int router, struct wire_in *in,
	      struct frame_msg *m, char *err, size_t errlen)
{
	struct frame_part parts[KVW_MAX_FRAMES];
	int more = 1, rc;

	in->n = 0;
	in->idlen = 0;
	if (router) {
		zmq_msg_t id;

		zmq_msg_init(&id);
		if (recv_part(&id, sock) < 0) {
			zmq_msg_close(&id);
			goto sys;
		}
		in->idlen = zmq_msg_size(&id);
		if (in->idlen > WIRE_ID_MAX)
			in->idlen = WIRE_ID_MAX;
		memcpy(in->id, zmq_msg_data(&id), in->idlen);
		more = zmq_msg_more(&id);
		zmq_msg_close(&id);
		if (!more)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"message with no parts");
	}
	while (more) {
		zmq_msg_t *p = &in->parts[in->n];

		if (in->n == KVW_MAX_FRAMES) {
			drain(sock);
			wire_in_release(in);
			return kvw_errf(err, errlen, KVW_EINVAL,
					"more than %u parts", KVW_MAX_FRAMES);
		}
		zmq_msg_init(p);
		if (recv_part(p, sock) < 0) {
			zmq_msg_close(p);
			/* Parts of one message arrive together: only a dead
			 * socket or context can interrupt one. */
			if (in->n == 0 && !router)
				goto sys;
			wire_in_release(in);
			return kvw_errf(err, errlen, KVW_ESYS, "recv: %s",
					zmq_strerror(errno));
		}
		in->n++;
		more = zmq_msg_more(p);
	}
	for (size_t i = 0; i < in->n; i++) {
		parts[i].data = zmq_msg_data(&in->parts[i]);
		parts[i].len = zmq_msg_size(&in->parts[i]);
	}
	rc = frame_decode(parts, in->n, m, err, errlen);
	if (rc) {
		size_t keep = in->idlen;

		wire_in_release(in);
		in->idlen = keep; /* callers may want to know who sent it */
	}
	return rc;
sys:
	if (errno == EAGAIN)
		return KVW_EAGAIN;
	return kvw_errf(err, errlen, KVW_ESYS, "recv: %s", zmq_strerror(errno));
}
