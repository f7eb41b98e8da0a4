/*
 * tcp_sink.c - the sink loop of tcp_sink.h. Every connection is
 * non-blocking and walks HELLO -> (HEADER -> COPIES -> PAYLOAD -> DIGEST -> ACK)*,
 * keeping what it has read so far, so one slow or hostile peer never
 * holds up the others. A header is checked on its own (magic, copy count
 * cap, total within the pool) before the copy list is allocated, the whole
 * copy list (each range inside the pool, no overflow, lengths adding up to
 * the total) before a payload byte is read, and the payload is read with
 * readv straight into the destination pages. The checksum is fed with
 * each range as it lands (still hot in the cache) and checked before the
 * ACK goes out.
 */
#include "tcp_sink.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/kvw.h"
#include "cuda_stage.h"
#include "tcp_auth.h"
#include "xhash.h"
#include "tcp_proto.h"

#define SINK_IOV 512u
/* Payload bytes asked of one readv: what lands is hashed next, and at
 * this size it is still in the cache (a readv that took all the socket
 * held, megabytes, left the hash to read memory again; measured). */
#define SINK_READ (1u << 20)
#define SINK_DISCARD 65536u

enum { C_HELLO, C_HDR, C_COPIES, C_PAYLOAD, C_TRAILER };

struct conn {
	int fd;
	int state;
	uint64_t deadline_ns; /* C_HELLO: give up then */
	uint64_t last_ns;     /* the last byte read */
	uint8_t head[TCP_BATCH_LEN];
	size_t have;          /* bytes of the current unit read so far */
	uint32_t ncopies;
	uint64_t batch, room, total, left;
	uint8_t *copies;      /* ncopies x (dst_off, len), owned */
	uint32_t ci;          /* payload: current copy ... */
	uint64_t coff;        /* ... and offset in it */
	int discard;          /* payload read and dropped: TCP_NOT_LIVE or
			       * TCP_DEST */
	int dev_fail;         /* landed, but not copied on to the GPU */
	XXH3_state_t *hs;     /* the payload's hash, fed as bytes land */
	int held;             /* room_begin said yes: room_end owed */
	uint32_t slot;        /* fixed for the connection's life */
	uint8_t src[16];      /* the peer's address (IPv4 mapped), for the
			       * per-source cap */
	uint8_t ack[TCP_CHALLENGE_LEN]; /* the ACK, or first the challenge */
	size_t ack_len;       /* bytes in ack */
	size_t ack_left;      /* of them not yet sent (POLLOUT) */
	uint8_t nonce[TCP_NONCE_LEN]; /* this connection's challenge */
};

struct sink {
	const struct tcp_sink_cfg *cfg;
	struct tcp_sink_stats *st;
	struct conn *c;
	uint32_t n, cap;
	struct pollfd *pfd;
	uint32_t *free_slot;  /* stack of unused connection slots */
	uint32_t nfree;
	uint8_t scratch[SINK_DISCARD];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void event(struct sink *s, const char *what)
{
	if (s->cfg->event)
		s->cfg->event(s->cfg->arg, what);
}

/* A connection that failed the handshake: refused, told as an event and
 * as an authentication failure. */
static void handshake_failed(struct sink *s, const char *what)
{
	s->st->refused++;
	event(s, what);
	if (s->cfg->auth_failed)
		s->cfg->auth_failed(s->cfg->arg);
}

/* The connection's write is over: its room is no longer held. */
static void release(struct sink *s, struct conn *c)
{
	if (c->held && s->cfg->room_end)
		s->cfg->room_end(s->cfg->arg, c->slot);
	c->held = 0;
}

static void drop(struct sink *s, uint32_t i)
{
	release(s, &s->c[i]);
	XXH3_freeState(s->c[i].hs);
	s->free_slot[s->nfree++] = s->c[i].slot;
	close(s->c[i].fd);
	free(s->c[i].copies);
	s->c[i] = s->c[--s->n];
}

/* Sends what is left of the connection's ACK: 0 done, 1 still pending
 * (wait for POLLOUT), -1 the connection is gone. */
static int flush_ack(struct conn *c)
{
	while (c->ack_left) {
		ssize_t k = send(c->fd, c->ack + c->ack_len - c->ack_left,
				 c->ack_left, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 1;
		if (k <= 0)
			return -1;
		c->ack_left -= (size_t)k;
	}
	return 0;
}

static int ack(struct conn *c, uint32_t status)
{
	le_put(c->ack, TCP_MAGIC_ACK, 4);
	le_put(c->ack + 4, status, 4);
	le_put(c->ack + 8, c->batch, 8);
	c->ack_len = c->ack_left = TCP_ACK_LEN;
	return flush_ack(c);
}

/* Reads into dst up to want - have bytes: 1 when the unit is complete, 0
 * when more must come, -1 on EOF or error. */
static int fill(struct conn *c, uint8_t *dst, size_t want)
{
	while (c->have < want) {
		ssize_t k = recv(c->fd, dst + c->have, want - c->have,
				 MSG_DONTWAIT);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (k <= 0)
			return -1;
		c->have += (size_t)k;
		c->last_ns = now_ns();
	}
	return 1;
}

static int hello(struct sink *s, struct conn *c)
{
	uint8_t wel[TCP_WELCOME_LEN];
	int diff, rc = fill(c, c->head, TCP_HELLO_LEN);

	if (rc <= 0)
		return rc;
	diff = !tcp_auth_ok(s->cfg->group_key, s->cfg->secret, c->nonce,
			    c->head + 8);
	le_put(wel, TCP_MAGIC_WELCOME, 4);
	if (le_get(c->head, 4) != TCP_MAGIC_HELLO ||
	    le_get(c->head + 4, 2) != TCP_VERSION || diff) {
		/* Counted before the peer can hear of it. */
		handshake_failed(s, diff ? "connection with a wrong secret or "
					   "group key refused"
					 : "connection with a bad hello refused");
		le_put(wel + 4, TCP_SECRET, 4);
		(void)send(c->fd, wel, sizeof wel, MSG_NOSIGNAL | MSG_DONTWAIT);
		return -1;
	}
	le_put(wel + 4, TCP_OK, 4);
	s->st->conns++;
	if (send(c->fd, wel, sizeof wel, MSG_NOSIGNAL | MSG_DONTWAIT) !=
	    (ssize_t)sizeof wel)
		return -1;
	c->state = C_HDR;
	c->have = 0;
	return 1;
}

/* A refused batch: counted, an ACK BAD, and the connection closes (the
 * rest of its stream cannot be trusted to line up). */
static int refuse(struct sink *s, struct conn *c, const char *what)
{
	s->st->bad++;
	event(s, what);
	(void)ack(c, TCP_BAD);
	return -1;
}

static int header(struct sink *s, struct conn *c)
{
	int rc = fill(c, c->head, TCP_BATCH_LEN);

	if (rc <= 0)
		return rc;
	c->ncopies = (uint32_t)le_get(c->head + 4, 4);
	c->batch = le_get(c->head + 8, 8);
	c->room = le_get(c->head + 16, 8);
	c->total = le_get(c->head + 24, 8);
	if (le_get(c->head, 4) != TCP_MAGIC_BATCH)
		return refuse(s, c, "batch with a bad magic refused");
	if (c->ncopies == 0 || c->ncopies > TCP_MAX_COPIES)
		return refuse(s, c, "batch with a copy count over the cap "
				    "refused");
	if (c->total > s->cfg->size)
		return refuse(s, c, "batch larger than the pool refused");
	c->copies = malloc((size_t)c->ncopies * TCP_COPY_LEN);
	if (!c->copies)
		return refuse(s, c, "out of memory for a copy list");
	c->state = C_COPIES;
	c->have = 0;
	return 1;
}

static int copy_list(struct sink *s, struct conn *c)
{
	uint64_t sum = 0;
	int rc = fill(c, c->copies, (size_t)c->ncopies * TCP_COPY_LEN);

	if (rc <= 0)
		return rc;
	/* The whole list before one payload byte: a single copy outside
	 * the pool refuses the batch and nothing is written. */
	for (uint32_t i = 0; i < c->ncopies; i++) {
		uint64_t off = le_get(c->copies + i * TCP_COPY_LEN, 8);
		uint64_t len = le_get(c->copies + i * TCP_COPY_LEN + 8, 8);
		uint64_t end;

		if (__builtin_add_overflow(off, len, &end) || end > s->cfg->size ||
		    __builtin_add_overflow(sum, len, &sum))
			return refuse(s, c, "batch with a copy outside the "
					    "pool refused");
	}
	if (sum != c->total)
		return refuse(s, c, "batch whose copies do not add up refused");
	c->held = c->discard = 0;
	if (s->cfg->room_begin) {
		/* Incarnation 0: this wire version does not carry it. */
		int v = s->cfg->room_begin(s->cfg->arg, c->slot, c->room, 0,
					   c->copies, c->ncopies);

		c->held = v == TCP_ROOM_OK;
		c->discard = c->held ? 0 : v == TCP_ROOM_DEST ? TCP_DEST
							      : TCP_NOT_LIVE;
	}
	c->left = c->total;
	xhash_reset(c->hs);
	c->ci = 0;
	c->coff = 0;
	c->state = C_PAYLOAD;
	return 1;
}

static uint8_t *dst_of(const struct sink *s, const struct conn *c,
		       uint32_t i, uint64_t *len)
{
	const uint8_t *p = c->copies + i * TCP_COPY_LEN;

	*len = le_get(p + 8, 8);
	return s->cfg->base + le_get(p, 8);
}

/* Where the decode keeps its KV on a GPU: the batch's device pages, landed
 * in the host pool, copied on to the GPU, done before the room is let go
 * and before the ACK says the bytes are in decode memory. 0 or the error
 * (told to the log). A host pool costs one stat. */
static int to_device(struct sink *s, struct conn *c)
{
	char why[256] = "";
	int gpu = 0, rc;

	if (s->cfg->stage == NULL)
		return 0;
	rc = cstage_fresh(s->cfg->stage, &gpu, why, sizeof why);
	for (uint32_t i = 0; rc == 0 && gpu && i < c->ncopies; i++) {
		const uint8_t *p = c->copies + i * TCP_COPY_LEN;

		rc = cstage_queue(s->cfg->stage, le_get(p, 8), le_get(p + 8, 8),
				  0, why, sizeof why);
	}
	if (gpu) { /* also after a failed enqueue: nothing stays queued */
		int r2 = cstage_sync(s->cfg->stage, rc ? NULL : why, sizeof why);

		if (rc == 0)
			rc = r2;
	}
	if (rc)
		event(s, why);
	return rc;
}

static int payload(struct sink *s, struct conn *c)
{
	while (c->left > 0) {
		struct iovec iov[SINK_IOV];
		int n = 0;
		ssize_t k;

		if (c->discard) {
			iov[n++] = (struct iovec){ s->scratch,
				c->left < SINK_DISCARD ? c->left : SINK_DISCARD };
		} else {
			uint64_t coff = c->coff, want = 0;

			for (uint32_t i = c->ci; i < c->ncopies &&
			     n < (int)SINK_IOV && want < SINK_READ; i++) {
				uint64_t len;
				uint8_t *d = dst_of(s, c, i, &len);

				if (len > coff) {
					len -= coff;
					len = len < SINK_READ - want
						      ? len : SINK_READ - want;
					iov[n++] = (struct iovec){ d + coff,
								   (size_t)len };
					want += len;
				}
				coff = 0;
			}
		}
		k = readv(c->fd, iov, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (k <= 0)
			return -1;
		c->left -= (uint64_t)k;
		c->last_ns = now_ns();
		if (!c->discard) {
			uint64_t adv = (uint64_t)k;

			s->st->bytes += adv;
			/* Hash what just landed, in order, while it is hot in
			 * the cache: the digest is of the written pages. */
			while (adv > 0) {
				uint64_t len;
				uint8_t *d = dst_of(s, c, c->ci, &len);
				uint64_t take = adv < len - c->coff ? adv
								    : len - c->coff;

				xhash_update(c->hs, d + c->coff, take);
				adv -= take;
				c->coff += take;
				if (c->coff == len) {
					c->ci++;
					c->coff = 0;
				}
			}
		}
	}
	c->dev_fail = !c->discard && to_device(s, c) != 0;
	release(s, c); /* every byte is written: the room may be released */
	c->state = C_TRAILER;
	c->have = 0;
	return 1;
}

/* The digest after the payload, then the ACK. */
static int trailer(struct sink *s, struct conn *c)
{
	uint32_t status = TCP_OK;
	int rc = fill(c, c->head, TCP_TRAILER_LEN);

	if (rc <= 0)
		return rc;
	if (c->discard == TCP_DEST) {
		s->st->dest++;
		event(s, "batch with a copy outside its room's granted pages "
			 "discarded");
		status = TCP_DEST;
	} else if (c->discard) {
		s->st->not_live++;
		event(s, "batch for a room that is not live discarded");
		status = TCP_NOT_LIVE;
	} else if (c->dev_fail) {
		s->st->device++;
		status = TCP_DEVICE;
	} else if (xhash_digest(c->hs) != le_get(c->head, 8)) {
		s->st->checksum++;
		event(s, "batch whose bytes do not match its checksum");
		status = TCP_CHECKSUM;
	} else {
		s->st->batches++;
	}
	free(c->copies);
	c->copies = NULL;
	c->state = C_HDR;
	c->have = 0;
	return ack(c, status) < 0 ? -1 : 1;
}

/* Serves one readable connection until it would block: 0 to keep it, -1
 * to close it. */
static int serve(struct sink *s, struct conn *c)
{
	int rc = 1;

	while (rc > 0 && c->ack_left == 0) {
		switch (c->state) {
		case C_HELLO: rc = hello(s, c); break;
		case C_HDR: rc = header(s, c); break;
		case C_COPIES: rc = copy_list(s, c); break;
		case C_PAYLOAD: rc = payload(s, c); break;
		default: rc = trailer(s, c); break;
		}
	}
	return rc < 0 ? -1 : 0;
}

/* The peer's address as 16 bytes (IPv4 in its IPv6-mapped form), port
 * aside. */
static void source(const struct sockaddr_storage *sa, uint8_t out[16])
{
	memset(out, 0, 16);
	if (sa->ss_family == AF_INET) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12,
		       &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
	} else if (sa->ss_family == AF_INET6) {
		memcpy(out,
		       &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
		       16);
	}
}

/* Open connections from src. */
static uint32_t from_source(const struct sink *s, const uint8_t src[16])
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->n; i++)
		n += memcmp(s->c[i].src, src, 16) == 0;
	return n;
}

static void take(struct sink *s, uint64_t now, uint32_t max)
{
	uint32_t per_source = s->cfg->max_per_source ? s->cfg->max_per_source
						     : 64;

	for (;;) {
		struct sockaddr_storage sa;
		socklen_t sl = sizeof sa;
		int fd = accept4(s->cfg->listen_fd, (struct sockaddr *)&sa, &sl,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		uint8_t src[16];
		int one = 1;
		XXH3_state_t *hs;
		struct conn *c;

		if (fd < 0)
			return; /* EAGAIN, or an aborted connection */
		if (s->n == max || s->nfree == 0) {
			close(fd);
			s->st->refused++;
			event(s, "connection over the cap refused");
			continue;
		}
		/* ACKs are 16 bytes: under Nagle a second one waits for the
		 * writer's delayed ACK (40 ms) whenever the writer has nothing
		 * to send meanwhile, as between a room's small batches. */
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		source(&sa, src);
		if (from_source(s, src) >= per_source) {
			close(fd);
			s->st->refused++;
			event(s, "connection over the per-source cap refused");
			continue;
		}
		if (s->n == s->cap) {
			uint32_t cap = s->cap ? 2 * s->cap : 16;
			struct conn *v = realloc(s->c, cap * sizeof *v);
			struct pollfd *p = realloc(s->pfd, (cap + 1) * sizeof *p);

			if (p)
				s->pfd = p;
			if (v)
				s->c = v;
			if (!v || !p) {
				close(fd);
				s->st->refused++;
				event(s, "out of memory for a connection");
				continue;
			}
			s->cap = cap;
		}
		hs = XXH3_createState();
		if (!hs) {
			close(fd);
			s->st->refused++;
			event(s, "out of memory for a connection");
			continue;
		}
		c = &s->c[s->n++];
		*c = (struct conn){
			.fd = fd, .state = C_HELLO, .hs = hs,
			.slot = s->free_slot[--s->nfree], .last_ns = now,
			.deadline_ns = now + (uint64_t)(s->cfg->handshake_ms
							    ? s->cfg->handshake_ms
							    : 5000) * 1000000ull,
		};
		memcpy(c->src, src, sizeof src);
		/* A fresh challenge: the hello must answer this one. */
		if (getrandom(c->nonce, sizeof c->nonce, 0) !=
		    (ssize_t)sizeof c->nonce) {
			s->st->refused++;
			event(s, "no randomness for a challenge");
			drop(s, s->n - 1);
			continue;
		}
		le_put(c->ack, TCP_MAGIC_CHALLENGE, 4);
		le_put(c->ack + 4, TCP_VERSION, 2);
		le_put(c->ack + 6, 0, 2);
		memcpy(c->ack + 8, c->nonce, TCP_NONCE_LEN);
		c->ack_len = c->ack_left = TCP_CHALLENGE_LEN;
		if (flush_ack(c) < 0)
			drop(s, s->n - 1);
	}
}

int tcp_sink_run(const struct tcp_sink_cfg *cfg, struct tcp_sink_stats *st,
		 char *err, size_t errlen)
{
	struct tcp_sink_stats local = { 0 };
	struct sink *s = calloc(1, sizeof *s);
	uint32_t max = cfg->max_conns ? cfg->max_conns : 1024;
	uint64_t stall = (uint64_t)(cfg->stall_ms ? cfg->stall_ms : 10000) *
			 1000000ull;
	int rc = 0;

	if (!s)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	s->cfg = cfg;
	s->st = st ? st : &local;
	s->pfd = malloc(sizeof *s->pfd);
	s->free_slot = malloc(max * sizeof *s->free_slot);
	for (uint32_t i = 0; s->free_slot && i < max; i++)
		s->free_slot[s->nfree++] = max - 1 - i;
	if (!s->pfd || !s->free_slot || fcntl(cfg->listen_fd, F_SETFL, O_NONBLOCK) < 0) {
		rc = kvw_errf(err, errlen, KVW_ESYS, "sink: setup failed");
		goto out;
	}
	while (!(cfg->stop && cfg->stop())) {
		uint64_t now = now_ns();
		int timeout = 200, n;

		s->pfd[0] = (struct pollfd){ cfg->listen_fd, POLLIN, 0 };
		for (uint32_t i = 0; i < s->n; i++) {
			struct conn *c = &s->c[i];

			s->pfd[i + 1] = (struct pollfd){
				c->fd, c->ack_left ? POLLOUT : POLLIN, 0 };
		}
		n = poll(s->pfd, s->n + 1, timeout);
		if (n < 0 && errno != EINTR) {
			rc = kvw_errf(err, errlen, KVW_ESYS, "sink: poll: %s",
				      strerror(errno));
			break;
		}
		now = now_ns();
		/* Backwards, so drop() (which moves the last one into the
		 * hole) never skips a connection. */
		for (uint32_t i = s->n; n > 0 && i-- > 0;) {
			struct conn *c = &s->c[i];
			short re = s->pfd[i + 1].revents;
			int keep = 0;

			if (!re)
				continue;
			if (re & (POLLERR | POLLNVAL))
				keep = -1;
			else if (c->ack_left)
				keep = flush_ack(c) < 0 ? -1 : 0;
			if (keep == 0 && !c->ack_left)
				keep = serve(s, c);
			if (keep < 0)
				drop(s, i);
		}
		/* A peer that never finishes its hello is a slow loris; one
		 * that stops inside a batch is one too, or a link that went
		 * down under it. */
		for (uint32_t i = s->n; i-- > 0;) {
			const struct conn *c = &s->c[i];
			int mid = c->state != C_HDR || c->have > 0;

			if (c->state == C_HELLO && now > c->deadline_ns) {
				handshake_failed(s, "connection without a hello "
						    "in time closed");
				drop(s, i);
			} else if (c->state != C_HELLO && mid && !c->ack_left &&
				   now > c->last_ns + stall) {
				s->st->refused++;
				event(s, "connection stalled inside a batch "
					 "closed");
				drop(s, i);
			}
		}
		if (n > 0 && (s->pfd[0].revents & POLLIN))
			take(s, now, max);
	}
out:
	while (s->n)
		drop(s, s->n - 1);
	free(s->c);
	free(s->pfd);
	free(s->free_slot);
	free(s);
	return rc;
}
