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

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "unit_wait.h"
#include "base/kvw.h"
#include "base/proc.h"
#include "roles/heartbeat/hbeat.h"
#include "table/rtab.h"
#include "wire/frame.h"
#include "wire/wire.h"

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

#define ANSWERERS_MAX 2000u /* the most answering peers a test makes */

/* The files a test makes in /tmp, named by this process: the mute peer's
 * and answerer i's ipc:// endpoints, and the heartbeat's log. */
static void mute_ep(char *buf, size_t len)
{
	snprintf(buf, len, "ipc:///tmp/kvw-thbeat-%d.mute", (int)getpid());
}

static void answer_ep(char *buf, size_t len, uint32_t i)
{
	snprintf(buf, len, "ipc:///tmp/kvw-thb%d.%u", (int)getpid(), i);
}

static void log_path(char *buf, size_t len)
{
	snprintf(buf, len, "/tmp/kvw-thb%d.log", (int)getpid());
}

/* The sockets and log of a test that failed before it closed them: a
 * failed test leaves nothing behind. */
static void remove_leftovers(void)
{
	char f[128];

	mute_ep(f, sizeof f);
	unlink(f + strlen("ipc://"));
	log_path(f, sizeof f);
	unlink(f);
	for (uint32_t i = 0; i < ANSWERERS_MAX; i++) {
		answer_ep(f, sizeof f, i);
		unlink(f + strlen("ipc://"));
	}
}

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
	remove_leftovers();
	return 0;
}

/* How the child runs: kv-heartbeat's main without the flags. */
struct hb_run {
	uint32_t max_failures;
	uint64_t interval_ns;  /* 0: 50 ms */
	rlim_t soft, hard;     /* open files at start (0: as inherited) */
	const char *log;       /* its stderr (NULL: inherited) */
};

static void run_heartbeat_as(const struct hb_run *r)
{
	struct hbeat_cfg cfg = {
		.table = path,
		.interval_ns = r->interval_ns ? r->interval_ns : 50000000ull,
		.max_failures = r->max_failures,
	};
	struct hbeat *h;
	char err[200];

	if (r->log) {
		int fd = open(r->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
			_exit(111);
		close(fd);
	}
	if (r->soft) {
		struct rlimit rl = { r->soft, r->hard ? r->hard : r->soft };

		if (!r->hard && getrlimit(RLIMIT_NOFILE, &rl) == 0)
			rl.rlim_cur = r->soft;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			_exit(111);
	}
	(void)proc_raise_nofile(); /* as kv-heartbeat's main does */
	if (proc_signals_init() != 0 ||
	    hbeat_open(&cfg, &h, err, sizeof err) != 0)
		_exit(111);
	_exit(hbeat_run(h, err, sizeof err) == 0 ? 0 : 111);
}

/* Forks the heartbeat before this process has any thread (the mute
 * peer's ZMQ context makes some: a fork then would leave the child unable
 * to start its own under TSAN). The child waits on *go until the test
 * has its table and peer ready: start_heartbeat_go releases it. */
static pid_t start_heartbeat_as(const struct hb_run *r, int *go)
{
	int fds[2];
	pid_t pid, parent;
	char c;

	assert_int_equal(pipe(fds), 0);
	parent = getpid();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Dies with this process: a test process that exits without
		 * its teardown (the unit bound's second alarm, a sanitizer's
		 * exit) must not leave a heartbeat running, holding the unit
		 * runner's output pipe open for ever. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 ||
		    getppid() != parent)
			_exit(111);
		close(fds[1]);
		if (read(fds[0], &c, 1) != 1)
			_exit(111);
		close(fds[0]);
		run_heartbeat_as(r);
	}
	close(fds[0]);
	child = pid;
	*go = fds[1];
	return pid;
}

static pid_t start_heartbeat(uint32_t max_failures, int *go)
{
	struct hb_run r = { .max_failures = max_failures };

	return start_heartbeat_as(&r, go);
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
	mute_ep(m->ep, sizeof m->ep);
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

/* ---- many peers (issue 34 item 4) ---------------------------------- */

#define MANY 2000u     /* peers of one heartbeat */
_Static_assert(MANY <= ANSWERERS_MAX, "teardown removes every answerer's socket");
#define EPOCH 7u

/* Peers that answer every PING: one ROUTER bound at n ipc endpoints (a
 * thread of this process), PONGs with the epoch the table knows. */
struct answerer {
	void *ctx, *sock;
	uint32_t n;
	pthread_t th;
	atomic_uint stop;
	/* Kills (one peer, its table): while muted, PINGs go unanswered and
	 * are counted; at the (max_failures + 1)th, verdict says whether the
	 * table already had it DEAD (1) or not (0); -1 until then. */
	struct rtab *t;
	uint32_t max_failures;
	atomic_uint muted, after;
	atomic_int verdict;
};

static void *answer_main(void *arg)
{
	struct answerer *a = arg;

	while (!atomic_load(&a->stop)) {
		zmq_pollitem_t it = { .socket = a->sock, .events = ZMQ_POLLIN };
		struct wire_in in;
		struct frame_msg m, r;
		char why[200];

		if (zmq_poll(&it, 1, 50) <= 0)
			continue;
		while (wire_recv(a->sock, 1, &in, &m, why, sizeof why) == 0) {
			if (m.hdr.type == FRAME_PING && atomic_load(&a->muted)) {
				struct rtab_peer_view v;

				if (atomic_fetch_add(&a->after, 1) + 1 ==
				    a->max_failures + 1)
					atomic_store(
					    &a->verdict,
					    rtab_peer_get(a->t, 1, &v) == 0 &&
						v.liveness == RTAB_PEER_DEAD);
			} else if (m.hdr.type == FRAME_PING) {
				frame_msg_init(&r, FRAME_PONG, 0, m.hdr.room,
					       EPOCH);
				(void)wire_send(a->sock, &r, in.id, in.idlen,
						why, sizeof why);
			}
			wire_in_release(&in);
		}
	}
	return NULL;
}

/* A fresh table of n peers, all answered by a. */
static struct rtab *table_with_answerers(struct answerer *a, uint32_t n)
{
	struct rtab *t = NULL;
	int linger = 0;
	char err[200], ep[128];

	assert_int_equal(rtab_create(path, 64, 4096, 0x3333, &t, NULL, err,
				     sizeof err), 0);
	a->n = n;
	a->ctx = zmq_ctx_new();
	assert_non_null(a->ctx);
	a->sock = zmq_socket(a->ctx, ZMQ_ROUTER);
	assert_non_null(a->sock);
	assert_int_equal(zmq_setsockopt(a->sock, ZMQ_LINGER, &linger,
					sizeof linger), 0);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id;

		answer_ep(ep, sizeof ep, i);
		assert_int_equal(zmq_bind(a->sock, ep), 0);
		assert_int_equal(rtab_peer_upsert(t, ep, EPOCH, &id, NULL), 0);
	}
	assert_int_equal(pthread_create(&a->th, NULL, answer_main, a), 0);
	return t;
}

static void answerers_close(struct answerer *a)
{
	char ep[128];

	atomic_store(&a->stop, 1);
	assert_int_equal(unit_join(a->th, 30), 0);
	zmq_close(a->sock);
	zmq_ctx_term(a->ctx);
	for (uint32_t i = 0; i < a->n; i++) {
		answer_ep(ep, sizeof ep, i);
		unlink(ep + strlen("ipc://"));
	}
}

/* Peers of t by liveness: [UNKNOWN, ALIVE, DEAD]. */
static void count_liveness(struct rtab *t, uint32_t n, uint32_t out[3])
{
	out[0] = out[1] = out[2] = 0;
	for (uint32_t id = 1; id <= n; id++) {
		struct rtab_peer_view v;

		assert_int_equal(rtab_peer_get(t, id, &v), 0);
		out[v.liveness < 3 ? v.liveness : 2]++;
	}
}

/* Waits (a poll with a generous bound: it gives up, it never decides)
 * until done(t, arg) holds. */
static void wait_until(int (*done)(struct rtab *, void *),
		       struct rtab *t, void *arg, const char *what)
{
	const struct timespec tick = { 0, 10000000 };
	long end = unit_now_s() + 120;

	while (!done(t, arg)) {
		if (unit_now_s() > end)
			fail_msg("gave up waiting for %s", what);
		nanosleep(&tick, NULL);
	}
}

static int peer1_alive(struct rtab *t, void *arg)
{
	struct rtab_peer_view v;

	(void)arg;
	return rtab_peer_get(t, 1, &v) == 0 && v.liveness == RTAB_PEER_ALIVE;
}

static int has_verdict(struct rtab *t, void *arg)
{
	(void)t;
	return atomic_load(&((struct answerer *)arg)->verdict) >= 0;
}

/* Issue 34 item 3's bound, 20 times: a peer that stops answering at a
 * random phase of the interval is DEAD by the time it holds its
 * (max_failures + 1)th unanswered PING: within interval x (max_failures
 * + 1) of its last answer, counted in the heartbeat's own PINGs, so no
 * clock and no load decides it. Each time it answers again and is
 * ALIVE again. (A late PONG of an earlier PING used to settle the newer
 * one, whose miss then never counted.) */
static void test_twenty_kills_at_random_phases_each_dead_within_the_bound(
	void **state)
{
	struct hb_run r = { .max_failures = 2, .interval_ns = 100000000ull };
	struct answerer a = { 0 };
	struct rtab *t;
	int go;
	pid_t pid;

	(void)state;
	pid = start_heartbeat_as(&r, &go);
	atomic_store(&a.verdict, -1);
	a.max_failures = r.max_failures;
	t = table_with_answerers(&a, 1);
	a.t = t;
	start_heartbeat_go(go);
	srand((unsigned)getpid());
	for (int kill = 1; kill <= 20; kill++) {
		/* The phase: anywhere in the interval after an answer. */
		struct timespec phase = { 0, (long)(rand() % 100) * 1000000L };

		wait_until(peer1_alive, t, NULL, "peer 1 ALIVE");
		nanosleep(&phase, NULL);
		atomic_store(&a.verdict, -1);
		atomic_store(&a.after, 0);
		atomic_store(&a.muted, 1);
		wait_until(has_verdict, t, &a, "the verdict on a stopped peer");
		if (atomic_load(&a.verdict) != 1)
			fail_msg("kill %d: PING %u after the peer stopped, and "
				 "it is not DEAD", kill, r.max_failures + 1);
		atomic_store(&a.muted, 0); /* it comes back */
	}
	wait_until(peer1_alive, t, NULL, "peer 1 ALIVE");
	stop_heartbeat(pid);
	answerers_close(&a);
	rtab_close(&t);
}

/* This process needs an fd per listener and per accepted connection. */
static int fds_for(uint32_t n)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 0;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
	return getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
	       (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= 2 * n + 256);
}

static int all_alive(struct rtab *t, void *arg)
{
	uint32_t n[3];

	count_liveness(t, MANY, n);
	(void)arg;
	return n[1] == MANY;
}

/* 2,000 peers under a soft limit of 1,024 open files at start: the
 * heartbeat raises it (as every member does) and watches them all on one
 * socket, so every one is pinged, answers and is ALIVE. A DEALER per peer
 * stopped at ZMQ's 1,023 sockets: 977 were never pinged (UNKNOWN) and the
 * wait gives up. So many misses make a peer dead here that no slowness of
 * the machine can reach them while the test runs: whether every peer is
 * watched is the verdict, not how fast 2,000 connections come up. */
static void test_two_thousand_peers_under_a_1024_soft_limit_all_watched(
	void **state)
{
	struct hb_run r = { .max_failures = 1000000u,
			    .interval_ns = 200000000ull, .soft = 1024 };
	struct answerer a = { 0 };
	uint32_t n[3];
	struct rtab *t;
	int go;
	pid_t pid;

	(void)state;
	if (!fds_for(MANY))
		skip(); /* the machine's hard limit leaves no room for 4,000 */
	pid = start_heartbeat_as(&r, &go);
	t = table_with_answerers(&a, MANY);
	start_heartbeat_go(go);
	wait_until(all_alive, t, NULL, "every peer ALIVE");
	count_liveness(t, MANY, n);
	stop_heartbeat(pid);
	answerers_close(&a);
	assert_int_equal(n[2], 0);
	rtab_close(&t);
}

#define FEW_FDS 400u  /* open files of a heartbeat that cannot watch all */
#define OVER 600u     /* its peers */

/* The heartbeat's log (up to 64 KiB). */
static void log_read(const char *log, char *buf, size_t cap)
{
	ssize_t got = -1;
	int fd = open(log, O_RDONLY);

	if (fd >= 0) {
		got = read(fd, buf, cap - 1);
		close(fd);
	}
	buf[got > 0 ? got : 0] = '\0';
}

struct over_wait {
	const char *log;
	uint32_t room; /* the connections the heartbeat planned (its log) */
};

/* The heartbeat said how many peers it has room for and that one is not
 * watched, and that many peers are ALIVE. */
static int over_settled(struct rtab *t, void *arg)
{
	struct over_wait *w = arg;
	static char buf[65536];
	const char *at;
	uint32_t n[3];

	log_read(w->log, buf, sizeof buf);
	at = strstr(buf, "room for ");
	if (!at || sscanf(at, "room for %u peer connections", &w->room) != 1 ||
	    !strstr(buf, "not watched: the open-file limit (RLIMIT_NOFILE 400)"))
		return 0;
	count_liveness(t, OVER, n);
	return n[1] == w->room;
}

/* Fewer open files than peers, even at the hard limit: the peers beyond
 * them are not watched, with an error that names the limit, and never
 * declared dead for it: not one miss is counted against them (no PING
 * goes to a peer without a connection). The others are all watched. */
static void test_out_of_open_files_is_an_error_naming_the_limit_not_a_death(
	void **state)
{
	char log[128];
	struct hb_run r = { .max_failures = 1000000u,
			    .interval_ns = 200000000ull, .soft = FEW_FDS,
			    .hard = FEW_FDS, .log = log };
	struct over_wait w = { log, 0 };
	struct answerer a = { 0 };
	uint32_t n[3];
	struct rtab *t;
	int go;
	pid_t pid;

	(void)state;
	log_path(log, sizeof log);
	if (!fds_for(OVER))
		skip();
	pid = start_heartbeat_as(&r, &go);
	t = table_with_answerers(&a, OVER);
	start_heartbeat_go(go);
	wait_until(over_settled, t, &w, "the planned peers ALIVE");
	stop_heartbeat(pid);
	answerers_close(&a);
	unlink(log);
	count_liveness(t, OVER, n);
	assert_true(w.room > 0 && w.room < OVER - 100);
	assert_int_equal(n[1], w.room);        /* the planned ones watched */
	assert_int_equal(n[2], 0);             /* none dead */
	assert_int_equal(n[0], OVER - w.room); /* the rest not watched */
	for (uint32_t id = 1; id <= OVER; id++) {
		struct rtab_peer_view v;

		assert_int_equal(rtab_peer_get(t, id, &v), 0);
		if (v.liveness == RTAB_PEER_UNKNOWN && v.misses != 0)
			fail_msg("unwatched peer %u has %u misses", id,
				 v.misses);
	}
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
		cmocka_unit_test_setup_teardown(
			test_twenty_kills_at_random_phases_each_dead_within_the_bound,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_two_thousand_peers_under_a_1024_soft_limit_all_watched,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_out_of_open_files_is_an_error_naming_the_limit_not_a_death,
			setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
