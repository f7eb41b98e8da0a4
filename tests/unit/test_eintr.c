/*
 * test_eintr.c - a signal is not a dead socket (issue 12, item 9), over
 * real libzmq: a thread keeps interrupting the caller with a signal whose
 * handler is installed without SA_RESTART (as proc_signals_init installs
 * SIGCHLD's and SIGTERM's), while the caller is blocked in bootc_call's
 * zmq_poll waiting for a reply that the responder only sends once 50 of
 * those signals were handled. Proved: the call still returns the reply
 * (zmq_poll's EINTR waited again, the DONTWAIT send and receive around
 * it tried again), with every signal handled during the call. Checked
 * against the bug: with an EINTR taken for an error the call fails.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "unit_wait.h"
#include "roles/bootstrap/bootc.h"
#include "wire/frame.h"
#include "wire/wire.h"

#define SIGNALS 50
#define EP "inproc://teintr"

static atomic_int handled;

static void on_usr1(int sig)
{
	(void)sig;
	atomic_fetch_add(&handled, 1);
}

struct storm {
	pthread_t target;
	void *ctx;
	atomic_int bound, stop;
	const char *resp_err; /* the responder's failure, NULL when none */
};

/* One millisecond between signals: the storm's rate, not a sync. */
static const struct timespec tick = { 0, 1000000 };

/* Signals the target thread until told to stop. */
static void *signaller(void *arg)
{
	struct storm *s = arg;

	while (!atomic_load(&s->stop)) {
		pthread_kill(s->target, SIGUSR1);
		nanosleep(&tick, NULL);
	}
	return NULL;
}

/* Answers one PING with a PONG, once SIGNALS signals were handled;
 * gives up (resp_err) when the caller stopped waiting. */
static void *responder(void *arg)
{
	struct storm *s = arg;
	char err[128];
	void *r = wire_socket(s->ctx, ZMQ_ROUTER, 0, err, sizeof err);
	struct wire_in in;
	struct frame_msg m, pong;
	int rc = KVW_EAGAIN;

	s->resp_err = "bind";
	if (!r || wire_bind(r, EP, 0, err, sizeof err)) {
		atomic_store(&s->bound, -1);
		return NULL;
	}
	atomic_store(&s->bound, 1);
	s->resp_err = "no PING";
	while (!atomic_load(&s->stop)) {
		zmq_pollitem_t it = { r, 0, ZMQ_POLLIN, 0 };

		if (zmq_poll(&it, 1, 100) < 1)
			continue;
		rc = wire_recv(r, 1, &in, &m, err, sizeof err);
		if (rc == 0 && m.hdr.type == FRAME_PING)
			break;
		if (rc == 0)
			wire_in_release(&in);
		rc = KVW_EAGAIN;
	}
	while (rc == 0 && atomic_load(&handled) < SIGNALS &&
	       !atomic_load(&s->stop))
		nanosleep(&tick, NULL); /* a bounded poll of the count */
	if (rc == 0) {
		frame_msg_init(&pong, FRAME_PONG, 0, m.hdr.room, 0x77);
		rc = wire_send(r, &pong, in.id, in.idlen, err, sizeof err);
		s->resp_err = rc ? "send" : NULL;
		wire_in_release(&in);
	}
	wire_close(&r);
	return NULL;
}

static void test_bootc_call_gets_its_reply_through_a_storm_of_signals(void **state)
{
	struct storm s = { .target = pthread_self() };
	struct sigaction sa, old;
	struct frame_msg req, reply;
	struct wire_in in;
	pthread_t sig_th, resp_th;
	sigset_t block, prev;
	char err[256] = "";
	int rc;

	(void)state;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; /* no SA_RESTART: a blocked call returns EINTR */
	assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
	s.ctx = zmq_ctx_new();
	assert_non_null(s.ctx);
	/* Only this thread takes the signal: the helpers (and the libzmq
	 * threads the context starts from now on) block it. */
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &block, &prev);
	assert_int_equal(pthread_create(&resp_th, NULL, responder, &s), 0);
	while (atomic_load(&s.bound) == 0)
		nanosleep(&tick, NULL); /* a poll until the responder is bound */
	assert_int_equal(atomic_load(&s.bound), 1);
	assert_int_equal(pthread_create(&sig_th, NULL, signaller, &s), 0);
	pthread_sigmask(SIG_SETMASK, &prev, NULL);

	frame_msg_init(&req, FRAME_PING, 0, 31, 0x55);
	rc = bootc_call(s.ctx, EP, &req, &reply, &in, 20000, err, sizeof err);
	atomic_store(&s.stop, 1);
	assert_int_equal(unit_join(sig_th, 10), 0);
	assert_int_equal(unit_join(resp_th, 10), 0);
	if (rc)
		fprintf(stderr, "bootc_call: %d %s (responder: %s)\n", rc, err,
			s.resp_err ? s.resp_err : "ok");
	assert_int_equal(rc, 0);
	assert_null(s.resp_err);
	assert_int_equal(reply.hdr.type, FRAME_PONG);
	assert_int_equal(reply.hdr.room, 31);
	assert_true(reply.hdr.epoch == 0x77);
	wire_in_release(&in);
	assert_true(atomic_load(&handled) >= SIGNALS);
	assert_int_equal(sigaction(SIGUSR1, &old, NULL), 0);
	assert_int_equal(zmq_ctx_term(s.ctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bootc_call_gets_its_reply_through_a_storm_of_signals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
