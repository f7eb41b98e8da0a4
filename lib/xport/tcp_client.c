/*
 * tcp_client.c - one prefill-side connection to a decode sink (see
 * tcp_client.h). Batches go out as header, copy list and payload in as few
 * writev calls as XTCP_IOV allows, straight from the source pool; each is
 * kept in a FIFO until its ACK (which the sink sends in order) comes back.
 * When the connection breaks - a send or a read fails, or an ACK names the
 * wrong batch - the client re-dials with a growing pause and sends every
 * kept batch again, for up to the resend window; only then does it give up
 * and forget them. A batch resent after its bytes had landed writes the
 * same bytes again, so the repeat is harmless.
 */
#include "tcp_client.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/kvw.h"
#include "tcp_auth.h"
#include "xhash.h"
#include "xnet.h"

#define XTCP_IO_TIMEOUT_S 30 /* a sink silent this long breaks the link */
#define XTCP_CONNECT_MS 2000
#define XTCP_IOV 512u /* iovecs per writev call (IOV_MAX is 1024) */
#define XTCP_GROUP (1u << 20) /* payload bytes sent, then hashed */

/* A batch sent and not acked yet. A batch whose connection could not be
 * mended is kept as lost (spans freed) until a wait has reported it, so
 * the wait for an earlier or later mark still answers for its own
 * batches only. Lost batches are always the oldest: every kept batch is
 * lost at once. */
struct kept {
	uint64_t id, room;
	uint32_t n;
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
	uint64_t next_id;
	uint64_t redials;
	uint64_t resent; /* batches sent again over a re-dialled link */
	char lost_why[256]; /* why the lost batches were lost */
	uint32_t resend_ms;
	struct kept *q; /* ring of unacked batches, oldest at head */
	uint32_t head, n, cap;
	uint8_t hdr[TCP_BATCH_LEN + TCP_MAX_COPIES * TCP_COPY_LEN];
	uint8_t trailer[TCP_TRAILER_LEN];
	struct iovec iov[XTCP_IOV];
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Connects within XTCP_CONNECT_MS and says hello: the fd, or -1 with why. */
static int dial(const struct tcp_client *c, char *why, size_t whylen)
{
	uint8_t hello[TCP_HELLO_LEN], wel[TCP_WELCOME_LEN] = { 0 };
	uint8_t ch[TCP_CHALLENGE_LEN];
	int fd = xnet_dial(c->host, c->port, XTCP_CONNECT_MS,
			   XTCP_IO_TIMEOUT_S * 1000, why, whylen);

	if (fd < 0)
		return -1;
	/* The sink's challenge first; the answer proves the keys. */
	if (xnet_io_all(fd, ch, sizeof ch, 0) < 0 ||
	    le_get(ch, 4) != TCP_MAGIC_CHALLENGE ||
	    le_get(ch + 4, 2) != TCP_VERSION) {
		snprintf(why, whylen, "%.64s:%u is not a kvwire data port of "
			 "this version", c->host, c->port);
		close(fd);
		return -1;
	}
	le_put(hello, TCP_MAGIC_HELLO, 4);
	le_put(hello + 4, TCP_VERSION, 2);
	le_put(hello + 6, 0, 2);
	tcp_auth_mac(c->has_group ? c->group : NULL, c->secret, ch + 8,
		     hello + 8);
	if (xnet_io_all(fd, hello, sizeof hello, 1) < 0 ||
	    xnet_io_all(fd, wel, sizeof wel, 0) < 0 ||
	    le_get(wel, 4) != TCP_MAGIC_WELCOME || le_get(wel + 4, 4)) {
		snprintf(why, whylen, "%.64s:%u did not accept the connection%s",
			 c->host, c->port,
			 le_get(wel + 4, 4) == TCP_SECRET
				 ? " (wrong secret or group key)" : "");
		close(fd);
		return -1;
	}
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
		ssize_t k = writev(c->fd, v, (int)n);

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

/* Feeds the hash the payload from span *i, offset *off up to span i1,
 * offset off1, and moves (*i, *off) there. */
static void hash_to(XXH3_state_t *hs, const struct kept *b, uint32_t *i,
		    uint64_t *off, uint32_t i1, uint64_t off1)
{
	for (; *i < i1; (*i)++, *off = 0)
		xhash_update(hs, b->s[*i].src + *off, b->s[*i].len - *off);
	xhash_update(hs, b->s[i1].src + *off, off1 - *off);
	*off = off1;
}

/* Writes one batch on the current connection: 0 or -1 (broken). The
 * payload goes in groups of about XTCP_GROUP bytes, each hashed right
 * after it is sent: the kernel's copy reads the source pages from memory
 * and the hash then reads them from the cache (hashing first made the
 * hash pay for the memory reads and left the copy to find part of the
 * group evicted). The digest follows the payload, so hashing after the
 * send changes nothing on the wire. */
static int put_batch(struct tcp_client *c, const struct kept *b)
{
	XXH3_state_t hs;
	uint64_t total = 0, group = 0, hoff = 0;
	uint32_t hi = 0; /* the payload not hashed yet starts at span hi */
	size_t nio = 0;

	for (uint32_t i = 0; i < b->n; i++)
		total += b->s[i].len;
	le_put(c->hdr, TCP_MAGIC_BATCH, 4);
	le_put(c->hdr + 4, b->n, 4);
	le_put(c->hdr + 8, b->id, 8);
	le_put(c->hdr + 16, b->room, 8);
	le_put(c->hdr + 24, total, 8);
	le_put(c->hdr + 32, 0, 8); /* reserved */
	for (uint32_t i = 0; i < b->n; i++) {
		uint8_t *p = c->hdr + TCP_BATCH_LEN + i * TCP_COPY_LEN;

		le_put(p, b->s[i].dst_off, 8);
		le_put(p + 8, b->s[i].len, 8);
	}
	c->iov[nio++] = (struct iovec){ c->hdr,
					TCP_BATCH_LEN + b->n * TCP_COPY_LEN };
	xhash_reset(&hs);
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
				hash_to(&hs, b, &hi, &hoff, i, off);
				nio = 0;
				group = 0;
			}
		}
	if (nio > 0 && flush(c, nio) < 0)
		return -1;
	hash_to(&hs, b, &hi, &hoff, b->n - 1, b->s[b->n - 1].len);
	le_put(c->trailer, xhash_digest(&hs), TCP_TRAILER_LEN);
	c->iov[0] = (struct iovec){ c->trailer, TCP_TRAILER_LEN };
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
		uint32_t i;

		c->fd = dial(c, why, sizeof why);
		if (c->fd >= 0) {
			c->redials++;
			for (i = 0; i < c->n; i++)
				if (!at(c, i)->lost && put_batch(c, at(c, i)) < 0)
					break;
			if (i == c->n) {
				c->resent += tcp_client_unacked(c);
				return 0;
			}
			hang_up(c);
		}
		if (mono_ms() + pause >= end)
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
		    char *err, size_t errlen)
{
	struct tcp_client *c = calloc(1, sizeof *c);
	const char *env = getenv("KVW_TCP_RESEND_MS");
	char why[200];

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
	c->fd = dial(c, why, sizeof why);
	if (c->fd < 0) {
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
	free(c->q);
	free(c);
	*cp = NULL;
}

int tcp_client_send(struct tcp_client *c, uint64_t room,
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
		return kvw_errf(err, errlen, KVW_ECORRUPT,
				"tcp: checksum mismatch at the decode "
				"(integrity)");
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
				first = kvw_errf(err, errlen, KVW_ESYS, "%s",
						 c->lost_why);
			forget_head(c);
			continue;
		}
		if (c->fd < 0 || xnet_io_all(c->fd, a, sizeof a, 0) < 0 ||
		    le_get(a, 4) != TCP_MAGIC_ACK || le_get(a + 8, 8) != id) {
			rc = mend(c, why, sizeof why);
			if (rc && id >= lo && first == 0)
				first = kvw_errf(err, errlen, rc, "%s", why);
			continue;
		}
		st = (uint32_t)le_get(a + 4, 4);
		forget_head(c);
		if (st != TCP_OK && id >= lo && first == 0)
			first = refusal(st, err, errlen);
		/* A refused batch closes the sink's side: start afresh (the
		 * rest of the kept batches go again on the new connection). */
		if (st == TCP_BAD) {
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
