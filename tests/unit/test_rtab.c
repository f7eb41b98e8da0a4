/*
 * test_rtab.c - the room table on real files in /dev/shm (unique names,
 * unlinked at the end): every pair of the 6x6 legal table driven through
 * rtab_transition on a real room; terminal rooms, stale refs, reuse after
 * CLEAR, EEXIST / EAGAIN / ENOMEM; collision chains against a model under
 * random inserts, clears and tombstone reuse; files of the wrong magic,
 * version, geometry or size; read-only mappings; owner restart; peers;
 * deadlines; and a multi-process stress run (one owner, three others,
 * >= 1,000,000 operations) whose every process checks the invariants as it
 * goes and counts violations in shared memory.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "table/rtab.h"
#include "unit_wait.h"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

/* ---- fixtures ---- */

static char errbuf[256];
static char made[64][160]; /* every path handed out, unlinked at the end */
static unsigned nmade;

static void tmp_path(char *buf, size_t len, const char *what)
{
	snprintf(buf, len, "/dev/shm/kvwire.test-rtab.%ld.%u.%s.rooms",
		 (long)getpid(), nmade, what);
	if (nmade < 64)
		snprintf(made[nmade++], sizeof(made[0]), "%s", buf);
	unlink(buf);
}

/* Group teardown: a failed test leaves no file behind. */
static int unlink_all(void **state)
{
	(void)state;
	for (unsigned i = 0; i < nmade; i++)
		unlink(made[i]);
	return 0;
}

struct fx {
	char path[160];
	struct rtab *t;
};

static struct fx *fx_new(const char *what, uint32_t cap, uint32_t peers)
{
	struct fx *f = calloc(1, sizeof(*f));
	int existed = -1;

	assert_non_null(f);
	tmp_path(f->path, sizeof(f->path), what);
	assert_int_equal(rtab_create(f->path, cap, peers, 0x1111, &f->t,
				     &existed, errbuf, sizeof(errbuf)),
			 0);
	assert_int_equal(existed, 0);
	return f;
}

static void fx_free(struct fx *f)
{
	rtab_close(&f->t);
	assert_null(f->t);
	rtab_unlink(f->path);
	free(f);
}

static struct rtab_ref must_insert(struct rtab *t, uint64_t room)
{
	struct rtab_ref r;

	assert_int_equal(rtab_insert(t, room, 0, 0, &r), 0);
	return r;
}

/* A path of legal moves from Bootstrapping to each state. */
static void drive_to(struct rtab *t, struct rtab_ref r, unsigned st)
{
	switch (st) {
	case KVW_BOOTSTRAPPING:
		break;
	case KVW_CLEARED:
		assert_int_equal(rtab_transition(t, r, KVW_FAILED, KVW_R_ABORTED), 0);
		assert_int_equal(rtab_transition(t, r, KVW_CLEARED, 0), 0);
		break;
	default:
		assert_int_equal(rtab_transition(t, r, st, KVW_R_ABORTED), 0);
	}
	assert_int_equal(rtab_state(t, r), (int)st);
}

static const unsigned char want_legal[KVW_NSTATES][KVW_NSTATES] = {
	/* to:            F  B  W  T  S  C */
	[KVW_FAILED] =  { 0, 0, 0, 0, 0, 1 },
	[KVW_BOOTSTRAPPING] = { 1, 0, 1, 1, 1, 0 },
	[KVW_WAITING] = { 1, 0, 0, 1, 1, 0 },
	[KVW_TRANSFERRING] = { 1, 0, 0, 0, 1, 0 },
	[KVW_SUCCESS] = { 0, 0, 0, 0, 0, 1 },
	[KVW_CLEARED] = { 0, 0, 0, 0, 0, 0 },
};

/* ---- the state machine ---- */

static void test_legal_table_is_the_designed_one(void **state)
{
	(void)state;
	for (unsigned a = 0; a < KVW_NSTATES; a++)
		for (unsigned b = 0; b < KVW_NSTATES; b++)
			assert_int_equal(rtab_legal(a, b), want_legal[a][b]);
	assert_int_equal(rtab_legal(KVW_NSTATES, KVW_CLEARED), 0);
	assert_int_equal(rtab_legal(KVW_BOOTSTRAPPING, 200), 0);
}

/* The accept table of rtab_states.def, as the handlers use it: the masks
 * of states in which each role acts on each message. */
static void test_accept_table_is_the_designed_one(void **state)
{
	const unsigned live = RTAB_M_ACTIVE;
	const struct {
		unsigned role, msg, mask;
	} want[] = {
		{ RTAB_ROLE_DECODE, RTAB_MSG_STATUS, live },
		{ RTAB_ROLE_DECODE, RTAB_MSG_ABORT_ACK, RTAB_M(KVW_FAILED) },
		{ RTAB_ROLE_PREFILL, RTAB_MSG_XFER_INFO,
		  RTAB_M(KVW_BOOTSTRAPPING) | RTAB_M(KVW_WAITING) },
		{ RTAB_ROLE_PREFILL, RTAB_MSG_SEND_CHUNK,
		  RTAB_M(KVW_WAITING) | RTAB_M(KVW_TRANSFERRING) },
		{ RTAB_ROLE_PREFILL, RTAB_MSG_ABORT, RTAB_M_ANY },
		{ RTAB_ROLE_WORKER, RTAB_MSG_JOB,
		  RTAB_M(KVW_WAITING) | RTAB_M(KVW_TRANSFERRING) },
	};
	unsigned n = 0;

	(void)state;
	for (unsigned r = 0; r < RTAB_NROLES; r++)
		for (unsigned m = 0; m < RTAB_NMSGS; m++) {
			unsigned mask = 0;

			for (unsigned i = 0; i < sizeof want / sizeof want[0]; i++)
				if (want[i].role == r && want[i].msg == m)
					mask = want[i].mask;
			for (unsigned st = 0; st < KVW_NSTATES; st++) {
				assert_int_equal(rtab_accepts(r, st, m),
						 (mask & RTAB_M(st)) != 0);
				n += (mask & RTAB_M(st)) != 0;
			}
		}
	assert_int_equal(n, 16);
	assert_int_equal(rtab_accepts(RTAB_NROLES, KVW_WAITING, RTAB_MSG_JOB), 0);
	assert_int_equal(rtab_accepts(RTAB_ROLE_WORKER, KVW_NSTATES, RTAB_MSG_JOB), 0);
	assert_int_equal(rtab_accepts(RTAB_ROLE_WORKER, KVW_WAITING, RTAB_NMSGS), 0);
	assert_string_equal(rtab_role_str(RTAB_ROLE_WORKER), "WORKER");
	assert_string_equal(rtab_msg_str(RTAB_MSG_ABORT_ACK), "ABORT_ACK");
	assert_string_equal(rtab_msg_str(RTAB_NMSGS), "?");
}

static void test_every_pair_through_transition_on_a_real_room(void **state)
{
	struct fx *f = fx_new("pairs", 128, 4);
	uint64_t room = 1000;

	(void)state;
	for (unsigned from = 0; from < KVW_NSTATES; from++) {
		for (unsigned to = 0; to < KVW_NSTATES; to++) {
			struct rtab_ref r = must_insert(f->t, room++);
			struct rtab_view before, after;
			int rc;

			drive_to(f->t, r, from);
			assert_int_equal(rtab_get(f->t, r, &before), 0);
			rc = rtab_transition(f->t, r, to, KVW_R_TRANSFER);
			assert_int_equal(rtab_get(f->t, r, &after), 0);
			if (want_legal[from][to]) {
				assert_int_equal(rc, 0);
				assert_int_equal(after.state, to);
			} else {
				assert_int_equal(rc, KVW_ESTATE);
				assert_int_equal(after.state, from);
				assert_int_equal(after.reason, before.reason);
			}
			/* The masked form agrees: allowed only from its mask. */
			r = must_insert(f->t, room++);
			drive_to(f->t, r, from);
			unsigned prev = 99;
			rc = rtab_transition_if(f->t, r, RTAB_M_ANY & ~RTAB_M(from),
						to, 0, &prev);
			assert_int_equal(rc, KVW_ESTATE);
			assert_int_equal(prev, from);
			rc = rtab_transition_if(f->t, r, RTAB_M(from), to, 0, &prev);
			assert_int_equal(rc, want_legal[from][to] ? 0 : KVW_ESTATE);
			assert_int_equal(prev, from);
			/* Free the slots for the next pair. */
			rtab_clear(f->t, r, KVW_R_CLEARED);
		}
		/* Clear every room of this row so the table never fills. */
		uint32_t c = 0;
		struct rtab_view v;
		while (rtab_next(f->t, &c, &v) == 0)
			rtab_clear(f->t, v.ref, KVW_R_CLEARED);
	}
	assert_int_equal(rtab_transition(f->t, must_insert(f->t, 1), KVW_NSTATES, 0),
			 KVW_EINVAL);
	fx_free(f);
}

static void test_failed_stores_reason_and_cleared_keeps_it(void **state)
{
	struct fx *f = fx_new("reason", 16, 1);
	struct rtab_ref r = must_insert(f->t, 7);
	struct rtab_view v;

	(void)state;
	assert_int_equal(rtab_transition(f->t, r, KVW_WAITING, KVW_R_TIMEOUT), 0);
	assert_int_equal(rtab_get(f->t, r, &v), 0);
	assert_int_equal(v.reason, KVW_R_NONE);
	assert_int_equal(rtab_fail(f->t, r, KVW_R_PEER_DEAD), 0);
	assert_int_equal(rtab_get(f->t, r, &v), 0);
	assert_int_equal(v.state, KVW_FAILED);
	assert_int_equal(v.reason, KVW_R_PEER_DEAD);
	assert_int_equal(rtab_clear(f->t, r, KVW_R_CLEARED), 0);
	assert_int_equal(rtab_get(f->t, r, &v), 0);
	assert_int_equal(v.state, KVW_CLEARED);
	assert_int_equal(v.reason, KVW_R_PEER_DEAD);
	assert_int_equal(rtab_clear(f->t, r, KVW_R_CLEARED), KVW_ESTATE);

	/* CLEAR of an active room fails it first, with the given reason. */
	r = must_insert(f->t, 8);
	assert_int_equal(rtab_clear(f->t, r, KVW_R_CLEARED), 0);
	assert_int_equal(rtab_get(f->t, r, &v), 0);
	assert_int_equal(v.state, KVW_CLEARED);
	assert_int_equal(v.reason, KVW_R_CLEARED);
	fx_free(f);
}

static void test_terminal_rooms_ignore_late_transitions(void **state)
{
	struct fx *f = fx_new("terminal", 16, 1);
	unsigned terms[] = { KVW_SUCCESS, KVW_FAILED, KVW_CLEARED };

	(void)state;
	for (unsigned i = 0; i < 3; i++) {
		struct rtab_ref r = must_insert(f->t, 100 + i);
		struct rtab_view a, b;

		drive_to(f->t, r, terms[i]);
		assert_int_equal(rtab_get(f->t, r, &a), 0);
		for (unsigned to = 0; to < KVW_NSTATES; to++) {
			if (to == KVW_CLEARED && terms[i] != KVW_CLEARED)
				continue;
			assert_int_equal(rtab_transition(f->t, r, to, KVW_R_TRANSFER),
					 KVW_ESTATE);
		}
		assert_int_equal(rtab_fail(f->t, r, KVW_R_TIMEOUT), KVW_ESTATE);
		assert_int_equal(rtab_get(f->t, r, &b), 0);
		assert_int_equal(b.state, a.state);
		assert_int_equal(b.reason, a.reason);
	}
	fx_free(f);
}

/* ---- identity and reuse ---- */

static void test_reuse_after_clear_bumps_gen_and_old_refs_are_stale(void **state)
{
	struct fx *f = fx_new("reuse", 16, 1);
	struct rtab_ref r1, r2, r3;
	struct rtab_view v;

	(void)state;
	r1 = must_insert(f->t, 0); /* room id 0 is a valid id */
	assert_int_equal(r1.gen, 1);
	assert_int_equal(rtab_outstanding_add(f->t, r1, 1), 1);
	assert_int_equal(rtab_pages_done_add(f->t, r1, 5), 5);
	assert_int_equal(rtab_flags_or(f->t, r1, RTAB_F_ARMED), 0);
	assert_int_equal(rtab_outstanding_add(f->t, r1, -1), 0);
	assert_int_equal(rtab_transition(f->t, r1, KVW_SUCCESS, 0), 0);
	assert_int_equal(rtab_clear(f->t, r1, 0), 0);

	assert_int_equal(rtab_insert(f->t, 0, 3, 0, &r2), 0);
	assert_int_equal(r2.slot, r1.slot);
	assert_int_equal(r2.gen, r1.gen + 1);
	assert_int_equal(rtab_get(f->t, r2, &v), 0);
	assert_int_equal(v.room, 0);
	assert_int_equal(v.state, KVW_BOOTSTRAPPING);
	assert_int_equal(v.reason, 0);
	assert_int_equal(v.peer, 3);
	assert_int_equal(v.outstanding, 0);
	assert_int_equal(v.pages_done, 0);
	assert_int_equal(v.flags, 0);
	assert_true(v.t_created_ns > 0);

	/* Everything through the old ref is stale and changes nothing. */
	assert_int_equal(rtab_state(f->t, r1), KVW_ESTALE);
	assert_int_equal(rtab_get(f->t, r1, &v), KVW_ESTALE);
	assert_int_equal(rtab_transition(f->t, r1, KVW_FAILED, 1), KVW_ESTALE);
	assert_int_equal(rtab_fail(f->t, r1, 1), KVW_ESTALE);
	assert_int_equal(rtab_clear(f->t, r1, 1), KVW_ESTALE);
	assert_int_equal(rtab_outstanding_add(f->t, r1, 1), KVW_ESTALE);
	assert_int_equal(rtab_pages_done_add(f->t, r1, 1), KVW_ESTALE);
	assert_int_equal(rtab_bytes_add(f->t, r1, 1), KVW_ESTALE);
	assert_int_equal(rtab_flags_or(f->t, r1, 1), KVW_ESTALE);
	assert_int_equal(rtab_set_deadline(f->t, r1, 1), KVW_ESTALE);
	assert_int_equal(rtab_set_peer(f->t, r1, 1), KVW_ESTALE);
	assert_int_equal(rtab_set_expected(f->t, r1, 1), KVW_ESTALE);
	assert_int_equal(rtab_get(f->t, r2, &v), 0);
	assert_int_equal(v.state, KVW_BOOTSTRAPPING);
	assert_int_equal(v.outstanding, 0);
	assert_int_equal(v.peer, 3);

	/* A zeroed or out-of-range ref is never valid. */
	r3.slot = 0;
	r3.gen = 0;
	assert_int_equal(rtab_state(f->t, r3), KVW_ESTALE);
	assert_int_equal(rtab_outstanding_add(f->t, r3, 1), KVW_ESTALE);
	r3.slot = 16;
	r3.gen = 1;
	assert_int_equal(rtab_transition(f->t, r3, KVW_FAILED, 1), KVW_ESTALE);
	assert_int_equal(rtab_lookup(f->t, 0, &r3), 0);
	assert_memory_equal(&r3, &r2, sizeof(r3));
	fx_free(f);
}

static void test_insert_of_a_live_key_is_eexist_in_every_live_state(void **state)
{
	struct fx *f = fx_new("eexist", 32, 1);
	unsigned st[] = { KVW_BOOTSTRAPPING, KVW_WAITING, KVW_TRANSFERRING,
			  KVW_SUCCESS, KVW_FAILED };

	(void)state;
	for (unsigned i = 0; i < 5; i++) {
		uint64_t room = UINT64_MAX - i;
		struct rtab_ref r = must_insert(f->t, room), again;

		drive_to(f->t, r, st[i]);
		assert_int_equal(rtab_insert(f->t, room, 0, 0, &again), KVW_EEXIST);
		assert_memory_equal(&again, &r, sizeof(r));
		assert_int_equal(rtab_state(f->t, r), (int)st[i]);
	}
	fx_free(f);
}

static void test_cleared_key_with_jobs_outstanding_is_not_reused(void **state)
{
	struct fx *f = fx_new("drain", 16, 1);
	struct rtab_ref r = must_insert(f->t, 9), r2;

	(void)state;
	assert_int_equal(rtab_outstanding_add(f->t, r, 1), 1);
	assert_int_equal(rtab_clear(f->t, r, KVW_R_CLEARED), 0);
	assert_int_equal(rtab_insert(f->t, 9, 0, 0, &r2), KVW_EAGAIN);
	assert_int_equal(rtab_state(f->t, r), KVW_CLEARED);
	/* The job still finishes through its ref, then the slot is free. */
	assert_int_equal(rtab_outstanding_add(f->t, r, -1), 0);
	assert_int_equal(rtab_outstanding_add(f->t, r, -1), KVW_ERANGE);
	assert_int_equal(rtab_insert(f->t, 9, 0, 0, &r2), 0);
	assert_int_equal(r2.gen, r.gen + 1);
	fx_free(f);
}

static void test_full_table_is_enomem_until_a_room_is_cleared(void **state)
{
	struct fx *f = fx_new("full", 8, 1);
	struct rtab_ref r[8], x;

	(void)state;
	for (unsigned i = 0; i < 8; i++)
		r[i] = must_insert(f->t, 500 + i);
	assert_int_equal(rtab_insert(f->t, 999, 0, 0, &x), KVW_ENOMEM);
	assert_int_equal(rtab_lookup(f->t, 999, &x), KVW_ENOENT);
	/* Terminal but not Cleared still holds its slot. */
	assert_int_equal(rtab_fail(f->t, r[3], KVW_R_ABORTED), 0);
	assert_int_equal(rtab_insert(f->t, 999, 0, 0, &x), KVW_ENOMEM);
	assert_int_equal(rtab_clear(f->t, r[3], 0), 0);
	assert_int_equal(rtab_insert(f->t, 999, 0, 0, &x), 0);
	assert_int_equal(x.slot, r[3].slot);
	assert_int_equal(rtab_lookup(f->t, 503, &x), KVW_ENOENT);
	/* With no EMPTY slot left, a miss scans the whole table. */
	for (unsigned i = 0; i < 8; i++) {
		if (i == 3)
			continue;
		assert_int_equal(rtab_lookup(f->t, 500 + i, &x), 0);
		assert_memory_equal(&x, &r[i], sizeof(x));
	}
	fx_free(f);
}

/* Random inserts, clears and reuses against a model on a small table with
 * more keys than slots: every lookup must name the model's incarnation, so
 * tombstones taken over by other keys (or forgotten by rtab_reclaim, when
 * reclaim is set) never break a collision chain. */
static void chains_against_a_model(int reclaim, uint32_t cap)
{
	enum { NKEYS = 40, STEPS = 20000 };
	struct fx *f = fx_new("chains", cap, 1);
	struct { int present; struct rtab_ref ref; unsigned st; } m[NKEYS];
	uint64_t x = 88172645463325252ULL;
	unsigned live = 0, forgotten = 0;

	memset(m, 0, sizeof(m));
	for (unsigned step = 0; step < STEPS; step++) {
		unsigned k;
		struct rtab_ref r;
		int rc;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		k = (unsigned)(x % NKEYS);
		/* keys far apart and near 0 / UINT64_MAX */
		uint64_t key = k % 2 ? UINT64_MAX - k : (uint64_t)k * 0x9e3779b97f4a7c15ULL;

		if (!m[k].present || m[k].st == KVW_CLEARED) {
			rc = rtab_insert(f->t, key, 0, 0, &r);
			if (live == cap) {
				/* full of non-Cleared rooms */
				assert_int_equal(rc, m[k].present ? 0 : KVW_ENOMEM);
			}
			if (rc == KVW_ENOMEM) {
				assert_int_equal(live, cap);
				continue;
			}
			assert_int_equal(rc, 0);
			if (m[k].present)
				assert_int_equal(r.gen, m[k].ref.gen + 1);
			m[k].present = 1;
			m[k].ref = r;
			m[k].st = KVW_BOOTSTRAPPING;
			live++;
		} else if (x & 0x100) {
			assert_int_equal(rtab_clear(f->t, m[k].ref, 0), 0);
			m[k].st = KVW_CLEARED;
			live--;
		} else {
			assert_int_equal(rtab_insert(f->t, key, 0, 0, &r), KVW_EEXIST);
		}
		/* Passes that forget old tombstones whenever they can (a
		 * full table's worth of wanted EMPTY slots): every key that
		 * stays must stay reachable through them. */
		if (reclaim && (x & 0x600) == 0) {
			int n = rtab_reclaim(f->t, cap);

			assert_true(n >= 0);
			forgotten += (unsigned)n;
		}
		/* A key whose tombstone was taken by another key, or forgotten,
		 * is gone. */
		for (unsigned j = 0; j < NKEYS; j++) {
			uint64_t kj = j % 2 ? UINT64_MAX - j : (uint64_t)j * 0x9e3779b97f4a7c15ULL;
			struct rtab_view v;

			if (m[j].present && rtab_state(f->t, m[j].ref) == KVW_ESTALE) {
				assert_int_equal(m[j].st, KVW_CLEARED);
				m[j].present = 0;
			}
			rc = rtab_lookup(f->t, kj, &r);
			if (!m[j].present) {
				assert_int_equal(rc, KVW_ENOENT);
				continue;
			}
			assert_int_equal(rc, 0);
			assert_memory_equal(&r, &m[j].ref, sizeof(r));
			assert_int_equal(rtab_get(f->t, r, &v), 0);
			assert_true(v.room == kj);
			assert_int_equal(v.state, m[j].st);
		}
	}
	if (reclaim && cap > NKEYS) { /* the passes did forget, often */
		print_message("%u slots, %u ids: %u tombstones forgotten\n",
			      cap, NKEYS, forgotten);
		assert_true(forgotten > STEPS / 100);
	}
	fx_free(f);
}

static void test_tombstone_reuse_keeps_collision_chains_correct(void **state)
{
	(void)state;
	chains_against_a_model(0, 16);
}

static void test_forgetting_old_tombstones_keeps_collision_chains_correct(void **state)
{
	(void)state;
	/* 16 slots for 40 ids: full most of the time, a tombstone is
	 * nearly always on a kept path; 64: runs of tombstones to forget,
	 * collisions and wraps all the same. */
	chains_against_a_model(1, 16);
	chains_against_a_model(1, 64);
}

/* rtab_reclaim: a Cleared tombstone is forgotten only at the second pass
 * that sees it jobless (it stays visible as Cleared for a pass), only when
 * the table wants EMPTY slots, never while a job is counted on it; a room
 * in any other state is never forgotten; the slot's next incarnation
 * has a later generation and the old ref is stale. */
static void test_reclaim_forgets_old_jobless_tombstones_only(void **state)
{
	struct fx *f = fx_new("reclaim", 16, 1);
	struct rtab_ref a = must_insert(f->t, 100), b = must_insert(f->t, 200);
	struct rtab_ref live[4], x;
	struct rtab_view v;
	uint32_t c = 0, n = 0;

	(void)state;
	for (unsigned i = 0; i < 4; i++) {
		live[i] = must_insert(f->t, 300 + i);
		drive_to(f->t, live[i], i == 0 ? KVW_FAILED : i == 1 ? KVW_SUCCESS
				      : i == 2 ? KVW_TRANSFERRING : KVW_BOOTSTRAPPING);
	}
	drive_to(f->t, a, KVW_CLEARED);
	assert_int_equal(rtab_outstanding_add(f->t, b, 1), 1);
	drive_to(f->t, b, KVW_CLEARED);
	/* The first pass only ages a: it stays visible as Cleared. */
	assert_int_equal(rtab_reclaim(f->t, 16), 0);
	assert_int_equal(rtab_lookup(f->t, 100, &x), 0);
	assert_int_equal(rtab_state(f->t, x), KVW_CLEARED);
	/* A table with enough EMPTY slots forgets nothing. */
	for (int pass = 0; pass < 3; pass++)
		assert_int_equal(rtab_reclaim(f->t, 0), 0);
	assert_int_equal(rtab_lookup(f->t, 100, &x), 0);
	assert_int_equal(rtab_reclaim(f->t, 16), 1);
	assert_int_equal(rtab_lookup(f->t, 100, &x), KVW_ENOENT);
	assert_int_equal(rtab_state(f->t, a), KVW_ESTALE);
	assert_int_equal(rtab_outstanding_add(f->t, a, 1), KVW_ESTALE);
	/* b's job holds it; once it is done, two more passes. */
	assert_int_equal(rtab_reclaim(f->t, 16), 0);
	assert_int_equal(rtab_lookup(f->t, 200, &x), 0);
	assert_int_equal(rtab_outstanding_add(f->t, b, -1), 0);
	assert_int_equal(rtab_reclaim(f->t, 16), 0);
	assert_int_equal(rtab_reclaim(f->t, 16), 1);
	assert_int_equal(rtab_lookup(f->t, 200, &x), KVW_ENOENT);
	/* The rooms in every other state stay, each found. */
	for (int pass = 0; pass < 3; pass++)
		assert_int_equal(rtab_reclaim(f->t, 16), 0);
	while (rtab_next(f->t, &c, &v) == 0) {
		assert_true(v.room >= 300 && v.room < 304);
		assert_int_equal(rtab_lookup(f->t, v.room, &x), 0);
		n++;
	}
	assert_int_equal(n, 4);
	/* The id begins again: a later generation than the forgotten one. */
	x = must_insert(f->t, 100);
	if (x.slot == a.slot)
		assert_true(x.gen > a.gen + 1);
	fx_free(f);
}

/* The table's slots do not all end as tombstones: rooms begun and cleared
 * under ever new ids, thirty times the capacity, with the controls' tick
 * after each insert (its count trigger: the clock stands still here),
 * leave most slots EMPTY, so a miss stays short. Without forgetting, every
 * slot is a tombstone long before (the first check, on a twin table). */
static void test_many_rooms_leave_the_table_mostly_empty(void **state)
{
	enum { CAP = 1024 };
	struct fx *f = fx_new("many", CAP, 1), *g = fx_new("many-kept", CAP, 1);
	uint32_t c = 0, filled = 0;
	struct rtab_view v;

	(void)state;
	for (uint64_t k = 1; k <= 30 * CAP; k++) {
		drive_to(f->t, must_insert(f->t, k * 7919), KVW_CLEARED);
		drive_to(g->t, must_insert(g->t, k * 7919), KVW_CLEARED);
		assert_true(rtab_reclaim_tick(f->t, 0) >= 0);
	}
	while (rtab_next(g->t, &c, &v) == 0)
		filled++;
	assert_int_equal(filled, CAP);
	c = 0;
	filled = 0;
	while (rtab_next(f->t, &c, &v) == 0)
		filled++;
	print_message("tombstones left: %u of %u slots (%u without "
		      "forgetting)\n", filled, CAP, CAP);
	assert_true(filled <= CAP / 2 + CAP / 8);
	fx_free(g);
	fx_free(f);
}

/* ---- files ---- */

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* Creating or opening over a bad file fails with EVERSION and a message,
 * and leaves the file alone. */
static void expect_refused(const char *path, const char *why)
{
	struct rtab *t = (struct rtab *)0x1;
	int existed = 7;

	errbuf[0] = '\0';
	assert_int_equal(rtab_create(path, 16, 4, 1, &t, &existed, errbuf,
				     sizeof(errbuf)),
			 KVW_EVERSION);
	assert_null(t);
	assert_true(strstr(errbuf, why) != NULL);
	t = (struct rtab *)0x1;
	errbuf[0] = '\0';
	assert_int_equal(rtab_open(path, 1, &t, errbuf, sizeof(errbuf)),
			 KVW_EVERSION);
	assert_null(t);
	assert_true(errbuf[0] != '\0');
}

static void test_create_refuses_foreign_or_damaged_files(void **state)
{
	char path[160];
	struct rtab *t;
	size_t len = RTAB_HDR_SIZE + 16 * RTAB_ENTRY_SIZE + 4 * RTAB_PEER_SIZE;
	unsigned char *buf = calloc(1, len);
	struct rtab_hdr *h = (struct rtab_hdr *)buf;
	struct stat st;

	(void)state;
	assert_non_null(buf);
	tmp_path(path, sizeof(path), "bad");

	write_file(path, buf, len); /* all zero: bad magic */
	expect_refused(path, "magic");
	write_file(path, "hello", 5);
	expect_refused(path, "truncated");
	write_file(path, buf, 0);
	expect_refused(path, "truncated");

	/* A real table, then damaged in place. */
	unlink(path);
	assert_int_equal(rtab_create(path, 16, 4, 1, &t, NULL, errbuf,
				     sizeof(errbuf)),
			 0);
	memcpy(buf, rtab_header(t), len);
	rtab_close(&t);

	h->version = RTAB_VERSION + 1;
	write_file(path, buf, len);
	expect_refused(path, "version");
	h->version = RTAB_VERSION;
	h->entry_size = 32;
	write_file(path, buf, len);
	expect_refused(path, "version");
	h->entry_size = RTAB_ENTRY_SIZE;
	write_file(path, buf, len - 1); /* truncated in the peer table */
	expect_refused(path, "geometry");
	write_file(path, buf, RTAB_HDR_SIZE + 64);
	expect_refused(path, "geometry");
	h->capacity = 12; /* not a power of two */
	write_file(path, buf, len);
	expect_refused(path, "geometry");
	h->capacity = 16;
	write_file(path, buf, len);

	/* Same magic and version, other geometry asked for by the owner. */
	errbuf[0] = '\0';
	assert_int_equal(rtab_create(path, 32, 4, 1, &t, NULL, errbuf,
				     sizeof(errbuf)),
			 KVW_EVERSION);
	assert_non_null(strstr(errbuf, "asked for 32 rooms"));
	assert_int_equal(rtab_create(path, 16, 5, 1, &t, NULL, errbuf,
				     sizeof(errbuf)),
			 KVW_EVERSION);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal((size_t)st.st_size, len); /* left alone */
	assert_int_equal(rtab_create(path, 16, 4, 1, &t, NULL, errbuf,
				     sizeof(errbuf)),
			 0);
	rtab_close(&t);

	assert_int_equal(rtab_unlink(path), 0);
	assert_int_equal(rtab_unlink(path), KVW_ENOENT);
	assert_int_equal(rtab_open(path, 0, &t, errbuf, sizeof(errbuf)),
			 KVW_ENOENT);
	assert_int_equal(rtab_create(path, 12, 4, 1, &t, NULL, errbuf,
				     sizeof(errbuf)),
			 KVW_EINVAL);
	assert_int_equal(rtab_create(path, 16, 0, 1, &t, NULL, errbuf,
				     sizeof(errbuf)),
			 KVW_EINVAL);
	assert_int_equal(stat(path, &st), -1);
	rtab_close(NULL);
	free(buf);
}

static void test_created_file_is_private_and_fully_initialised(void **state)
{
	struct fx *f = fx_new("init", 64, 8);
	struct rtab_info info;
	struct stat st;
	uint32_t c = 0;
	struct rtab_view v;

	(void)state;
	assert_int_equal(stat(f->path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal((size_t)st.st_size,
			 RTAB_HDR_SIZE + 64 * RTAB_ENTRY_SIZE + 8 * RTAB_PEER_SIZE);
	rtab_info(f->t, &info);
	assert_int_equal(info.capacity, 64);
	assert_int_equal(info.peer_capacity, 8);
	assert_int_equal(info.peer_count, 0);
	assert_int_equal(info.owner_pid, (uint32_t)getpid());
	assert_int_equal(info.owner_epoch, 0x1111);
	assert_true(info.created_ns > 0);
	assert_int_equal(rtab_capacity(f->t), 64);
	assert_int_equal(rtab_peer_capacity(f->t), 8);
	assert_int_equal(rtab_owner_epoch(f->t), 0x1111);
	assert_int_equal(rtab_next(f->t, &c, &v), KVW_ENOENT);
	assert_int_equal(rtab_next_deadline(f->t), 0);
	rtab_counter_add(f->t, RTAB_C_MALFORMED, 3);
	rtab_counter_add(f->t, RTAB_NCOUNTERS, 3); /* ignored */
	assert_int_equal(rtab_counter_get(f->t, RTAB_C_MALFORMED), 3);
	assert_int_equal(rtab_counter_get(f->t, RTAB_NCOUNTERS), 0);
	/* No temporary file is left beside it. */
	char tmp[200];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", f->path, (long)getpid());
	assert_int_equal(access(tmp, F_OK), -1);
	fx_free(f);
}

static void test_readonly_open_reads_and_cannot_write(void **state)
{
	struct fx *f = fx_new("ro", 16, 2);
	struct rtab_ref r = must_insert(f->t, 42), r2;
	struct rtab *ro;
	struct rtab_view v;
	uint32_t id;
	pid_t pid;
	int st;

	(void)state;
	assert_int_equal(rtab_peer_upsert(f->t, "tcp://p:1", 5, &id, NULL), 0);
	assert_int_equal(rtab_open(f->path, 0, &ro, errbuf, sizeof(errbuf)), 0);
	assert_int_equal(rtab_lookup(ro, 42, &r2), 0);
	assert_memory_equal(&r, &r2, sizeof(r));
	assert_int_equal(rtab_state(ro, r2), KVW_BOOTSTRAPPING);
	/* The owner's changes show through the reader's mapping. */
	assert_int_equal(rtab_transition(f->t, r, KVW_WAITING, 0), 0);
	assert_int_equal(rtab_get(ro, r2, &v), 0);
	assert_int_equal(v.state, KVW_WAITING);

	assert_int_equal(rtab_transition(ro, r2, KVW_FAILED, 1), KVW_EINVAL);
	assert_int_equal(rtab_fail(ro, r2, 1), KVW_EINVAL);
	assert_int_equal(rtab_outstanding_add(ro, r2, 1), KVW_EINVAL);
	assert_int_equal(rtab_pages_done_add(ro, r2, 1), KVW_EINVAL);
	assert_int_equal(rtab_bytes_add(ro, r2, 1), KVW_EINVAL);
	assert_int_equal(rtab_flags_or(ro, r2, 1), KVW_EINVAL);
	assert_int_equal(rtab_flags_clear(ro, r2, 1), KVW_EINVAL);
	assert_int_equal(rtab_set_deadline(ro, r2, 1), KVW_EINVAL);
	assert_int_equal(rtab_insert(ro, 43, 0, 0, &r2), KVW_EINVAL);
	assert_int_equal(rtab_expire(ro, UINT64_MAX, NULL, NULL), KVW_EINVAL);
	assert_int_equal(rtab_fail_peer(ro, id, 1, NULL, NULL), KVW_EINVAL);
	assert_int_equal(rtab_fail_stale_owner(ro, 9, NULL, NULL), KVW_EINVAL);
	assert_int_equal(rtab_peer_miss(ro, id), KVW_EINVAL);
	assert_int_equal(rtab_peer_seen(ro, id, 6, 1), KVW_EINVAL);
	assert_int_equal(rtab_peer_upsert(ro, "tcp://q:1", 5, &id, NULL), KVW_EINVAL);
	rtab_counter_add(ro, RTAB_C_MALFORMED, 1);
	assert_int_equal(rtab_counter_get(ro, RTAB_C_MALFORMED), 0);
	assert_int_equal(rtab_state(f->t, r), KVW_WAITING);

	/* The mapping itself is PROT_READ: a raw store faults. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		volatile uint64_t *p =
			(volatile uint64_t *)(uintptr_t)rtab_header(ro);
		int nul = open("/dev/null", O_WRONLY);

		if (nul >= 0)
			dup2(nul, 2); /* a sanitizer's fault report is noise */
		/* cmocka catches SIGSEGV: let the fault kill the child. */
		signal(SIGSEGV, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		*p = 0;
		_exit(0);
	}
	assert_int_equal(unit_waitpid(pid, &st, 10), pid);
	assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(rtab_header(ro)->magic, RTAB_MAGIC);

	/* A non-owner writer may change state but not insert. */
	struct rtab *rw;
	assert_int_equal(rtab_open(f->path, 1, &rw, errbuf, sizeof(errbuf)), 0);
	assert_int_equal(rtab_insert(rw, 43, 0, 0, &r2), KVW_EINVAL);
	assert_int_equal(rtab_peer_upsert(rw, "tcp://q:1", 5, &id, NULL), KVW_EINVAL);
	assert_int_equal(rtab_fail_stale_owner(rw, 9, NULL, NULL), KVW_EINVAL);
	assert_int_equal(rtab_fail(rw, r, KVW_R_ABORTED), 0);
	assert_int_equal(rtab_state(ro, r), KVW_FAILED);
	rtab_close(&rw);
	rtab_close(&ro);
	assert_null(ro);
	fx_free(f);
}

/* ---- owner restart ---- */

static unsigned cb_count;
static void count_cb(void *arg, const struct rtab_view *v)
{
	(void)arg;
	assert_int_equal(v->state, KVW_FAILED);
	cb_count++;
}

static void test_owner_restart_fails_exactly_the_active_rooms(void **state)
{
	struct fx *f = fx_new("restart", 64, 4);
	unsigned st[] = { KVW_BOOTSTRAPPING, KVW_WAITING, KVW_TRANSFERRING,
			  KVW_SUCCESS, KVW_FAILED, KVW_CLEARED };
	struct rtab_ref r[6];
	struct rtab *t2;
	int existed = 0;

	(void)state;
	for (unsigned i = 0; i < 6; i++) {
		r[i] = must_insert(f->t, 70 + i);
		assert_int_equal(rtab_outstanding_add(f->t, r[i], 2), 2);
		drive_to(f->t, r[i], st[i]);
	}
	assert_int_equal(rtab_fail(f->t, r[4], KVW_R_TRANSFER), KVW_ESTATE);
	rtab_close(&f->t); /* the owner dies */

	assert_int_equal(rtab_create(f->path, 64, 4, 0x2222, &t2, &existed,
				     errbuf, sizeof(errbuf)),
			 0);
	assert_int_equal(existed, 1);
	assert_int_equal(rtab_owner_epoch(t2), 0x1111);
	cb_count = 0;
	assert_int_equal(rtab_fail_stale_owner(t2, 0x2222, count_cb, NULL), 3);
	assert_int_equal(cb_count, 3);
	assert_int_equal(rtab_owner_epoch(t2), 0x2222);
	for (unsigned i = 0; i < 6; i++) {
		struct rtab_view v;

		assert_int_equal(rtab_get(t2, r[i], &v), 0);
		assert_int_equal(v.outstanding, 0);
		if (i < 3) {
			assert_int_equal(v.state, KVW_FAILED);
			assert_int_equal(v.reason, KVW_R_OWNER_RESTART);
		} else {
			assert_int_equal(v.state, st[i]);
			assert_int_equal(v.reason, i == 3 ? 0 : KVW_R_ABORTED);
		}
	}
	assert_int_equal(rtab_counter_get(t2, RTAB_C_FAILED), 3);
	/* A second sweep finds nothing; new rooms are served. */
	assert_int_equal(rtab_fail_stale_owner(t2, 0x2222, NULL, NULL), 0);
	struct rtab_ref n;
	assert_int_equal(rtab_insert(t2, 75, 0, 0, &n), 0); /* reuse Cleared id */
	assert_int_equal(n.gen, r[5].gen + 1);
	f->t = t2;
	fx_free(f);
}

static void test_restart_repairs_a_slot_left_reserved(void **state)
{
	struct fx *f = fx_new("reserved", 16, 1);
	struct rtab_ref r = must_insert(f->t, 5), r2;
	struct rtab_entry *e;
	struct rtab *t2;
	int existed;

	(void)state;
	/* Forge what a crash mid-rewrite leaves: the slot RESERVED. */
	e = (struct rtab_entry *)(uintptr_t)((const char *)rtab_header(f->t) +
					      RTAB_HDR_SIZE) + r.slot;
	atomic_store(&e->state, (uint64_t)(r.gen + 1) << 32 | RTAB_K_RESERVED);
	assert_int_equal(rtab_state(f->t, r), KVW_ESTALE);
	assert_int_equal(rtab_lookup(f->t, 5, &r2), KVW_EAGAIN);
	rtab_close(&f->t);
	assert_int_equal(rtab_create(f->path, 16, 1, 3, &t2, &existed, errbuf,
				     sizeof(errbuf)),
			 0);
	assert_int_equal(existed, 1);
	assert_int_equal(rtab_lookup(t2, 5, &r2), 0);
	assert_int_equal(r2.gen, r.gen + 1);
	assert_int_equal(rtab_state(t2, r2), KVW_CLEARED);
	assert_int_equal(rtab_insert(t2, 5, 0, 0, &r2), 0);
	assert_int_equal(r2.gen, r.gen + 2);
	f->t = t2;
	fx_free(f);
}

/* Issue 12, item 9: an owner that died between the two CASes of a take
 * left the job counter claimed for the next generation and the state word
 * a Cleared tombstone (or EMPTY): the restart gives the counter back, so
 * the id and the slot can be taken again. */
static void test_restart_repairs_a_take_cut_between_its_two_cases(void **state)
{
	struct fx *f = fx_new("halftake", 16, 1);
	struct rtab_ref r = must_insert(f->t, 6), r2;
	struct rtab_entry *e;
	struct rtab *t2;
	int existed;

	(void)state;
	assert_int_equal(rtab_fail(f->t, r, KVW_R_ABORTED), 0);
	assert_int_equal(rtab_clear(f->t, r, KVW_R_CLEARED), 0);
	/* Forge the first CAS of the next take: the counter of gen + 1. */
	e = (struct rtab_entry *)(uintptr_t)((const char *)rtab_header(f->t) +
					      RTAB_HDR_SIZE) + r.slot;
	atomic_store(&e->outstanding, (uint64_t)(r.gen + 1) << 32);
	assert_int_equal(rtab_insert(f->t, 6, 0, 0, &r2), KVW_EAGAIN);
	rtab_close(&f->t);
	assert_int_equal(rtab_create(f->path, 16, 1, 3, &t2, &existed, errbuf,
				     sizeof(errbuf)),
			 0);
	assert_int_equal(existed, 1);
	assert_int_equal(rtab_insert(t2, 6, 0, 0, &r2), 0);
	assert_int_equal(r2.slot, r.slot);
	assert_int_equal(r2.gen, r.gen + 1);
	assert_int_equal(rtab_state(t2, r2), KVW_BOOTSTRAPPING);
	f->t = t2;
	fx_free(f);
}

/* ---- peers, deadlines, counters ---- */

static void test_peer_upsert_is_idempotent_and_reports_new_epochs(void **state)
{
	struct fx *f = fx_new("peers", 16, 3);
	uint32_t a, b, c, d, cur = 0;
	int ch = -1;
	struct rtab_peer_view v;
	char longep[RTAB_ENDPOINT_MAX + 1];

	(void)state;
	assert_int_equal(rtab_peer_upsert(f->t, "tcp://10.0.0.1:7000", 0, &a, &ch), 0);
	assert_int_equal(a, 1);
	assert_int_equal(ch, 0);
	assert_int_equal(rtab_peer_upsert(f->t, "tcp://10.0.0.1:7000", 77, &b, &ch), 0);
	assert_int_equal(b, a);
	assert_int_equal(ch, 0); /* unknown -> known is not a change */
	assert_int_equal(rtab_peer_upsert(f->t, "tcp://10.0.0.1:7000", 77, &b, &ch), 0);
	assert_int_equal(ch, 0);
	assert_int_equal(rtab_peer_upsert(f->t, "tcp://10.0.0.1:7000", 0, &b, &ch), 0);
	assert_int_equal(ch, 0);
	assert_int_equal(rtab_peer_get(f->t, a, &v), 0);
	assert_int_equal(v.epoch, 77);
	assert_int_equal(rtab_peer_upsert(f->t, "tcp://10.0.0.1:7000", 78, &b, &ch), 0);
	assert_int_equal(b, a);
	assert_int_equal(ch, 1);
	/* A prefix of an endpoint is another endpoint. */
	assert_int_equal(rtab_peer_upsert(f->t, "tcp://10.0.0.1:700", 1, &c, &ch), 0);
	assert_int_equal(c, 2);
	assert_int_equal(rtab_peer_upsert(f->t, "ipc:///x", 1, &d, NULL), 0);
	assert_int_equal(rtab_peer_upsert(f->t, "ipc:///y", 1, &d, NULL), KVW_ENOMEM);
	memset(longep, 'e', sizeof(longep));
	longep[RTAB_ENDPOINT_MAX] = '\0'; /* no room for its NUL */
	assert_int_equal(rtab_peer_upsert(f->t, longep, 1, &d, NULL), KVW_EINVAL);
	assert_int_equal(rtab_peer_upsert(f->t, "", 1, &d, NULL), KVW_EINVAL);

	assert_int_equal(rtab_peer_get(f->t, a, &v), 0);
	assert_string_equal(v.endpoint, "tcp://10.0.0.1:7000");
	assert_int_equal(v.epoch, 78);
	assert_int_equal(v.liveness, RTAB_PEER_UNKNOWN);
	assert_int_equal(rtab_peer_miss(f->t, a), 1);
	assert_int_equal(rtab_peer_miss(f->t, a), 2);
	assert_int_equal(rtab_peer_seen(f->t, a, 78, 12345), 0);
	assert_int_equal(rtab_peer_get(f->t, a, &v), 0);
	assert_int_equal(v.misses, 0);
	assert_int_equal(v.liveness, RTAB_PEER_ALIVE);
	assert_int_equal(v.last_seen_ns, 12345);
	assert_int_equal(rtab_peer_seen(f->t, a, 79, 12346), 1);
	assert_int_equal(rtab_peer_set_liveness(f->t, a, RTAB_PEER_DEAD), 0);
	assert_int_equal(rtab_peer_set_liveness(f->t, a, 9), KVW_EINVAL);
	assert_int_equal(rtab_peer_get(f->t, a, &v), 0);
	assert_int_equal(v.liveness, RTAB_PEER_DEAD);
	assert_int_equal(v.epoch, 79);
	assert_int_equal(rtab_peer_get(f->t, 0, &v), KVW_ENOENT);
	assert_int_equal(rtab_peer_get(f->t, 4, &v), KVW_ENOENT);
	assert_int_equal(rtab_peer_miss(f->t, 4), KVW_ENOENT);

	unsigned n = 0;
	while (rtab_peer_next(f->t, &cur, &v) == 0)
		assert_int_equal(v.id, ++n);
	assert_int_equal(n, 3);
	fx_free(f);
}

static void test_fail_peer_fails_only_that_peers_active_rooms(void **state)
{
	struct fx *f = fx_new("failpeer", 64, 4);
	struct rtab_ref r[8];
	uint32_t p1, p2;
	struct rtab_view v;

	(void)state;
	assert_int_equal(rtab_peer_upsert(f->t, "tcp://a:1", 1, &p1, NULL), 0);
	assert_int_equal(rtab_peer_upsert(f->t, "tcp://b:1", 1, &p2, NULL), 0);
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(rtab_insert(f->t, i, i < 5 ? p1 : p2, 0, &r[i]), 0);
	drive_to(f->t, r[1], KVW_WAITING);
	drive_to(f->t, r[2], KVW_TRANSFERRING);
	drive_to(f->t, r[3], KVW_SUCCESS);
	drive_to(f->t, r[4], KVW_CLEARED);
	/* r[5] moves to p1 later; r[6], r[7] stay on p2 */
	assert_int_equal(rtab_set_peer(f->t, r[5], p1), 0);
	cb_count = 0;
	assert_int_equal(rtab_fail_peer(f->t, p1, KVW_R_PEER_DEAD, count_cb, NULL), 4);
	assert_int_equal(cb_count, 4);
	unsigned want[8] = { KVW_FAILED, KVW_FAILED, KVW_FAILED, KVW_SUCCESS,
			     KVW_CLEARED, KVW_FAILED, KVW_BOOTSTRAPPING,
			     KVW_BOOTSTRAPPING };
	for (unsigned i = 0; i < 8; i++) {
		assert_int_equal(rtab_get(f->t, r[i], &v), 0);
		assert_int_equal(v.state, want[i]);
		if (want[i] == KVW_FAILED)
			assert_int_equal(v.reason, KVW_R_PEER_DEAD);
	}
	assert_int_equal(rtab_fail_peer(f->t, p1, KVW_R_PEER_DEAD, NULL, NULL), 0);
	assert_int_equal(rtab_fail_peer(f->t, 0, KVW_R_PEER_DEAD, NULL, NULL), KVW_EINVAL);
	fx_free(f);
}

static void test_expire_fails_exactly_the_overdue_active_rooms(void **state)
{
	struct fx *f = fx_new("expire", 64, 1);
	struct rtab_ref r[6];
	struct rtab_view v;

	(void)state;
	/* deadlines: none, 100 (active), 200 (active), 100 (Success),
	 * 300 (active), 150 set later (Waiting) */
	uint64_t dl[6] = { 0, 100, 200, 100, 300, 0 };
	for (unsigned i = 0; i < 6; i++)
		assert_int_equal(rtab_insert(f->t, 900 + i, 0, dl[i], &r[i]), 0);
	drive_to(f->t, r[3], KVW_SUCCESS);
	drive_to(f->t, r[5], KVW_WAITING);
	assert_int_equal(rtab_set_deadline(f->t, r[5], 150), 0);
	assert_int_equal(rtab_next_deadline(f->t), 100);
	assert_int_equal(rtab_expire(f->t, 99, NULL, NULL), 0);
	assert_int_equal(rtab_expire(f->t, 150, NULL, NULL), 2);
	unsigned want[6] = { KVW_BOOTSTRAPPING, KVW_FAILED, KVW_BOOTSTRAPPING,
			     KVW_SUCCESS, KVW_BOOTSTRAPPING, KVW_FAILED };
	for (unsigned i = 0; i < 6; i++) {
		assert_int_equal(rtab_get(f->t, r[i], &v), 0);
		assert_int_equal(v.state, want[i]);
		if (want[i] == KVW_FAILED)
			assert_int_equal(v.reason, KVW_R_TIMEOUT);
	}
	assert_int_equal(rtab_next_deadline(f->t), 200);
	assert_int_equal(rtab_expire(f->t, 150, NULL, NULL), 0);
	assert_int_equal(rtab_expire(f->t, UINT64_MAX, NULL, NULL), 2);
	assert_int_equal(rtab_get(f->t, r[0], &v), 0);
	assert_int_equal(v.state, KVW_BOOTSTRAPPING); /* no deadline */
	assert_int_equal(rtab_next_deadline(f->t), 0);
	fx_free(f);
}

static void test_counters_flags_and_iteration(void **state)
{
	struct fx *f = fx_new("counters", 16, 1);
	struct rtab_ref r = must_insert(f->t, 11);
	struct rtab_view v;
	uint32_t c = 0;
	unsigned n = 0;

	(void)state;
	assert_int_equal(rtab_outstanding_add(f->t, r, -1), KVW_ERANGE);
	assert_int_equal(rtab_outstanding_add(f->t, r, 3), 3);
	assert_int_equal(rtab_outstanding_add(f->t, r, -4), KVW_ERANGE);
	assert_int_equal(rtab_outstanding_add(f->t, r, INT32_MAX), KVW_ERANGE);
	assert_int_equal(rtab_outstanding_add(f->t, r, -2), 1);
	assert_int_equal(rtab_pages_done_add(f->t, r, 7), 7);
	assert_int_equal(rtab_pages_done_add(f->t, r, INT32_MAX), KVW_ERANGE);
	assert_int_equal(rtab_bytes_add(f->t, r, 1ull << 40), 0);
	assert_int_equal(rtab_bytes_add(f->t, r, 5), 0);
	assert_int_equal(rtab_set_expected(f->t, r, 9), 0);
	assert_int_equal(rtab_flags_or(f->t, r, RTAB_F_ARMED | RTAB_F_DUMMY), 0);
	assert_int_equal(rtab_flags_or(f->t, r, RTAB_F_RELEASABLE),
			 RTAB_F_ARMED | RTAB_F_DUMMY);
	assert_int_equal(rtab_flags_clear(f->t, r, RTAB_F_ARMED),
			 RTAB_F_ARMED | RTAB_F_DUMMY | RTAB_F_RELEASABLE);
	assert_int_equal(rtab_flags_or(f->t, r, 0x80000000u), KVW_EINVAL);
	assert_int_equal(rtab_get(f->t, r, &v), 0);
	assert_int_equal(v.outstanding, 1);
	assert_int_equal(v.pages_done, 7);
	assert_int_equal(v.pages_expected, 9);
	assert_true(v.bytes == (1ull << 40) + 5);
	assert_int_equal(v.flags, RTAB_F_DUMMY | RTAB_F_RELEASABLE);

	must_insert(f->t, 12);
	drive_to(f->t, must_insert(f->t, 13), KVW_CLEARED);
	while (rtab_next(f->t, &c, &v) == 0) {
		assert_true(v.room >= 11 && v.room <= 13);
		n++;
	}
	assert_int_equal(n, 3);
	assert_int_equal(rtab_counter_get(f->t, RTAB_C_INSERTED), 3);
	fx_free(f);
}

/* ---- multi-process stress ---- */

enum { S_CAP = 256, S_KEYS = 128, S_PROCS = 4 };

struct shared {
	_Atomic uint32_t ready; /* start barrier: all run at once */
	_Atomic uint64_t violations;
	_Atomic uint64_t ops[S_PROCS];
	_Atomic uint64_t plus, minus;
	_Atomic uint64_t inserts, transitions;
	_Atomic uint64_t drained_waits, stale_plus; /* races that were hit */
	_Atomic uint64_t forgotten; /* tombstones the owner's passes forgot */
	char first_violation[200];
};

struct seen {
	uint32_t gen[S_CAP];     /* highest gen seen per slot */
	uint8_t state[S_CAP];    /* state last seen at that gen */
};

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void violation(struct shared *sh, const char *what, unsigned a,
		      unsigned b)
{
	if (atomic_fetch_add(&sh->violations, 1) == 0)
		snprintf(sh->first_violation, sizeof(sh->first_violation),
			 "pid %ld: %s (%u, %u)", (long)getpid(), what, a, b);
}

/* Checks one observation of (slot, gen, state) against what this process
 * saw before: no generation going back, nothing leaving a terminal state
 * except to Cleared, nothing leaving Cleared. */
static void observe(struct shared *sh, struct seen *sn, uint32_t slot,
		    uint32_t gen, unsigned st)
{
	if (gen < sn->gen[slot]) {
		violation(sh, "generation went back", sn->gen[slot], gen);
		return;
	}
	if (gen == sn->gen[slot] && sn->state[slot] != st) {
		unsigned was = sn->state[slot];

		if (was == KVW_CLEARED)
			violation(sh, "left Cleared", was, st);
		else if (rtab_terminal(was) && st != KVW_CLEARED)
			violation(sh, "left a terminal state", was, st);
	}
	sn->gen[slot] = gen;
	sn->state[slot] = (uint8_t)st;
}

/* Each process runs its share of operations, then on until the races the
 * test is about were all hit often enough (on a loaded machine the
 * processes may run one after another for a while, so a fixed count may
 * miss them), up to STRESS_MORE times its share. */
enum { STRESS_MIN_HITS = 1000, STRESS_MORE = 50 };

static int stress_more(struct shared *sh, uint64_t ops, uint64_t target)
{
	if (ops < target)
		return 1;
	if (ops >= (uint64_t)STRESS_MORE * target)
		return 0;
	return atomic_load(&sh->inserts) <= STRESS_MIN_HITS ||
	       atomic_load(&sh->transitions) <= STRESS_MIN_HITS ||
	       atomic_load(&sh->plus) <= STRESS_MIN_HITS;
}

static uint64_t key_of(unsigned k)
{
	return k == 0 ? 0 : (uint64_t)k * 0x9e3779b97f4a7c15ULL;
}

static void stress_owner(struct shared *sh, struct rtab *t, uint64_t target)
{
	struct seen *sn = calloc(1, sizeof(*sn));
	uint64_t x = 0x2545F4914F6CDD1DULL, ops = 0;

	if (sn == NULL)
		_exit(3);
	while (stress_more(sh, ops, target)) {
		unsigned k = (unsigned)(rnd(&x) % S_KEYS);
		struct rtab_ref r, n;
		int st = -1, rc;

		if (ops % 64 == 0) { /* forget what it can, as the controls do */
			rc = rtab_reclaim(t, S_CAP);
			if (rc < 0)
				violation(sh, "reclaim failed", (unsigned)-rc, 0);
			else
				atomic_fetch_add(&sh->forgotten, (uint64_t)rc);
		}
		rc = rtab_lookup(t, key_of(k), &r);
		ops++;
		if (rc == KVW_ENOENT || (rc == 0 && (st = rtab_state(t, r)) == KVW_CLEARED)) {
			rc = rtab_insert(t, key_of(k), 0, 0, &n);
			ops++;
			if (rc == 0) {
				observe(sh, sn, n.slot, n.gen, KVW_BOOTSTRAPPING);
				atomic_fetch_add(&sh->inserts, 1);
			} else if (rc == KVW_EAGAIN) {
				atomic_fetch_add(&sh->drained_waits, 1);
			} else {
				violation(sh, "insert failed", (unsigned)-rc, k);
			}
			continue;
		}
		if (rc != 0) {
			if (rc != KVW_EAGAIN)
				violation(sh, "owner lookup failed", (unsigned)-rc, k);
			continue;
		}
		if (st < 0)
			continue;
		observe(sh, sn, r.slot, r.gen, (unsigned)st);
		if (rtab_terminal((unsigned)st)) {
			rc = rtab_clear(t, r, KVW_R_CLEARED);
			ops++;
		} else if (rnd(&x) % 16 == 0) {
			rc = rtab_fail(t, r, KVW_R_ABORTED);
			ops++;
		}
		if (rc != 0 && rc != KVW_ESTATE && rc != KVW_ESTALE)
			violation(sh, "owner change failed", (unsigned)-rc, k);
	}
	atomic_fetch_add(&sh->ops[0], ops);
	free(sn);
}

static void stress_other(struct shared *sh, struct rtab *t, unsigned idx,
			 uint64_t target)
{
	struct seen *sn = calloc(1, sizeof(*sn));
	uint64_t x = 0x9E3779B97F4A7C15ULL * (idx + 1), ops = 0;

	if (sn == NULL)
		_exit(3);
	while (stress_more(sh, ops, target)) {
		unsigned k = (unsigned)(rnd(&x) % S_KEYS), prev;
		unsigned to = (unsigned)(rnd(&x) % KVW_NSTATES);
		struct rtab_ref r;
		struct rtab_view v;
		int rc;

		rc = rtab_lookup(t, key_of(k), &r);
		ops++;
		if (rc != 0) {
			if (rc != KVW_ENOENT && rc != KVW_EAGAIN)
				violation(sh, "lookup failed", (unsigned)-rc, k);
			continue;
		}
		rc = rtab_get(t, r, &v);
		ops++;
		if (rc == 0) {
			if (v.room != key_of(k))
				violation(sh, "snapshot of another key", k, 0);
			observe(sh, sn, r.slot, r.gen, v.state);
		}
		if (rnd(&x) % 2) {
			rc = rtab_transition_if(t, r, RTAB_M_ANY, to,
						KVW_R_TRANSFER, &prev);
			ops++;
			if (rc == 0) {
				atomic_fetch_add(&sh->transitions, 1);
				if (!rtab_legal(prev, to))
					violation(sh, "illegal CAS", prev, to);
				observe(sh, sn, r.slot, r.gen, prev);
				observe(sh, sn, r.slot, r.gen, to);
			} else if (rc == KVW_ESTATE) {
				if (rtab_legal(prev, to))
					violation(sh, "legal move refused", prev, to);
				observe(sh, sn, r.slot, r.gen, prev);
			} else if (rc != KVW_ESTALE) {
				violation(sh, "transition failed", (unsigned)-rc, k);
			}
			continue;
		}
		rc = rtab_outstanding_add(t, r, 1);
		ops++;
		if (rc == KVW_ESTALE) {
			atomic_fetch_add(&sh->stale_plus, 1);
			continue;
		}
		if (rc < 1) {
			violation(sh, "+1 failed", (unsigned)-rc, k);
			continue;
		}
		atomic_fetch_add(&sh->plus, 1);
		/* While the job is counted the slot cannot be reused. */
		rc = rtab_state(t, r);
		ops++;
		if (rc < 0)
			violation(sh, "slot reused under a job", (unsigned)-rc, k);
		else
			observe(sh, sn, r.slot, r.gen, (unsigned)rc);
		rc = rtab_outstanding_add(t, r, -1);
		ops++;
		if (rc < 0)
			violation(sh, "-1 failed", (unsigned)-rc, k);
		else
			atomic_fetch_add(&sh->minus, 1);
	}
	atomic_fetch_add(&sh->ops[idx], ops);
	free(sn);
}

static void test_multiprocess_stress_keeps_every_invariant(void **state)
{
	struct fx *f = fx_new("stress", S_CAP, 4);
	struct shared *sh;
	pid_t pids[S_PROCS];
	uint64_t total = 4000000, sum = 0;
	const char *env = getenv("KVW_RTAB_STRESS_OPS");
	uint64_t t0 = rtab_now_ns();

	(void)state;
#ifdef UNDER_TSAN
	/* TSAN runs ~50x slower: 1,000,000 by default, and here alone
	 * KVW_RTAB_STRESS_OPS may also lower it (never below 100,000). */
	total = 1000000;
	if (env != NULL && strtoull(env, NULL, 10) >= 100000)
		total = strtoull(env, NULL, 10);
#else
	if (env != NULL && strtoull(env, NULL, 10) > total)
		total = strtoull(env, NULL, 10);
#endif
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));

	for (unsigned i = 0; i < S_PROCS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			struct rtab *t = NULL;
			uint64_t share = total / S_PROCS + 1;

			long spin0 = unit_now_s();

			atomic_fetch_add(&sh->ready, 1);
			while (atomic_load(&sh->ready) < S_PROCS)
				if (unit_now_s() - spin0 > 10)
					_exit(3); /* a sibling never started */
				else
					sched_yield();
			if (i == 0) {
				stress_owner(sh, f->t, share);
			} else {
				if (rtab_open(f->path, 1, &t, errbuf,
					      sizeof(errbuf)) != 0)
					_exit(2);
				stress_other(sh, t, i, share);
				rtab_close(&t);
			}
			_exit(0);
		}
	}
	for (unsigned i = 0; i < S_PROCS; i++) {
		int st;

		assert_int_equal(unit_waitpid(pids[i], &st, 60), pids[i]);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
	}
	for (unsigned i = 0; i < S_PROCS; i++)
		sum += sh->ops[i];
	print_message("stress: %llu ops in %.2f s: %llu inserts (%llu "
		      "waited for jobs), %llu transitions, %llu job pairs "
		      "(%llu stale), %llu tombstones forgotten, %llu "
		      "violations\n",
		      (unsigned long long)sum,
		      (double)(rtab_now_ns() - t0) / 1e9,
		      (unsigned long long)sh->inserts,
		      (unsigned long long)sh->drained_waits,
		      (unsigned long long)sh->transitions,
		      (unsigned long long)sh->plus,
		      (unsigned long long)sh->stale_plus,
		      (unsigned long long)sh->forgotten,
		      (unsigned long long)sh->violations);
	if (sh->violations != 0)
		print_error("first violation: %s\n", sh->first_violation);
	assert_int_equal(sh->violations, 0);
	assert_true(sum >= total);
	assert_true(sh->inserts > STRESS_MIN_HITS);
	assert_true(sh->transitions > STRESS_MIN_HITS);
	assert_true(sh->plus > STRESS_MIN_HITS);
	assert_int_equal(sh->plus, sh->minus);
	assert_true(sh->forgotten > 0);

	/* Quiescent table: counts all zero, keys unique among LIVE slots. */
	{
		uint32_t c = 0, n = 0;
		struct rtab_view v;
		uint8_t seen_key[S_KEYS] = { 0 };

		while (rtab_next(f->t, &c, &v) == 0) {
			unsigned k;

			n++;
			assert_int_equal(v.outstanding, 0);
			for (k = 0; k < S_KEYS && key_of(k) != v.room; k++)
				;
			assert_true(k < S_KEYS);
			assert_int_equal(seen_key[k], 0);
			seen_key[k] = 1;
		}
		assert_true(n > 0);
	}
	munmap(sh, sizeof(*sh));
	fx_free(f);
}

/* One owner per table: while the owner lives, a second rtab_create on its
 * file is refused before it changes anything (no room failed, no counter
 * touched, the owner epoch kept); once the owner closes, the next owner
 * reopens it. */
static void test_a_second_owner_is_refused_while_the_first_lives(void **state)
{
	struct fx *f = fx_new("owner", 16, 4);
	struct rtab_ref r = must_insert(f->t, 42);
	struct rtab *second = (struct rtab *)0x1;
	struct rtab_info before, after;
	int existed = 7;

	(void)state;
	rtab_counter_add(f->t, RTAB_C_MALFORMED, 3);
	rtab_info(f->t, &before);
	errbuf[0] = '\0';
	assert_int_equal(rtab_create(f->path, 16, 4, 0x2222, &second, &existed,
				     errbuf, sizeof(errbuf)),
			 KVW_EEXIST);
	assert_null(second);
	assert_non_null(strstr(errbuf, "owned by a live process"));
	rtab_info(f->t, &after);
	assert_true(after.owner_epoch == 0x1111);
	assert_true(after.owner_pid == before.owner_pid);
	assert_true(after.counters[RTAB_C_MALFORMED] == 3);
	assert_int_equal(rtab_state(f->t, r), KVW_BOOTSTRAPPING);
	/* The owner gone, the next one takes the table over. */
	rtab_close(&f->t);
	assert_int_equal(rtab_create(f->path, 16, 4, 0x2222, &f->t, &existed,
				     errbuf, sizeof(errbuf)),
			 0);
	assert_int_equal(existed, 1);
	fx_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_legal_table_is_the_designed_one),
		cmocka_unit_test(test_a_second_owner_is_refused_while_the_first_lives),
		cmocka_unit_test(test_accept_table_is_the_designed_one),
		cmocka_unit_test(test_every_pair_through_transition_on_a_real_room),
		cmocka_unit_test(test_failed_stores_reason_and_cleared_keeps_it),
		cmocka_unit_test(test_terminal_rooms_ignore_late_transitions),
		cmocka_unit_test(test_reuse_after_clear_bumps_gen_and_old_refs_are_stale),
		cmocka_unit_test(test_insert_of_a_live_key_is_eexist_in_every_live_state),
		cmocka_unit_test(test_cleared_key_with_jobs_outstanding_is_not_reused),
		cmocka_unit_test(test_full_table_is_enomem_until_a_room_is_cleared),
		cmocka_unit_test(test_tombstone_reuse_keeps_collision_chains_correct),
		cmocka_unit_test(test_forgetting_old_tombstones_keeps_collision_chains_correct),
		cmocka_unit_test(test_reclaim_forgets_old_jobless_tombstones_only),
		cmocka_unit_test(test_many_rooms_leave_the_table_mostly_empty),
		cmocka_unit_test(test_create_refuses_foreign_or_damaged_files),
		cmocka_unit_test(test_created_file_is_private_and_fully_initialised),
		cmocka_unit_test(test_readonly_open_reads_and_cannot_write),
		cmocka_unit_test(test_owner_restart_fails_exactly_the_active_rooms),
		cmocka_unit_test(test_restart_repairs_a_slot_left_reserved),
		cmocka_unit_test(test_restart_repairs_a_take_cut_between_its_two_cases),
		cmocka_unit_test(test_peer_upsert_is_idempotent_and_reports_new_epochs),
		cmocka_unit_test(test_fail_peer_fails_only_that_peers_active_rooms),
		cmocka_unit_test(test_expire_fails_exactly_the_overdue_active_rooms),
		cmocka_unit_test(test_counters_flags_and_iteration),
		cmocka_unit_test(test_multiprocess_stress_keeps_every_invariant),
	};

	return cmocka_run_group_tests(tests, NULL, unlink_all);
}
