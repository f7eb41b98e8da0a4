/*
 * test_wpoll.c - the poll(2)-based wait over ZMQ sockets, on a real inproc
 * DEALER pair. Proved: a socket is due as soon as it is set, without a
 * wait; once drained to EAGAIN a quiet socket makes the wait time out;
 * a message from the peer makes exactly that socket due and readable; a
 * touch makes a drained socket due again without sleeping; setting the
 * same socket again keeps its state, a new socket in a slot is due, an
 * empty slot never is; truncating drops slots; and a message sent while
 * the caller also sent on the same socket (the case that can swallow the
 * descriptor's signal) is still seen once the caller touches the socket;
 * a plain descriptor in a slot (wpoll_set_fd) is level-triggered.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/proc.h"
#include "wire/wire.h"
#include "wire/wpoll.h"

struct pair {
	void *ctx, *a, *b;
	struct wpoll *w;
};

static int setup(void **state)
{
	static unsigned n;
	struct pair *p = test_calloc(1, sizeof *p);
	char ep[64], err[128];

	snprintf(ep, sizeof ep, "inproc://twpoll-%u", n++);
	p->ctx = zmq_ctx_new();
	p->a = wire_socket(p->ctx, ZMQ_DEALER, 0, err, sizeof err);
	p->b = wire_socket(p->ctx, ZMQ_DEALER, 0, err, sizeof err);
	p->w = wpoll_new();
	if (!p->a || !p->b || !p->w || zmq_bind(p->a, ep) || zmq_connect(p->b, ep))
		return -1;
	*state = p;
	return 0;
}

static int teardown(void **state)
{
	struct pair *p = *state;

	wpoll_free(&p->w);
	wire_close(&p->a);
	wire_close(&p->b);
	zmq_ctx_term(p->ctx);
	test_free(p);
	return 0;
}

/* Receives from slot 0 (socket a) until EAGAIN; returns messages read. */
static int drain_a(struct pair *p)
{
	char buf[16];
	int n = 0;

	while (zmq_recv(p->a, buf, sizeof buf, ZMQ_DONTWAIT) >= 0)
		n++;
	assert_int_equal(zmq_errno(), EAGAIN);
	wpoll_drained(p->w, 0);
	return n;
}

static void test_a_new_socket_is_due_at_once_and_a_drained_quiet_one_times_out(void **state)
{
	struct pair *p = *state;
	uint64_t t0;

	assert_int_equal(wpoll_set(p->w, 0, p->a), 0);
	/* Due at once: a wait that may not block at all reports it (timed
	 * against a clock, "at once" would depend on the machine's load). */
	assert_int_equal(wpoll_wait(p->w, 0), 1);
	assert_true(wpoll_due(p->w, 0));
	assert_int_equal(drain_a(p), 0);
	assert_false(wpoll_due(p->w, 0));
	t0 = proc_now_ns();
	assert_int_equal(wpoll_wait(p->w, 50), 0);
	assert_true(proc_now_ns() - t0 >= 40000000ull);
}

static void test_a_message_from_the_peer_makes_the_socket_due(void **state)
{
	struct pair *p = *state;

	assert_int_equal(wpoll_set(p->w, 0, p->a), 0);
	assert_int_equal(drain_a(p), 0);
	assert_int_equal(zmq_send(p->b, "x", 1, 0), 1);
	assert_int_equal(wpoll_wait(p->w, 5000), 1);
	assert_true(wpoll_due(p->w, 0));
	assert_int_equal(drain_a(p), 1);
	assert_int_equal(wpoll_wait(p->w, 20), 0);
}

static void test_a_touch_makes_a_drained_socket_due_without_waiting(void **state)
{
	struct pair *p = *state;

	assert_int_equal(wpoll_set(p->w, 0, p->a), 0);
	assert_int_equal(drain_a(p), 0);
	wpoll_touch_sock(p->w, p->a);
	assert_int_equal(wpoll_wait(p->w, 5000), 1);
	assert_true(wpoll_due(p->w, 0));
	assert_int_equal(drain_a(p), 0);
	wpoll_touch_sock(p->w, p->b); /* not in the set: nothing */
	assert_int_equal(wpoll_wait(p->w, 0), 0);
	wpoll_touch_all(p->w);
	assert_int_equal(wpoll_wait(p->w, 0), 1);
}

static void test_slots_keep_state_for_the_same_socket_and_reset_for_a_new_one(void **state)
{
	struct pair *p = *state;

	assert_int_equal(wpoll_set(p->w, 0, p->a), 0);
	assert_int_equal(drain_a(p), 0);
	assert_int_equal(wpoll_set(p->w, 0, p->a), 0);
	assert_false(wpoll_due(p->w, 0));
	assert_int_equal(wpoll_set(p->w, 2, NULL), 0); /* slot 1 empty too */
	assert_false(wpoll_due(p->w, 1));
	assert_false(wpoll_due(p->w, 2));
	assert_int_equal(wpoll_wait(p->w, 0), 0);
	assert_int_equal(wpoll_set(p->w, 1, p->b), 0);
	assert_true(wpoll_due(p->w, 1));
	wpoll_truncate(p->w, 1);
	assert_false(wpoll_due(p->w, 1));
	assert_int_equal(wpoll_wait(p->w, 0), 0);
	assert_int_equal(wpoll_set(p->w, WPOLL_MAX, p->b), KVW_EINVAL);
}

/* Input that arrives while the caller sends on the same socket may be
 * taken in by the send: the touch the contract asks for finds it. */
static void test_input_around_a_send_is_found_after_the_touch(void **state)
{
	struct pair *p = *state;
	char buf[4];
	int got = 0;

	assert_int_equal(wpoll_set(p->w, 0, p->a), 0);
	assert_int_equal(drain_a(p), 0);
	for (int i = 0; i < 200; i++) {
		assert_int_equal(zmq_send(p->b, "y", 1, 0), 1);
		assert_int_equal(zmq_send(p->a, "z", 1, 0), 1);
		wpoll_touch_sock(p->w, p->a);
		/* The message is there (inproc): the caller is never left
		 * asleep on it; 5 s waits end early or the count fails. */
		while (got < i + 1 && wpoll_wait(p->w, 5000) > 0 &&
		       wpoll_due(p->w, 0))
			got += drain_a(p);
		while (zmq_recv(p->b, buf, sizeof buf, ZMQ_DONTWAIT) >= 0)
			;
		assert_int_equal(got, i + 1);
	}
}

/* A plain descriptor (a worker channel) sits beside the sockets: due
 * when set, level-triggered on input, on POLLOUT only when asked, and
 * setting the same fd again only changes its events. */
static void test_a_plain_descriptor_is_due_on_input_and_on_pollout_when_asked(void **state)
{
	struct pair *p = *state;
	int sv[2];
	char c;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	assert_int_equal(wpoll_set(p->w, 0, p->a), 0);
	assert_int_equal(drain_a(p), 0);
	assert_int_equal(wpoll_set_fd(p->w, 1, sv[0], POLLIN), 0);
	assert_true(wpoll_due(p->w, 1));
	wpoll_drained(p->w, 1);
	assert_int_equal(wpoll_wait(p->w, 20), 0); /* nothing to read */
	assert_int_equal(write(sv[1], "ab", 2), 2);
	assert_int_equal(wpoll_wait(p->w, 5000), 1);
	assert_true(wpoll_due(p->w, 1));
	assert_false(wpoll_due(p->w, 0));
	assert_int_equal(read(sv[0], &c, 1), 1);
	wpoll_drained(p->w, 1);
	/* Level-triggered: a byte left behind makes it due again. */
	assert_int_equal(wpoll_wait(p->w, 5000), 1);
	assert_true(wpoll_due(p->w, 1));
	assert_int_equal(read(sv[0], &c, 1), 1);
	wpoll_drained(p->w, 1);
	/* Same fd, POLLOUT asked: due at once (the buffer has room), and
	 * the state was kept (not marked due by the set itself). */
	assert_int_equal(wpoll_set_fd(p->w, 1, sv[0], POLLIN | POLLOUT), 0);
	assert_false(wpoll_due(p->w, 1));
	assert_int_equal(wpoll_wait(p->w, 5000), 1);
	assert_true(wpoll_due(p->w, 1));
	wpoll_drained(p->w, 1);
	assert_int_equal(wpoll_set_fd(p->w, 1, sv[0], POLLIN), 0);
	assert_int_equal(wpoll_wait(p->w, 20), 0);
	/* fd -1: an empty slot that is never due. */
	assert_int_equal(wpoll_set_fd(p->w, 1, -1, POLLIN), 0);
	assert_false(wpoll_due(p->w, 1));
	assert_int_equal(write(sv[1], "c", 1), 1);
	assert_int_equal(wpoll_wait(p->w, 20), 0);
	assert_int_equal(wpoll_set_fd(p->w, WPOLL_MAX, sv[0], POLLIN), KVW_EINVAL);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_a_new_socket_is_due_at_once_and_a_drained_quiet_one_times_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_message_from_the_peer_makes_the_socket_due, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_touch_makes_a_drained_socket_due_without_waiting, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slots_keep_state_for_the_same_socket_and_reset_for_a_new_one, setup, teardown),
		cmocka_unit_test_setup_teardown(test_input_around_a_send_is_found_after_the_touch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_plain_descriptor_is_due_on_input_and_on_pollout_when_asked, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
