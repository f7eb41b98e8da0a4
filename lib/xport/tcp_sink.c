/*
 * tcp_sink.c - the sink loop of tcp_sink.h. Every connection is
 * non-blocking and walks HELLO -> (HEADER -> COPIES+HEAD TAG -> PAYLOAD ->
 * BODY TAG -> ACK)*, keeping what it has read so far, so one slow or
 * hostile peer never holds up the others. A header is checked on its own
 * (magic, copy count cap, total within the pool, the next seq) before the
 * copy list is allocated; the head tag over header and copy list, then the
 * whole copy list (each range inside the pool, no overflow, lengths adding
 * up to the total), then the room's incarnation and destinations
 * (room_begin) before a payload byte is read; the payload is read with
 * readv straight into the destination pages. The body tag is fed with
 * each range as it lands (still hot in the cache; decrypted in place with
 * ENCRYPT) and checked before the ACK goes out. A wrong tag or seq drops
 * the connection without an ACK OK: the client resends on a new one.
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

#include <arpa/inet.h>
#include <stdio.h>

#include "base/kvw.h"
#include "cuda_stage.h"
#include "tcp_auth.h"
#include "tcp_mac.h"
#include "tcp_proto.h"

#define SINK_IOV 512u
/* Payload bytes asked of one readv: what lands is hashed next, and at
 * this size it is still in the cache (a readv that took all the socket
 * held, megabytes, left the hash to read memory again; measured). */
#define SINK_READ (1u << 20)
#define SINK_DISCARD 65536u

enum { C_HELLO, C_HDR, C_COPIES, C_PAYLOAD, C_TRAILER };

#define NO_SLOT UINT32_MAX

struct conn {
	int fd;
	int state;
	uint64_t deadline_ns; /* C_HELLO: give up then */
	uint64_t last_ns;     /* the last byte read */
	uint8_t head[TCP_HELLO_LEN]; /* the hello, a header or a body tag */
	size_t have;          /* bytes of the current unit read so far */
	uint32_t ncopies;
	uint64_t batch, room, inc, total, left;
	uint8_t *copies;      /* ncopies x (dst_off, len), then the head
			       * tag; owned */
	uint32_t ci;          /* payload: current copy ... */
	uint64_t coff;        /* ... and offset in it */
	int discard;          /* payload read and dropped: the ACK status */
	int dev_fail;         /* landed, but not copied on to the GPU */
	int keyed;            /* the macs are set up (handshake done) */
	int encrypt;          /* HELLO asked for ENCRYPT */
	struct tcp_mac in;    /* client -> sink: checks batch tags */
	struct tcp_mac out;   /* sink -> client: tags ACKs */
	uint64_t seq_in;      /* the next batch's seq */
	uint64_t seq_out;     /* the next ACK's seq */
	int held;             /* room_begin said yes: room_end owed */
	uint32_t slot;        /* from the handshake on; NO_SLOT before */
	uint8_t src[16];      /* the peer's address (IPv4 mapped), for the
			       * per-source cap */
	char peer[64];        /* the peer's address and port, for the log */
	uint8_t ack[TCP_WELCOME_LEN]; /* the ACK, or the challenge, or the
				       * welcome */
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
	uint32_t pending;     /* connections in C_HELLO */
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

/* An event that names the peer. */
static void cevent(struct sink *s, const struct conn *c, const char *what)
{
	char line[320];

	snprintf(line, sizeof line, "%s (peer %s)", what, c->peer);
	event(s, line);
}

/* A connection that failed the handshake: refused, told as an event and
 * as an authentication failure. */
static void handshake_failed(struct sink *s, const struct conn *c,
			     const char *what)
{
	s->st->refused++;
	cevent(s, c, what);
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
	tcp_mac_free(&s->c[i].in);
	tcp_mac_free(&s->c[i].out);
	if (s->c[i].slot != NO_SLOT)
		s->free_slot[s->nfree++] = s->c[i].slot;
	if (s->c[i].state == C_HELLO)
		s->pending--;
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

/* The ACK of the current batch, tagged with the next ACK seq. Before the
 * handshake is done there is nothing to ACK with. */
static int ack(struct conn *c, uint32_t status)
{
	if (!c->keyed)
		return -1;
	le_put(c->ack, TCP_MAGIC_ACK, 4);
	le_put(c->ack + 4, status, 4);
	le_put(c->ack + 8, c->batch, 8);
	le_put(c->ack + 16, c->seq_out, 8);
	tcp_mac_one(&c->out, c->seq_out++, TCP_TAG_ACK, c->ack, TCP_ACK_SIGNED,
		    c->ack + TCP_ACK_SIGNED);
	c->ack_len = c->ack_left = TCP_ACK_LEN;
	return flush_ack(c);
}

/* Before a refused connection closes: what the peer sent and we did not
 * read is read and dropped (up to a bound), so the close is a FIN, not a
 * RST that can destroy the refusal's ACK before the peer reads it. */
static void drain(struct sink *s, struct conn *c)
{
	for (int i = 0; i < 16; i++)
		if (recv(c->fd, s->scratch, sizeof s->scratch, MSG_DONTWAIT) <= 0)
			return;
}

/* A batch whose tag or seq is wrong: nothing more from this connection
 * can be trusted. Counted, told (naming the peer), an ACK INTEGRITY (a
 * hint only: the client resends on a new connection either way), and
 * the connection closes. */
static int tampered(struct sink *s, struct conn *c, const char *what)
{
	s->st->integrity++;
	cevent(s, c, what);
	if (s->cfg->integrity_failed)
		s->cfg->integrity_failed(s->cfg->arg);
	(void)ack(c, TCP_INTEGRITY);
	drain(s, c);
	return -1;
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

/* Per-source connections that finished the handshake. */
static uint32_t from_source(const struct sink *s, const uint8_t src[16])
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->n; i++)
		n += s->c[i].state != C_HELLO &&
		     memcmp(s->c[i].src, src, 16) == 0;
	return n;
}

/* Why a HELLO's proof failed, for both sides' logs: the keys (their
 * fingerprints differ) or the registration's secret. */
static void keys_refused(struct sink *s, struct conn *c, const uint8_t *peer_fp)
{
	uint8_t fp[TCP_FP_LEN];
	char ours[17], theirs[17], line[200];

	tcp_auth_fingerprint(s->cfg->group_key, fp);
	tcp_auth_fp_hex(fp, ours);
	tcp_auth_fp_hex(peer_fp, theirs);
	if (memcmp(fp, peer_fp, TCP_FP_LEN) != 0)
		snprintf(line, sizeof line, "data port handshake refused: the "
			 "group keys differ (ours %s, the peer's %s)", ours,
			 theirs);
	else
		snprintf(line, sizeof line, "data port handshake refused: same "
			 "group key (%s) but a wrong registration secret "
			 "(a stale descriptor?)", ours);
	handshake_failed(s, c, line);
}

static int welcome(struct sink *s, struct conn *c, uint32_t status)
{
	tcp_auth_fingerprint(s->cfg->group_key, c->ack + 8);
	le_put(c->ack, TCP_MAGIC_WELCOME, 4);
	le_put(c->ack + 4, status, 4);
	tcp_auth_welcome(s->cfg->group_key, s->cfg->secret, c->nonce,
			 c->head + 8, status, c->ack + 16);
	c->ack_len = c->ack_left = TCP_WELCOME_LEN;
	return flush_ack(c);
}

/* The HELLO: proof checked, a fence slot and the per-source cap (which
 * count authenticated connections only), the connection's keys. */
static int hello(struct sink *s, struct conn *c)
{
	uint8_t mac[TCP_MAC_LEN], c2s[TCP_KEY_LEN], s2c[TCP_KEY_LEN];
	uint32_t per_source = s->cfg->max_per_source ? s->cfg->max_per_source
						     : 64;
	const uint8_t *g = s->cfg->group_key;
	uint16_t flags;
	int rc = fill(c, c->head, TCP_HELLO_LEN);

	if (rc <= 0)
		return rc;
	flags = (uint16_t)le_get(c->head + 6, 2);
	if (le_get(c->head, 4) != TCP_MAGIC_HELLO ||
	    le_get(c->head + 4, 2) != TCP_VERSION) {
		handshake_failed(s, c, "connection with a bad hello or another "
				       "protocol version refused");
		(void)welcome(s, c, TCP_BAD);
		return -1;
	}
	tcp_auth_hello(g, s->cfg->secret, c->nonce, c->head + 8, flags, mac);
	if (!tcp_auth_same(mac, c->head + 32)) {
		/* Counted before the peer can hear of it. */
		keys_refused(s, c, c->head + 24);
		(void)welcome(s, c, TCP_SECRET);
		return -1;
	}
	if ((flags & ~TCP_F_ENCRYPT) || ((flags & TCP_F_ENCRYPT) && !g) ||
	    (s->cfg->require_encrypt && !(flags & TCP_F_ENCRYPT))) {
		handshake_failed(s, c, "connection with flags this sink does "
				       "not serve refused (--encrypt on one "
				       "side only, or without group keys)");
		(void)welcome(s, c, TCP_BAD);
		return -1;
	}
	if (s->nfree == 0 || from_source(s, c->src) >= per_source) {
		s->st->refused++;
		cevent(s, c, s->nfree ? "connection over the per-source cap "
					"refused"
				      : "connection over the cap refused");
		(void)welcome(s, c, TCP_BAD);
		return -1;
	}
	tcp_auth_keys(g, s->cfg->secret, c->nonce, c->head + 8, flags, c2s,
		      s2c);
	rc = tcp_mac_init(&c->in, g ? c2s : NULL, 0);
	if (rc == 0 && (rc = tcp_mac_init(&c->out, g ? s2c : NULL, 1)) != 0)
		tcp_mac_free(&c->in);
	memset(c2s, 0, sizeof c2s);
	memset(s2c, 0, sizeof s2c);
	if (rc) {
		s->st->refused++;
		cevent(s, c, "out of memory for a connection's keys");
		return -1;
	}
	c->keyed = 1;
	c->encrypt = !!(flags & TCP_F_ENCRYPT);
	c->slot = s->free_slot[--s->nfree];
	s->pending--;
	s->st->conns++;
	c->state = C_HDR;
	c->have = 0;
	return welcome(s, c, TCP_OK) < 0 ? -1 : 1;
}

/* A refused batch: counted, an ACK BAD, and the connection closes (the
 * rest of its stream cannot be trusted to line up). */
static int refuse(struct sink *s, struct conn *c, const char *what)
{
	s->st->bad++;
	event(s, what);
	(void)ack(c, TCP_BAD);
	drain(s, c);
	return -1;
}

/* The header alone: what can be checked before its tag is, refused as
 * tampering (a peer with the keys never sends it), so nothing unchecked
 * sizes an allocation or a read. */
static int header(struct sink *s, struct conn *c)
{
	int rc = fill(c, c->head, TCP_BATCH_LEN);

	if (rc <= 0)
		return rc;
	c->ncopies = (uint32_t)le_get(c->head + 4, 4);
	c->batch = le_get(c->head + 8, 8);
	c->room = le_get(c->head + 16, 8);
	c->inc = le_get(c->head + 24, 8);
	c->total = le_get(c->head + 32, 8);
	if (le_get(c->head, 4) != TCP_MAGIC_BATCH)
		return tampered(s, c, "batch with a bad magic refused");
	if (le_get(c->head + 40, 8) != c->seq_in)
		return tampered(s, c, "batch out of sequence (replayed, "
				      "reordered or dropped) refused");
	if (c->ncopies == 0 || c->ncopies > TCP_MAX_COPIES)
		return tampered(s, c, "batch with a copy count over the cap "
				      "refused");
	if (c->total > s->cfg->size)
		return refuse(s, c, "batch larger than the pool refused");
	c->copies = malloc((size_t)c->ncopies * TCP_COPY_LEN + TCP_TAG_BYTES);
	if (!c->copies)
		return refuse(s, c, "out of memory for a copy list");
	c->state = C_COPIES;
	c->have = 0;
	return 1;
}

static int copy_list(struct sink *s, struct conn *c)
{
	size_t clen = (size_t)c->ncopies * TCP_COPY_LEN;
	uint64_t sum = 0;
	int rc = fill(c, c->copies, clen + TCP_TAG_BYTES);

	if (rc <= 0)
		return rc;
	/* The head tag first: header and copy list are as the client sent
	 * them, in this connection's order, before anything acts on them. */
	tcp_mac_begin(&c->in, c->seq_in, TCP_TAG_HEAD);
	tcp_mac_add(&c->in, c->head, TCP_BATCH_LEN);
	tcp_mac_add(&c->in, c->copies, clen);
	if (!tcp_mac_check(&c->in, c->copies + clen))
		return tampered(s, c, "batch whose head tag is wrong refused "
				      "(nothing written)");
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
	rc = s->cfg->room_begin ? s->cfg->room_begin(s->cfg->arg, c->slot,
						     c->room, c->inc, c->copies,
						     c->ncopies)
				: TCP_ROOM_OK;
	c->held = s->cfg->room_begin && rc == TCP_ROOM_OK;
	c->discard = rc == TCP_ROOM_OK ? 0
		     : rc == TCP_ROOM_DEST ? TCP_DEST : TCP_NOT_LIVE;
	c->left = c->total;
	/* The body tag covers the head tag, so a body cannot be spliced
	 * under another head. */
	if (c->encrypt)
		tcp_mac_begin_sealed(&c->in, c->seq_in);
	else
		tcp_mac_begin(&c->in, c->seq_in, TCP_TAG_BODY);
	tcp_mac_add(&c->in, c->copies + clen, TCP_TAG_BYTES);
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
		if (c->discard) {
			/* Discarded bytes are authenticated all the same:
			 * the stream must stay whole. */
			if (c->encrypt)
				tcp_mac_crypt(&c->in, s->scratch, s->scratch,
					      (size_t)k);
			else
				tcp_mac_add(&c->in, s->scratch, (size_t)k);
		} else {
			uint64_t adv = (uint64_t)k;

			s->st->bytes += adv;
			/* Authenticate (decrypt) what just landed, in order,
			 * while it is hot in the cache: the tag is of the
			 * written pages. */
			while (adv > 0) {
				uint64_t len;
				uint8_t *d = dst_of(s, c, c->ci, &len);
				uint64_t take = adv < len - c->coff ? adv
								    : len - c->coff;

				if (c->encrypt)
					tcp_mac_crypt(&c->in, d + c->coff,
						      d + c->coff, take);
				else
					tcp_mac_add(&c->in, d + c->coff, take);
				adv -= take;
				c->coff += take;
				if (c->coff == len) {
					c->ci++;
					c->coff = 0;
				}
			}
		}
	}
	c->state = C_TRAILER;
	c->have = 0;
	return 1;
}

/* The body tag after the payload; then the GPU copy, the room let go,
 * and the ACK. A wrong body tag leaves wrong bytes in the room's pages,
 * but no ACK OK: the client resends them (same pages) on a new
 * connection, and the room cannot succeed before that lands. */
static int trailer(struct sink *s, struct conn *c)
{
	uint32_t status = TCP_OK;
	int rc = fill(c, c->head, TCP_TAG_BYTES);

	if (rc <= 0)
		return rc;
	if (!tcp_mac_check(&c->in, c->head)) {
		release(s, c);
		return tampered(s, c, "batch whose body tag is wrong refused "
				      "(not acked)");
	}
	c->seq_in++;
	c->dev_fail = !c->discard && to_device(s, c) != 0;
	release(s, c); /* every byte is written: the room may be released */
	if (c->discard == TCP_DEST) {
		s->st->dest++;
		cevent(s, c, "batch with a copy outside the pages granted to "
			     "its room refused (nothing written)");
		status = TCP_DEST;
	} else if (c->discard) {
		s->st->not_live++;
		event(s, "batch for a room that is not live discarded");
		status = TCP_NOT_LIVE;
	} else if (c->dev_fail) {
		s->st->device++;
		status = TCP_DEVICE;
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

/* The peer's address and port as text. */
static void peer_text(const struct sockaddr_storage *sa, char *out, size_t len)
{
	char a[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (sa->ss_family == AF_INET) {
		const struct sockaddr_in *v = (const void *)sa;

		inet_ntop(AF_INET, &v->sin_addr, a, sizeof a);
		port = ntohs(v->sin_port);
	} else if (sa->ss_family == AF_INET6) {
		const struct sockaddr_in6 *v = (const void *)sa;

		inet_ntop(AF_INET6, &v->sin6_addr, a, sizeof a);
		port = ntohs(v->sin6_port);
	}
	snprintf(out, len, "%s:%u", a, port);
}

/* All handshake slots are taken: the one that has waited longest goes,
 * so a burst of idle keyless connections delays a real peer by at most
 * the time max_pending newer connections take to arrive. */
static void evict_oldest_pending(struct sink *s)
{
	uint32_t old = UINT32_MAX;

	for (uint32_t i = 0; i < s->n; i++)
		if (s->c[i].state == C_HELLO &&
		    (old == UINT32_MAX ||
		     s->c[i].deadline_ns < s->c[old].deadline_ns))
			old = i;
	if (old == UINT32_MAX)
		return;
	s->st->refused++;
	s->st->evicted++;
	cevent(s, &s->c[old], "connection still in the handshake closed for "
			      "a newer one (handshake slots full)");
	drop(s, old);
}

static void take(struct sink *s, uint64_t now)
{
	uint32_t max_pending = s->cfg->max_pending ? s->cfg->max_pending : 64;

	for (;;) {
		struct sockaddr_storage sa;
		socklen_t sl = sizeof sa;
		int fd = accept4(s->cfg->listen_fd, (struct sockaddr *)&sa, &sl,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		int one = 1;
		struct conn *c;

		if (fd < 0)
			return; /* EAGAIN, or an aborted connection */
		if (s->pending >= max_pending)
			evict_oldest_pending(s);
		/* ACKs are small: under Nagle a second one waits for the
		 * writer's delayed ACK (40 ms) whenever the writer has nothing
		 * to send meanwhile, as between a room's small batches. */
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
		c = &s->c[s->n++];
		*c = (struct conn){
			.fd = fd, .state = C_HELLO, .slot = NO_SLOT,
			.last_ns = now,
			.deadline_ns = now + (uint64_t)(s->cfg->handshake_ms
							    ? s->cfg->handshake_ms
							    : 2000) * 1000000ull,
		};
		s->pending++;
		source(&sa, c->src);
		peer_text(&sa, c->peer, sizeof c->peer);
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
				handshake_failed(s, c, "connection without a "
						       "hello in time closed");
				drop(s, i);
			} else if (c->state != C_HELLO && mid && !c->ack_left &&
				   now > c->last_ns + stall) {
				s->st->refused++;
				cevent(s, c, "connection stalled inside a "
					     "batch closed");
				drop(s, i);
			}
		}
		if (n > 0 && (s->pfd[0].revents & POLLIN))
			take(s, now);
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
