/*
 * tcp_sink.c - the sink loop of tcp_sink.h: accepts connections, keeps
 * the caps (handshake slots with their deadline, authenticated slots, the
 * per-source cap), polls every connection and closes the stalled ones.
 * What happens on one connection is tcp_sink_conn.c: every connection is
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
#include "tcp_sink_impl.h"

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

#include "tcp_auth.h"
#include "tcp_mac.h"
#include "tcp_proto.h"
#include "base/kvw.h"


uint64_t tcp_sink_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void tcp_sink_event(struct sink *s, const char *what)
{
	if (s->cfg->event)
		s->cfg->event(s->cfg->arg, what);
}

/* An event that names the peer. */
void tcp_sink_cevent(struct sink *s, const struct conn *c, const char *what)
{
	char line[320];

	snprintf(line, sizeof line, "%s (peer %s)", what, c->peer);
	tcp_sink_event(s, line);
}

/* A connection that failed the handshake: refused, told as an event and
 * as an authentication failure. */
void tcp_sink_handshake_failed(struct sink *s, const struct conn *c,
			     const char *what)
{
	s->st->refused++;
	tcp_sink_cevent(s, c, what);
	if (s->cfg->auth_failed)
		s->cfg->auth_failed(s->cfg->arg);
}

/* Per-source connections that finished the handshake. */
uint32_t tcp_sink_from_source(const struct sink *s, const uint8_t src[16])
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->n; i++)
		n += s->c[i].state != C_HELLO &&
		     memcmp(s->c[i].src, src, 16) == 0;
	return n;
}

static void drop(struct sink *s, uint32_t i)
{
	tcp_sink_release(s, &s->c[i]);
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
	tcp_sink_cevent(s, &s->c[old], "connection still in the handshake closed for "
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
				tcp_sink_event(s, "out of memory for a connection");
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
			tcp_sink_event(s, "no randomness for a challenge");
			drop(s, s->n - 1);
			continue;
		}
		le_put(c->ack, TCP_MAGIC_CHALLENGE, 4);
		le_put(c->ack + 4, TCP_VERSION, 2);
		le_put(c->ack + 6, 0, 2);
		memcpy(c->ack + 8, c->nonce, TCP_NONCE_LEN);
		c->ack_len = c->ack_left = TCP_CHALLENGE_LEN;
		if (tcp_sink_flush_ack(c) < 0)
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
		uint64_t now = tcp_sink_now_ns();
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
		now = tcp_sink_now_ns();
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
				keep = tcp_sink_flush_ack(c) < 0 ? -1 : 0;
			if (keep == 0 && !c->ack_left)
				keep = tcp_sink_serve(s, c);
			if (keep < 0)
				drop(s, i);
		}
		/* A peer that never finishes its hello is a slow loris; one
		 * that stops inside a batch is one too, or a link that went
		 * down under it. */
		for (uint32_t i = s->n; i-- > 0;) {
			struct conn *c = &s->c[i];
			int mid = c->state != C_HDR || c->have > 0;

			/* Bytes of a slow payload may wait under its
			 * low-water mark: they are progress, read them
			 * before judging the connection. */
			if (c->state == C_PAYLOAD && !c->ack_left &&
			    c->lowat > 1 && now > c->last_ns + stall) {
				tcp_sink_lowat(c, 1);
				if (tcp_sink_serve(s, c) < 0) {
					drop(s, i);
					continue;
				}
				mid = c->state != C_HDR || c->have > 0;
			}

			if (c->state == C_HELLO && now > c->deadline_ns) {
				tcp_sink_handshake_failed(s, c, "connection without a "
						       "hello in time closed");
				drop(s, i);
			} else if (c->state == C_CLOSING) {
				/* Refused already (and told): a peer that
				 * neither reads its ACK nor hangs up is cut
				 * quietly. */
				if (now > c->last_ns + stall)
					drop(s, i);
			} else if (c->state != C_HELLO && mid && !c->ack_left &&
				   now > c->last_ns + stall) {
				s->st->refused++;
				tcp_sink_cevent(s, c, "connection stalled inside a "
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
