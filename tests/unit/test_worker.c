/*
 * test_worker.c - one kv-sender worker (worker_run, in a child process)
 * driven through its channel by the test playing the control, on a real
 * table and pool in /dev/shm. Proved: a JOB whose transfer fails (its
 * descriptor names a decode pool that does not exist) is answered by a
 * JOB_DONE whose result is the failure (negative) with reason transfer,
 * the room is failed in the table with that reason and its outstanding
 * count given back; and a JOB for a room that ended is answered with
 * KVW_ESTALE, the room untouched. The control acts on JOB_DONE's result
 * (sender_xfer.c job_answered): a failure there is what makes it tell
 * the destinations, so a result forced to success would be a lie.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "unit_wait.h"
#include "base/kvw.h"
#include "mem/pool.h"
#include "roles/sender/worker.h"
#include "table/rtab.h"
#include "wire/chan.h"
#include "wire/frame.h"

#define ROOM 77u

struct fx {
	char table[96], pool[96];
	struct rtab *t;
	struct pool *p;
	struct chan ch;
	pid_t pid;
};

static int setup(void **state)
{
	struct fx *f = test_calloc(1, sizeof *f);
	char err[200];
	int fds[2];

	snprintf(f->table, sizeof f->table, "/dev/shm/kvwire.tworker-%d.table",
		 (int)getpid());
	snprintf(f->pool, sizeof f->pool, "/dev/shm/kvwire.tworker-%d.pool",
		 (int)getpid());
	rtab_unlink(f->table);
	pool_unlink(f->pool);
	if (rtab_create(f->table, 64, 4, 0x4444, &f->t, NULL, err,
			sizeof err) != 0 ||
	    pool_create(f->pool, 1 << 20, &f->p, err, sizeof err) != 0 ||
	    chan_pair(fds) != 0) {
		fprintf(stderr, "setup: %s\n", err);
		return -1;
	}
	f->pid = fork();
	if (f->pid < 0)
		return -1;
	if (f->pid == 0) {
		struct worker_cfg cfg = { .id = 1, .job_fd = fds[1],
					  .table = f->table, .pool = f->pool,
					  .transport = "shm" };

		close(fds[0]);
		_exit(worker_run(&cfg, err, sizeof err) == 0 ? 0 : 111);
	}
	close(fds[1]);
	chan_init(&f->ch, fds[0]);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int st;

	chan_close(&f->ch); /* the worker ends with its channel */
	kill(f->pid, SIGTERM);
	(void)unit_waitpid(f->pid, &st, 10);
	rtab_close(&f->t);
	pool_close(&f->p);
	rtab_unlink(f->table);
	pool_unlink(f->pool);
	test_free(f);
	return 0;
}

/* The next frame from the worker, within 20 s. */
static void recv_within(struct fx *f, struct frame_msg *m)
{
	long end = unit_now_s() + 20;
	char why[200];
	int rc;

	while ((rc = chan_recv(&f->ch, m, why, sizeof why)) == KVW_EAGAIN) {
		struct pollfd p = { f->ch.fd, POLLIN, 0 };

		assert_true(unit_now_s() < end);
		(void)poll(&p, 1, 200);
	}
	assert_int_equal(rc, 0);
}

/* A Waiting room with one job outstanding, as the control leaves it
 * before it sends the JOB. */
static struct rtab_ref waiting_room(struct fx *f)
{
	struct rtab_ref ref;

	assert_int_equal(rtab_insert(f->t, ROOM, 0, 0, &ref), 0);
	assert_int_equal(rtab_transition(f->t, ref, KVW_WAITING, 0), 0);
	assert_int_equal(rtab_outstanding_add(f->t, ref, 1), 1);
	return ref;
}

/* Sends the worker one JOB for ref whose one copy goes to the decode pool
 * `target` names (a shm descriptor, xport_shm.c's layout). */
static void send_job(struct fx *f, struct rtab_ref ref, const char *target)
{
	struct frame_copy c = { 0, 0, 4096 };
	struct frame_msg m;
	uint8_t desc[256] = "KVSH";
	size_t n = strlen(target);
	char why[200];

	desc[4] = 1;
	desc[6] = (uint8_t)n;
	desc[9] = 0x10; /* size 1 MiB; dev and ino 0 */
	memcpy(desc + 32, target, n);
	frame_msg_init(&m, FRAME_JOB, 0, ROOM, 1);
	m.u.job.slot = ref.slot;
	m.u.job.generation = ref.gen;
	m.u.job.peer = 1;
	m.u.job.flags = FRAME_JOB_LAST;
	m.u.job.token = 9;
	m.u.job.desc.p = desc;
	m.u.job.desc.len = (uint32_t)(32 + n);
	m.u.job.copies = frame_copies_of(&c, 1);
	assert_int_equal(chan_send(&f->ch, &m, why, sizeof why), 0);
	while (chan_pending(&f->ch))
		assert_true(chan_flush(&f->ch) >= 0);
}

static void test_a_failed_transfer_is_answered_with_its_failure(void **state)
{
	struct fx *f = *state;
	struct rtab_ref ref;
	struct rtab_view v;
	struct frame_msg m;

	recv_within(f, &m);
	assert_int_equal(m.hdr.type, FRAME_PONG); /* the worker's hello */
	ref = waiting_room(f);
	send_job(f, ref, "/dev/shm/kvwire.tworker-no-such.pool");
	recv_within(f, &m);
	assert_int_equal(m.hdr.type, FRAME_JOB_DONE);
	assert_int_equal(m.hdr.room, ROOM);
	assert_int_equal(m.u.job_done.count, 1);
	assert_int_equal(m.u.job_done.slot, ref.slot);
	assert_true(m.u.job_done.result < 0);
	assert_int_not_equal(m.u.job_done.result, KVW_ESTALE);
	assert_int_equal(m.u.job_done.reason, KVW_R_TRANSFER);
	assert_int_equal(rtab_get(f->t, ref, &v), 0);
	assert_int_equal(v.state, KVW_FAILED);
	assert_int_equal(v.reason, KVW_R_TRANSFER);
	assert_int_equal(v.outstanding, 0);
}

static void test_a_job_for_an_ended_room_is_answered_stale(void **state)
{
	struct fx *f = *state;
	struct rtab_ref ref;
	struct rtab_view v;
	struct frame_msg m;

	recv_within(f, &m);
	assert_int_equal(m.hdr.type, FRAME_PONG);
	ref = waiting_room(f);
	assert_int_equal(rtab_fail(f->t, ref, KVW_R_ABORTED), 0);
	send_job(f, ref, "/dev/shm/kvwire.tworker-no-such.pool");
	recv_within(f, &m);
	assert_int_equal(m.hdr.type, FRAME_JOB_DONE);
	assert_int_equal(m.u.job_done.result, KVW_ESTALE);
	assert_int_equal(m.u.job_done.reason, KVW_R_NONE);
	assert_int_equal(rtab_get(f->t, ref, &v), 0);
	assert_int_equal(v.state, KVW_FAILED);
	assert_int_equal(v.reason, KVW_R_ABORTED);
	assert_int_equal(v.outstanding, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			test_a_failed_transfer_is_answered_with_its_failure,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_a_job_for_an_ended_room_is_answered_stale,
			setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
