/*
 * rdma_serve.c - the decode side's exchange thread (rdma_serve.h). One
 * poll(2) over a wake-up eventfd, the listening socket, the completion
 * channel every connection's CQ reports to, and the connections. A
 * connection walks HELLO (bytes gathered without blocking, 5 s at most) ->
 * LIVE (a queue pair of its own); any breach, end of stream or failed
 * completion marks it dead, and dead ones are dropped after each wake-up,
 * so indices stay put while one wake-up is handled.
 */
#include "rdma_serve.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdma_cm.h"
#include "rdma_desc.h"
#include "base/kvw.h"
#include "base/log.h"
#include "xport/xnet.h"

#define HELLO_MS 5000u
#define POLL_MS 200

struct sconn {
	int fd;
	int live;             /* has its queue pair */
	int dead;             /* to be dropped */
	uint64_t deadline_ns; /* the hello by then */
	uint8_t hello[RCM_HELLO_LEN];
	size_t have;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

struct rdma_serve {
	struct rdma_dev *d;
	pthread_t th;
	int started;
	int lfd, wfd;
	struct ibv_comp_channel *ch;
	atomic_int stop;
	char host[RDMA_HOST_MAX + 1];
	uint16_t port;
	uint8_t secret[RDMA_SECRET_LEN];
	_Atomic uint64_t conns, refused, batches, errors, live;
	struct sconn **c;
	uint32_t n, cap;
	struct pollfd *pfd;
	struct ibv_recv_wr rwr[RDMA_SERVE_RECV_DEPTH];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int listen_on(struct rdma_serve *s, const char *hostport, char *err,
		     size_t errlen)
{
	char why[200];
	int fd;

	if (xnet_split(hostport, s->host, sizeof s->host, &s->port) < 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: want HOST[:PORT] with a numeric host, "
				"got %.100s",
				hostport);
	fd = xnet_listen(s->host, &s->port, 1, why, sizeof why);
	if (fd < 0)
		return kvw_errf(err, errlen, fd, "rdma: %s", why);
	s->lfd = fd;
	return 0;
}

/* Posts k zero-length receives (an immediate needs no buffer). */
static int post_recvs(struct rdma_serve *s, struct sconn *c, uint32_t k)
{
	struct ibv_recv_wr *bad = NULL;

	if (k == 0)
		return 0;
	for (uint32_t i = 0; i < k; i++)
		s->rwr[i] = (struct ibv_recv_wr){
			.wr_id = i, .next = i + 1 < k ? &s->rwr[i + 1] : NULL };
	return ibv_post_recv(c->qp, s->rwr, &bad);
}

static void conn_free(struct rdma_serve *s, struct sconn *c)
{
	const struct rdma_lib *l = s->d->lib;

	if (c->qp)
		l->destroy_qp(c->qp);
	if (c->cq)
		l->destroy_cq(c->cq);
	if (c->live)
		s->live--;
	close(c->fd);
	free(c);
}

/* Makes c's queue pair toward p: CQ on the channel, QP (INIT), receives
 * posted, RTR/RTS, notifications armed. 0 or KVW_E* (why set). */
static int make_qp(struct rdma_serve *s, struct sconn *c,
		   const struct rdma_peer *p, uint32_t psn, char *why,
		   size_t whylen)
{
	const struct rdma_lib *l = s->d->lib;
	struct rdma_qp_cfg cfg = { .send_wr = 1,
				   .recv_wr = RDMA_SERVE_RECV_DEPTH,
				   .max_sge = 1,
				   .remote_write = 1 };
	struct ibv_qp_cap got;
	uint32_t depth;
	int rc;

	c->cq = l->create_cq(s->d->ctx, RDMA_SERVE_RECV_DEPTH + 2, c, s->ch, 0);
	if (!c->cq) {
		snprintf(why, whylen, "create_cq: %s", strerror(errno));
		return KVW_ESYS;
	}
	cfg.send_cq = cfg.recv_cq = c->cq;
	rc = rdma_qp_create(s->d, &cfg, &c->qp, &got, why, whylen);
	if (rc)
		return rc;
	depth = got.max_recv_wr < RDMA_SERVE_RECV_DEPTH ? got.max_recv_wr
							: RDMA_SERVE_RECV_DEPTH;
	rc = post_recvs(s, c, depth);
	if (rc) {
		snprintf(why, whylen, "post_recv: %s", strerror(rc));
		return KVW_ESYS;
	}
	rc = rdma_qp_connect(s->d, c->qp, psn, p, why, whylen);
	if (rc)
		return rc;
	if (ibv_req_notify_cq(c->cq, 0) != 0) {
		snprintf(why, whylen, "req_notify_cq failed");
		return KVW_ESYS;
	}
	return 0;
}

/* A refused connection: a reply with status (best effort), counted,
 * logged, dropped. */
static void refuse(struct rdma_serve *s, struct sconn *c, uint32_t status,
		   const char *why)
{
	uint8_t rep[RCM_REPLY_LEN];

	rcm_reply_encode(rep, status, 0, 0);
	(void)send(c->fd, rep, sizeof rep, MSG_NOSIGNAL | MSG_DONTWAIT);
	s->refused++;
	LOG_RL(LOG_WARN, "rdma exchange: connection refused: %s", why);
	c->dead = 1;
}

static void exchange(struct rdma_serve *s, struct sconn *c)
{
	uint8_t sec[RDMA_SECRET_LEN], rep[RCM_REPLY_LEN], diff = 0;
	struct rdma_peer p;
	uint32_t psn = rdma_psn();
	char why[200];

	if (rcm_hello_decode(c->hello, sizeof c->hello, sec, &p) != 0)
		return refuse(s, c, RCM_BAD, "malformed hello");
	for (unsigned i = 0; i < RDMA_SECRET_LEN; i++)
		diff |= sec[i] ^ s->secret[i];
	if (diff)
		return refuse(s, c, RCM_SECRET, "wrong secret");
	if (p.link != s->d->link)
		return refuse(s, c, RCM_LINK, "the peer's link layer differs");
	if (make_qp(s, c, &p, psn, why, sizeof why) != 0)
		return refuse(s, c, RCM_NORES, why);
	rcm_reply_encode(rep, RCM_OK, c->qp->qp_num, psn);
	if (send(c->fd, rep, sizeof rep, MSG_NOSIGNAL | MSG_DONTWAIT) !=
	    (ssize_t)sizeof rep) {
		c->dead = 1;
		return;
	}
	c->live = 1;
	s->live++;
	s->conns++;
}

/* One readable connection: more of its hello, or (live) the end of it. */
static void readable(struct rdma_serve *s, struct sconn *c)
{
	uint8_t b;
	ssize_t k;

	if (c->live) {
		k = recv(c->fd, &b, 1, MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (k > 0)
			LOG_RL(LOG_WARN, "rdma exchange: bytes after the "
			       "exchange; queue pair dropped");
		c->dead = 1; /* closed, broken, or a breach */
		return;
	}
	k = recv(c->fd, c->hello + c->have, sizeof c->hello - c->have,
		 MSG_DONTWAIT);
	if (k < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (k <= 0) {
		c->dead = 1;
		return;
	}
	c->have += (size_t)k;
	if (c->have == sizeof c->hello)
		exchange(s, c);
}

/* Takes c's completions: each immediate is a batch landed and its receive
 * is posted again; a failed completion ends the queue pair. */
static void reap(struct rdma_serve *s, struct sconn *c)
{
	struct ibv_wc wc[16];
	char st[96];
	int k = 0;

	while (!c->dead && (k = ibv_poll_cq(c->cq, 16, wc)) > 0) {
		uint32_t again = 0;

		for (int i = 0; i < k; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				if (!c->dead) {
					s->errors++;
					LOG_RL(LOG_WARN, "rdma exchange: queue "
					       "pair %u ended: %s",
					       c->qp ? c->qp->qp_num : 0,
					       rdma_status_text(s->d->lib,
								wc[i].status, st,
								sizeof st));
				}
				c->dead = 1;
				continue;
			}
			if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM)
				s->batches++;
			again++;
		}
		if (!c->dead && post_recvs(s, c, again) != 0)
			c->dead = 1;
	}
	if (k < 0)
		c->dead = 1;
}

/* Every pending completion event: acked, re-armed, its CQ reaped. */
static void events(struct rdma_serve *s)
{
	struct ibv_cq *cq;
	void *ctx;

	while (s->d->lib->get_cq_event(s->ch, &cq, &ctx) == 0) {
		struct sconn *c = ctx;

		s->d->lib->ack_cq_events(cq, 1);
		if (ibv_req_notify_cq(cq, 0) != 0)
			c->dead = 1;
		reap(s, c);
	}
}

static void take(struct rdma_serve *s, uint64_t now)
{
	for (;;) {
		int fd = accept4(s->lfd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct sconn *c;

		if (fd < 0)
			return; /* EAGAIN, or an aborted connection */
		if (s->n == RDMA_SERVE_MAX_CONNS) {
			close(fd);
			s->refused++;
			LOG_RL(LOG_WARN, "rdma exchange: connection over the "
			       "cap of %u refused", RDMA_SERVE_MAX_CONNS);
			continue;
		}
		if (s->n == s->cap) {
			uint32_t cap = s->cap ? 2 * s->cap : 16;
			struct sconn **v = realloc(s->c, cap * sizeof *v);
			struct pollfd *p;

			if (v)
				s->c = v;
			p = v ? realloc(s->pfd, (cap + 3) * sizeof *p) : NULL;
			if (p)
				s->pfd = p;
			if (!v || !p) {
				close(fd);
				s->refused++;
				continue;
			}
			s->cap = cap;
		}
		c = calloc(1, sizeof *c);
		if (!c) {
			close(fd);
			s->refused++;
			continue;
		}
		c->fd = fd;
		c->deadline_ns = now + HELLO_MS * 1000000ull;
		s->c[s->n++] = c;
	}
}

static void *serve_main(void *arg)
{
	struct rdma_serve *s = arg;

	while (!atomic_load(&s->stop)) {
		uint64_t now;
		int k;

		s->pfd[0] = (struct pollfd){ s->wfd, POLLIN, 0 };
		s->pfd[1] = (struct pollfd){ s->lfd, POLLIN, 0 };
		s->pfd[2] = (struct pollfd){ s->ch->fd, POLLIN, 0 };
		for (uint32_t i = 0; i < s->n; i++)
			s->pfd[3 + i] = (struct pollfd){ s->c[i]->fd, POLLIN, 0 };
		k = poll(s->pfd, 3 + s->n, POLL_MS);
		if (k < 0 && errno != EINTR) {
			LOG_RL(LOG_ERROR, "rdma exchange: poll: %s",
			       strerror(errno));
			usleep(100000);
			continue;
		}
		if (k > 0 && s->pfd[2].revents)
			events(s);
		for (uint32_t i = 0; k > 0 && i < s->n; i++)
			if (s->pfd[3 + i].revents && !s->c[i]->dead)
				readable(s, s->c[i]);
		now = now_ns();
		for (uint32_t i = s->n; i-- > 0;) {
			struct sconn *c = s->c[i];

			if (!c->dead && !c->live && now > c->deadline_ns) {
				s->refused++;
				LOG_RL(LOG_WARN, "rdma exchange: no hello in "
				       "%u ms; connection closed", HELLO_MS);
				c->dead = 1;
			}
			if (c->dead) {
				conn_free(s, c);
				s->c[i] = s->c[--s->n];
			}
		}
		if (k > 0 && (s->pfd[1].revents & POLLIN))
			take(s, now);
	}
	return NULL;
}

int rdma_serve_start(struct rdma_dev *d, const char *hostport,
		     struct rdma_serve **out, char *err, size_t errlen)
{
	struct rdma_serve *s = calloc(1, sizeof *s);
	sigset_t all, old;
	int rc;

	*out = NULL;
	if (!s)
		return kvw_errf(err, errlen, KVW_ENOMEM, "rdma: out of memory");
	s->d = d;
	s->lfd = s->wfd = -1;
	rc = listen_on(s, hostport, err, errlen);
	if (rc)
		goto fail;
	rc = KVW_ESYS;
	if (getrandom(s->secret, sizeof s->secret, 0) != sizeof s->secret) {
		kvw_seterr(err, errlen, "rdma: getrandom: %s", strerror(errno));
		goto fail;
	}
	s->wfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->pfd = malloc(3 * sizeof *s->pfd);
	s->ch = d->lib->create_comp_channel(d->ctx);
	if (s->wfd < 0 || !s->pfd || !s->ch ||
	    fcntl(s->ch->fd, F_SETFL, fcntl(s->ch->fd, F_GETFL) | O_NONBLOCK) < 0 ||
	    fcntl(s->ch->fd, F_SETFD, FD_CLOEXEC) < 0) {
		kvw_seterr(err, errlen, "rdma: exchange setup: %s",
			   strerror(errno));
		goto fail;
	}
	/* The thread takes no signal: they stay the main loop's. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&s->th, NULL, serve_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		rc = kvw_errf(err, errlen, KVW_ESYS, "rdma: thread: %s",
			      strerror(rc));
		goto fail;
	}
	s->started = 1;
	*out = s;
	return 0;
fail:
	rdma_serve_stop(&s);
	return rc;
}

void rdma_serve_stop(struct rdma_serve **sp)
{
	struct rdma_serve *s = sp ? *sp : NULL;
	uint64_t one = 1;

	if (!s)
		return;
	if (s->started) {
		atomic_store(&s->stop, 1);
		if (write(s->wfd, &one, sizeof one) < 0)
			(void)0; /* the thread wakes within POLL_MS anyway */
		pthread_join(s->th, NULL);
	}
	while (s->n) {
		conn_free(s, s->c[s->n - 1]);
		s->n--;
	}
	if (s->ch)
		s->d->lib->destroy_comp_channel(s->ch);
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->wfd >= 0)
		close(s->wfd);
	free(s->c);
	free(s->pfd);
	free(s);
	*sp = NULL;
}

const char *rdma_serve_host(const struct rdma_serve *s)
{
	return s->host;
}

uint16_t rdma_serve_port(const struct rdma_serve *s)
{
	return s->port;
}

const uint8_t *rdma_serve_secret(const struct rdma_serve *s)
{
	return s->secret;
}

void rdma_serve_counts(const struct rdma_serve *s,
		       struct rdma_serve_counts *out)
{
	out->conns = s->conns;
	out->refused = s->refused;
	out->batches = s->batches;
	out->errors = s->errors;
	out->live = s->live;
}
