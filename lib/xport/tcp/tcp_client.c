/*
 * tcp_client.c - one prefill-side connection to a decode sink (see
 * tcp_client.h; protocol v4, tcp_proto.h). Batches go out as header, copy
 * list, head tag and payload in as few writev calls as XTCP_IOV allows,
 * straight from the source pool (through a bounce buffer, encrypted, with
 * ENCRYPT), then the body tag; each is kept in a FIFO until its ACK (which
 * the sink sends in order, tagged, with its own sequence number) comes
 * back. When the connection breaks - a send or a read fails, an ACK names
 * the wrong batch, carries a wrong tag or seq (tampering: counted), or
 * says INTEGRITY - the client re-dials with a growing pause and sends
 * every kept batch again, for up to the resend window; only then does it
 * give up and forget them. A batch resent after its bytes had landed
 * writes the same bytes again, so the repeat is harmless. A batch that
 * fails integrity on TCP_STRIKES connections fails (KVW_ECORRUPT).
 */
#include "tcp_client.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "tcp_auth.h"
#include "tcp_mac.h"
#include "base/kvw.h"
#include "base/log.h"
#include "xport/xnet.h"

#define XTCP_IO_TIMEOUT_S 30 /* a sink silent this long breaks the link */
#define XTCP_CONNECT_MS 2000
#define XTCP_IOV 512u /* iovecs per writev call (IOV_MAX is 1024) */
#define XTCP_GROUP (1u << 20) /* payload bytes sent, then MACed */
#define TCP_STRIKES 3u /* connections a batch may fail integrity on */
#define TCP_LOSSES 8u  /* connections in a row a batch may be unanswered
			* on (a tamperer that cuts every connection) */

/* A batch sent and not acked yet. A batch whose connection could not be
 * mended is kept as lost (spans freed) until a wait has reported it, so
 * the wait for an earlier or later mark still answers for its own
 * batches only. Lost batches are always the oldest: every kept batch is
 * lost at once. */
struct kept {
	uint64_t id, room, inc;
	uint32_t n;
	uint32_t strikes; /* connections it failed integrity on */
	uint32_t losses;  /* connections lost with it unanswered */
	int lost;
	struct tcp_span *s; /* owned; NULL once lost */
};

struct tcp_client {
	int fd; /* -1 while broken */
	char host[TCP_HOST_MAX + 1];
	uint16_t port;
	uint8_t secret[TCP_SECRET_LEN];
	uint8_t group[TCP_GROUP_KEY_LEN];
	int has_group;
	int encrypt;        /* ask for ENCRYPT in every HELLO */
	int permanent;      /* the last dial failed for a reason a retry
			     * cannot mend (keys, version) */
	struct tcp_mac out; /* client -> sink tags (encrypts) */
	struct tcp_mac in;  /* sink -> client: checks ACK tags */
	uint64_t seq_out, seq_in;
	uint64_t next_id;
	uint64_t redials, resent, integrity;
	uint8_t *bounce;    /* ENCRYPT: XTCP_GROUP bytes of ciphertext */
	char lost_why[256]; /* why the lost batches were lost */
	uint32_t resend_ms;
	struct kept *q; /* ring of unacked batches, oldest at head */
	uint32_t head, n, cap;
	uint8_t hdr[TCP_BATCH_LEN + TCP_MAX_COPIES * TCP_COPY_LEN +
		    TCP_TAG_BYTES];
	uint8_t trailer[TCP_TAG_BYTES];
	struct iovec iov[XTCP_IOV];
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Why the sink refused our HELLO, from its WELCOME: keys (both
 * fingerprints, never the keys), a stale secret, or flags. */
static void refused_why(const struct tcp_client *c, const uint8_t *wel,
			char *why, size_t whylen)
{
	uint8_t fp[TCP_FP_LEN];
	char ours[17], theirs[17];

	tcp_auth_fingerprint(c->has_group ? c->group : NULL, fp);
	tcp_auth_fp_hex(fp, ours);
	tcp_auth_fp_hex(wel + 8, theirs);
	if (le_get(wel + 4, 4) != TCP_SECRET)
		snprintf(why, whylen, "%.64s:%u refused the handshake (status "
			 "%u: %s)", c->host, c->port,
			 (unsigned)le_get(wel + 4, 4),
			 c->encrypt ? "--encrypt on one side only, or the "
				      "connection cap"
				    : "the connection cap or --encrypt "
				      "required there");
	else if (memcmp(fp, wel + 8, TCP_FP_LEN) != 0)
		snprintf(why, whylen, "%.64s:%u refused the handshake: the "
			 "group keys differ (ours %s, the decode's %s)",
			 c->host, c->port, ours, theirs);
	else
		snprintf(why, whylen, "%.64s:%u refused the handshake: same "
			 "group key (%s) but the registration's secret is "
			 "wrong (a stale descriptor?)", c->host, c->port, ours);
}

/* Connects within XTCP_CONNECT_MS, says hello and sets up the
 * connection's keys and sequence numbers: the fd, or -1 with why (and
 * c->permanent set where a retry cannot help). */
static int dial(struct tcp_client *c, char *why, size_t whylen)
{
	uint8_t hello[TCP_HELLO_LEN], wel[TCP_WELCOME_LEN] = { 0 };
	uint8_t ch[TCP_CHALLENGE_LEN], mac[TCP_MAC_LEN];
	uint8_t c2s[TCP_KEY_LEN], s2c[TCP_KEY_LEN];
	const uint8_t *g = c->has_group ? c->group : NULL;
	uint16_t flags = c->encrypt ? TCP_F_ENCRYPT : 0;
	int fd = xnet_dial(c->host, c->port, XTCP_CONNECT_MS,
			   XTCP_IO_TIMEOUT_S * 1000, why, whylen);

	c->permanent = 0;
	if (fd < 0)
		return -1;
	/* The sink's challenge first; the answer proves the keys. */
	if (xnet_io_all(fd, ch, sizeof ch, 0) < 0) {
		snprintf(why, whylen, "%.64s:%u closed the connection before "
			 "its challenge (its handshake slots full, or not a "
			 "kvwire data port)", c->host, c->port);
		close(fd);
		return -1;
	}
	if (le_get(ch, 4) != TCP_MAGIC_CHALLENGE ||
	    le_get(ch + 4, 2) != TCP_VERSION) {
		c->permanent = 1;
		snprintf(why, whylen, "%.64s:%u is not a kvwire data port of "
			 "this version (it says version %u, we speak %u)",
			 c->host, c->port,
			 le_get(ch, 4) == TCP_MAGIC_CHALLENGE
				 ? (unsigned)le_get(ch + 4, 2) : 0u,
			 TCP_VERSION);
		close(fd);
		return -1;
	}
	le_put(hello, TCP_MAGIC_HELLO, 4);
	le_put(hello + 4, TCP_VERSION, 2);
	le_put(hello + 6, flags, 2);
	if (getrandom(hello + 8, TCP_NONCE_LEN, 0) != (ssize_t)TCP_NONCE_LEN) {
		snprintf(why, whylen, "no randomness for a nonce");
		close(fd);
		return -1;
	}
	tcp_auth_fingerprint(g, hello + 24);
	tcp_auth_hello(g, c->secret, ch + 8, hello + 8, flags, hello + 32);
	if (xnet_io_all(fd, hello, sizeof hello, 1) < 0 ||
	    xnet_io_all(fd, wel, sizeof wel, 0) < 0 ||
	    le_get(wel, 4) != TCP_MAGIC_WELCOME) {
		snprintf(why, whylen, "%.64s:%u closed the connection during "
			 "the handshake", c->host, c->port);
		close(fd);
		return -1;
	}
	if (le_get(wel + 4, 4) != TCP_OK) {
		refused_why(c, wel, why, whylen);
		c->permanent = le_get(wel + 4, 4) == TCP_SECRET;
		close(fd);
		return -1;
	}
	/* An OK must come from a sink with the keys: a relay cannot make
	 * one up. */
	tcp_auth_welcome(g, c->secret, ch + 8, hello + 8, TCP_OK, mac);
	if (!tcp_auth_same(mac, wel + 16)) {
		c->integrity++;
		snprintf(why, whylen, "%.64s:%u sent a WELCOME that is not "
			 "authentic (tampering on the path?)", c->host,
			 c->port);
		close(fd);
		return -1;
	}
	tcp_mac_free(&c->out);
	tcp_mac_free(&c->in);
	tcp_auth_keys(g, c->secret, ch + 8, hello + 8, flags, c2s, s2c);
	if (tcp_mac_init(&c->out, g ? c2s : NULL, 1) != 0 ||
	    tcp_mac_init(&c->in, g ? s2c : NULL, 0) != 0) {
		snprintf(why, whylen, "out of memory for the connection's keys");
		close(fd);
		fd = -1;
	}
	memset(c2s, 0, sizeof c2s);
	memset(s2c, 0, sizeof s2c);
	c->seq_out = c->seq_in = 0;
	return fd;
}

static struct kept *at(struct tcp_client *c, uint32_t i)
{
	return &c->q[(c->head + i) % c->cap];
}

static void forget_head(struct tcp_client *c)
{
	free(at(c, 0)->s);
	c->head = (c->head + 1) % c->cap;
	c->n--;
}

static void forget_all(struct tcp_client *c)
{
	while (c->n)
		forget_head(c);
}

/* Every kept batch becomes lost (see struct kept). */
static void lose_all(struct tcp_client *c)
{
	for (uint32_t i = 0; i < c->n; i++) {
		free(at(c, i)->s);
		at(c, i)->s = NULL;
		at(c, i)->lost = 1;
	}
}

/* 1 while a kept batch still waits for its ACK (the newest is not lost). */
static int live_kept(struct tcp_client *c)
{
	return c->n > 0 && !at(c, c->n - 1)->lost;
}

static void hang_up(struct tcp_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

/* Sends iov[0..n) whole: 0 or -1 (broken). */
static int flush(struct tcp_client *c, size_t n)
{
	struct iovec *v = c->iov;
	size_t off;

	while (n > 0) {
		/* sendmsg for MSG_NOSIGNAL: a sink that drops the connection
		 * (a batch refused for integrity) must not SIGPIPE us. */
		struct msghdr mh = { .msg_iov = v, .msg_iovlen = n };
		ssize_t k = sendmsg(c->fd, &mh, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		for (off = (size_t)k; n && off >= v->iov_len; n--, v++)
			off -= v->iov_len;
		if (n) {
			v->iov_base = (uint8_t *)v->iov_base + off;
			v->iov_len -= off;
		}
	}
	return 0;
}

/* Feeds the body tag the payload from span *i, offset *off up to span
 * i1, offset off1, and moves (*i, *off) there. */
static void mac_to(struct tcp_mac *m, const struct kept *b, uint32_t *i,
		   uint64_t *off, uint32_t i1, uint64_t off1)
{
	for (; *i < i1; (*i)++, *off = 0)
		tcp_mac_add(m, b->s[*i].src + *off, b->s[*i].len - *off);
	tcp_mac_add(m, b->s[i1].src + *off, off1 - *off);
	*off = off1;
}

/* ENCRYPT: the payload encrypted into the bounce buffer a group at a time
 * and sent from there. 0 or -1 (broken). */
static int put_sealed(struct tcp_client *c, const struct kept *b)
{
	uint64_t fill = 0;

	for (uint32_t i = 0; i < b->n; i++)
		for (uint64_t off = 0; off < b->s[i].len;) {
			uint64_t piece = b->s[i].len - off < XTCP_GROUP - fill
					 ? b->s[i].len - off
					 : XTCP_GROUP - fill;

			tcp_mac_crypt(&c->out, b->s[i].src + off,
				      c->bounce + fill, (size_t)piece);
			fill += piece;
			off += piece;
			if (fill == XTCP_GROUP) {
				c->iov[0] = (struct iovec){ c->bounce,
							    (size_t)fill };
				if (flush(c, 1) < 0)
					return -1;
				fill = 0;
			}
		}
	c->iov[0] = (struct iovec){ c->bounce, (size_t)fill };
	return fill ? flush(c, 1) : 0;
}

/* Writes one batch on the current connection under the next seq: 0 or -1
 * (broken). The payload goes in groups of about XTCP_GROUP bytes, each
 * MACed right after it is sent: the kernel's copy reads the source pages
 * from memory and the MAC then reads them from the cache (MACing first
 * made it pay for the memory reads and left the copy to find part of the
 * group evicted). The body tag follows the payload, so MACing after the
 * send changes nothing on the wire. */
static int put_batch(struct tcp_client *c, const struct kept *b)
{
	uint64_t total = 0, group = 0, hoff = 0, seq = c->seq_out++;
	size_t clen = (size_t)b->n * TCP_COPY_LEN;
	uint32_t hi = 0; /* the payload not MACed yet starts at span hi */
	size_t nio = 0;

	for (uint32_t i = 0; i < b->n; i++)
		total += b->s[i].len;
	le_put(c->hdr, TCP_MAGIC_BATCH, 4);
	le_put(c->hdr + 4, b->n, 4);
	le_put(c->hdr + 8, b->id, 8);
	le_put(c->hdr + 16, b->room, 8);
	le_put(c->hdr + 24, b->inc, 8);
	le_put(c->hdr + 32, total, 8);
	le_put(c->hdr + 40, seq, 8);
	le_put(c->hdr + 48, 0, 8); /* flags, reserved */
	for (uint32_t i = 0; i < b->n; i++) {
		uint8_t *p = c->hdr + TCP_BATCH_LEN + i * TCP_COPY_LEN;

		le_put(p, b->s[i].dst_off, 8);
		le_put(p + 8, b->s[i].len, 8);
	}
	tcp_mac_one(&c->out, seq, TCP_TAG_HEAD, c->hdr, TCP_BATCH_LEN + clen,
		    c->hdr + TCP_BATCH_LEN + clen);
	c->iov[nio++] = (struct iovec){ c->hdr,
					TCP_BATCH_LEN + clen + TCP_TAG_BYTES };
	if (c->encrypt)
		tcp_mac_begin_sealed(&c->out, seq);
	else
		tcp_mac_begin(&c->out, seq, TCP_TAG_BODY);
	tcp_mac_add(&c->out, c->hdr + TCP_BATCH_LEN + clen, TCP_TAG_BYTES);
	if (c->encrypt) {
		if (flush(c, nio) < 0 || put_sealed(c, b) < 0)
			return -1;
		goto tag;
	}
	for (uint32_t i = 0; i < b->n; i++)
		for (uint64_t off = 0; off < b->s[i].len;) {
			uint64_t piece = b->s[i].len - off < XTCP_GROUP
					 ? b->s[i].len - off : XTCP_GROUP;
			const uint8_t *p = b->s[i].src + off;

			c->iov[nio++] = (struct iovec){ (void *)(uintptr_t)p,
							(size_t)piece };
			group += piece;
			off += piece;
			if (nio == XTCP_IOV || group >= XTCP_GROUP) {
				if (flush(c, nio) < 0)
					return -1;
				mac_to(&c->out, b, &hi, &hoff, i, off);
				nio = 0;
				group = 0;
			}
		}
	if (nio > 0 && flush(c, nio) < 0)
		return -1;
	mac_to(&c->out, b, &hi, &hoff, b->n - 1, b->s[b->n - 1].len);
tag:
	tcp_mac_final(&c->out, c->trailer);
	c->iov[0] = (struct iovec){ c->trailer, TCP_TAG_BYTES };
	return flush(c, 1);
}

/* Makes the connection whole: re-dials (pausing 10 ms, doubling to 500 ms)
 * and sends every kept batch again, until it works or the resend window
 * is spent. 0, or KVW_ESYS (every kept batch lost). */
static int mend(struct tcp_client *c, char *err, size_t errlen)
{
	uint64_t end = mono_ms() + c->resend_ms;
	unsigned pause = 10;
	char why[200] = "connection lost";

	hang_up(c);
	for (;;) {
		uint32_t i, again = 0;

		c->fd = dial(c, why, sizeof why);
		if (c->fd >= 0) {
			c->redials++;
			for (i = 0; i < c->n; i++) {
				if (at(c, i)->lost)
					continue;
				if (put_batch(c, at(c, i)) < 0)
					break;
				again++;
			}
			c->resent += again;
			LOG_RL(LOG_WARN, "tcp: re-dialled %.64s:%u and sent %u "
			       "unacked batches again (%llu redials, %llu "
			       "resent so far)", c->host, c->port, again,
			       (unsigned long long)c->redials,
			       (unsigned long long)c->resent);
			if (i == c->n)
				return 0;
			hang_up(c);
		}
		if (c->permanent || mono_ms() + pause >= end)
			break;
		poll(NULL, 0, (int)pause);
		pause = pause < 250 ? 2 * pause : 500;
	}
	lose_all(c);
	snprintf(c->lost_why, sizeof c->lost_why,
		 "tcp: connection to the decode lost and not mended within "
		 "%u ms: %s", c->resend_ms, why);
	return kvw_errf(err, errlen, KVW_ESYS, "%s", c->lost_why);
}

int tcp_client_open(struct tcp_client **out, const char *host, uint16_t port,
		    const uint8_t secret[TCP_SECRET_LEN], const uint8_t *group,
		    int encrypt, char *err, size_t errlen)
{
	struct tcp_client *c = calloc(1, sizeof *c);
	const char *env = getenv("KVW_TCP_RESEND_MS");
	char why[200];
	unsigned pause = 10;
	uint64_t end;

	*out = NULL;
	if (!c)
		return kvw_errf(err, errlen, KVW_ENOMEM, "tcp: out of memory");
	snprintf(c->host, sizeof c->host, "%s", host);
	c->port = port;
	memcpy(c->secret, secret, TCP_SECRET_LEN);
	if (group) {
		memcpy(c->group, group, TCP_GROUP_KEY_LEN);
		c->has_group = 1;
	}
	c->resend_ms = env && *env ? (uint32_t)strtoul(env, NULL, 10)
				   : TCP_RESEND_MS_DEFAULT;
	if (encrypt && !group) {
		free(c);
		return kvw_errf(err, errlen, KVW_EINVAL, "tcp: --encrypt needs "
				"the group's keys");
	}
	c->encrypt = encrypt;
	if (encrypt && !(c->bounce = malloc(XTCP_GROUP))) {
		free(c);
		return kvw_errf(err, errlen, KVW_ENOMEM, "tcp: out of memory");
	}
	/* A refused or timed-out first connect is tried again, pausing
	 * 10 ms doubling to 500 ms, within the resend window; keys or a
	 * version that differ are not. */
	end = mono_ms() + c->resend_ms;
	while ((c->fd = dial(c, why, sizeof why)) < 0 && !c->permanent &&
	       mono_ms() + pause < end) {
		c->redials++;
		poll(NULL, 0, (int)pause);
		pause = pause < 250 ? 2 * pause : 500;
	}
	if (c->fd < 0) {
		tcp_mac_free(&c->out);
		tcp_mac_free(&c->in);
		free(c->bounce);
		free(c);
		return kvw_errf(err, errlen, KVW_ESYS, "tcp: %s", why);
	}
	*out = c;
	return 0;
}

void tcp_client_close(struct tcp_client **cp)
{
	struct tcp_client *c = cp ? *cp : NULL;

	if (!c)
		return;
	hang_up(c);
	forget_all(c);
	tcp_mac_free(&c->out);
	tcp_mac_free(&c->in);
	free(c->bounce);
	free(c->q);
	free(c);
	*cp = NULL;
}

int tcp_client_send(struct tcp_client *c, uint64_t room, uint64_t inc,
		    const struct tcp_span *s, size_t n, char *err,
		    size_t errlen)
{
	struct kept *b;

	if (n == 0 || n > TCP_MAX_COPIES)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"tcp: %zu copies in one batch", n);
	if (c->n == c->cap) {
		uint32_t cap = c->cap ? 2 * c->cap : 16;
		struct kept *q = malloc(cap * sizeof *q);

		if (!q)
			return kvw_errf(err, errlen, KVW_ENOMEM,
					"tcp: out of memory");
		for (uint32_t i = 0; i < c->n; i++)
			q[i] = *at(c, i);
		free(c->q);
		c->q = q;
		c->cap = cap;
		c->head = 0;
	}
	b = at(c, c->n);
	b->s = malloc(n * sizeof *s);
	if (!b->s)
		return kvw_errf(err, errlen, KVW_ENOMEM, "tcp: out of memory");
	memcpy(b->s, s, n * sizeof *s);
	b->n = (uint32_t)n;
	b->lost = 0;
	b->id = c->next_id++;
	b->room = room;
	b->inc = inc;
	b->strikes = 0;
	b->losses = 0;
	c->n++;
	/* Kept before it is sent: a break now resends it with the rest. */
	if (c->fd >= 0 && put_batch(c, b) == 0)
		return 0;
	return mend(c, err, errlen);
}

/* Maps a sink's refusal to an error. */
static int refusal(uint32_t st, char *err, size_t errlen)
{
	switch (st) {
	case TCP_CHECKSUM:
	case TCP_INTEGRITY:
		return kvw_errf(err, errlen, KVW_ECORRUPT,
				"tcp: the batch failed its integrity check at "
				"the decode on %u connections (integrity)",
				TCP_STRIKES);
	case TCP_DEST:
		return kvw_errf(err, errlen, KVW_ECORRUPT,
				"tcp: the decode refused a copy outside the "
				"pages it granted the room (integrity)");
	case TCP_NOT_LIVE:
		return kvw_errf(err, errlen, KVW_ENOENT,
				"tcp: the room is not live at the decode");
	case TCP_DEVICE:
		return kvw_errf(err, errlen, KVW_ESYS,
				"tcp: the decode could not copy the batch "
				"to its GPU");
	default:
		return kvw_errf(err, errlen, KVW_EINVAL,
				"tcp: the decode refused a batch (status %u)",
				st);
	}
}

/* A batch that ends without an answer (rc, why): where the decode had
 * already refused it for integrity on an earlier connection, the cut that
 * followed is the tampering's too (the sink closes after an INTEGRITY ACK,
 * and whether the client reads that ACK or the reset first is a matter of
 * timing): it fails as integrity, so the room's reason never depends on
 * which came first. */
static int failed(uint32_t strikes, int rc, const char *why, char *err,
		  size_t errlen)
{
	if (strikes > 0)
		return kvw_errf(err, errlen, KVW_ECORRUPT, "tcp: the batch "
				"failed its integrity check at the decode, "
				"then %s (integrity)", why);
	return kvw_errf(err, errlen, rc, "%s", why);
}

/* 1 when ACK a is the next one on this connection, for batch id, with a
 * right tag; else counted as tampering and told (rate-limited). */
static int ack_ok(struct tcp_client *c, const uint8_t *a, uint64_t id)
{
	int ok;

	tcp_mac_begin(&c->in, c->seq_in, TCP_TAG_ACK);
	tcp_mac_add(&c->in, a, TCP_ACK_SIGNED);
	ok = tcp_mac_check(&c->in, a + TCP_ACK_SIGNED) &&
	     le_get(a, 4) == TCP_MAGIC_ACK && le_get(a + 16, 8) == c->seq_in &&
	     le_get(a + 8, 8) == id;
	if (ok) {
		c->seq_in++;
		if (le_get(a + 4, 4) == TCP_INTEGRITY) {
			c->integrity++;
			LOG_RL(LOG_WARN, "tcp: decode %.64s:%u says batch %llu "
			       "failed its integrity check; resending on a new "
			       "connection", c->host, c->port,
			       (unsigned long long)id);
		}
		return 1;
	}
	c->integrity++;
	LOG_RL(LOG_WARN, "tcp: an ACK from %.64s:%u with a wrong tag, seq or "
	       "batch (tampering on the path?); resending on a new "
	       "connection", c->host, c->port);
	return 0;
}

/* Reads ACKs until every batch below mark hi is answered and answers for
 * those from mark lo on: 0, or the first refusal or loss among them (lost
 * batches count only where `lost` says so). */
static int collect(struct tcp_client *c, uint64_t lo, uint64_t hi, int lost,
		   char *err, size_t errlen)
{
	char why[256];
	int first = 0, rc;

	while (c->n > 0 && at(c, 0)->id < hi) {
		uint64_t id = at(c, 0)->id;
		uint8_t a[TCP_ACK_LEN];
		uint32_t st;

		if (at(c, 0)->lost) {
			if (lost && id >= lo && first == 0)
				first = failed(at(c, 0)->strikes, KVW_ESYS,
					       c->lost_why, err, errlen);
			forget_head(c);
			continue;
		}
		if (c->fd < 0 || xnet_io_all(c->fd, a, sizeof a, 0) < 0) {
			if (++at(c, 0)->losses >= TCP_LOSSES) {
				uint32_t strikes = at(c, 0)->strikes;

				/* Never answered: fails, never lands. */
				forget_head(c);
				snprintf(why, sizeof why, "tcp: batch "
					 "unanswered on %u connections in a "
					 "row", TCP_LOSSES);
				if (id >= lo && first == 0)
					first = failed(strikes, KVW_ESYS, why,
						       err, errlen);
				hang_up(c);
				if (live_kept(c))
					(void)mend(c, why, sizeof why);
				continue;
			}
			rc = mend(c, why, sizeof why);
			if (rc && id >= lo && first == 0)
				first = failed(at(c, 0)->strikes, rc, why, err,
					       errlen);
			continue;
		}
		st = (uint32_t)le_get(a + 4, 4);
		if (!ack_ok(c, a, id) || st == TCP_INTEGRITY) {
			/* Tampering on this connection (a forged, replayed
			 * or lost ACK here; a bad batch at the sink): the
			 * batch is not known to have landed. It goes
			 * again, with the rest, on a new connection, up to
			 * TCP_STRIKES times. */
			if (++at(c, 0)->strikes < TCP_STRIKES) {
				rc = mend(c, why, sizeof why);
				if (rc && id >= lo && first == 0)
					first = kvw_errf(err, errlen, rc, "%s",
							 why);
				continue;
			}
			st = TCP_INTEGRITY;
		}
		forget_head(c);
		if (st != TCP_OK && id >= lo && first == 0)
			first = refusal(st, err, errlen);
		/* A refused batch closes the sink's side: start afresh (the
		 * rest of the kept batches go again on the new connection). */
		if (st == TCP_BAD || st == TCP_INTEGRITY) {
			hang_up(c);
			if (live_kept(c))
				(void)mend(c, why, sizeof why);
		}
	}
	return first;
}

int tcp_client_wait(struct tcp_client *c, char *err, size_t errlen)
{
	/* Lost batches were reported by the send or wait that lost them. */
	return collect(c, 0, c->next_id, 0, err, errlen);
}

uint64_t tcp_client_mark(const struct tcp_client *c)
{
	return c->next_id;
}

int tcp_client_wait_for(struct tcp_client *c, uint64_t lo, uint64_t hi,
			char *err, size_t errlen)
{
	return collect(c, lo, hi, 1, err, errlen);
}

uint32_t tcp_client_unacked(const struct tcp_client *c)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < c->n; i++)
		n += !c->q[(c->head + i) % c->cap].lost;
	return n;
}

uint64_t tcp_client_redials(const struct tcp_client *c)
{
	return c->redials;
}

uint64_t tcp_client_resent(const struct tcp_client *c)
{
	return c->resent;
}

uint64_t tcp_client_integrity(const struct tcp_client *c)
{
	return c->integrity;
}
