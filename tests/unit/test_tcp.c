/*
 * test_tcp.c - the tcp transport against its sink, over real loopback
 * sockets and real pool files: a worker-shaped client (xport_tcp: connect
 * by descriptor, pipelined batches, one wait) lands every byte where the
 * copy list says and nowhere else; a batch for a room the sink says is not
 * live is discarded (no byte written) and reported, and every batch the
 * sink held for a room is released again; a batch whose body tag is wrong
 * is refused as INTEGRITY and counted; a copy outside the room's granted
 * pages (room_begin says DEST) writes nothing and reaches the writer as
 * KVW_ECORRUPT (the room's reason `integrity`), as does a late batch of a
 * cleared incarnation (discarded, nothing written); a tampering relay -
 * a flipped payload bit, a flipped copy-list bit, swapped destinations,
 * a replayed batch, a dropped batch, a forged ACK - is caught, counted on
 * the side that caught it, and the batches resent on a new connection
 * until every byte is right, never a success with wrong bytes; 1,000
 * idle keyless connections never keep a client with the keys out; a
 * link cut mid-batch (a
 * proxy that breaks) is re-dialled and the unacked batches resent until
 * every byte is in, and a decode gone for good fails them after the
 * resend window; jobs in flight on one connection each hear their own
 * outcome (a refusal, or a loss with the connection, is the job's whose
 * batch earned it); a peer that stops inside a batch is closed; a client that
 * answers the sink's challenge without the group's data key is refused; and
 * hostile peers at
 * the data port - a wrong secret, garbage, a valid header whose copy lies
 * outside the pool, a copy count over the cap, a peer that stops half way
 * through its hello - are each refused and counted while the sink keeps
 * serving a good client afterwards, with no byte outside the copies
 * written.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/kvw.h"
#include "mem/pool.h"
#include "xport/tcp/tcp_auth.h"
#include "xport/tcp/tcp_mac.h"
#include "xport/tcp/tcp_proto.h"
#include "xport/tcp/tcp_sink.h"
#include "xport/tcp/xport_tcp.h"
#include "xport/xport.h"

#define POOL_BYTES (1u << 20)
#define NOT_LIVE_ROOM 666u
#define DEST_ROOM 667u
#define LIVE_INC 4242u  /* the incarnation room_begin takes as current */
#define CLEARED_INC 41u /* an earlier one, cleared: its batches discarded */

/* The group's data key both ends of the fixture hold. */
static const uint8_t GROUP[32] = { 0x5a, 0x01, 0x02, 0x03, 0x04, 0x05 };

struct fx {
	char src_path[96], dst_path[96];
	struct pool *src, *dst;
	struct xport *dx, *px; /* decode side (listens), prefill side */
	uint8_t desc[KVW_MAX_DESC];
	size_t desclen;
	uint32_t src_id, dst_id;
	uint16_t port;
	uint8_t secret[16];
	pthread_t th;
	struct tcp_sink_cfg cfg;
	struct tcp_sink_stats st;
	char err[256];
};

static atomic_int stop_flag;
static int stop_now(void) { return atomic_load(&stop_flag); }

static atomic_int held; /* rooms held by the sink, not yet ended */

/* A test room table: NOT_LIVE_ROOM is not live, DEST_ROOM's pages are
 * elsewhere, and a batch of CLEARED_INC is of an incarnation gone. */
static int begin(void *arg, uint32_t slot, uint64_t room, uint64_t inc,
		 const uint8_t *copies, uint32_t ncopies)
{
	(void)arg;
	assert_true(slot < 1024);
	assert_non_null(copies);
	assert_true(ncopies > 0);
	if (room == NOT_LIVE_ROOM || inc == CLEARED_INC)
		return TCP_ROOM_NOT_LIVE;
	if (room == DEST_ROOM)
		return TCP_ROOM_DEST;
	atomic_fetch_add(&held, 1);
	return TCP_ROOM_OK;
}

static void end(void *arg, uint32_t slot)
{
	(void)arg;
	(void)slot;
	atomic_fetch_sub(&held, 1);
}

/* The sink's events (what kv-receiver logs), all of them in order. */
static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static char ev_text[8192];

/* Rooms of the batches discarded as not live (the stale hook). */
static _Atomic uint32_t nstale;
static _Atomic uint64_t stale_room;

static void on_stale(void *arg, uint64_t room)
{
	(void)arg;
	atomic_store(&stale_room, room);
	atomic_fetch_add(&nstale, 1);
}

static void on_event(void *arg, const char *what)
{
	(void)arg;
	pthread_mutex_lock(&ev_lock);
	if (strlen(ev_text) + strlen(what) + 2 < sizeof ev_text) {
		strcat(ev_text, what);
		strcat(ev_text, "\n");
	}
	pthread_mutex_unlock(&ev_lock);
}

/* 1 when an event so far contains both a and b on one line. */
static int told(const char *a, const char *b)
{
	int yes = 0;

	pthread_mutex_lock(&ev_lock);
	for (char *l = ev_text; l && *l && !yes; l = strchr(l, '\n')) {
		char line[512], *e;

		l += *l == '\n';
		e = strchr(l, '\n');
		snprintf(line, sizeof line, "%.*s", e ? (int)(e - l) : (int)strlen(l), l);
		yes = strstr(line, a) && strstr(line, b);
	}
	pthread_mutex_unlock(&ev_lock);
	return yes;
}

static void *sink_main(void *arg)
{
	struct fx *f = arg;
	char err[128];

	(void)tcp_sink_run(&f->cfg, &f->st, err, sizeof err);
	return NULL;
}

static int setup(void **state)
{
	static unsigned n;
	struct fx *f = test_calloc(1, sizeof *f);
	uint8_t *s;
	int lfd;

	snprintf(f->src_path, sizeof f->src_path,
		 "/dev/shm/kvwire.ttcp-src-%d-%u.pool", (int)getpid(), n);
	snprintf(f->dst_path, sizeof f->dst_path,
		 "/dev/shm/kvwire.ttcp-dst-%d-%u.pool", (int)getpid(), n++);
	if (pool_create(f->src_path, POOL_BYTES, &f->src, f->err, sizeof f->err) ||
	    pool_create(f->dst_path, POOL_BYTES, &f->dst, f->err, sizeof f->err))
		return -1;
	s = pool_base(f->src);
	for (uint32_t i = 0; i < POOL_BYTES; i++)
		s[i] = (uint8_t)(i * 131u + 7u);
	if (xport_open(xport_find("tcp"), &f->dx, f->err, sizeof f->err) ||
	    xport_tcp_listen(f->dx, "127.0.0.1:0", f->err, sizeof f->err) ||
	    xport_register(f->dx, f->dst, &f->dst_id, f->desc, sizeof f->desc,
			   &f->desclen, f->err, sizeof f->err) ||
	    xport_tcp_sink_info(f->dx, &lfd, f->secret))
		return -1;
	f->port = (uint16_t)le_get(f->desc + 6, 2);
	f->cfg = (struct tcp_sink_cfg){ .listen_fd = lfd,
		.base = pool_base(f->dst), .size = POOL_BYTES,
		.secret = f->secret, .group_key = GROUP, .room_begin = begin,
		.room_end = end, .stop = stop_now, .event = on_event,
		.stale = on_stale, .handshake_ms = 300, .stall_ms = 300 };
	atomic_store(&stop_flag, 0);
	atomic_store(&held, 0);
	atomic_store(&nstale, 0);
	atomic_store(&stale_room, 0);
	ev_text[0] = '\0';
	if (pthread_create(&f->th, NULL, sink_main, f))
		return -1;
	if (xport_open(xport_find("tcp"), &f->px, f->err, sizeof f->err) ||
	    xport_tcp_set_group_key(f->px, GROUP) ||
	    xport_register(f->px, f->src, &f->src_id, (uint8_t[KVW_MAX_DESC]){ 0 },
			   KVW_MAX_DESC, &(size_t){ 0 }, f->err, sizeof f->err))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	atomic_store(&stop_flag, 1);
	pthread_join(f->th, NULL);
	/* Every batch the sink held it ended: acked or dropped. */
	assert_int_equal(atomic_load(&held), 0);
	xport_close(&f->px);
	xport_close(&f->dx);
	pool_close(&f->src);
	pool_close(&f->dst);
	pool_unlink(f->src_path);
	pool_unlink(f->dst_path);
	test_free(f);
	return 0;
}

/* Connected TCP sockets of this process whose local port is the sink's
 * (the sink runs on a thread here, so its accepted sockets are ours); of
 * those, how many have TCP_NODELAY into *nodelay, and the largest
 * SO_RCVLOWAT into *lowat. */
static int sink_sockets(const struct fx *f, int *nodelay, int *lowat)
{
	int n = 0;

	*nodelay = 0;
	*lowat = 0;
	for (int fd = 3; fd < 1024; fd++) {
		struct sockaddr_in me, peer;
		socklen_t ml = sizeof me, pl = sizeof peer, ol = sizeof(int);
		int type = 0, on = 0, lw = 0;

		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &ol) != 0 ||
		    type != SOCK_STREAM ||
		    getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
		    me.sin_family != AF_INET || ntohs(me.sin_port) != f->port ||
		    getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
			continue;
		n++;
		ol = sizeof on;
		if (getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &ol) == 0 && on)
			(*nodelay)++;
		ol = sizeof lw;
		if (getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lw, &ol) == 0 &&
		    lw > *lowat)
			*lowat = lw;
	}
	return n;
}

/* Bytes of dst that differ from zero outside [lo, hi) of every copy. */
static void assert_only(const struct fx *f, const struct xport_copy *c,
			size_t n)
{
	const uint8_t *d = pool_base(f->dst), *s = pool_base(f->src);

	for (uint32_t off = 0; off < POOL_BYTES; off++) {
		int in = 0;

		for (size_t i = 0; i < n && !in; i++)
			if (off >= c[i].dst_off && off < c[i].dst_off + c[i].len) {
				in = 1;
				assert_int_equal(d[off],
						 s[c[i].src_off + off - c[i].dst_off]);
			}
		if (!in && d[off] != 0)
			fail_msg("byte %u written outside the copies", off);
	}
}

static void test_pipelined_batches_land_exactly_where_the_copies_say(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[3 * 64];
	uint32_t rid;
	size_t n = 0;

	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &rid,
				       f->err, sizeof f->err), 0);
	/* Three batches of 64 scattered 1 KiB copies, sent before one wait. */
	for (uint32_t b = 0; b < 3; b++) {
		for (uint32_t i = 0; i < 64; i++, n++)
			c[n] = (struct xport_copy){ .src_off = 4096u * n + 17,
				.dst_off = 4096u * n + 2000, .len = 1024,
				.src = f->src_id, .dst = rid };
		xport_set_room(f->px, 7);
		assert_int_equal(xport_write_batch(f->px, c + 64 * b, 64, f->err,
						   sizeof f->err), 0);
	}
	assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), 0);
	assert_only(f, c, n);
	assert_true(f->st.batches == 3);
	assert_true(f->st.bytes == 3 * 64 * 1024);
	/* The same descriptor again is the same remote. */
	uint32_t again;
	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &again,
				       f->err, sizeof f->err), 0);
	assert_int_equal(again, rid);
}

/* The sink answers each batch with a 16-byte ACK. Under Nagle an ACK
 * written while the previous one is unacknowledged waits for the
 * writer's delayed ACK (40 ms) unless the writer sends something first:
 * with a room's batches split over several decode ranks (TP 1 -> 2) that
 * held every room 40 ms, 22 rooms/s where 1,000 went. */
static void test_the_sinks_connections_send_acks_without_delay(void **state)
{
	struct fx *f = *state;
	struct xport_copy c = { .src_off = 0, .dst_off = 0, .len = 4096,
				.src = f->src_id };
	int nodelay = 0, lowat;

	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &c.dst,
				       f->err, sizeof f->err), 0);
	xport_set_room(f->px, 7);
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err,
					   sizeof f->err), 0);
	/* Acked: the sink has accepted the connection by now. */
	assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), 0);
	assert_int_equal(sink_sockets(f, &nodelay, &lowat), 1);
	assert_int_equal(nodelay, 1);
}

static void test_a_batch_for_a_room_not_live_is_discarded(void **state)
{
	struct fx *f = *state;
	struct xport_copy c = { .src_off = 0, .dst_off = 0, .len = 65536,
				.src = f->src_id };
	uint32_t rid;

	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &rid,
				       f->err, sizeof f->err), 0);
	c.dst = rid;
	xport_set_room(f->px, NOT_LIVE_ROOM);
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err, sizeof f->err), 0);
	assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), KVW_ENOENT);
	assert_non_null(strstr(f->err, "not live"));
	assert_only(f, &c, 0); /* nothing written */
	assert_true(f->st.not_live == 1);
	/* A late batch, not a refusal of anything malformed: told to the
	 * stale hook with its room (kv-receiver counts it as stale), not as
	 * an event (which kv-receiver counts as malformed and warns of). */
	assert_int_equal(atomic_load(&nstale), 1);
	assert_true(atomic_load(&stale_room) == NOT_LIVE_ROOM);
	pthread_mutex_lock(&ev_lock);
	assert_null(strstr(ev_text, "not live"));
	pthread_mutex_unlock(&ev_lock);
	/* The connection stays usable for a live room. */
	xport_set_room(f->px, 8);
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err, sizeof f->err), 0);
	assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), 0);
	assert_only(f, &c, 1);
}

static void test_copies_outside_either_side_are_refused_before_sending(void **state)
{
	struct fx *f = *state;
	struct xport_copy c = { .src_off = POOL_BYTES - 10, .dst_off = 0,
				.len = 11, .src = f->src_id };
	uint32_t rid;

	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &rid,
				       f->err, sizeof f->err), 0);
	c.dst = rid;
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err, sizeof f->err),
			 KVW_ERANGE);
	c = (struct xport_copy){ .src_off = 0, .dst_off = UINT64_MAX - 4,
				 .len = 10, .src = f->src_id, .dst = rid };
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err, sizeof f->err),
			 KVW_ERANGE);
	assert_true(f->st.bad == 0); /* nothing reached the sink */
}

static uint8_t nonce[TCP_NONCE_LEN]; /* the last challenge dial read */

/* A raw v4 client's keys and sequence numbers (one connection at a time). */
static struct tcp_mac raw_out, raw_in;
static uint64_t raw_seq;
static uint64_t raw_flags; /* the header's flags and reserved word */
static uint64_t raw_part;  /* nonzero: raw_batch sends this many payload
			    * bytes (once raw_ready says so) and no tag */
static int (*raw_ready)(void); /* raw_part's bytes wait for it to say 1 */

/* A raw connection to the sink, its challenge read (into nonce). */
static int dial(const struct fx *f)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(f->port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
	{
		uint8_t ch[TCP_CHALLENGE_LEN];
		ssize_t k = recv(fd, ch, sizeof ch, MSG_WAITALL);

		assert_int_equal(k, (ssize_t)sizeof ch);
		assert_int_equal(le_get(ch, 4), TCP_MAGIC_CHALLENGE);
		memcpy(nonce, ch + 8, TCP_NONCE_LEN);
	}
	return fd;
}

/* Reads until EOF (the sink closed) or n bytes; returns bytes read. */
static size_t read_some(int fd, uint8_t *buf, size_t n)
{
	struct timeval tv = { 5, 0 };
	size_t have = 0;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	while (have < n) {
		ssize_t k = recv(fd, buf + have, n - have, 0);

		if (k <= 0)
			break;
		have += (size_t)k;
	}
	return have;
}

/* Answers the challenge as a v4 client with the group's key; 1 when
 * welcomed (the raw client's keys then set up). */
static int hello_ok(const struct fx *f, int fd, const uint8_t *secret)
{
	uint8_t h[TCP_HELLO_LEN] = { 0 }, w[TCP_WELCOME_LEN], c2s[32], s2c[32];
	const uint8_t *sec = secret ? secret : f->secret;

	le_put(h, TCP_MAGIC_HELLO, 4);
	le_put(h + 4, TCP_VERSION, 2);
	memset(h + 8, 0x3c, TCP_NONCE_LEN);
	tcp_auth_fingerprint(GROUP, h + 24);
	tcp_auth_hello(GROUP, sec, nonce, h + 8, 0, h + 32);
	assert_int_equal(send(fd, h, sizeof h, 0), (ssize_t)sizeof h);
	if (read_some(fd, w, sizeof w) != sizeof w || le_get(w + 4, 4) != TCP_OK)
		return 0;
	tcp_auth_keys(GROUP, sec, nonce, h + 8, 0, c2s, s2c);
	tcp_mac_free(&raw_out);
	tcp_mac_free(&raw_in);
	assert_int_equal(tcp_mac_init(&raw_out, c2s, 1), 0);
	assert_int_equal(tcp_mac_init(&raw_in, s2c, 0), 0);
	raw_seq = 0;
	return 1;
}

/* Sends a batch header, copy list and head tag (right, or one bit wrong
 * with bad_head) for room 8 of LIVE_INC, then the payload and a body tag
 * (one bit wrong with bad_body) unless pay is NULL; returns the ACK's
 * status (its tag checked), or -1 when the sink closed without one. */
static int raw_batch(int fd, uint32_t ncopies, uint64_t total,
		     const uint8_t *copies, size_t copylen, const uint8_t *pay,
		     int bad_head, int bad_body)
{
	uint8_t h[TCP_BATCH_LEN] = { 0 }, a[TCP_ACK_LEN], tag[TCP_TAG_LEN];
	uint8_t btag[TCP_TAG_LEN];
	uint64_t seq = raw_seq++;

	le_put(h, TCP_MAGIC_BATCH, 4);
	le_put(h + 4, ncopies, 4);
	le_put(h + 8, 42, 8);
	le_put(h + 16, 8, 8);
	le_put(h + 24, LIVE_INC, 8);
	le_put(h + 32, total, 8);
	le_put(h + 40, seq, 8);
	le_put(h + 48, raw_flags, 8);
	tcp_mac_begin(&raw_out, seq, TCP_TAG_HEAD);
	tcp_mac_add(&raw_out, h, sizeof h);
	tcp_mac_add(&raw_out, copies, copylen);
	tcp_mac_final(&raw_out, tag);
	tag[5] ^= (uint8_t)(bad_head ? 1 : 0);
	assert_int_equal(send(fd, h, sizeof h, MSG_NOSIGNAL), (ssize_t)sizeof h);
	if (copylen)
		(void)send(fd, copies, copylen, MSG_NOSIGNAL);
	(void)send(fd, tag, sizeof tag, MSG_NOSIGNAL);
	if (pay && raw_part) {
		for (int i = 0; raw_ready && !raw_ready(); i++) {
			assert_true(i < 10000); /* 10 s */
			poll(NULL, 0, 1);
		}
		(void)send(fd, pay, (size_t)raw_part, MSG_NOSIGNAL);
	} else if (pay) {
		tcp_mac_begin(&raw_out, seq, TCP_TAG_BODY);
		tcp_mac_add(&raw_out, tag, sizeof tag);
		tcp_mac_add(&raw_out, pay, (size_t)total);
		tcp_mac_final(&raw_out, btag);
		btag[0] ^= (uint8_t)(bad_body ? 0x80 : 0);
		(void)send(fd, pay, (size_t)total, MSG_NOSIGNAL);
		(void)send(fd, btag, sizeof btag, MSG_NOSIGNAL);
	}
	if (read_some(fd, a, sizeof a) != sizeof a)
		return -1;
	tcp_mac_begin(&raw_in, le_get(a + 16, 8), TCP_TAG_ACK);
	tcp_mac_add(&raw_in, a, TCP_ACK_SIGNED);
	assert_true(tcp_mac_check(&raw_in, a + TCP_ACK_SIGNED));
	return (int)le_get(a + 4, 4);
}

static void test_a_batch_whose_body_tag_is_wrong_is_refused_as_integrity(void **state)
{
	struct fx *f = *state;
	uint8_t cp[TCP_COPY_LEN], pay[16];
	int fd = dial(f);

	assert_true(hello_ok(f, fd, NULL));
	memset(pay, 0x77, sizeof pay);
	le_put(cp, 4096, 8);
	le_put(cp + 8, sizeof pay, 8);
	assert_int_equal(raw_batch(fd, 1, sizeof pay, cp, sizeof cp, pay, 0, 1),
			 TCP_INTEGRITY);
	assert_true(f->st.integrity == 1);
	assert_true(f->st.batches == 0);
	close(fd);
	/* The right tags on a new connection: landed and acked OK. */
	fd = dial(f);
	assert_true(hello_ok(f, fd, NULL));
	assert_int_equal(raw_batch(fd, 1, sizeof pay, cp, sizeof cp, pay, 0, 0),
			 TCP_OK);
	assert_true(f->st.batches == 1);
	assert_int_equal(((uint8_t *)pool_base(f->dst))[4096], 0x77);
	close(fd);
}

static void test_a_batch_whose_head_tag_is_wrong_writes_nothing(void **state)
{
	struct fx *f = *state;
	uint8_t cp[TCP_COPY_LEN], pay[16];
	int fd = dial(f);

	assert_true(hello_ok(f, fd, NULL));
	memset(pay, 0x77, sizeof pay);
	le_put(cp, 4096, 8);
	le_put(cp + 8, sizeof pay, 8);
	/* The sink refuses at the head tag, then reads and drops our
	 * payload until we hang up (a FIN behind its ACK, never a RST that
	 * could destroy the ACK): the answer always arrives. */
	assert_int_equal(raw_batch(fd, 1, sizeof pay, cp, sizeof cp, pay, 1, 0),
			 TCP_INTEGRITY);
	assert_true(f->st.integrity == 1);
	assert_only(f, NULL, 0);
	close(fd);
}

/* Batch flags or the reserved word set, under a right head tag: a keyed
 * peer speaking something newer. Refused BAD before a byte is written;
 * the same batch without them lands. */
static void test_a_batch_with_unknown_flags_is_refused_and_writes_nothing(void **state)
{
	struct fx *f = *state;
	uint8_t cp[TCP_COPY_LEN], pay[16];
	int fd = dial(f);

	assert_true(hello_ok(f, fd, NULL));
	memset(pay, 0x5a, sizeof pay);
	le_put(cp, 4096, 8);
	le_put(cp + 8, sizeof pay, 8);
	for (int bit = 0; bit < 64; bit += 32) {
		raw_flags = 1ull << bit;
		assert_int_equal(raw_batch(fd, 1, sizeof pay, cp, sizeof cp,
					   pay, 0, 0), TCP_BAD);
		raw_flags = 0;
		close(fd);
		assert_only(f, NULL, 0);
		fd = dial(f);
		assert_true(hello_ok(f, fd, NULL));
	}
	assert_true(f->st.bad == 2 && f->st.integrity == 0);
	assert_int_equal(raw_batch(fd, 1, sizeof pay, cp, sizeof cp, pay, 0, 0),
			 TCP_OK);
	assert_int_equal(((uint8_t *)pool_base(f->dst))[4096], 0x5a);
	close(fd);
}

/* A copy outside the pages the decode granted the room (the hook says
 * DEST): nothing written, and the writer hears KVW_ECORRUPT (integrity). */
static void test_a_copy_outside_the_rooms_pages_fails_with_integrity(void **state)
{
	struct fx *f = *state;
	struct xport_copy c = { .len = 4096, .src = f->src_id };

	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &c.dst,
				       f->err, sizeof f->err), 0);
	xport_set_room(f->px, DEST_ROOM);
	xport_tcp_set_incarnation(f->px, LIVE_INC);
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err, sizeof f->err), 0);
	assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), KVW_ECORRUPT);
	assert_non_null(strstr(f->err, "integrity"));
	assert_true(f->st.dest == 1);
	assert_only(f, &c, 0);
}

/* A late batch of a cleared incarnation of a live room id: discarded,
 * nothing written, the writer told the room is not live. */
static void test_a_late_batch_of_a_cleared_incarnation_writes_nothing(void **state)
{
	struct fx *f = *state;
	struct xport_copy c = { .len = 65536, .src = f->src_id };

	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &c.dst,
				       f->err, sizeof f->err), 0);
	xport_set_room(f->px, 8);
	xport_tcp_set_incarnation(f->px, CLEARED_INC);
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err, sizeof f->err), 0);
	assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), KVW_ENOENT);
	assert_only(f, &c, 0);
	assert_true(f->st.not_live == 1);
	xport_tcp_set_incarnation(f->px, LIVE_INC);
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err, sizeof f->err), 0);
	assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), 0);
	assert_only(f, &c, 1);
}

/* A link that can break: it forwards one connection at a time from its own
 * port to the sink's; after cut_after bytes from the client (>= 0) it
 * closes both ends once, as a link that went down mid-batch; with
 * refuse set it closes its port, as a decode host that is gone. */
enum tamper { T_NONE, T_FLIP, T_SWAP, T_REPLAY, T_DROP, T_ACK };

/* On the first connection only, a tamperer on the path (no keys): T_FLIP
 * flips bit 0 of client byte `at`; T_SWAP swaps the 8 bytes at `at` and
 * at `at2` (two copies' destinations); T_REPLAY sends client bytes
 * [first, first + len) again once byte first + len has gone; T_DROP
 * drops client bytes [first, first + len); T_ACK rewrites sink byte `at`
 * to 0 (an ACK's status to OK). */
struct proxy {
	int lfd;
	uint16_t port, to;
	atomic_long cut_after;
	atomic_int accepts, refuse, stop;
	int mode;
	int always;             /* tamper on every connection, not the first */
	long at, at2, first, len;
	uint8_t saved[1 << 18]; /* T_REPLAY: the batch kept to replay */
	const uint8_t *needle;  /* 32 source bytes to look for on the wire */
	atomic_long found;      /* times seen, client to sink */
	pthread_t th;
};

/* Forwards what one recv gives, tampered as p says (dir 0 client to sink,
 * 1 back); *count is the direction's bytes so far. 0 forwarded, 1 that
 * side's EOF, -1 an error. */
static int pump(struct proxy *p, int dir, int from, int to, long *count)
{
	static uint8_t buf[16384]; /* small: a cut lands inside a batch */
	ssize_t k = recv(from, buf, sizeof buf, 0);
	long o = *count, n = k, skip = 0;
	int on = p->always || atomic_load(&p->accepts) == 1;

	if (k == 0)
		return 1;
	if (k < 0)
		return -1;
	for (const uint8_t *h = buf; dir == 0 && p->needle &&
	     (h = memmem(h, (size_t)(buf + k - h), p->needle, 32)); h++)
		atomic_fetch_add(&p->found, 1);
	for (long i = 0; on && dir == 0 && i < k; i++) {
		long pos = o + i;

		if (p->mode == T_FLIP && pos == p->at)
			buf[i] ^= 1;
		if (p->mode == T_SWAP && pos >= p->at && pos < p->at + 8) {
			uint8_t t = buf[i];

			buf[i] = buf[i + (p->at2 - p->at)];
			buf[i + (p->at2 - p->at)] = t;
		}
		if (p->mode == T_REPLAY && pos >= p->first &&
		    pos < p->first + p->len)
			p->saved[pos - p->first] = buf[i];
	}
	if (on && dir == 1 && p->mode == T_ACK && p->at >= o && p->at < o + k)
		buf[p->at - o] = 0;
	if (on && dir == 0 && p->mode == T_DROP) {
		/* Whole recvs are cut at the batch's edges: send around it. */
		long a = p->first - o, b = p->first + p->len - o;

		a = a < 0 ? 0 : a > n ? n : a;
		b = b < 0 ? 0 : b > n ? n : b;
		if (a > 0 && send(to, buf, (size_t)a, MSG_NOSIGNAL) != a)
			return -1;
		skip = b;
		n = n - b;
		if (n > 0 && send(to, buf + skip, (size_t)n, MSG_NOSIGNAL) != n)
			return -1;
		*count += k;
		return 0;
	}
	if (on && dir == 0 && p->mode == T_REPLAY && o < p->first + p->len &&
	    o + k >= p->first + p->len) {
		/* The copy goes right behind the batch it copies. */
		long cut = p->first + p->len - o;

		if (send(to, buf, (size_t)cut, MSG_NOSIGNAL) != cut ||
		    send(to, p->saved, (size_t)p->len, MSG_NOSIGNAL) != p->len)
			return -1;
		skip = cut;
		n -= cut;
	}
	if (n > 0 && send(to, buf + skip, (size_t)n, MSG_NOSIGNAL) != n)
		return -1;
	*count += k;
	return 0;
}

static void *proxy_main(void *arg)
{
	struct proxy *p = arg;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(p->to) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	while (!atomic_load(&p->stop)) {
		struct pollfd l = { p->lfd, POLLIN, 0 };
		long sent = 0, back = 0;
		int cfd, sfd;

		if (atomic_load(&p->refuse)) {
			if (p->lfd >= 0)
				close(p->lfd);
			p->lfd = -1;
			poll(NULL, 0, 20);
			continue;
		}
		if (poll(&l, 1, 20) != 1 || (cfd = accept(p->lfd, NULL, NULL)) < 0)
			continue;
		atomic_fetch_add(&p->accepts, 1);
		sfd = socket(AF_INET, SOCK_STREAM, 0);
		/* A half-close goes on as one (as a router's would): the
		 * sink shuts its side after a refusal and reads on. */
		if (connect(sfd, (struct sockaddr *)&a, sizeof a) == 0)
			for (int open[2] = { 1, 1 }; open[0] || open[1];) {
				struct pollfd pf[2] = {
					{ open[0] ? cfd : -1, POLLIN, 0 },
					{ open[1] ? sfd : -1, POLLIN, 0 } };
				long cut = atomic_load(&p->cut_after);
				int r = 0;

				if (atomic_load(&p->stop) || poll(pf, 2, 20) < 0)
					break;
				for (int d = 0; d < 2 && r >= 0; d++) {
					if (!pf[d].revents)
						continue;
					r = d ? pump(p, 1, sfd, cfd, &back)
					      : pump(p, 0, cfd, sfd, &sent);
					if (r == 1) {
						(void)shutdown(d ? cfd : sfd,
							       SHUT_WR);
						open[d] = 0;
					}
				}
				if (r < 0)
					break;
				if (cut >= 0 && sent >= cut) {
					atomic_store(&p->cut_after, -1);
					break;
				}
			}
		close(sfd);
		close(cfd);
	}
	if (p->lfd >= 0)
		close(p->lfd);
	return NULL;
}

/* A proxy to the fixture's sink, not started; *desc becomes the
 * fixture's descriptor naming the proxy's port. */
static void proxy_prepare(struct fx *f, struct proxy *p, uint8_t *desc)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof a;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	memset(p, 0, sizeof *p);
	p->to = f->port;
	p->cut_after = -1;
	p->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(p->lfd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(p->lfd, 8), 0);
	assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&a, &al), 0);
	p->port = ntohs(a.sin_port);
	memcpy(desc, f->desc, f->desclen);
	le_put(desc + 6, p->port, 2);
}

/* Prepares and starts one (its tampering set before the thread runs). */
static void proxy_start(struct fx *f, struct proxy *p, uint8_t *desc)
{
	proxy_prepare(f, p, desc);
	assert_int_equal(pthread_create(&p->th, NULL, proxy_main, p), 0);
}

static void proxy_stop(struct proxy *p)
{
	atomic_store(&p->stop, 1);
	pthread_join(p->th, NULL);
}

static long seen_on_wire; /* source patterns the last proxy saw */

/* The tampering tests' traffic: 4 batches of 2 copies of 8 KiB, the
 * copies' destinations reversed against their sources. */
#define T_COPY 8192u
#define T_BATCH (TCP_BATCH_LEN + 2 * TCP_COPY_LEN + 2 * TCP_TAG_LEN + 2 * T_COPY)
#define T_PAYLOAD0 (TCP_HELLO_LEN + TCP_BATCH_LEN + 2 * TCP_COPY_LEN + TCP_TAG_LEN)

/* Runs the traffic through a proxy that tampers once as mode says, for
 * room: what the wait said. Every tamperer here is caught and the
 * batches resent on a new connection, so the bytes must be right. */
static int always_tamper; /* the next tampered_run tampers every time */

static int tampered_run(struct fx *f, int mode, long at, long at2,
			long first, long len, uint64_t room,
			struct xport_copy *c)
{
	uint8_t desc[KVW_MAX_DESC];
	static struct proxy p;
	uint32_t rid;
	int rc;

	proxy_prepare(f, &p, desc);
	p.needle = (const uint8_t *)pool_base(f->src) + 3;
	p.mode = mode;
	p.at = at;
	p.at2 = at2;
	p.first = first;
	p.len = len;
	p.always = always_tamper;
	assert_int_equal(pthread_create(&p.th, NULL, proxy_main, &p), 0);
	assert_int_equal(xport_connect(f->px, desc, f->desclen, &rid, f->err,
				       sizeof f->err), 0);
	for (uint32_t i = 0; i < 8; i++)
		c[i] = (struct xport_copy){ .src_off = i * T_COPY + 3,
			.dst_off = (7 - i) * T_COPY, .len = T_COPY,
			.src = f->src_id, .dst = rid };
	xport_set_room(f->px, room);
	xport_tcp_set_incarnation(f->px, LIVE_INC);
	for (uint32_t b = 0; b < 4; b++)
		assert_int_equal(xport_write_batch(f->px, c + 2 * b, 2, f->err,
						   sizeof f->err), 0);
	rc = xport_wait(f->px, -1, f->err, sizeof f->err);
	assert_true(atomic_load(&p.accepts) >= 2); /* re-dialled */
	seen_on_wire = atomic_load(&p.found);
	xport_disconnect(f->px, rid);
	proxy_stop(&p);
	return rc;
}

/* Caught at the sink: counted there, re-dialled and resent by the
 * client, every byte right in the end. */
static void assert_caught_at_sink(struct fx *f, int rc, struct xport_copy *c)
{
	uint64_t redials, resent, integrity;

	assert_int_equal(rc, 0);
	assert_only(f, c, 8);
	assert_true(f->st.integrity >= 1);
	xport_tcp_counts(f->px, &redials, &resent, &integrity);
	assert_true(redials >= 1);
	assert_true(resent >= 1);
}

static void test_a_flipped_payload_bit_is_caught_and_resent(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[8];

	assert_caught_at_sink(f, tampered_run(f, T_FLIP, T_PAYLOAD0 + 100, 0, 0,
					      0, 8, c), c);
	assert_true(seen_on_wire > 0); /* in clear without --encrypt */
}

static void test_a_flipped_copy_list_bit_is_caught_and_resent(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[8];

	assert_caught_at_sink(f, tampered_run(f, T_FLIP, TCP_HELLO_LEN +
					      TCP_BATCH_LEN + 1, 0, 0, 0, 8, c),
			      c);
}

static void test_swapped_destinations_are_caught_and_resent(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[8];
	long at = TCP_HELLO_LEN + TCP_BATCH_LEN;

	assert_caught_at_sink(f, tampered_run(f, T_SWAP, at, at + TCP_COPY_LEN,
					      0, 0, 8, c), c);
}

static void test_a_replayed_batch_is_caught_and_resent(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[8];

	assert_caught_at_sink(f, tampered_run(f, T_REPLAY, 0, 0, TCP_HELLO_LEN,
					      T_BATCH, 8, c), c);
}

static void test_a_dropped_batch_is_caught_and_resent(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[8];

	assert_caught_at_sink(f, tampered_run(f, T_DROP, 0, 0, TCP_HELLO_LEN +
					      T_BATCH, T_BATCH, 8, c), c);
}

/* A tamperer on every connection: the batch fails its integrity check
 * on 3 connections and the room fails with `integrity` (KVW_ECORRUPT),
 * never a success. */
static void test_a_batch_that_keeps_failing_integrity_fails_its_room(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[8];
	int rc;

	always_tamper = 1;
	rc = tampered_run(f, T_FLIP, T_PAYLOAD0 + 100, 0, 0, 0, 8, c);
	always_tamper = 0;
	assert_int_equal(rc, KVW_ECORRUPT);
	assert_non_null(strstr(f->err, "integrity"));
	assert_true(f->st.integrity >= 3);
}

/* The sink says NOT_LIVE; the relay makes the first ACK say OK. The
 * client must not take it: counted, re-dialled, and the true answer
 * heard on the new connection. */
static void test_a_forged_ack_ok_is_never_believed(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[8];
	uint64_t redials, resent, integrity;
	int rc = tampered_run(f, T_ACK, TCP_CHALLENGE_LEN + TCP_WELCOME_LEN + 4,
			      0, 0, 0, NOT_LIVE_ROOM, c);

	assert_int_equal(rc, KVW_ENOENT);
	assert_only(f, c, 0);
	xport_tcp_counts(f->px, &redials, &resent, &integrity);
	assert_true(integrity >= 1);
	assert_true(redials >= 1);
	assert_true(f->st.batches == 0);
}

/* --encrypt: the payload travels as AES-256-GCM ciphertext (a relay
 * that looks for the source bytes on the wire finds none), lands
 * decrypted, and a flipped ciphertext bit is caught and resent. */
static void test_encrypted_batches_land_right_and_tampering_is_caught(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[8];

	assert_int_equal(xport_tcp_set_encrypt(f->px, 1), 0);
	assert_caught_at_sink(f, tampered_run(f, T_FLIP, T_PAYLOAD0 + 100, 0, 0,
					      0, 8, c), c);
	assert_int_equal(seen_on_wire, 0);
}

/* 1,000 connections that never say hello (no keys) hold no slot a peer
 * with the keys needs: the oldest make way for the newest. */
static void test_a_thousand_idle_keyless_connections_never_keep_a_client_out(void **state)
{
	struct fx *f = *state;
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(f->port) };
	struct xport_copy c = { .len = 65536, .src = f->src_id };
	static int idle[1000];

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (int i = 0; i < 1000; i++) {
		idle[i] = socket(AF_INET, SOCK_STREAM, 0);
		assert_true(idle[i] >= 0);
		assert_int_equal(connect(idle[i], (struct sockaddr *)&a, sizeof a),
				 0);
	}
	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &c.dst,
				       f->err, sizeof f->err), 0);
	xport_set_room(f->px, 8);
	xport_tcp_set_incarnation(f->px, LIVE_INC);
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err, sizeof f->err), 0);
	assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), 0);
	assert_only(f, &c, 1);
	assert_true(f->st.evicted > 0);
	for (int i = 0; i < 1000; i++)
		close(idle[i]);
}

static void test_a_link_broken_mid_batch_is_redialled_and_unacked_batches_resent(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[32];
	uint8_t desc[KVW_MAX_DESC];
	static struct proxy p;
	uint32_t rid;

	proxy_start(f, &p, desc);
	assert_int_equal(xport_connect(f->px, desc, f->desclen, &rid, f->err,
				       sizeof f->err), 0);
	/* 8 batches of 4 copies of 16 KiB; the link breaks inside batch 3. */
	for (uint32_t i = 0; i < 32; i++)
		c[i] = (struct xport_copy){ .src_off = i * 16384u,
			.dst_off = (31 - i) * 16384u, .len = 16384,
			.src = f->src_id, .dst = rid };
	atomic_store(&p.cut_after, TCP_HELLO_LEN + 2L * (TCP_BATCH_LEN + 4 * 16 +
				  32 + 4 * 16384) + 5000);
	xport_set_room(f->px, 8);
	for (uint32_t b = 0; b < 8; b++)
		assert_int_equal(xport_write_batch(f->px, c + 4 * b, 4, f->err,
						   sizeof f->err), 0);
	assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), 0);
	assert_only(f, c, 32);
	assert_true(atomic_load(&p.accepts) >= 2); /* it was re-dialled */
	xport_disconnect(f->px, rid);
	proxy_stop(&p);
}

/* Connects through a proxy with a 300 ms resend window, then makes the
 * decode gone for good: the link breaks after 100 bytes and no dial gets
 * through again. The remote's id. */
static uint32_t connect_then_lose(struct fx *f, struct proxy *p, uint8_t *desc)
{
	uint32_t rid;

	setenv("KVW_TCP_RESEND_MS", "300", 1);
	proxy_start(f, p, desc);
	assert_int_equal(xport_connect(f->px, desc, f->desclen, &rid, f->err,
				       sizeof f->err), 0);
	unsetenv("KVW_TCP_RESEND_MS");
	atomic_store(&p->refuse, 1);
	atomic_store(&p->cut_after, 100);
	return rid;
}

static void test_a_decode_gone_for_good_fails_the_batches_after_the_resend_window(void **state)
{
	struct fx *f = *state;
	struct xport_copy c = { .len = 65536, .src = f->src_id };
	uint8_t desc[KVW_MAX_DESC];
	static struct proxy p;
	uint32_t rid;

	rid = connect_then_lose(f, &p, desc);
	c.dst = rid;
	xport_set_room(f->px, 8);
	/* The send may still fit in the socket buffers (then the wait meets
	 * the cut) or meet the cut itself (its digest goes in a write of its
	 * own, after the payload): either way the batch fails, once the
	 * resend window is spent. */
	if (xport_write_batch(f->px, &c, 1, f->err, sizeof f->err) == 0)
		assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err),
				 KVW_ESYS);
	else
		assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), 0);
	assert_non_null(strstr(f->err, "not mended within 300 ms"));
	assert_true(f->st.batches == 0); /* nothing was acked as landed */
	xport_disconnect(f->px, rid);
	proxy_stop(&p);
}

/* A worker keeps several jobs in flight on one connection and learns
 * each one's outcome from the marks around its batches: a refusal is the
 * job's that earned it, not the one waited for first. */
static void test_jobs_in_flight_on_one_connection_each_hear_their_own_outcome(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[4];
	uint64_t room[3] = { 7, NOT_LIVE_ROOM, 8 }, mark[4];
	uint32_t rid;

	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &rid,
				       f->err, sizeof f->err), 0);
	for (uint32_t i = 0; i < 4; i++)
		c[i] = (struct xport_copy){ .src_off = 65536u * i + 99,
			.dst_off = 65536u * (7 - i), .len = 40000,
			.src = f->src_id, .dst = rid };
	assert_true(xport_pipelines(f->px));
	/* Job 0: one batch; job 1 (room not live): one; job 2: two. */
	mark[0] = xport_mark(f->px, rid);
	for (uint32_t j = 0, b = 0; j < 3; j++) {
		xport_set_room(f->px, room[j]);
		for (uint32_t k = 0; k < (j == 2 ? 2u : 1u); k++, b++)
			assert_int_equal(xport_write_batch(f->px, &c[b], 1, f->err,
							   sizeof f->err), 0);
		mark[j + 1] = xport_mark(f->px, rid);
	}
	assert_int_equal(xport_wait_for(f->px, rid, mark[0], mark[1], f->err,
					sizeof f->err), 0);
	assert_int_equal(xport_wait_for(f->px, rid, mark[1], mark[2], f->err,
					sizeof f->err), KVW_ENOENT);
	assert_non_null(strstr(f->err, "not live"));
	assert_int_equal(xport_wait_for(f->px, rid, mark[2], mark[3], f->err,
					sizeof f->err), 0);
	c[1] = c[3]; /* job 1's copy never landed */
	assert_only(f, c, 3);
	assert_true(f->st.not_live == 1);
}

/* A decode gone for good loses every batch in flight: each job's wait
 * fails, also one whose batches the failed send of a later job lost (a
 * lost batch is never taken for a landed one). */
static void test_jobs_in_flight_to_a_decode_gone_for_good_each_fail(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[2];
	uint8_t desc[KVW_MAX_DESC];
	uint64_t mark[3];
	static struct proxy p;
	uint32_t rid;

	rid = connect_then_lose(f, &p, desc);
	mark[0] = xport_mark(f->px, rid);
	for (uint32_t j = 0; j < 2; j++) {
		c[j] = (struct xport_copy){ .src_off = 0, .dst_off = 262144u * j,
			.len = 262144, .src = f->src_id, .dst = rid };
		xport_set_room(f->px, 7 + j);
		/* Either fits the socket buffers or meets the cut itself. */
		(void)xport_write_batch(f->px, &c[j], 1, f->err, sizeof f->err);
		mark[j + 1] = xport_mark(f->px, rid);
	}
	assert_true(mark[1] > mark[0] && mark[2] > mark[1]);
	for (uint32_t j = 0; j < 2; j++) {
		f->err[0] = '\0';
		assert_int_equal(xport_wait_for(f->px, rid, mark[j], mark[j + 1],
						f->err, sizeof f->err), KVW_ESYS);
		assert_non_null(strstr(f->err, "not mended within 300 ms"));
	}
	assert_int_equal(xport_wait_for(f->px, rid, mark[2], mark[2], f->err,
					sizeof f->err), 0);
	assert_true(f->st.batches == 0); /* nothing was acked as landed */
	xport_disconnect(f->px, rid);
	/* Gone with its connection: still a failure, never a landing. */
	assert_int_equal(xport_wait_for(f->px, rid, mark[0], mark[2], f->err,
					sizeof f->err), KVW_ESYS);
	proxy_stop(&p);
}

static void test_a_peer_that_stops_inside_a_batch_is_closed(void **state)
{
	struct fx *f = *state;
	uint8_t h[TCP_BATCH_LEN] = { 0 }, b;
	uint64_t before = f->st.refused;
	int fd = dial(f);

	assert_true(hello_ok(f, fd, NULL));
	le_put(h, TCP_MAGIC_BATCH, 4);
	assert_int_equal(send(fd, h, 20, 0), 20); /* half a header, then nothing */
	assert_int_equal(read_some(fd, &b, 1), 0); /* closed by the sink */
	assert_true(f->st.refused == before + 1);
	close(fd);
}

/* The sink waits in a payload for more than one byte (its connection's
 * SO_RCVLOWAT is set). */
static const struct fx *lowat_fx;

static int sink_waits_for_more(void)
{
	int nodelay, lowat;

	(void)sink_sockets(lowat_fx, &nodelay, &lowat);
	return lowat > 1;
}

/* A payload that comes slower than its low-water mark: the sink reads
 * what waits before it judges the connection stalled (bytes that came
 * are progress), then, nothing more coming, closes it. The 10 KiB are
 * sent only once the sink waits for more than that. */
static void test_a_slow_payloads_bytes_are_read_before_it_is_judged(void **state)
{
	struct fx *f = *state;
	static uint8_t pay[65536];
	uint8_t cp[TCP_COPY_LEN];
	uint64_t bytes = f->st.bytes, refused = f->st.refused;
	int fd = dial(f);

	assert_true(hello_ok(f, fd, NULL));
	le_put(cp, 0, 8);
	le_put(cp + 8, sizeof pay, 8);
	memset(pay, 0x5c, sizeof pay);
	lowat_fx = f;
	raw_ready = sink_waits_for_more;
	raw_part = 10240;
	assert_int_equal(raw_batch(fd, 1, sizeof pay, cp, sizeof cp, pay, 0, 0),
			 -1); /* no ACK: closed */
	raw_part = 0;
	raw_ready = NULL;
	assert_true(f->st.refused == refused + 1); /* as stalled ... */
	assert_true(f->st.bytes == bytes + 10240); /* ... once it read them */
	close(fd);
}

static void test_a_client_without_the_groups_data_key_is_refused(void **state)
{
	struct fx *f = *state;
	uint8_t key[32];
	uint32_t rid;
	uint64_t before = f->st.refused;

	/* Another group's key answers the challenge wrong: refused at
	 * once (not retried), the error names both fingerprints. */
	uint8_t fp[TCP_FP_LEN];
	char hex[17];

	memset(key, 0x11, sizeof key);
	assert_int_equal(xport_tcp_set_group_key(f->px, key), 0);
	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &rid, f->err,
				       sizeof f->err), KVW_ESYS);
	assert_non_null(strstr(f->err, "group keys differ"));
	tcp_auth_fingerprint(key, fp);
	tcp_auth_fp_hex(fp, hex);
	assert_non_null(strstr(f->err, hex));
	tcp_auth_fingerprint(GROUP, fp);
	tcp_auth_fp_hex(fp, hex);
	assert_non_null(strstr(f->err, hex));
	assert_true(f->st.refused == before + 1);
	/* The sink told it too (counted before the client heard), naming
	 * the peer and both fingerprints. */
	{
		char theirs[17];

		tcp_auth_fingerprint(key, fp);
		tcp_auth_fp_hex(fp, theirs);
		assert_true(told("group keys differ", hex));
		assert_true(told(theirs, "peer 127.0.0.1:"));
	}
	/* Only a tcp instance has a data key. */
	{
		struct xport *shm = NULL;

		assert_int_equal(xport_open(xport_find("shm"), &shm, f->err,
					    sizeof f->err), 0);
		assert_int_equal(xport_tcp_set_group_key(shm, key), KVW_EINVAL);
		xport_close(&shm);
	}
}

static void test_hostile_peers_are_refused_and_the_sink_keeps_serving(void **state)
{
	struct fx *f = *state;
	uint8_t wrong[16], junk[64], cp[TCP_COPY_LEN];
	int fd;

	/* A wrong secret. */
	memcpy(wrong, f->secret, 16);
	wrong[3] ^= 1;
	fd = dial(f);
	assert_false(hello_ok(f, fd, wrong));
	close(fd);
	/* Garbage instead of a hello: closed. */
	fd = dial(f);
	memset(junk, 0xa5, sizeof junk);
	assert_int_equal(send(fd, junk, sizeof junk, MSG_NOSIGNAL), (ssize_t)sizeof junk);
	assert_true(read_some(fd, junk, sizeof junk) <= TCP_WELCOME_LEN);
	close(fd);
	/* A valid header whose one copy lies outside the pool. */
	fd = dial(f);
	assert_true(hello_ok(f, fd, NULL));
	le_put(cp, POOL_BYTES - 8, 8);
	le_put(cp + 8, 16, 8);
	assert_int_equal(raw_batch(fd, 1, 16, cp, sizeof cp, NULL, 0, 0), TCP_BAD);
	close(fd);
	/* A copy count over the cap (refused before its tag is read). */
	fd = dial(f);
	assert_true(hello_ok(f, fd, NULL));
	{
		/* The ACK is a hint: the sink may close before the rest of
		 * what we sent arrives (a RST); the count is the verdict. */
		int st = raw_batch(fd, TCP_MAX_COPIES + 1, 16, NULL, 0, NULL, 0,
				   0);

		assert_true(st == TCP_INTEGRITY || st == -1);
	}
	close(fd);
	/* Half a hello, then silence: closed after the handshake time. */
	fd = dial(f);
	assert_int_equal(send(fd, junk, 10, 0), 10);
	assert_int_equal(read_some(fd, junk, 1), 0); /* EOF, not a timeout */
	close(fd);
	assert_true(f->st.refused >= 3);
	assert_true(f->st.bad == 1);
	assert_true(f->st.integrity == 1);
	assert_only(f, NULL, 0); /* no byte written by any of them */
	/* And a good client is still served. */
	test_pipelined_batches_land_exactly_where_the_copies_say(state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pipelined_batches_land_exactly_where_the_copies_say, setup, teardown),
		cmocka_unit_test_setup_teardown(test_the_sinks_connections_send_acks_without_delay, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_batch_for_a_room_not_live_is_discarded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_batch_whose_body_tag_is_wrong_is_refused_as_integrity, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_batch_whose_head_tag_is_wrong_writes_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_batch_with_unknown_flags_is_refused_and_writes_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_copy_outside_the_rooms_pages_fails_with_integrity, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_late_batch_of_a_cleared_incarnation_writes_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_flipped_payload_bit_is_caught_and_resent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_flipped_copy_list_bit_is_caught_and_resent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_swapped_destinations_are_caught_and_resent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_replayed_batch_is_caught_and_resent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_dropped_batch_is_caught_and_resent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_forged_ack_ok_is_never_believed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_batch_that_keeps_failing_integrity_fails_its_room, setup, teardown),
		cmocka_unit_test_setup_teardown(test_encrypted_batches_land_right_and_tampering_is_caught, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_thousand_idle_keyless_connections_never_keep_a_client_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_link_broken_mid_batch_is_redialled_and_unacked_batches_resent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_decode_gone_for_good_fails_the_batches_after_the_resend_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_jobs_in_flight_on_one_connection_each_hear_their_own_outcome, setup, teardown),
		cmocka_unit_test_setup_teardown(test_jobs_in_flight_to_a_decode_gone_for_good_each_fail, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_peer_that_stops_inside_a_batch_is_closed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_slow_payloads_bytes_are_read_before_it_is_judged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_client_without_the_groups_data_key_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copies_outside_either_side_are_refused_before_sending, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_peers_are_refused_and_the_sink_keeps_serving, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
