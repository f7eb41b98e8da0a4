/*
 * test_tcp.c - the tcp transport against its sink, over real loopback
 * sockets and real pool files: a worker-shaped client (xport_tcp: connect
 * by descriptor, pipelined batches, one wait) lands every byte where the
 * copy list says and nowhere else; a batch for a room the sink says is not
 * live is discarded (no byte written) and reported, and every batch the
 * sink held for a room is released again; a batch whose bytes miss their
 * checksum is acked as such, and that refusal reaches the writer as
 * KVW_ECORRUPT (the room's reason `integrity`); a link cut mid-batch (a
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
#include "xport/pool.h"
#include "xport/tcp_auth.h"
#include "xport/tcp_proto.h"
#include "xport/tcp_sink.h"
#include "xport/xport.h"

#define POOL_BYTES (1u << 20)
#define NOT_LIVE_ROOM 666u
#define DEST_ROOM 667u /* the hook says: a copy outside its pages */

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

/* The hook saw the batch's copy list as sent: the last one seen. */
static _Atomic uint64_t seen_off, seen_len;
static atomic_uint seen_n;

static int begin(void *arg, uint32_t slot, uint64_t room, uint64_t inc,
		 const uint8_t *copies, uint32_t ncopies)
{
	(void)arg;
	(void)inc;
	assert_true(slot < 1024);
	assert_true(ncopies > 0);
	atomic_store(&seen_n, ncopies);
	atomic_store(&seen_off, le_get(copies, 8));
	atomic_store(&seen_len, le_get(copies + 8, 8));
	if (room == NOT_LIVE_ROOM)
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
		.secret = f->secret, .room_begin = begin, .room_end = end, .stop = stop_now,
		.handshake_ms = 300, .stall_ms = 300 };
	atomic_store(&stop_flag, 0);
	atomic_store(&held, 0);
	if (pthread_create(&f->th, NULL, sink_main, f))
		return -1;
	if (xport_open(xport_find("tcp"), &f->px, f->err, sizeof f->err) ||
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
 * those, how many have TCP_NODELAY into *nodelay. */
static int sink_sockets(const struct fx *f, int *nodelay)
{
	int n = 0;

	*nodelay = 0;
	for (int fd = 3; fd < 1024; fd++) {
		struct sockaddr_in me, peer;
		socklen_t ml = sizeof me, pl = sizeof peer, ol = sizeof(int);
		int type = 0, on = 0;

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
	int nodelay = 0;

	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &c.dst,
				       f->err, sizeof f->err), 0);
	xport_set_room(f->px, 7);
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err,
					   sizeof f->err), 0);
	/* Acked: the sink has accepted the connection by now. */
	assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), 0);
	assert_int_equal(sink_sockets(f, &nodelay), 1);
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
	/* The connection stays usable for a live room. */
	xport_set_room(f->px, 8);
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err, sizeof f->err), 0);
	assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), 0);
	assert_only(f, &c, 1);
}

/* A batch the hook refuses for its destinations (TCP_ROOM_DEST) is read
 * and discarded: no byte written, nothing held, counted apart from "not
 * live", and the writer hears a refusal; the hook got the copy list as
 * sent, and the connection serves the next batch. */
static void test_a_batch_refused_for_its_destinations_writes_nothing(void **state)
{
	struct fx *f = *state;
	struct xport_copy c = { .src_off = 100, .dst_off = 5000, .len = 3000,
				.src = f->src_id };
	uint32_t rid;

	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &rid,
				       f->err, sizeof f->err), 0);
	c.dst = rid;
	xport_set_room(f->px, DEST_ROOM);
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err, sizeof f->err), 0);
	assert_true(xport_wait(f->px, -1, f->err, sizeof f->err) < 0);
	assert_only(f, &c, 0); /* nothing written */
	assert_true(f->st.dest == 1);
	assert_true(f->st.not_live == 0);
	assert_int_equal(atomic_load(&seen_n), 1);
	assert_true(atomic_load(&seen_off) == 5000);
	assert_true(atomic_load(&seen_len) == 3000);
	assert_int_equal(atomic_load(&held), 0);
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

static int hello_ok(const struct fx *f, int fd, const uint8_t *secret)
{
	uint8_t h[TCP_HELLO_LEN] = { 0 }, w[TCP_WELCOME_LEN];

	le_put(h, TCP_MAGIC_HELLO, 4);
	le_put(h + 4, TCP_VERSION, 2);
	tcp_auth_mac(NULL, secret ? secret : f->secret, nonce, h + 8);
	assert_int_equal(send(fd, h, sizeof h, 0), (ssize_t)sizeof h);
	return read_some(fd, w, sizeof w) == sizeof w &&
	       le_get(w + 4, 4) == TCP_OK;
}

/* Sends a batch header (and copy list) and returns the ACK's status, or -1
 * when the sink closed without one. */
static int raw_batch(int fd, uint32_t ncopies, uint64_t total,
		     const uint8_t *copies, size_t copylen)
{
	uint8_t h[TCP_BATCH_LEN] = { 0 }, a[TCP_ACK_LEN];

	le_put(h, TCP_MAGIC_BATCH, 4);
	le_put(h + 4, ncopies, 4);
	le_put(h + 16, 1, 8);
	le_put(h + 24, total, 8);
	assert_int_equal(send(fd, h, sizeof h, MSG_NOSIGNAL), (ssize_t)sizeof h);
	if (copylen)
		(void)send(fd, copies, copylen, MSG_NOSIGNAL);
	if (read_some(fd, a, sizeof a) != sizeof a)
		return -1;
	return (int)le_get(a + 4, 4);
}

static void test_a_batch_whose_bytes_miss_their_checksum_is_acked_as_such(void **state)
{
	struct fx *f = *state;
	uint8_t h[TCP_BATCH_LEN] = { 0 }, cp[TCP_COPY_LEN], pay[16], a[TCP_ACK_LEN];
	uint8_t sum[TCP_TRAILER_LEN];
	int fd = dial(f);

	assert_true(hello_ok(f, fd, NULL));
	memset(pay, 0x77, sizeof pay);
	le_put(h, TCP_MAGIC_BATCH, 4);
	le_put(h + 4, 1, 4);
	le_put(h + 8, 42, 8);
	le_put(h + 16, 8, 8);  /* a live room */
	le_put(h + 24, sizeof pay, 8);
	le_put(cp, 4096, 8);
	le_put(cp + 8, sizeof pay, 8);
	le_put(sum, 12345, 8); /* not the xxh3 of the payload */
	assert_int_equal(send(fd, h, sizeof h, 0), (ssize_t)sizeof h);
	assert_int_equal(send(fd, cp, sizeof cp, 0), (ssize_t)sizeof cp);
	assert_int_equal(send(fd, pay, sizeof pay, 0), (ssize_t)sizeof pay);
	assert_int_equal(send(fd, sum, sizeof sum, 0), (ssize_t)sizeof sum);
	assert_int_equal(read_some(fd, a, sizeof a), sizeof a);
	assert_int_equal(le_get(a + 4, 4), TCP_CHECKSUM);
	assert_int_equal(le_get(a + 8, 8), 42);
	assert_true(f->st.checksum == 1);
	assert_true(f->st.batches == 0);
	close(fd);
}

/* A sink that welcomes one connection, reads one batch of `len` payload
 * bytes and answers it with the status in *arg. */
struct liar {
	int lfd;
	uint32_t status;
	uint8_t secret[16];
};

static void *liar_main(void *arg)
{
	struct liar *l = arg;
	uint8_t buf[TCP_BATCH_LEN + TCP_COPY_LEN + 65536 + TCP_TRAILER_LEN], w[TCP_WELCOME_LEN],
		a[TCP_ACK_LEN];
	int fd = accept(l->lfd, NULL, NULL);
	size_t need;

	memset(w, 0, sizeof w);
	if (fd < 0)
		return NULL;
	memset(buf, 0, TCP_CHALLENGE_LEN);
	le_put(buf, TCP_MAGIC_CHALLENGE, 4);
	le_put(buf + 4, TCP_VERSION, 2);
	(void)send(fd, buf, TCP_CHALLENGE_LEN, MSG_NOSIGNAL);
	if (read_some(fd, buf, TCP_HELLO_LEN) != TCP_HELLO_LEN)
		return NULL;
	le_put(w, TCP_MAGIC_WELCOME, 4);
	le_put(w + 4, TCP_OK, 4);
	(void)send(fd, w, sizeof w, MSG_NOSIGNAL);
	if (read_some(fd, buf, TCP_BATCH_LEN) == TCP_BATCH_LEN) {
		need = (size_t)le_get(buf + 4, 4) * TCP_COPY_LEN +
		       (size_t)le_get(buf + 24, 8) + TCP_TRAILER_LEN;
		if (need <= sizeof buf && read_some(fd, buf + TCP_BATCH_LEN, need) == need) {
			le_put(a, TCP_MAGIC_ACK, 4);
			le_put(a + 4, l->status, 4);
			memcpy(a + 8, buf + 8, 8);
			(void)send(fd, a, sizeof a, MSG_NOSIGNAL);
		}
	}
	(void)read_some(fd, buf, 1); /* until the client closes */
	close(fd);
	return NULL;
}

static void test_a_checksum_refusal_reaches_the_writer_as_corrupt(void **state)
{
	struct fx *f = *state;
	struct liar l = { .status = TCP_CHECKSUM };
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof sa;
	uint8_t d[TCP_DESC_FIXED + 9];
	struct xport_copy c = { .len = 4096, .src = f->src_id };
	pthread_t th;
	uint32_t rid;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l.lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(l.lfd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(l.lfd, 1), 0);
	assert_int_equal(getsockname(l.lfd, (struct sockaddr *)&sa, &sl), 0);
	le_put(d, TCP_MAGIC_DESC, 4);
	le_put(d + 4, TCP_VERSION, 2);
	le_put(d + 6, ntohs(sa.sin_port), 2);
	le_put(d + 8, POOL_BYTES, 8);
	memset(d + 16, 0, 16);
	le_put(d + 32, 9, 2);
	memcpy(d + TCP_DESC_FIXED, "127.0.0.1", 9);
	assert_int_equal(pthread_create(&th, NULL, liar_main, &l), 0);
	assert_int_equal(xport_connect(f->px, d, sizeof d, &rid, f->err,
				       sizeof f->err), 0);
	c.dst = rid;
	xport_set_room(f->px, 8);
	assert_int_equal(xport_write_batch(f->px, &c, 1, f->err, sizeof f->err), 0);
	assert_int_equal(xport_wait(f->px, -1, f->err, sizeof f->err), KVW_ECORRUPT);
	assert_non_null(strstr(f->err, "integrity"));
	xport_disconnect(f->px, rid);
	pthread_join(th, NULL);
	close(l.lfd);
}

/* A link that can break: it forwards one connection at a time from its own
 * port to the sink's; after cut_after bytes from the client (>= 0) it
 * closes both ends once, as a link that went down mid-batch; with
 * refuse set it closes its port, as a decode host that is gone. */
struct proxy {
	int lfd;
	uint16_t port, to;
	atomic_long cut_after;
	atomic_int accepts, refuse, stop;
	pthread_t th;
};

static int pump(int from, int to, long *count)
{
	uint8_t buf[16384];
	ssize_t k = recv(from, buf, sizeof buf, 0);

	if (k <= 0 || send(to, buf, (size_t)k, MSG_NOSIGNAL) != k)
		return -1;
	if (count)
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
		long sent = 0;
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
		if (connect(sfd, (struct sockaddr *)&a, sizeof a) == 0)
			for (;;) {
				struct pollfd pf[2] = { { cfd, POLLIN, 0 },
							{ sfd, POLLIN, 0 } };
				long cut = atomic_load(&p->cut_after);

				if (atomic_load(&p->stop) || poll(pf, 2, 20) < 0)
					break;
				if ((pf[0].revents && pump(cfd, sfd, &sent) < 0) ||
				    (pf[1].revents && pump(sfd, cfd, NULL) < 0))
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

/* Starts a proxy to the fixture's sink; *desc becomes the fixture's
 * descriptor naming the proxy's port. */
static void proxy_start(struct fx *f, struct proxy *p, uint8_t *desc)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof a;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	*p = (struct proxy){ .to = f->port, .cut_after = -1 };
	p->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(p->lfd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(p->lfd, 8), 0);
	assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&a, &al), 0);
	p->port = ntohs(a.sin_port);
	memcpy(desc, f->desc, f->desclen);
	le_put(desc + 6, p->port, 2);
	assert_int_equal(pthread_create(&p->th, NULL, proxy_main, p), 0);
}

static void proxy_stop(struct proxy *p)
{
	atomic_store(&p->stop, 1);
	pthread_join(p->th, NULL);
}

static void test_a_link_broken_mid_batch_is_redialled_and_unacked_batches_resent(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[32];
	uint8_t desc[KVW_MAX_DESC];
	struct proxy p;
	uint32_t rid;

	proxy_start(f, &p, desc);
	assert_int_equal(xport_connect(f->px, desc, f->desclen, &rid, f->err,
				       sizeof f->err), 0);
	/* 8 batches of 4 copies of 16 KiB; the link breaks inside batch 3. */
	for (uint32_t i = 0; i < 32; i++)
		c[i] = (struct xport_copy){ .src_off = i * 16384u,
			.dst_off = (31 - i) * 16384u, .len = 16384,
			.src = f->src_id, .dst = rid };
	atomic_store(&p.cut_after, 2L * (40 + 4 * 16 + 4 * 16384) + 5000);
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
	struct proxy p;
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
	struct proxy p;
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

static void test_a_client_without_the_groups_data_key_is_refused(void **state)
{
	struct fx *f = *state;
	uint8_t key[32];
	uint32_t rid;
	uint64_t before = f->st.refused;

	/* The sink here has no group key; a client proving one (or the
	 * other way round) answers the challenge wrong. */
	memset(key, 0x11, sizeof key);
	assert_int_equal(xport_tcp_set_group_key(f->px, key), 0);
	assert_int_equal(xport_connect(f->px, f->desc, f->desclen, &rid, f->err,
				       sizeof f->err), KVW_ESYS);
	assert_non_null(strstr(f->err, "wrong secret or group key"));
	assert_true(f->st.refused == before + 1);
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
	assert_int_equal(raw_batch(fd, 1, 16, cp, sizeof cp), TCP_BAD);
	close(fd);
	/* A copy count over the cap. */
	fd = dial(f);
	assert_true(hello_ok(f, fd, NULL));
	assert_int_equal(raw_batch(fd, TCP_MAX_COPIES + 1, 16, NULL, 0), TCP_BAD);
	close(fd);
	/* Half a hello, then silence: closed after the handshake time. */
	fd = dial(f);
	assert_int_equal(send(fd, junk, 10, 0), 10);
	assert_int_equal(read_some(fd, junk, 1), 0); /* EOF, not a timeout */
	close(fd);
	assert_true(f->st.refused >= 3);
	assert_true(f->st.bad == 2);
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
		cmocka_unit_test_setup_teardown(test_a_batch_whose_bytes_miss_their_checksum_is_acked_as_such, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_checksum_refusal_reaches_the_writer_as_corrupt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_link_broken_mid_batch_is_redialled_and_unacked_batches_resent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_decode_gone_for_good_fails_the_batches_after_the_resend_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_jobs_in_flight_on_one_connection_each_hear_their_own_outcome, setup, teardown),
		cmocka_unit_test_setup_teardown(test_jobs_in_flight_to_a_decode_gone_for_good_each_fail, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_peer_that_stops_inside_a_batch_is_closed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_client_without_the_groups_data_key_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_batch_refused_for_its_destinations_writes_nothing,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_copies_outside_either_side_are_refused_before_sending, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_peers_are_refused_and_the_sink_keeps_serving, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
