/*
 * tcp_sink_conn.c - one connection of the tcp sink (tcp_sink_impl.h):
 * the handshake, then each batch unit by unit (header, copy list and head
 * tag, payload, body tag) and its ACK, keeping what it has read so far so
 * that the loop in tcp_sink.c never waits on one peer.
 */
#include "tcp_sink_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "tcp_auth.h"
#include "base/kvw.h"
#include "mem/mem.h"
#include "mem/pool.h"

/* The connection's write is over: its room is no longer held. */
void tcp_sink_release(struct sink *s, struct conn *c)
{
	if (c->held && s->cfg->room_end)
		s->cfg->room_end(s->cfg->arg, c->slot);
	c->held = 0;
}

/* Sends what is left of the connection's ACK: 0 done, 1 still pending
 * (wait for POLLOUT), -1 the connection is gone. */
int tcp_sink_flush_ack(struct conn *c)
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
	return tcp_sink_flush_ack(c);
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
		c->last_ns = tcp_sink_now_ns();
	}
	return 1;
}

/* After a refusal's ACK the connection closes, but not at once: our side
 * shuts (a FIN behind the ACK) and what the peer still sends is read and
 * dropped until it hangs up. A close with unread bytes would be a RST,
 * and a peer still writing the batches behind the refused one would meet
 * the RST before the ACK and never learn why (it would count a lost
 * connection where the decode had found tampering). Bounded by
 * SINK_LINGER_BYTES here and by the stall timer in the loop. */
static int closing(struct sink *s, struct conn *c)
{
	tcp_sink_release(s, c);
	free(c->copies);
	c->copies = NULL;
	c->state = C_CLOSING;
	c->have = 0;
	return 1;
}

/* C_CLOSING: the ACK is out; shut our side, then drop what comes until
 * the peer's EOF (-1: close now) or the socket runs dry (0: keep). */
static int linger(struct sink *s, struct conn *c)
{
	if (!c->shut) {
		(void)shutdown(c->fd, SHUT_WR);
		c->shut = 1;
	}
	for (;;) {
		int rc;

		c->have = 0;
		rc = fill(c, s->scratch, sizeof s->scratch);
		c->dropped += c->have;
		if (rc < 0 || c->dropped > SINK_LINGER_BYTES)
			return -1;
		if (rc == 0)
			return 0;
	}
}

/* A batch whose tag or seq is wrong: nothing more from this connection
 * can be trusted. Counted, told (naming the peer), an ACK INTEGRITY (a
 * hint only: the client resends on a new connection either way), and
 * the connection closes. */
static int tampered(struct sink *s, struct conn *c, const char *what)
{
	s->st->integrity++;
	tcp_sink_cevent(s, c, what);
	if (s->cfg->integrity_failed)
		s->cfg->integrity_failed(s->cfg->arg);
	return ack(c, TCP_INTEGRITY) < 0 ? -1 : closing(s, c);
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
	tcp_sink_handshake_failed(s, c, line);
}

static int welcome(struct sink *s, struct conn *c, uint32_t status)
{
	tcp_auth_fingerprint(s->cfg->group_key, c->ack + 8);
	le_put(c->ack, TCP_MAGIC_WELCOME, 4);
	le_put(c->ack + 4, status, 4);
	tcp_auth_welcome(s->cfg->group_key, s->cfg->secret, c->nonce,
			 c->head + 8, status, c->ack + 16);
	c->ack_len = c->ack_left = TCP_WELCOME_LEN;
	return tcp_sink_flush_ack(c);
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
		tcp_sink_handshake_failed(s, c, "connection with a bad hello or another "
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
		tcp_sink_handshake_failed(s, c, "connection with flags this sink does "
				       "not serve refused (--encrypt on one "
				       "side only, or without group keys)");
		(void)welcome(s, c, TCP_BAD);
		return -1;
	}
	if (s->nfree == 0 || tcp_sink_from_source(s, c->src) >= per_source) {
		s->st->refused++;
		tcp_sink_cevent(s, c, s->nfree ? "connection over the per-source cap "
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
		tcp_sink_cevent(s, c, "out of memory for a connection's keys");
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
	tcp_sink_event(s, what);
	return ack(c, TCP_BAD) < 0 ? -1 : closing(s, c);
}

/* The decode engine's own host memory laid over the pool, when it
 * registered some (one load when nothing changed): 1, or 0 with the reason
 * told to the log. */
static int engine_memory(struct sink *s)
{
	char why[256];

	if (s->cfg->pool == NULL ||
	    pool_refresh(s->cfg->pool, why, sizeof why) == 0)
		return 1;
	tcp_sink_event(s, why);
	return 0;
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
	/* Batch flags and the reserved word: none is defined in v4, so a
	 * keyed peer that sets one speaks something this sink does not. */
	if (le_get(c->head + 48, 8) != 0)
		return refuse(s, c, "batch with flags this sink does not know "
				    "refused");
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
	if (rc == TCP_ROOM_OK && !engine_memory(s))
		c->discard = TCP_DEVICE; /* nothing lands; the room fails */
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
	int rc, r2;

	if (s->cfg->mem == NULL)
		return 0;
	rc = mem_region_refresh(s->cfg->mem, why, sizeof why);
	for (uint32_t i = 0; rc == 0 && i < c->ncopies; i++) {
		const uint8_t *p = c->copies + i * TCP_COPY_LEN;

		rc = mem_region_copy_to_device(s->cfg->mem, le_get(p, 8),
					       le_get(p + 8, 8), why,
					       sizeof why);
	}
	/* Also after a failed enqueue: nothing stays queued. */
	r2 = mem_region_sync(s->cfg->mem, rc ? NULL : why, sizeof why);
	if (rc == 0)
		rc = r2;
	if (rc)
		tcp_sink_event(s, why);
	return rc;
}

void tcp_sink_lowat(struct conn *c, int v)
{
	if (c->lowat != v &&
	    setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v) == 0)
		c->lowat = v;
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
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* Wake for the next big piece, not for each segment:
			 * never for more than the batch has left (its body
			 * tag follows it only once it is read). */
			tcp_sink_lowat(c, c->left < SINK_LOWAT ? (int)c->left
							       : (int)SINK_LOWAT);
			return 0;
		}
		if (k <= 0)
			return -1;
		c->left -= (uint64_t)k;
		c->last_ns = tcp_sink_now_ns();
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
	tcp_sink_lowat(c, 1);
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
		tcp_sink_release(s, c);
		return tampered(s, c, "batch whose body tag is wrong refused "
				      "(not acked)");
	}
	c->seq_in++;
	c->dev_fail = !c->discard && to_device(s, c) != 0;
	tcp_sink_release(s, c); /* every byte is written: the room may be released */
	if (c->discard == TCP_DEST) {
		s->st->dest++;
		tcp_sink_cevent(s, c, "batch with a copy outside the pages granted to "
			     "its room refused (nothing written)");
		status = TCP_DEST;
	} else if (c->discard == TCP_DEVICE) {
		s->st->device++;
		status = TCP_DEVICE;
	} else if (c->discard) {
		s->st->not_live++;
		if (s->cfg->stale)
			s->cfg->stale(s->cfg->arg, c->room);
		else
			tcp_sink_event(s, "batch for a room that is not live "
					  "discarded");
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
int tcp_sink_serve(struct sink *s, struct conn *c)
{
	int rc = 1;

	while (rc > 0 && c->ack_left == 0) {
		switch (c->state) {
		case C_HELLO: rc = hello(s, c); break;
		case C_HDR: rc = header(s, c); break;
		case C_COPIES: rc = copy_list(s, c); break;
		case C_PAYLOAD: rc = payload(s, c); break;
		case C_TRAILER: rc = trailer(s, c); break;
		default: rc = linger(s, c); break;
		}
	}
	return rc < 0 ? -1 : 0;
}
