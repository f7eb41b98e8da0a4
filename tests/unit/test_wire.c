/*
 * test_wire.c - the receive side against hostile peers and a dying
 * context, over real ZMQ sockets (inproc, and one real kv-receiver built
 * with receiver_open on files in /dev/shm). Proved: one random frame, an
 * empty frame, 64 frames, a valid header with a bad or oversized body and
 * a header-only message of a type that needs a body are each refused as
 * one whole message (the next valid message still decodes, nothing is left
 * half-read); a terminated context (zmq_ctx_shutdown) makes wire_recv
 * return KVW_ESYS, never KVW_EAGAIN, so a loop cannot spin on it; and
 * receiver_run, the real poll loop, returns KVW_ESYS promptly when its
 * context is shut down under it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit_wait.h"
#include "base/proc.h"
#include "mem/pool.h"
#include "roles/receiver/receiver_impl.h"
#include "wire/frame.h"
#include "wire/wire.h"

struct pair {
	void *ctx, *router, *dealer;
};

static int pair_setup(void **state)
{
	static unsigned n;
	struct pair *p = test_calloc(1, sizeof *p);
	char ep[64], err[128];

	snprintf(ep, sizeof ep, "inproc://twire-%u", n++);
	p->ctx = zmq_ctx_new();
	p->router = wire_socket(p->ctx, ZMQ_ROUTER, 0, err, sizeof err);
	p->dealer = wire_socket(p->ctx, ZMQ_DEALER, 0, err, sizeof err);
	if (!p->router || !p->dealer || wire_bind(p->router, ep, 0, err, sizeof err) ||
	    zmq_connect(p->dealer, ep))
		return -1;
	*state = p;
	return 0;
}

static int pair_teardown(void **state)
{
	struct pair *p = *state;

	wire_close(&p->router);
	wire_close(&p->dealer);
	zmq_ctx_term(p->ctx);
	test_free(p);
	return 0;
}

/* Sends parts[0..n) as one message from the dealer. */
static void send_parts(struct pair *p, const void *const *data,
		       const size_t *len, size_t n)
{
	for (size_t i = 0; i < n; i++)
		assert_true(zmq_send(p->dealer, data[i], len[i],
				     i + 1 < n ? ZMQ_SNDMORE : 0) >= 0);
}

/* Waits (bounded) until the router has something to read. */
static void wait_in(struct pair *p)
{
	zmq_pollitem_t it = { p->router, 0, ZMQ_POLLIN, 0 };

	assert_int_equal(zmq_poll(&it, 1, 5000), 1);
}

static void hdr_bytes(uint8_t *b, unsigned type, uint64_t room)
{
	struct frame_msg m;
	struct frame_out out;

	frame_msg_init(&m, FRAME_PING, 3, room, 9);
	assert_int_equal(frame_encode(&m, &out, NULL, 0), 0);
	memcpy(b, out.hdr, FRAME_HDR_LEN);
	b[5] = (uint8_t)type;
}

static void send_ping(struct pair *p, uint64_t room)
{
	uint8_t h[FRAME_HDR_LEN];
	const void *d[1] = { h };
	size_t l[1] = { sizeof h };

	hdr_bytes(h, FRAME_PING, room);
	send_parts(p, d, l, 1);
}

/* The next message on the router is the PING for `room`. */
static void expect_ping(struct pair *p, uint64_t room)
{
	struct wire_in in;
	struct frame_msg m;
	char err[160];

	wait_in(p);
	assert_int_equal(wire_recv(p->router, 1, &in, &m, err, sizeof err), 0);
	assert_int_equal(m.hdr.type, FRAME_PING);
	assert_int_equal(m.hdr.room, room);
	wire_in_release(&in);
}

static int recv_rc(struct pair *p)
{
	struct wire_in in;
	struct frame_msg m;
	char err[160];
	int rc;

	wait_in(p);
	rc = wire_recv(p->router, 1, &in, &m, err, sizeof err);
	if (rc == 0)
		wire_in_release(&in);
	assert_int_equal(in.n, 0); /* refused messages leave nothing held */
	return rc;
}

static void hostile_messages_are_refused_whole_and_the_next_one_decodes(void **state)
{
	struct pair *p = *state;
	static uint8_t big[4 * 65537 + 2];
	uint8_t rnd[300], hdr[FRAME_HDR_LEN], body[64];
	const void *d[64];
	size_t l[64];

	srand(7);
	for (size_t i = 0; i < sizeof rnd; i++)
		rnd[i] = (uint8_t)rand();
	/* One random frame. */
	d[0] = rnd;
	l[0] = sizeof rnd;
	send_parts(p, d, l, 1);
	assert_true(recv_rc(p) < 0);
	send_ping(p, 1);
	expect_ping(p, 1);
	/* One empty frame. */
	l[0] = 0;
	send_parts(p, d, l, 1);
	assert_int_equal(recv_rc(p), KVW_EINVAL);
	send_ping(p, 2);
	expect_ping(p, 2);
	/* 64 frames: more than KVW_MAX_FRAMES, drained whole. */
	hdr_bytes(hdr, FRAME_PING, 99);
	for (int i = 0; i < 64; i++) {
		d[i] = i ? (const void *)rnd : hdr;
		l[i] = i ? 8 : sizeof hdr;
	}
	send_parts(p, d, l, 64);
	assert_int_equal(recv_rc(p), KVW_EINVAL);
	send_ping(p, 3);
	expect_ping(p, 3);
	/* A valid STATUS header with a short body, then with a huge one. */
	hdr_bytes(hdr, FRAME_STATUS, 5);
	memset(body, 0xff, sizeof body);
	d[0] = hdr;
	d[1] = body;
	l[0] = sizeof hdr;
	l[1] = 3;
	send_parts(p, d, l, 2);
	assert_int_equal(recv_rc(p), KVW_EINVAL);
	memset(big, 0xee, sizeof big);
	d[1] = big;
	l[1] = 70000;
	send_parts(p, d, l, 2);
	assert_int_equal(recv_rc(p), KVW_EINVAL);
	/* XFER_INFO whose page array is not a whole number of u32. */
	hdr_bytes(hdr, FRAME_XFER_INFO, 6);
	memset(body, 0, 9);
	body[4] = 1;
	d[1] = body;
	l[1] = 9;
	d[2] = big;
	l[2] = 4 * 65537 + 2;
	send_parts(p, d, l, 3);
	assert_int_equal(recv_rc(p), KVW_EINVAL);
	/* A type that needs a body, sent header only; then a bad magic. */
	hdr_bytes(hdr, FRAME_REGISTER, 7);
	send_parts(p, d, l, 1);
	assert_int_equal(recv_rc(p), KVW_EINVAL);
	hdr[0] ^= 0xff;
	send_parts(p, d, l, 1);
	assert_int_equal(recv_rc(p), KVW_EVERSION);
	send_ping(p, 4);
	expect_ping(p, 4);
	/* Nothing left behind. */
	{
		struct wire_in in;
		struct frame_msg m;

		assert_int_equal(wire_recv(p->router, 1, &in, &m, NULL, 0),
				 KVW_EAGAIN);
	}
}

static void terminated_context_makes_recv_fail_not_eagain(void **state)
{
	struct pair *p = *state;
	struct wire_in in;
	struct frame_msg m;
	char err[160];

	assert_int_equal(wire_recv(p->router, 1, &in, &m, err, sizeof err),
			 KVW_EAGAIN);
	assert_int_equal(zmq_ctx_shutdown(p->ctx), 0);
	assert_int_equal(wire_recv(p->router, 1, &in, &m, err, sizeof err),
			 KVW_ESYS);
	assert_int_equal(errno, ETERM);
	assert_int_equal(wire_recv(p->dealer, 0, &in, &m, err, sizeof err),
			 KVW_ESYS);
}

/* ---- the real receiver loop under a terminated context ---------------- */

struct rx_run {
	struct receiver *r;
	int rc;
	uint64_t ended_ns;
};

static void *run_rx(void *arg)
{
	struct rx_run *a = arg;
	char err[200];

	a->rc = receiver_run(a->r, err, sizeof err);
	a->ended_ns = proc_now_ns();
	return NULL;
}

static void receiver_loop_ends_promptly_when_its_context_is_terminated(void **state)
{
	char dir[] = "/tmp/kvwtw.XXXXXX", listen[128], eng[128], table[128],
	     pool[128], err[256];
	struct receiver_cfg cfg = { 0 };
	struct rx_run a = { 0 };
	pthread_t th;
	uint64_t t0, cap_ns;

	(void)state;
	/* One idle 1 s poll, as long as it takes at this machine's load now
	 * (a sleeping thread wakes late on a busy machine): the loop's poll
	 * cap, measured, for the bound below. */
	t0 = proc_now_ns();
	assert_int_equal(poll(NULL, 0, 1000), 0);
	cap_ns = proc_now_ns() - t0;
	assert_non_null(mkdtemp(dir));
	snprintf(listen, sizeof listen, "ipc://%s/p", dir);
	snprintf(eng, sizeof eng, "ipc://%s/e", dir);
	snprintf(table, sizeof table, "%s/t.rooms", dir);
	snprintf(pool, sizeof pool, "/dev/shm/kvwire.twire-%d.pool", (int)getpid());
	cfg.listen = listen;
	cfg.engine = eng;
	cfg.table = table;
	cfg.pool = pool;
	cfg.transport = "shm";
	cfg.topo = (struct kvw_topo){ 1, 1, 1, 1 };
	shape_default(&cfg.shape);
	cfg.shape.layers = 2;
	cfg.shape.pages = 8;
	cfg.waiting_timeout_ns = 1000000000ull;
	assert_int_equal(receiver_open(&cfg, &a.r, err, sizeof err), 0);
	assert_int_equal(pthread_create(&th, NULL, run_rx, &a), 0);
	/* Wherever in the loop the shutdown lands (before the first poll
	 * or during one), the loop must end with KVW_ESYS. */
	t0 = proc_now_ns();
	assert_int_equal(zmq_ctx_shutdown(a.r->ctx), 0);
	assert_int_equal(unit_join(th, 10), 0);
	assert_int_equal(a.rc, KVW_ESYS);
	/* The loop waits at most one poll (cap 1 s) before it sees ETERM:
	 * it ends within two caps as long as one takes here now (2 s on an
	 * idle machine, as before). */
	if (a.ended_ns - t0 >= 2 * cap_ns)
		print_error("ended %.3f s after the shutdown; a 1 s poll takes "
			    "%.3f s here now\n", (a.ended_ns - t0) / 1e9,
			    cap_ns / 1e9);
	assert_true(a.ended_ns - t0 < 2 * cap_ns);
	receiver_close(&a.r);
	unlink(table);
	pool_unlink(pool);
	/* The ipc sockets' files outlive a context shut down under them
	 * (137 such folders were left in /tmp). */
	unlink(listen + strlen("ipc://"));
	unlink(eng + strlen("ipc://"));
	assert_int_equal(rmdir(dir), 0);
}

static void endpoints_are_checked_before_bind(void **state)
{
	char ep[160], err[200];

	(void)state;
	assert_int_equal(wire_endpoint_check("ipc:///tmp/a.sock", err, sizeof err), 0);
	assert_int_equal(wire_endpoint_check("tcp://127.0.0.1:5555", err, sizeof err), 0);
	assert_int_equal(wire_endpoint_check("inproc://x", err, sizeof err), 0);
	/* 107 bytes of path fit a socket address, 108 do not. */
	snprintf(ep, sizeof ep, "ipc://%0107d", 0);
	assert_int_equal(wire_endpoint_check(ep, err, sizeof err), 0);
	snprintf(ep, sizeof ep, "ipc://%0108d", 0);
	assert_int_equal(wire_endpoint_check(ep, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "1..107 allowed"));
	assert_int_equal(wire_endpoint_check("ipc://", err, sizeof err), KVW_EINVAL);
	assert_int_equal(wire_endpoint_check("tcp://nohost", err, sizeof err), KVW_EINVAL);
	assert_int_equal(wire_endpoint_check("udp://x:1", err, sizeof err), KVW_EINVAL);
	assert_int_equal(wire_endpoint_check("", err, sizeof err), KVW_EINVAL);
	assert_int_equal(wire_endpoint_check(NULL, err, sizeof err), KVW_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    hostile_messages_are_refused_whole_and_the_next_one_decodes,
		    pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(
		    terminated_context_makes_recv_fail_not_eagain, pair_setup,
		    pair_teardown),
		cmocka_unit_test(receiver_loop_ends_promptly_when_its_context_is_terminated),
		cmocka_unit_test(endpoints_are_checked_before_bind),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
