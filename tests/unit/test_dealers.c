/*
 * test_dealers.c - the one outbound DEALER cache (lib/wire/dealers.h), over
 * real ZMQ inproc sockets: a DEALER is made and connected on first use and
 * found again by its endpoint (frames sent through it reach the peer's
 * ROUTER, one connection per endpoint); an unbounded cache keeps every
 * DEALER; a bounded one closes the least recently used to make room and the
 * endpoint it dropped still works on the next ask; a bad or over-long
 * endpoint fails with a reason and caches nothing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/kvw.h"
#include "wire/dealers.h"
#include "wire/frame.h"
#include "wire/wire.h"

#define NPEERS 3

struct fixture {
	void *ctx;
	void *router[NPEERS];
	char ep[NPEERS][64];
};

static int setup(void **state)
{
	static unsigned run;
	struct fixture *f = test_calloc(1, sizeof *f);
	char err[128];

	f->ctx = zmq_ctx_new();
	for (int i = 0; i < NPEERS; i++) {
		snprintf(f->ep[i], sizeof f->ep[i], "inproc://tdealers-%u-%d",
			 run, i);
		f->router[i] = wire_socket(f->ctx, ZMQ_ROUTER, 0, err, sizeof err);
		if (!f->router[i] ||
		    wire_bind(f->router[i], f->ep[i], 0, err, sizeof err))
			return -1;
	}
	run++;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	for (int i = 0; i < NPEERS; i++)
		wire_close(&f->router[i]);
	zmq_ctx_term(f->ctx);
	test_free(f);
	return 0;
}

/* Sends a PING for `room` through sock, then reads it at router (bounded
 * wait) and checks it is that PING; returns the ROUTER identity length so
 * callers can tell connections apart. */
static void ping_arrives(void *sock, void *router, uint64_t room,
			 uint8_t *id, size_t *idlen)
{
	struct frame_msg m, got;
	struct wire_in in;
	zmq_pollitem_t it = { .socket = router, .events = ZMQ_POLLIN };
	char err[128];

	frame_msg_init(&m, FRAME_PING, 0, room, 7);
	assert_int_equal(wire_send(sock, &m, NULL, 0, err, sizeof err), 0);
	assert_int_equal(zmq_poll(&it, 1, 5000), 1);
	assert_int_equal(wire_recv(router, 1, &in, &got, err, sizeof err), 0);
	assert_int_equal(got.hdr.type, FRAME_PING);
	assert_true(got.hdr.room == room);
	memcpy(id, in.id, in.idlen);
	*idlen = in.idlen;
	wire_in_release(&in);
}

static void test_a_dealer_is_made_once_per_endpoint_and_reaches_its_peer(void **state)
{
	struct fixture *f = *state;
	struct dealers *d;
	uint8_t id1[WIRE_ID_MAX], id2[WIRE_ID_MAX];
	size_t n1, n2;
	char err[128];
	void *a, *b;

	assert_int_equal(dealers_open(f->ctx, 0, &d), 0);
	a = dealers_get(d, f->ep[0], err, sizeof err);
	assert_non_null(a);
	b = dealers_get(d, f->ep[0], err, sizeof err);
	assert_ptr_equal(a, b);
	assert_int_equal(dealers_count(d), 1);
	/* The same connection both times: the ROUTER sees one identity. */
	ping_arrives(a, f->router[0], 1, id1, &n1);
	ping_arrives(b, f->router[0], 2, id2, &n2);
	assert_int_equal(n1, n2);
	assert_memory_equal(id1, id2, n1);
	/* Another endpoint, another DEALER, to the other peer. */
	b = dealers_get(d, f->ep[1], err, sizeof err);
	assert_non_null(b);
	assert_ptr_not_equal(a, b);
	ping_arrives(b, f->router[1], 3, id2, &n2);
	assert_int_equal(dealers_count(d), 2);
	dealers_close(&d);
	assert_null(d);
	dealers_close(&d); /* NULL: no-op */
}

static void test_an_unbounded_cache_keeps_every_dealer(void **state)
{
	struct fixture *f = *state;
	struct dealers *d;
	void *s[NPEERS];
	char err[128];

	assert_int_equal(dealers_open(f->ctx, 0, &d), 0);
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < NPEERS; i++) {
			void *x = dealers_get(d, f->ep[i], err, sizeof err);

			assert_non_null(x);
			if (round == 0)
				s[i] = x;
			else /* a kept pointer stays the live DEALER */
				assert_ptr_equal(x, s[i]);
		}
	assert_int_equal(dealers_count(d), NPEERS);
	dealers_close(&d);
}

static void test_a_bounded_cache_drops_the_least_recently_used(void **state)
{
	struct fixture *f = *state;
	struct dealers *d;
	uint8_t id[WIRE_ID_MAX];
	size_t n;
	char err[128];
	void *s0, *s1;

	assert_int_equal(dealers_open(f->ctx, 2, &d), 0);
	s0 = dealers_get(d, f->ep[0], err, sizeof err);
	s1 = dealers_get(d, f->ep[1], err, sizeof err);
	assert_non_null(s0);
	assert_non_null(s1);
	/* ep[0] is used again, so ep[1] is the least recently used ... */
	assert_ptr_equal(dealers_get(d, f->ep[0], err, sizeof err), s0);
	assert_non_null(dealers_get(d, f->ep[2], err, sizeof err));
	assert_int_equal(dealers_count(d), 2);
	/* ... and only ep[1] was dropped: ep[0] is still the same DEALER. */
	assert_ptr_equal(dealers_get(d, f->ep[0], err, sizeof err), s0);
	/* A dropped endpoint is dialled again on the next ask, and works. */
	s1 = dealers_get(d, f->ep[1], err, sizeof err);
	assert_non_null(s1);
	assert_int_equal(dealers_count(d), 2);
	ping_arrives(s1, f->router[1], 9, id, &n);
	dealers_close(&d);
}

static void test_a_bad_endpoint_fails_with_a_reason_and_caches_nothing(void **state)
{
	struct fixture *f = *state;
	struct dealers *d;
	char err[128], longep[KVW_MAX_STR + 32];

	assert_int_equal(dealers_open(f->ctx, 0, &d), 0);
	err[0] = '\0';
	assert_null(dealers_get(d, "nope://x", err, sizeof err));
	assert_non_null(strstr(err, "connect"));
	memset(longep, 'a', sizeof longep - 1);
	longep[sizeof longep - 1] = '\0';
	memcpy(longep, "inproc://", 9);
	err[0] = '\0';
	assert_null(dealers_get(d, longep, err, sizeof err));
	assert_non_null(strstr(err, "longer"));
	assert_int_equal(dealers_count(d), 0);
	/* The cache still serves good endpoints afterwards. */
	assert_non_null(dealers_get(d, f->ep[0], err, sizeof err));
	assert_int_equal(dealers_count(d), 1);
	dealers_close(&d);
}

static void test_a_dropped_dealer_is_closed_and_its_entry_reused(void **state)
{
	struct fixture *f = *state;
	struct dealers *d;
	uint8_t id1[WIRE_ID_MAX], id2[WIRE_ID_MAX];
	size_t n1, n2;
	char err[128];
	void *a;

	assert_int_equal(dealers_open(f->ctx, 0, &d), 0);
	a = dealers_get(d, f->ep[0], err, sizeof err);
	assert_non_null(a);
	ping_arrives(a, f->router[0], 1, id1, &n1);
	assert_non_null(dealers_get(d, f->ep[1], err, sizeof err));
	dealers_drop(d, f->ep[0]);
	dealers_drop(d, "tcp://127.0.0.1:1"); /* not cached: nothing */
	assert_int_equal(dealers_count(d), 1);
	/* Asked again, ep[0] is a new connection (the ROUTER sees another
	 * identity), and the emptied entry took it: no growth. */
	a = dealers_get(d, f->ep[0], err, sizeof err);
	assert_non_null(a);
	ping_arrives(a, f->router[0], 2, id2, &n2);
	assert_false(n1 == n2 && memcmp(id1, id2, n1) == 0);
	assert_int_equal(dealers_count(d), 2);
	for (int i = 0; i < 100; i++) {
		dealers_drop(d, f->ep[2]);
		assert_non_null(dealers_get(d, f->ep[2], err, sizeof err));
	}
	assert_int_equal(dealers_count(d), 3);
	dealers_close(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_a_dealer_is_made_once_per_endpoint_and_reaches_its_peer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_an_unbounded_cache_keeps_every_dealer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_bounded_cache_drops_the_least_recently_used, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_dropped_dealer_is_closed_and_its_entry_reused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_bad_endpoint_fails_with_a_reason_and_caches_nothing, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
