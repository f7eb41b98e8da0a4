/*
 * test_hbeat.c - kv-heartbeat's loop (hbeat.c) on a real table, in a
 * child process stopped with SIGTERM: a peer that never answers is DEAD
 * after exactly max_failures missed PINGs (not one more, not one fewer),
 * its live room fails with reason PEER_DEAD, and its terminal room stays
 * as it was. Counts, not times: the verdict does
 * not depend on how fast the machine is.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "unit_wait.h"
#include "base/kvw.h"
#include "base/proc.h"
#include "roles/heartbeat/hbeat.h"
#include "table/rtab.h"

#include <zmq.h>

#define MAX_FAILURES 3u

static char path[128];

static int setup(void **state)
{
	(void)state;
	snprintf(path, sizeof path, "/dev/shm/kvwire.thbeat-%d.table",
		 (int)getpid());
	rtab_unlink(path);
	return 0;
}

static pid_t child; /* a heartbeat a failed test left running */

static int teardown(void **state)
{
	(void)state;
	if (child > 0) {
		int st;

		kill(child, SIGKILL);
		(void)unit_waitpid(child, &st, 10);
		child = 0;
	}
	rtab_unlink(path);
	return 0;
}

/* The child: kv-heartbeat's main without the flags, interval 50 ms. */
static void run_heartbeat(uint32_t max_failures)
{
	struct hbeat_cfg cfg = {
		.table = path,
		.interval_ns = 50000000ull,
		.max_failures = max_failures,
	};
	struct hbeat *h;
	char err[200];

	if (proc_signals_init() != 0 ||
	    hbeat_open(&cfg, &h, err, sizeof err) != 0)
		_exit(111);
	_exit(hbeat_run(h, err, sizeof err) == 0 ? 0 : 111);
}

/* Forks the heartbeat before this process has any thread (the mute
 * peer's ZMQ context makes some: a fork then would leave the child unable
 * to start its own under TSAN). The child waits on *go until the test
 * has its table and peer ready: start_heartbeat_go releases it. */
static pid_t start_heartbeat(uint32_t max_failures, int *go)
{
	int fds[2];
	pid_t pid;
	char c;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[1]);
		if (read(fds[0], &c, 1) != 1)
			_exit(111);
		close(fds[0]);
		run_heartbeat(max_failures);
	}
	close(fds[0]);
	child = pid;
	*go = fds[1];
	return pid;
}

static void start_heartbeat_go(int go)
{
	assert_int_equal(write(go, "g", 1), 1);
	close(go);
}

static void stop_heartbeat(pid_t pid)
{
	int st;

	kill(pid, SIGTERM);
	assert_int_equal(unit_waitpid(pid, &st, 10), pid);
	child = 0;
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A peer that takes PINGs and never answers: a ROUTER bound at ep. */
struct mute {
	void *ctx, *sock;
	char ep[128];
};

/* A fresh table at `path` whose one peer (*id) is a mute one. */
static struct rtab *table_with_mute_peer(struct mute *m, uint32_t *id)
{
	struct rtab *t = NULL;
	int linger = 0, timeout = 30000; /* one generous bound per PING */
	char err[200];

	assert_int_equal(rtab_create(path, 64, 4, 0x3333, &t, NULL, err,
				     sizeof err), 0);
	snprintf(m->ep, sizeof m->ep, "ipc:///tmp/kvw-thbeat-%d.mute",
		 (int)getpid());
	m->ctx = zmq_ctx_new();
	assert_non_null(m->ctx);
	m->sock = zmq_socket(m->ctx, ZMQ_ROUTER);
	assert_non_null(m->sock);
	assert_int_equal(zmq_setsockopt(m->sock, ZMQ_LINGER, &linger,
					sizeof linger), 0);
	assert_int_equal(zmq_setsockopt(m->sock, ZMQ_RCVTIMEO, &timeout,
					sizeof timeout), 0);
	assert_int_equal(zmq_bind(m->sock, m->ep), 0);
	assert_int_equal(rtab_peer_upsert(t, m->ep, 7, id, NULL), 0);
	return t;
}

/* Takes the next PING (the ROUTER identity, then its frame parts). */
static void mute_take_ping(struct mute *m)
{
	zmq_msg_t part;
	int more = 1;

	while (more) {
		zmq_msg_init(&part);
		assert_true(zmq_msg_recv(&part, m->sock, 0) >= 0);
		more = zmq_msg_more(&part);
		zmq_msg_close(&part);
	}
}

static void mute_close(struct mute *m)
{
	zmq_close(m->sock);
	zmq_ctx_term(m->ctx);
	unlink(m->ep + strlen("ipc://"));
}

static int liveness(struct rtab *t, uint32_t id, struct rtab_peer_view *v)
{
	assert_int_equal(rtab_peer_get(t, id, v), 0);
	return (int)v->liveness;
}

/* The heartbeat counts a PING's miss before it sends the next, and the
 * peer takes that PING after it was sent: when the peer holds PING k,
 * at least k - 1 misses are counted (at most k: PING k's own may be
 * too). No clock in any verdict below: the order of the heartbeat's own
 * steps decides it. */
static void test_a_silent_peer_is_dead_after_exactly_max_failures_misses(
	void **state)
{
	struct rtab_peer_view v;
	struct rtab_view rv;
	struct rtab_ref live, done;
	struct mute m;
	uint32_t silent;
	struct rtab *t;
	int go;
	pid_t pid = start_heartbeat(MAX_FAILURES, &go);

	(void)state;
	t = table_with_mute_peer(&m, &silent);
	assert_int_equal(rtab_insert(t, 1, silent, 0, &live), 0);
	assert_int_equal(rtab_insert(t, 2, silent, 0, &done), 0);
	assert_int_equal(rtab_transition(t, done, KVW_SUCCESS, KVW_R_NONE), 0);
	start_heartbeat_go(go);
	/* Two PINGs past its death: a DEAD peer is still pinged (a PONG
	 * would revive it), but its misses no longer count. */
	for (uint32_t k = 1; k <= MAX_FAILURES + 3; k++) {
		uint32_t least = k - 1 < MAX_FAILURES ? k - 1 : MAX_FAILURES;

		mute_take_ping(&m);
		(void)liveness(t, silent, &v);
		if (v.misses < least || v.misses > MAX_FAILURES)
			fail_msg("PING %u arrived with %u misses counted",
				 k, v.misses);
		assert_int_equal(v.liveness == RTAB_PEER_DEAD,
				 v.misses == MAX_FAILURES);
	}
	stop_heartbeat(pid);
	mute_close(&m);

	assert_int_equal(liveness(t, silent, &v), RTAB_PEER_DEAD);
	assert_int_equal(v.misses, MAX_FAILURES);
	assert_int_equal(rtab_get(t, live, &rv), 0);
	assert_int_equal(rv.state, KVW_FAILED);
	assert_int_equal(rv.reason, KVW_R_PEER_DEAD);
	assert_int_equal(rtab_get(t, done, &rv), 0);
	assert_int_equal(rv.state, KVW_SUCCESS);
	rtab_close(&t);
}

/* Issue 34 item 3: every unanswered PING is a miss, never overwritten by
 * the next PING before its miss counts (a bound on misses never reached:
 * the peer stays alive and its misses keep counting). */
static void test_every_unanswered_ping_is_counted_before_the_next(void **state)
{
	struct rtab_peer_view v;
	struct mute m;
	uint32_t id;
	struct rtab *t;
	int go;
	pid_t pid = start_heartbeat(1000000u, &go);

	(void)state;
	t = table_with_mute_peer(&m, &id);
	start_heartbeat_go(go);
	for (uint32_t k = 1; k <= 40; k++) {
		mute_take_ping(&m);
		assert_int_equal(rtab_peer_get(t, id, &v), 0);
		if (v.misses + 1 < k || v.misses > k)
			fail_msg("PING %u arrived with %u misses counted",
				 k, v.misses);
	}
	stop_heartbeat(pid);
	mute_close(&m);
	rtab_close(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			test_a_silent_peer_is_dead_after_exactly_max_failures_misses,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_every_unanswered_ping_is_counted_before_the_next,
			setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
