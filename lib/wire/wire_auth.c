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
#include <time.h>
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
				   * (another server key, no CURVE), and
				   * those our dialling sockets saw fail */
	_Atomic uint64_t seq;     /* names of monitor endpoints */
	char client_fp[KEYS_FP];  /* fingerprints for the logs (keys.h) */
	char group_fp[KEYS_FP];
} wa = { .lock = PTHREAD_MUTEX_INITIALIZER };

void wire_auth_use(const struct keys *k)
{
	pthread_mutex_lock(&wa.lock);
	wa.keys = *k;
	(void)zmq_z85_decode(wa.client_raw, wa.keys.client_public);
	keys_fp(wa.client_raw, wa.client_fp);
	(void)keys_group_fp(&wa.keys, wa.group_fp);
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

int wire_auth_group_fp(char out[KEYS_FP])
{
	int have;

	pthread_mutex_lock(&wa.lock);
	have = wa.mode == WIRE_AUTH_KEYS;
	if (have)
		memcpy(out, wa.group_fp, KEYS_FP);
	pthread_mutex_unlock(&wa.lock);
	return have;
}

uint64_t wire_auth_refused(void)
{
	return atomic_load(&wa.refused) + atomic_load(&wa.failed);
}

/* Handshakes that fail are counted and logged (rate-limited, at once for
 * the first: an operator sees wrong keys within a second, never a silent
 * hang). A server socket (ROUTER) sees the ones ZAP never does: a client
 * with another group's server key or without CURVE fails inside libzmq
 * (ZAP's own refusals are counted and logged by the handler). A client
 * socket (DEALER, REQ) sees the server refuse its client key (ZAP 400),
 * a protocol failure, or the connection closed before the handshake
 * completed (the server could not read our HELLO: its server key is not
 * the one we were given). The monitor thread ends when the socket closes
 * or its context terminates. */
#define SERVER_EVENTS (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | \
		       ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
#define CLIENT_EVENTS (SERVER_EVENTS | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | \
		       ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | \
		       ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
#define WATCH_EPS 8u

/* One logger of failed handshakes (a socket's, a ZAP handler's). */
struct quiet {
	uint64_t logged_ns; /* last line logged (0: none yet) */
	unsigned n;         /* failures since, not logged */
};

struct watch {
	void *pair;
	int server;
	/* client: endpoints connected whose handshake has not completed */
	char pending[WATCH_EPS][128];
};

static int pending_at(struct watch *w, const char *ep, int add)
{
	for (unsigned i = 0; i < WATCH_EPS; i++)
		if (w->pending[i][0] && strcmp(w->pending[i], ep) == 0)
			return (int)i;
	for (unsigned i = 0; add && i < WATCH_EPS; i++)
		if (!w->pending[i][0]) {
			snprintf(w->pending[i], sizeof w->pending[i], "%s", ep);
			return (int)i;
		}
	return -1;
}

/* A failed handshake is logged at once the first time, then once per
 * WATCH_LOG_S (libzmq redials every 100 ms) with how many went unlogged
 * between. */
#define WATCH_LOG_S 10u

/* "" or "; N more unlogged" for a line that log_due let through. */
static const char *more(unsigned unlogged, char buf[48])
{
	buf[0] = '\0';
	if (unlogged)
		snprintf(buf, 48, "; %u more unlogged", unlogged);
	return buf;
}

/* 1 when the failure l counts is to be logged (*unlogged: how many were
 * not, since the last line), else 0. */
static int log_due(struct quiet *l, unsigned *unlogged)
{
	struct timespec ts;
	uint64_t now;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	if (l->logged_ns != 0 &&
	    now - l->logged_ns < WATCH_LOG_S * 1000000000ull) {
		l->n++;
		return 0;
	}
	l->logged_ns = now;
	*unlogged = l->n;
	l->n = 0;
	return 1;
}

/* The loggers of failed handshakes, one per endpoint, process-wide: a
 * member that dials again on a new socket still logs one line per
 * WATCH_LOG_S per peer. The least recently logged one is reused. */
#define QUIET_EPS 16u
static struct {
	pthread_mutex_t lock;
	char ep[QUIET_EPS][128];
	struct quiet q[QUIET_EPS];
} qs = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Counts a failed handshake with ep; 1 when it is to be logged. */
static int failed_now(const char *ep, unsigned *unlogged)
{
	unsigned i, old = 0;
	int due;

	atomic_fetch_add(&wa.failed, 1);
	pthread_mutex_lock(&qs.lock);
	for (i = 0; i < QUIET_EPS; i++) {
		if (strcmp(qs.ep[i], ep) == 0)
			break;
		if (qs.q[i].logged_ns < qs.q[old].logged_ns)
			old = i;
	}
	if (i == QUIET_EPS) {
		i = old;
		snprintf(qs.ep[i], sizeof qs.ep[i], "%s", ep);
		qs.q[i] = (struct quiet){ 0, 0 };
	}
	due = log_due(&qs.q[i], unlogged);
	pthread_mutex_unlock(&qs.lock);
	return due;
}

static void server_event(unsigned e, uint32_t v, const char *ep)
{
	char mb[48];
	unsigned q;

	if (!(e & SERVER_EVENTS) || !failed_now(ep, &q))
		return;
	LOG(LOG_WARN, "auth: CURVE handshake on %s failed (%s 0x%x): a "
	       "peer with another group's server key, or without keys; this "
	       "group's keys have fingerprint %s%s", ep,
	       e == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "protocol error"
							 : "no detail",
	       (unsigned)v, wa.group_fp, more(q, mb));
}

static void client_event(struct watch *w, unsigned e, uint32_t v,
			 const char *ep)
{
	char mb[48];
	unsigned q;
	int i;

	switch (e) {
	case ZMQ_EVENT_CONNECTED:
		pending_at(w, ep, 1);
		return;
	case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
		if ((i = pending_at(w, ep, 0)) >= 0)
			w->pending[i][0] = '\0';
		return;
	case ZMQ_EVENT_DISCONNECTED:
		if ((i = pending_at(w, ep, 0)) < 0)
			return; /* a link that had worked: not about keys */
		w->pending[i][0] = '\0';
		if (failed_now(ep, &q))
			LOG(LOG_WARN, "auth: CURVE handshake with %s failed: "
			    "the peer closed the connection before the "
			    "handshake completed (its server key is not this "
			    "group's, or it runs another group's keys or "
			    "none); this group's keys have fingerprint %s "
			    "(client key %s%s)", ep,
			    wa.group_fp, wa.client_fp, more(q, mb));
		return;
	case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
		if ((i = pending_at(w, ep, 0)) >= 0)
			w->pending[i][0] = '\0';
		if (failed_now(ep, &q))
			LOG(LOG_WARN, "auth: CURVE handshake with %s refused "
			    "by the peer (ZAP %u): our client key %s is not "
			    "its group's; this group's keys have fingerprint "
			    "%s%s", ep, (unsigned)v,
			    wa.client_fp, wa.group_fp, more(q, mb));
		return;
	default:
		if (!(e & SERVER_EVENTS))
			return;
		if ((i = pending_at(w, ep, 0)) >= 0)
			w->pending[i][0] = '\0';
		if (failed_now(ep, &q))
			LOG(LOG_WARN, "auth: CURVE handshake with %s failed "
			    "(%s 0x%x): the peer's keys differ from this "
			    "group's (fingerprint %s%s)", ep,
			    e == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
				    ? "protocol error" : "no detail",
			    (unsigned)v, wa.group_fp, more(q, mb));
	}
}

static void *watch_main(void *arg)
{
	struct watch *w = arg;
	void *p = w->pair;

	for (;;) {
		uint8_t ev[6];
		char addr[256];
		int n = zmq_recv(p, ev, sizeof ev, 0), more = 0, k = 0;
		size_t ml = sizeof more;

		if (n < 0 && errno == ETERM)
			break;
		if (n < 0)
			continue;
		zmq_getsockopt(p, ZMQ_RCVMORE, &more, &ml);
		if (more) {
			k = zmq_recv(p, addr, sizeof addr - 1, 0);
			if (k < 0 && errno == ETERM)
				break;
		}
		addr[k < 0 ? 0 : k > (int)sizeof addr - 1 ? (int)sizeof addr - 1
							  : k] = '\0';
		if (n >= 6) {
			unsigned e = (unsigned)(ev[0] | ev[1] << 8);
			uint32_t v = (uint32_t)ev[2] | (uint32_t)ev[3] << 8 |
				     (uint32_t)ev[4] << 16 |
				     (uint32_t)ev[5] << 24;

			if (e == ZMQ_EVENT_MONITOR_STOPPED)
				break;
			if (w->server)
				server_event(e, v, addr);
			else
				client_event(w, e, v, addr);
		}
	}
	zmq_close(p);
	free(w);
	return NULL;
}

int wire_auth_watch(void *ctx, void *sock, int server, char *err,
		    size_t errlen)
{
	char ep[64];
	pthread_attr_t at;
	pthread_t th;
	struct watch *w;
	void *p;
	int zero = 0;

	if (wire_auth_mode() != WIRE_AUTH_KEYS)
		return 0;
	snprintf(ep, sizeof ep, "inproc://kvw-auth-watch-%llu",
		 (unsigned long long)atomic_fetch_add(&wa.seq, 1));
	if (zmq_socket_monitor(sock, ep, (server ? SERVER_EVENTS
						 : CLIENT_EVENTS) |
				       ZMQ_EVENT_MONITOR_STOPPED))
		return kvw_errf(err, errlen, KVW_ESYS, "monitor: %s",
				zmq_strerror(errno));
	w = calloc(1, sizeof *w);
	p = zmq_socket(ctx, ZMQ_PAIR);
	if (!w || !p || zmq_setsockopt(p, ZMQ_LINGER, &zero, sizeof zero) ||
	    connect_again(p, ep) != 0) {
		if (p)
			zmq_close(p);
		free(w);
		return kvw_errf(err, errlen, KVW_ESYS, "monitor: %s",
				zmq_strerror(errno));
	}
	w->pair = p;
	w->server = server;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &at, watch_main, w) != 0) {
		pthread_attr_destroy(&at);
		zmq_close(p);
		free(w);
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

/* Says which peer ZAP refused and why (rate-limited): its address, and
 * for CURVE its client key's fingerprint beside the one this group
 * admits. */
static void zap_refused(struct quiet *l, char frames[][256], const int *len,
			int n)
{
	char addr[64], fp[KEYS_FP], mb[48];
	int al = len[3] < (int)sizeof addr - 1 ? len[3] : (int)sizeof addr - 1;
	unsigned q;

	if (!log_due(l, &q))
		return;
	memcpy(addr, frames[3], (size_t)al);
	addr[al] = '\0';
	if (n == 7 && len[6] == 32) {
		keys_fp((const uint8_t *)frames[6], fp);
		LOG(LOG_WARN, "auth: CURVE handshake from %s refused: its "
		    "client key %s is not this group's (%s; group keys %s): "
		    "the peer runs another group's keys%s",
		    addr, fp, wa.client_fp, wa.group_fp, more(q, mb));
	} else {
		LOG(LOG_WARN, "auth: handshake from %s refused: not CURVE with "
		    "a key (this group's keys %s%s)", addr,
		    wa.group_fp, more(q, mb));
	}
}

static void *zap_main(void *arg)
{
	struct zap z = *(struct zap *)arg;
	struct quiet zq = { 0, 0 };
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
		if (!ok) {
			atomic_fetch_add(&wa.refused, 1);
			zap_refused(&zq, frames, len, n);
		}
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
