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

#include "base/kvw.h"
#include "base/proc.h"
#include "roles/hbeat.h"
#include "table/rtab.h"
#include "unit_wait.h"

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

static int teardown(void **state)
{
	(void)state;
	rtab_unlink(path);
	return 0;
}

/* The child: kv-heartbeat's main without the flags. */
static void run_heartbeat(void)
{
	struct hbeat_cfg cfg = {
		.table = path,
		.interval_ns = 50000000ull,
		.max_failures = MAX_FAILURES,
	};
	struct hbeat *h;
	char err[200];

	if (proc_signals_init() != 0 ||
	    hbeat_open(&cfg, &h, err, sizeof err) != 0)
		_exit(111);
	_exit(hbeat_run(h, err, sizeof err) == 0 ? 0 : 111);
}

static int liveness(struct rtab *t, uint32_t id, struct rtab_peer_view *v)
{
	assert_int_equal(rtab_peer_get(t, id, v), 0);
	return (int)v->liveness;
}

static void test_a_silent_peer_is_dead_after_exactly_max_failures_misses(
	void **state)
{
	struct rtab *t = NULL;
	struct rtab_peer_view v;
	struct rtab_view rv;
	struct rtab_ref live, done;
	uint32_t silent;
	char err[200], ep[128];
	long end;
	pid_t pid;
	int st;

	(void)state;
	assert_int_equal(rtab_create(path, 64, 4, 0x3333, &t, NULL, err,
				     sizeof err), 0);
	/* Nothing is bound at the endpoint: every PING goes unanswered. */
	snprintf(ep, sizeof ep, "ipc:///tmp/kvw-thbeat-%d.none", (int)getpid());
	assert_int_equal(rtab_peer_upsert(t, ep, 7, &silent, NULL), 0);
	assert_int_equal(rtab_insert(t, 1, silent, 0, &live), 0);
	assert_int_equal(rtab_insert(t, 2, silent, 0, &done), 0);
	assert_int_equal(rtab_transition(t, done, KVW_SUCCESS, KVW_R_NONE), 0);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		run_heartbeat();
	end = unit_now_s() + 30;
	while (liveness(t, silent, &v) != RTAB_PEER_DEAD && unit_now_s() < end) {
		/* a miss needs a PING timeout (50 ms): a poll, not a sync */
		const struct timespec tick = { 0, 5000000 };

		assert_true(v.misses < MAX_FAILURES);
		nanosleep(&tick, NULL);
	}
	kill(pid, SIGTERM);
	assert_int_equal(unit_waitpid(pid, &st, 10), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	assert_int_equal(liveness(t, silent, &v), RTAB_PEER_DEAD);
	assert_int_equal(v.misses, MAX_FAILURES);
	assert_int_equal(rtab_get(t, live, &rv), 0);
	assert_int_equal(rv.state, KVW_FAILED);
	assert_int_equal(rv.reason, KVW_R_PEER_DEAD);
	assert_int_equal(rtab_get(t, done, &rv), 0);
	assert_int_equal(rv.state, KVW_SUCCESS);
	rtab_close(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			test_a_silent_peer_is_dead_after_exactly_max_failures_misses,
			setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
