/*
 * wire_auth.c - the policy of wire_auth.h. The ZAP handler follows RFC 27
 * (ZeroMQ Authentication Protocol): a REP socket on
 * inproc://zeromq.zap.01 in the same context as the CURVE servers; each
 * request is version, request id, domain, address, identity, mechanism
 * and, for CURVE, the client's 32-byte public key; the reply is version,
 * request id, status code, status text, user id and empty metadata.
 */
#include "wire_auth.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "base/kvw.h"
#include "base/log.h"

/* zmq_connect / zmq_bind again when a signal interrupted them: libzmq
 * runs the socket's pending commands first and gives up with EINTR
 * before it has done anything. */
static int connect_again(void *s, const char *ep)
{
	int rc;

	while ((rc = zmq_connect(s, ep)) != 0 && errno == EINTR)
		;
	return rc;
}

static int bind_again(void *s, const char *ep)
{
	int rc;

	while ((rc = zmq_bind(s, ep)) != 0 && errno == EINTR)
		;
	return rc;
}

#define ZAP_EP "inproc://zeromq.zap.01"
#define ZAP_MAX_CTX 8u

static struct {
	pthread_mutex_t lock;
	enum wire_auth_mode mode;
	struct keys keys;
	uint8_t client_raw[32]; /* the one client key admitted */
	void *ctx[ZAP_MAX_CTX]; /* contexts that have a handler */
	uint32_t nctx;
	_Atomic uint64_t refused; /* by the ZAP handler */
	_Atomic uint64_t failed;  /* CURVE handshakes that failed before ZAP
				   * (another server key, no CURVE) */
	_Atomic uint64_t seq;     /* names of monitor endpoints */
} wa = { .lock = PTHREAD_MUTEX_INITIALIZER };

void wire_auth_use(const struct keys *k)
{
	pthread_mutex_lock(&wa.lock);
	wa.keys = *k;
	(void)zmq_z85_decode(wa.client_raw, wa.keys.client_public);
	wa.mode = WIRE_AUTH_KEYS;
	pthread_mutex_unlock(&wa.lock);
}

void wire_auth_insecure(void)
{
	pthread_mutex_lock(&wa.lock);
	keys_wipe(&wa.keys);
	wa.mode = WIRE_AUTH_INSECURE;
	pthread_mutex_unlock(&wa.lock);
}

enum wire_auth_mode wire_auth_mode(void)
{
	enum wire_auth_mode m;

	pthread_mutex_lock(&wa.lock);
	m = wa.mode;
	pthread_mutex_unlock(&wa.lock);
	return m;
}

int wire_auth_data_key(uint8_t out[KEYS_DATA])
{
	int have;

	pthread_mutex_lock(&wa.lock);
	have = wa.mode == WIRE_AUTH_KEYS;
	if (have)
		memcpy(out, wa.keys.data, KEYS_DATA);
	pthread_mutex_unlock(&wa.lock);
	return have;
}

uint64_t wire_auth_refused(void)
{
	return atomic_load(&wa.refused) + atomic_load(&wa.failed);
}

/* Handshakes ZAP never sees: a client with another group's server key or
 * without CURVE fails inside libzmq. The socket monitor reports them
 * (ZAP's own refusals, HANDSHAKE_FAILED_AUTH, are counted by the handler
 * already). Ends when the socket closes or its context terminates. */
#define WATCHED (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | \
		 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)

static void *watch_main(void *arg)
{
	void *p = arg;

	for (;;) {
		uint8_t ev[6];
		char spill[256];
		int n = zmq_recv(p, ev, sizeof ev, 0), more = 0;
		size_t ml = sizeof more;

		if (n < 0 && errno == ETERM)
			break;
		if (n < 0)
			continue;
		zmq_getsockopt(p, ZMQ_RCVMORE, &more, &ml);
		if (more && zmq_recv(p, spill, sizeof spill, 0) < 0 &&
		    errno == ETERM)
			break;
		if (n >= 2) {
			uint16_t e = (uint16_t)(ev[0] | ev[1] << 8);

			if (e == ZMQ_EVENT_MONITOR_STOPPED)
				break;
			if (e & WATCHED)
				atomic_fetch_add(&wa.failed, 1);
		}
	}
	zmq_close(p);
	return NULL;
}

int wire_auth_watch(void *ctx, void *sock, char *err, size_t errlen)
{
	char ep[64];
	pthread_attr_t at;
	pthread_t th;
	void *p;
	int zero = 0;

	if (wire_auth_mode() != WIRE_AUTH_KEYS)
		return 0;
	snprintf(ep, sizeof ep, "inproc://kvw-auth-watch-%llu",
		 (unsigned long long)atomic_fetch_add(&wa.seq, 1));
	if (zmq_socket_monitor(sock, ep, WATCHED | ZMQ_EVENT_MONITOR_STOPPED))
		return kvw_errf(err, errlen, KVW_ESYS, "monitor: %s",
				zmq_strerror(errno));
	p = zmq_socket(ctx, ZMQ_PAIR);
	if (!p || zmq_setsockopt(p, ZMQ_LINGER, &zero, sizeof zero) ||
	    connect_again(p, ep) != 0) {
		if (p)
			zmq_close(p);
		return kvw_errf(err, errlen, KVW_ESYS, "monitor: %s",
				zmq_strerror(errno));
	}
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &at, watch_main, p) != 0) {
		pthread_attr_destroy(&at);
		zmq_close(p);
		return kvw_errf(err, errlen, KVW_ESYS, "monitor: cannot start "
				"its thread");
	}
	pthread_attr_destroy(&at);
	return 0;
}

static int is_tcp(const char *ep)
{
	return strncmp(ep, "tcp://", 6) == 0;
}

/* 0 when sock may go on to ep without options; 1 when CURVE applies;
 * KVW_EINVAL (fail-closed) otherwise. */
static int policy(const char *ep, const char *what, char *err, size_t errlen)
{
	enum wire_auth_mode m;

	if (!is_tcp(ep))
		return 0;
	m = wire_auth_mode();
	if (m == WIRE_AUTH_KEYS)
		return 1;
	if (m == WIRE_AUTH_INSECURE) {
		LOG(LOG_WARN, "INSECURE: %s %s without authentication "
		    "(--insecure): anyone who reaches it is trusted", what, ep);
		return 0;
	}
	return kvw_errf(err, errlen, KVW_EINVAL,
			"%s %s: tcp:// needs the group's keys (--keys DIR) or "
			"--insecure", what, ep);
}

static int opt(void *sock, int name, const void *v, size_t len, char *err,
	       size_t errlen)
{
	if (zmq_setsockopt(sock, name, v, len) == 0)
		return 0;
	return kvw_errf(err, errlen, KVW_ESYS, "CURVE option %d: %s", name,
			zmq_strerror(errno));
}

int wire_auth_server(void *sock, const char *ep, char *err, size_t errlen)
{
	int rc = policy(ep, "binding", err, errlen), one = 1;

	if (rc <= 0)
		return rc;
	/* The ZAP domain makes libzmq ask the handler for every handshake
	 * (without one it could admit any client key). */
	if ((rc = opt(sock, ZMQ_CURVE_SERVER, &one, sizeof one, err, errlen)) ||
	    (rc = opt(sock, ZMQ_CURVE_SECRETKEY, wa.keys.server_secret, 40, err,
		      errlen)) ||
	    (rc = opt(sock, ZMQ_ZAP_DOMAIN, "kvwire", 6, err, errlen)))
		return rc;
	return 0;
}

int wire_auth_client(void *sock, const char *ep, char *err, size_t errlen)
{
	int rc = policy(ep, "dialling", err, errlen);

	if (rc <= 0)
		return rc;
	if ((rc = opt(sock, ZMQ_CURVE_SERVERKEY, wa.keys.server_public, 40, err,
		      errlen)) ||
	    (rc = opt(sock, ZMQ_CURVE_PUBLICKEY, wa.keys.client_public, 40, err,
		      errlen)) ||
	    (rc = opt(sock, ZMQ_CURVE_SECRETKEY, wa.keys.client_secret, 40, err,
		      errlen)))
		return rc;
	return 0;
}

/* One frame of a request into buf[cap]: its length, or -1 (ETERM or a
 * broken request). *more says whether frames follow. */
static int part(void *s, void *buf, size_t cap, int *more)
{
	size_t ml = sizeof *more;
	int n = zmq_recv(s, buf, cap, 0);

	if (n < 0 || zmq_getsockopt(s, ZMQ_RCVMORE, more, &ml) != 0)
		return -1;
	return n > (int)cap ? (int)cap : n;
}

struct zap {
	void *sock, *ctx;
};

/* The context is being terminated: forget it (a new context may get its
 * address and needs a handler of its own). */
static void zap_forget(void *ctx)
{
	pthread_mutex_lock(&wa.lock);
	for (uint32_t i = 0; i < wa.nctx; i++)
		if (wa.ctx[i] == ctx) {
			wa.ctx[i] = wa.ctx[--wa.nctx];
			break;
		}
	pthread_mutex_unlock(&wa.lock);
}

static void *zap_main(void *arg)
{
	struct zap z = *(struct zap *)arg;
	void *s = z.sock;

	free(arg);
	for (;;) {
		char frames[7][256];
		int len[7] = { 0 }, more = 1, n = 0, ok;
		char key[32];

		/* version, id, domain, address, identity, mechanism, key */
		while (more) {
			char spill[256];
			int k = part(s, n < 7 ? frames[n] : spill, 256, &more);

			if (k < 0) {
				if (errno == ETERM)
					goto out;
				more = 0;
				n = -1;
				break;
			}
			if (n < 7)
				len[n] = k;
			n++;
		}
		if (n < 6)
			continue; /* not a request: nothing to answer */
		ok = n == 7 && len[5] == 5 && memcmp(frames[5], "CURVE", 5) == 0 &&
		     len[6] == 32;
		if (ok) {
			memcpy(key, frames[6], 32);
			pthread_mutex_lock(&wa.lock);
			ok = memcmp(key, wa.client_raw, 32) == 0;
			pthread_mutex_unlock(&wa.lock);
		}
		if (!ok)
			atomic_fetch_add(&wa.refused, 1);
		if (zmq_send(s, "1.0", 3, ZMQ_SNDMORE) < 0 ||
		    zmq_send(s, frames[1], (size_t)len[1], ZMQ_SNDMORE) < 0 ||
		    zmq_send(s, ok ? "200" : "400", 3, ZMQ_SNDMORE) < 0 ||
		    zmq_send(s, ok ? "OK" : "not a key of this group",
			     ok ? 2 : 23, ZMQ_SNDMORE) < 0 ||
		    zmq_send(s, ok ? "member" : "", ok ? 6 : 0, ZMQ_SNDMORE) < 0 ||
		    zmq_send(s, "", 0, 0) < 0) {
			if (errno == ETERM)
				goto out;
		}
	}
out:
	zmq_close(s);
	zap_forget(z.ctx);
	return NULL;
}

int wire_auth_zap_start(void *ctx, char *err, size_t errlen)
{
	pthread_attr_t at;
	pthread_t th;
	struct zap *z = NULL;
	void *s = NULL;
	int zero = 0, rc = 0;

	pthread_mutex_lock(&wa.lock);
	if (wa.mode != WIRE_AUTH_KEYS)
		goto out;
	for (uint32_t i = 0; i < wa.nctx; i++)
		if (wa.ctx[i] == ctx)
			goto out;
	if (wa.nctx == ZAP_MAX_CTX) {
		rc = kvw_errf(err, errlen, KVW_ENOMEM, "ZAP: more than %u "
			      "contexts", ZAP_MAX_CTX);
		goto out;
	}
	/* Bound here, before any CURVE server of ctx can take a handshake:
	 * the handler exists before anyone can reach it. */
	s = zmq_socket(ctx, ZMQ_REP);
	if (!s || zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero) ||
	    bind_again(s, ZAP_EP) != 0) {
		rc = kvw_errf(err, errlen, KVW_ESYS, "ZAP: %s",
			      zmq_strerror(errno));
		goto out;
	}
	z = malloc(sizeof *z);
	if (!z) {
		rc = kvw_errf(err, errlen, KVW_ENOMEM, "ZAP: out of memory");
		goto out;
	}
	*z = (struct zap){ s, ctx };
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &at, zap_main, z) != 0) {
		free(z);
		pthread_attr_destroy(&at);
		rc = kvw_errf(err, errlen, KVW_ESYS, "ZAP: cannot start its "
			      "thread");
		goto out;
	}
	pthread_attr_destroy(&at);
	wa.ctx[wa.nctx++] = ctx;
	s = NULL; /* the thread's now */
out:
	if (s)
		zmq_close(s);
	pthread_mutex_unlock(&wa.lock);
	return rc;
}
