/*
 * test_api.c - the engine API against a real room table and pool made in
 * the test (unique /dev/shm names, removed at the end) and a ROUTER bound
 * in the test on a fresh ipc path standing in for the control process:
 * open fails cleanly (NULL *out, message) on a missing table, pool or bad
 * endpoint; kvw_poll reports ENOENT for an unknown room and otherwise
 * exactly what the owner wrote (state, reason, generation, pages, bytes,
 * flags), including a new generation after CLEAR and reuse, and never
 * the previous incarnation after the engine's own CLEAR and new BEGIN (issue
 * 29) while the owner has not taken them yet; every command
 * arrives at the control socket as the frame it stands for; argument
 * errors are EINVAL and send nothing; the pool mapping is the file's.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "api.h"
#include "mem/pool.h"
#include "table/rtab.h"
#include "wire/frame.h"
#include "wire/wire.h"

static char err[512];

struct fx {
	char table[160], pool[160], ep[160];
	struct rtab *t;   /* the owner's mapping */
	struct pool *p;   /* the owner's pool */
	void *ctx, *router;
	struct kvw_engine *e;
	/* A second engine and the ROUTER it reaches late (a test that
	 * fails midway leaves them to teardown, which must not hang). */
	char ep2[168];
	void *router2;
	struct kvw_engine *e2;
};

static int setup(void **state)
{
	static unsigned n;
	struct fx *f = calloc(1, sizeof *f);
	int existed;

	assert_non_null(f);
	snprintf(f->table, sizeof f->table,
		 "/dev/shm/kvwire.test-api.%d.%u.rooms", (int)getpid(), n);
	snprintf(f->pool, sizeof f->pool, "/dev/shm/kvwire.test-api.%d.%u.pool",
		 (int)getpid(), n);
	snprintf(f->ep, sizeof f->ep, "ipc:///tmp/kvw-test-api.%d.%u.eng",
		 (int)getpid(), n);
	n++;
	unlink(f->table);
	unlink(f->pool);
	assert_int_equal(rtab_create(f->table, 64, 4, 0x77, &f->t, &existed,
				     err, sizeof err), 0);
	assert_int_equal(pool_create(f->pool, 1 << 16, &f->p, err, sizeof err),
			 0);
	f->ctx = zmq_ctx_new();
	assert_non_null(f->ctx);
	f->router = wire_socket(f->ctx, ZMQ_ROUTER, 0, err, sizeof err);
	assert_non_null(f->router);
	assert_int_equal(wire_bind(f->router, f->ep, 0600, err, sizeof err), 0);
	assert_int_equal(kvw_engine_open(f->ep, f->table, f->pool, &f->e, err,
					 sizeof err), 0);
	assert_non_null(f->e);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	kvw_engine_close(&f->e);
	kvw_engine_close(&f->e2);
	wire_close(&f->router);
	if (f->router2) {
		wire_close(&f->router2);
		unlink(f->ep2 + 6);
	}
	zmq_ctx_term(f->ctx);
	rtab_close(&f->t);
	pool_close(&f->p);
	unlink(f->table);
	unlink(f->pool);
	unlink(f->ep + 6);
	free(f);
	return 0;
}

/* Receives one message on the test's ROUTER within 5 s (bounded poll). */
static void recv_one(struct fx *f, struct wire_in *in, struct frame_msg *m)
{
	zmq_pollitem_t it = { f->router, 0, ZMQ_POLLIN, 0 };

	assert_int_equal(zmq_poll(&it, 1, 5000), 1);
	assert_int_equal(wire_recv(f->router, 1, in, m, err, sizeof err), 0);
}

static void nothing_waiting(struct fx *f)
{
	zmq_pollitem_t it = { f->router, 0, ZMQ_POLLIN, 0 };

	assert_int_equal(zmq_poll(&it, 1, 50), 0);
}

static void open_refuses_missing_files_and_bad_endpoint(void **state)
{
	struct fx *f = *state;
	struct kvw_engine *e = (struct kvw_engine *)1;

	err[0] = '\0';
	assert_int_equal(kvw_engine_open(f->ep, "/dev/shm/kvwire.nope.rooms",
					 f->pool, &e, err, sizeof err),
			 KVW_ENOENT);
	assert_null(e);
	assert_non_null(strstr(err, "nope"));
	e = (struct kvw_engine *)1;
	assert_int_equal(kvw_engine_open(f->ep, f->table,
					 "/dev/shm/kvwire.nope.pool", &e, err,
					 sizeof err), KVW_ENOENT);
	assert_null(e);
	/* A pool file is not a room table. */
	assert_int_equal(kvw_engine_open(f->ep, f->pool, f->pool, &e, err,
					 sizeof err), KVW_EVERSION);
	assert_null(e);
	assert_int_equal(kvw_engine_open("nonsense://x", f->table, f->pool, &e,
					 err, sizeof err), KVW_EINVAL);
	assert_null(e);
	assert_int_equal(kvw_engine_open(NULL, f->table, f->pool, &e, NULL, 0),
			 KVW_EINVAL);
	assert_null(e);
	kvw_engine_close(&e);
	kvw_engine_close(NULL);
}

static void poll_unknown_room_is_enoent(void **state)
{
	struct fx *f = *state;
	struct kvw_room_status st = { .state = 99 };

	assert_int_equal(kvw_poll(f->e, 42, &st), KVW_ENOENT);
	assert_int_equal(st.state, 99); /* unchanged on error */
}

static void poll_reads_what_the_owner_wrote(void **state)
{
	struct fx *f = *state;
	struct kvw_room_status st;
	struct rtab_ref r;

	assert_int_equal(rtab_insert(f->t, 42, 0, 0, &r), 0);
	assert_int_equal(kvw_poll(f->e, 42, &st), 0);
	assert_int_equal(st.state, KVW_BOOTSTRAPPING);
	assert_int_equal(st.generation, r.gen);
	assert_int_equal(st.pages_done, 0);
	assert_int_equal(rtab_set_expected(f->t, r, 16), 0);
	assert_int_equal(rtab_transition(f->t, r, KVW_WAITING, 0), 0);
	assert_int_equal(rtab_transition(f->t, r, KVW_TRANSFERRING, 0), 0);
	assert_true(rtab_pages_done_add(f->t, r, 5) >= 0);
	assert_int_equal(rtab_bytes_add(f->t, r, 12345), 0);
	assert_int_equal(kvw_poll(f->e, 42, &st), 0);
	assert_int_equal(st.state, KVW_TRANSFERRING);
	assert_int_equal(st.pages_expected, 16);
	assert_int_equal(st.pages_done, 5);
	assert_int_equal(st.bytes, 12345);
	assert_int_equal(rtab_fail(f->t, r, KVW_R_ABORTED), 0);
	assert_true(rtab_flags_or(f->t, r, RTAB_F_ARMED | RTAB_F_RELEASABLE) >=
		    0);
	assert_int_equal(kvw_poll(f->e, 42, &st), 0);
	assert_int_equal(st.state, KVW_FAILED);
	assert_int_equal(st.reason, KVW_R_ABORTED);
	assert_int_equal(st.flags, KVW_ROOM_F_ARMED | KVW_ROOM_F_RELEASABLE);
	/* Another room is still unknown. */
	assert_int_equal(kvw_poll(f->e, 43, &st), KVW_ENOENT);
}

/* Issue 33: kvw_poll_many answers for each room exactly what kvw_poll
 * does (a room in the table, an unknown one, one hidden after the
 * engine's CLEAR and new BEGIN), counts the rooms it read, and refuses
 * NULL arrays without writing anything. */
static void poll_many_answers_as_poll_does(void **state)
{
	struct fx *f = *state;
	uint64_t rooms[4] = { 42, 43, 7, 42 };
	struct kvw_room_status st[4], one;
	int32_t rcs[4] = { 99, 99, 99, 99 };
	struct rtab_ref r42, r7;
	uint32_t pages[1] = { 3 };

	/* Padding included, so the structs compare as bytes. */
	memset(st, 0, sizeof st);
	memset(&one, 0, sizeof one);
	assert_int_equal(rtab_insert(f->t, 42, 0, 0, &r42), 0);
	assert_int_equal(rtab_set_expected(f->t, r42, 16), 0);
	assert_int_equal(rtab_transition(f->t, r42, KVW_WAITING, 0), 0);
	assert_int_equal(rtab_insert(f->t, 7, 0, 0, &r7), 0);
	assert_int_equal(rtab_transition(f->t, r7, KVW_SUCCESS, 0), 0);
	/* Room 7 cleared and begun again by this engine: its Success is
	 * the old incarnation's, hidden. */
	assert_int_equal(kvw_clear(f->e, 7), 0);
	assert_int_equal(kvw_recv_begin(f->e, 7, "ipc:///x/boot", 0, pages,
					1, 0, 0), 0);

	assert_int_equal(kvw_poll_many(f->e, rooms, 4, st, rcs), 2);
	assert_int_equal(rcs[0], 0);
	assert_int_equal(st[0].state, KVW_WAITING);
	assert_int_equal(st[0].pages_expected, 16);
	assert_int_equal(st[0].generation, r42.gen);
	assert_int_equal(rcs[1], KVW_ENOENT);
	assert_int_equal(rcs[2], KVW_ENOENT);
	assert_int_equal(kvw_poll(f->e, 7, &one), KVW_ENOENT);
	assert_int_equal(rcs[3], 0);
	assert_memory_equal(&st[3], &st[0], sizeof st[0]);
	assert_int_equal(kvw_poll(f->e, 42, &one), 0);
	assert_memory_equal(&one, &st[0], sizeof one);

	assert_int_equal(kvw_poll_many(f->e, rooms, 0, NULL, NULL), 0);
	rcs[0] = 99;
	assert_int_equal(kvw_poll_many(f->e, rooms, 1, st, NULL), KVW_EINVAL);
	assert_int_equal(kvw_poll_many(f->e, NULL, 1, st, rcs), KVW_EINVAL);
	assert_int_equal(kvw_poll_many(f->e, rooms, 1, NULL, rcs), KVW_EINVAL);
	assert_int_equal(kvw_poll_many(NULL, rooms, 1, st, rcs), KVW_EINVAL);
	assert_int_equal(kvw_poll_many(f->e, rooms, (uint32_t)INT32_MAX + 1,
				       st, rcs), KVW_EINVAL);
	assert_int_equal(rcs[0], 99);
}

/* Issue 33 item 2: kvw_room_times gives the table's entry times of the
 * incarnation kvw_poll reports (the transfer's latency for
 * get_transfer_metric), in order, 0 for states not entered; unknown and
 * hidden rooms are ENOENT as in kvw_poll. */
static void room_times_are_the_incarnations(void **state)
{
	struct fx *f = *state;
	uint64_t t[KVW_NSTATES];
	struct rtab_ref r;
	uint32_t pages[1] = { 3 };

	memset(t, 0xff, sizeof t);
	assert_int_equal(kvw_room_times(f->e, 5, t), KVW_ENOENT);
	assert_int_equal(t[0], UINT64_MAX); /* unchanged on error */
	assert_int_equal(rtab_insert(f->t, 5, 0, 0, &r), 0);
	assert_int_equal(rtab_transition(f->t, r, KVW_WAITING, 0), 0);
	assert_int_equal(kvw_room_times(f->e, 5, t), 0);
	assert_true(t[KVW_BOOTSTRAPPING] > 0);
	assert_true(t[KVW_WAITING] >= t[KVW_BOOTSTRAPPING]);
	assert_int_equal(t[KVW_SUCCESS], 0);
	assert_int_equal(rtab_transition(f->t, r, KVW_TRANSFERRING, 0), 0);
	assert_int_equal(rtab_transition(f->t, r, KVW_SUCCESS, 0), 0);
	assert_int_equal(kvw_room_times(f->e, 5, t), 0);
	assert_true(t[KVW_TRANSFERRING] >= t[KVW_WAITING]);
	assert_true(t[KVW_SUCCESS] >= t[KVW_TRANSFERRING]);
	assert_int_equal(t[KVW_FAILED], 0);
	/* Cleared and begun again by this engine: hidden, as in kvw_poll. */
	assert_int_equal(kvw_clear(f->e, 5), 0);
	assert_int_equal(kvw_recv_begin(f->e, 5, "ipc:///x/boot", 0, pages, 1,
					0, 0), 0);
	assert_int_equal(kvw_room_times(f->e, 5, t), KVW_ENOENT);
	assert_int_equal(kvw_room_times(f->e, 5, NULL), KVW_EINVAL);
	assert_int_equal(kvw_room_times(NULL, 5, t), KVW_EINVAL);
}

/* Issue 29: a prefill engine learns from kvw_poll when no worker reads a
 * room's source pages any more: KVW_ROOM_F_SENDING while the table counts
 * jobs outstanding, failed or not, cleared or not. */
static void poll_shows_sending_while_jobs_are_outstanding(void **state)
{
	struct fx *f = *state;
	struct kvw_room_status st;
	struct rtab_ref r;

	assert_int_equal(rtab_insert(f->t, 44, 0, 0, &r), 0);
	assert_int_equal(kvw_poll(f->e, 44, &st), 0);
	assert_int_equal(st.flags & KVW_ROOM_F_SENDING, 0);
	assert_int_equal(rtab_outstanding_add(f->t, r, 2), 2);
	assert_int_equal(kvw_poll(f->e, 44, &st), 0);
	assert_int_equal(st.flags, KVW_ROOM_F_SENDING);
	/* Aborted with both jobs still at the workers: still sending. */
	assert_int_equal(rtab_fail(f->t, r, KVW_R_ABORTED), 0);
	assert_int_equal(rtab_outstanding_add(f->t, r, -1), 1);
	assert_int_equal(kvw_poll(f->e, 44, &st), 0);
	assert_int_equal(st.state, KVW_FAILED);
	assert_true(st.flags & KVW_ROOM_F_SENDING);
	assert_int_equal(rtab_clear(f->t, r, KVW_R_CLEARED), 0);
	assert_int_equal(kvw_poll(f->e, 44, &st), 0);
	assert_int_equal(st.state, KVW_CLEARED);
	assert_true(st.flags & KVW_ROOM_F_SENDING);
	/* The last job ended: the source pages are free. */
	assert_int_equal(rtab_outstanding_add(f->t, r, -1), 0);
	assert_int_equal(kvw_poll(f->e, 44, &st), 0);
	assert_int_equal(st.flags & KVW_ROOM_F_SENDING, 0);
}

static void poll_after_clear_and_reuse_sees_the_new_generation(void **state)
{
	struct fx *f = *state;
	struct kvw_room_status st;
	struct rtab_ref r1, r2;

	assert_int_equal(rtab_insert(f->t, 7, 0, 0, &r1), 0);
	assert_int_equal(rtab_set_prefix(f->t, r1, 32), 0);
	assert_int_equal(rtab_transition(f->t, r1, KVW_SUCCESS, 0), 0);
	assert_int_equal(kvw_poll(f->e, 7, &st), 0);
	assert_int_equal(st.state, KVW_SUCCESS);
	assert_int_equal(st.prefix_tokens, 32); /* the decode prefix */
	assert_int_equal(rtab_clear(f->t, r1, KVW_R_CLEARED), 0);
	assert_int_equal(kvw_poll(f->e, 7, &st), 0);
	assert_int_equal(st.state, KVW_CLEARED);
	assert_int_equal(st.generation, r1.gen);
	assert_int_equal(rtab_insert(f->t, 7, 0, 0, &r2), 0);
	assert_int_equal(kvw_poll(f->e, 7, &st), 0);
	assert_int_equal(st.state, KVW_BOOTSTRAPPING);
	assert_int_equal(st.generation, r2.gen);
	assert_true(r2.gen != r1.gen);
	assert_int_equal(st.reason, KVW_R_NONE);
}

/* Plays the control process: takes the next command off the ROUTER and
 * checks its type and room. */
static void take(struct fx *f, unsigned type, uint64_t room)
{
	struct frame_msg m;
	struct wire_in in;

	recv_one(f, &in, &m);
	assert_int_equal(m.hdr.type, type);
	assert_int_equal(m.hdr.room, room);
	wire_in_release(&in);
}

/* Issue 29: the engine's CLEAR and new BEGIN of room 7 are queued while
 * the table still holds the previous incarnation's Success, then its
 * Cleared tombstone: poll says "not in the table yet" (ENOENT) through
 * both, and only the new incarnation once the owner inserted it. Before
 * the fix it returned the old Success (and then Cleared). */
static void poll_after_clear_and_rebegin_never_shows_the_old(void **state)
{
	struct fx *f = *state;
	struct kvw_room_status st;
	struct rtab_ref r1, r2;
	uint32_t pages[1] = { 3 };

	assert_int_equal(kvw_recv_begin(f->e, 7, "ipc:///x/boot", 0, pages,
					1, 0, 0), 0);
	take(f, FRAME_RECV_BEGIN, 7);
	assert_int_equal(rtab_insert(f->t, 7, 0, 0, &r1), 0);
	assert_int_equal(rtab_set_prefix(f->t, r1, 32), 0);
	assert_int_equal(rtab_transition(f->t, r1, KVW_SUCCESS, 0), 0);
	assert_int_equal(kvw_poll(f->e, 7, &st), 0);
	assert_int_equal(st.state, KVW_SUCCESS);
	assert_int_equal(st.prefix_tokens, 32); /* the decode prefix */
	assert_int_equal(st.generation, r1.gen);

	assert_int_equal(kvw_clear(f->e, 7), 0);
	assert_int_equal(kvw_recv_begin(f->e, 7, "ipc:///x/boot", 0, pages,
					1, 0, 0), 0);
	assert_int_equal(kvw_poll(f->e, 7, &st), KVW_ENOENT);
	take(f, FRAME_CLEAR, 7);
	assert_int_equal(rtab_clear(f->t, r1, KVW_R_CLEARED), 0);
	assert_int_equal(kvw_poll(f->e, 7, &st), KVW_ENOENT);
	take(f, FRAME_RECV_BEGIN, 7);
	assert_int_equal(rtab_insert(f->t, 7, 0, 0, &r2), 0);
	assert_int_equal(kvw_poll(f->e, 7, &st), 0);
	assert_int_equal(st.state, KVW_BOOTSTRAPPING);
	assert_int_equal(st.generation, r2.gen);
	assert_true(r2.gen != r1.gen);

	/* Failed, then cleared, then begun again: the same. */
	assert_int_equal(rtab_fail(f->t, r2, KVW_R_TIMEOUT), 0);
	assert_int_equal(kvw_clear(f->e, 7), 0);
	take(f, FRAME_CLEAR, 7);
	assert_int_equal(rtab_clear(f->t, r2, KVW_R_CLEARED), 0);
	assert_int_equal(kvw_send_begin(f->e, 7, 1, 0), 0);
	assert_int_equal(kvw_poll(f->e, 7, &st), KVW_ENOENT);
}

/* Prefill: a decode's XFER_INFO may open the incarnation before the
 * engine's SEND_BEGIN (the Python KVSender polls it before init()). After
 * the engine's CLEAR the old Success is never shown, but the incarnation
 * the XFER_INFO opens is, before and after SEND_BEGIN. */
static void poll_shows_an_incarnation_opened_before_begin(void **state)
{
	struct fx *f = *state;
	struct kvw_room_status st;
	struct rtab_ref r1, r2;

	assert_int_equal(rtab_insert(f->t, 9, 0, 0, &r1), 0);
	assert_int_equal(kvw_send_begin(f->e, 9, 2, 0), 0);
	take(f, FRAME_SEND_BEGIN, 9);
	assert_int_equal(kvw_poll(f->e, 9, &st), 0);
	assert_int_equal(st.state, KVW_BOOTSTRAPPING);
	assert_int_equal(rtab_transition(f->t, r1, KVW_SUCCESS, 0), 0);
	assert_int_equal(kvw_poll(f->e, 9, &st), 0);
	assert_int_equal(st.state, KVW_SUCCESS);

	assert_int_equal(kvw_clear(f->e, 9), 0);
	assert_int_equal(kvw_poll(f->e, 9, &st), KVW_ENOENT);
	take(f, FRAME_CLEAR, 9);
	assert_int_equal(rtab_clear(f->t, r1, KVW_R_CLEARED), 0);
	assert_int_equal(kvw_poll(f->e, 9, &st), KVW_ENOENT);
	assert_int_equal(rtab_insert(f->t, 9, 0, 0, &r2), 0); /* XFER_INFO */
	assert_int_equal(kvw_poll(f->e, 9, &st), 0);
	assert_int_equal(st.state, KVW_BOOTSTRAPPING);
	assert_int_equal(st.generation, r2.gen);
	assert_int_equal(kvw_send_begin(f->e, 9, 2, 0), 0);
	assert_int_equal(kvw_poll(f->e, 9, &st), 0);
	assert_int_equal(st.generation, r2.gen);
}

/* The records of ids cleared and not begun again are swept once the
 * table shows their CLEAR done: memory stays bounded over a long run of
 * distinct ids, and a swept id's Cleared tombstone is then shown as it is
 * (before the sweep the record hides it). */
static void cleared_ids_are_swept(void **state)
{
	struct fx *f = *state;
	struct kvw_room_status st;
	struct rtab_ref r;

	for (uint64_t id = 1; id <= 40; id++) {
		assert_int_equal(rtab_insert(f->t, id, 0, 0, &r), 0);
		assert_int_equal(rtab_transition(f->t, r, KVW_SUCCESS, 0), 0);
		assert_int_equal(kvw_clear(f->e, id), 0);
		take(f, FRAME_CLEAR, id);
		assert_int_equal(rtab_clear(f->t, r, KVW_R_CLEARED), 0);
	}
	/* (Each insert may take an earlier id's tombstone: the last id's
	 * is still in the table.) */
	assert_int_equal(kvw_poll(f->e, 40, &st), KVW_ENOENT);
	for (uint64_t id = 1000; id < 1000 + 1100; id++) {
		assert_int_equal(kvw_clear(f->e, id), 0);
		take(f, FRAME_CLEAR, id);
	}
	assert_int_equal(kvw_poll(f->e, 40, &st), 0);
	assert_int_equal(st.state, KVW_CLEARED);
}

static void commands_arrive_as_their_frames(void **state)
{
	struct fx *f = *state;
	uint32_t pages[3] = { 9, 4, 100 };
	struct frame_msg m;
	struct wire_in in;

	assert_int_equal(kvw_send_begin(f->e, 1, 3, 11), 0);
	recv_one(f, &in, &m);
	assert_int_equal(m.hdr.type, FRAME_SEND_BEGIN);
	assert_int_equal(m.hdr.room, 1);
	assert_int_equal(m.u.send_begin.num_pages, 3);
	assert_int_equal(m.u.send_begin.aux_slot, 11);
	wire_in_release(&in);

	assert_int_equal(kvw_send_chunk(f->e, 2, pages, 3, 1), 0);
	pages[0] = 0; /* the message holds its own copy */
	recv_one(f, &in, &m);
	assert_int_equal(m.hdr.type, FRAME_SEND_CHUNK);
	assert_int_equal(m.hdr.room, 2);
	assert_int_equal(m.u.send_chunk.is_last, 1);
	assert_int_equal(m.u.send_chunk.pages.n, 3);
	assert_int_equal(frame_u32s_get(m.u.send_chunk.pages, 0), 9);
	assert_int_equal(frame_u32s_get(m.u.send_chunk.pages, 2), 100);
	wire_in_release(&in);

	assert_int_equal(kvw_send_chunk(f->e, 2, NULL, 0, 1), 0);
	recv_one(f, &in, &m);
	assert_int_equal(m.u.send_chunk.pages.n, 0);
	wire_in_release(&in);

	assert_int_equal(kvw_recv_begin(f->e, UINT64_MAX, "ipc:///x/boot", 2,
					pages, 2, 5, 64), 0);
	recv_one(f, &in, &m);
	assert_int_equal(m.hdr.type, FRAME_RECV_BEGIN);
	assert_true(m.hdr.room == UINT64_MAX);
	assert_string_equal(m.u.recv_begin.bootstrap, "ipc:///x/boot");
	assert_int_equal(m.u.recv_begin.prefill_dp_rank, 2);
	assert_int_equal(m.u.recv_begin.prefix_tokens, 64);
	assert_int_equal(m.u.recv_begin.aux_slot, 5);
	assert_int_equal(m.u.recv_begin.pages.n, 2);
	assert_int_equal(frame_u32s_get(m.u.recv_begin.pages, 1), 4);
	wire_in_release(&in);

	assert_int_equal(kvw_abort(f->e, 3), 0);
	recv_one(f, &in, &m);
	assert_int_equal(m.hdr.type, FRAME_RECV_ABORT);
	assert_int_equal(m.hdr.room, 3);
	wire_in_release(&in);

	assert_int_equal(kvw_clear(f->e, 4), 0);
	recv_one(f, &in, &m);
	assert_int_equal(m.hdr.type, FRAME_CLEAR);
	assert_int_equal(m.hdr.room, 4);
	assert_true(m.hdr.epoch != 0);
	wire_in_release(&in);
	assert_string_equal(kvw_engine_error(f->e), "");
}

/* Held commands (kvw_engine_hold) reach the control only at the flush,
 * all of them, in order, each the frame it would have been; the page list
 * is copied when the command is given. */
static void held_commands_go_at_the_flush_in_order(void **state)
{
	struct fx *f = *state;
	uint32_t pages[2] = { 7, 8 };
	struct frame_msg m;
	struct wire_in in;

	assert_int_equal(kvw_engine_held(f->e), 0);
	assert_int_equal(kvw_engine_flush(f->e), 0); /* nothing: nothing */
	assert_int_equal(kvw_engine_hold(f->e, 1), 0);
	assert_int_equal(kvw_send_begin(f->e, 5, 2, 1), 0);
	assert_int_equal(kvw_send_chunk(f->e, 5, pages, 2, 1), 0);
	pages[0] = 0; /* the held command has its own copy */
	assert_int_equal(kvw_clear(f->e, 6), 0);
	/* Refused as without the hold, and nothing held for it. */
	assert_int_equal(kvw_send_chunk(f->e, 5, NULL, 2, 0), KVW_EINVAL);
	assert_int_equal(kvw_engine_held(f->e), 3);
	nothing_waiting(f);
	assert_int_equal(kvw_engine_flush(f->e), 0);
	assert_int_equal(kvw_engine_held(f->e), 0);
	recv_one(f, &in, &m);
	assert_int_equal(m.hdr.type, FRAME_SEND_BEGIN);
	assert_int_equal(m.hdr.room, 5);
	assert_int_equal(m.u.send_begin.num_pages, 2);
	wire_in_release(&in);
	recv_one(f, &in, &m);
	assert_int_equal(m.hdr.type, FRAME_SEND_CHUNK);
	assert_int_equal(m.u.send_chunk.pages.n, 2);
	assert_int_equal(frame_u32s_get(m.u.send_chunk.pages, 0), 7);
	assert_int_equal(frame_u32s_get(m.u.send_chunk.pages, 1), 8);
	assert_int_equal(m.u.send_chunk.is_last, 1);
	wire_in_release(&in);
	take(f, FRAME_CLEAR, 6);
	/* Still holding: the next one waits too; ending the hold sends it. */
	assert_int_equal(kvw_abort(f->e, 9), 0);
	nothing_waiting(f);
	assert_int_equal(kvw_engine_hold(f->e, 0), 0);
	take(f, FRAME_RECV_ABORT, 9);
	/* Not holding: a command goes at once. */
	assert_int_equal(kvw_clear(f->e, 10), 0);
	assert_int_equal(kvw_engine_held(f->e), 0);
	take(f, FRAME_CLEAR, 10);
	assert_int_equal(kvw_engine_hold(NULL, 1), KVW_EINVAL);
	assert_int_equal(kvw_engine_flush(NULL), KVW_EINVAL);
}

/* A flush that meets a full queue (no control listening: libzmq queues
 * up to its high-water mark, then refuses) keeps the rest held, in
 * order; past API_HOLD_MAX bytes a command that cannot make room is
 * refused with nothing held for it; a hold that ends with commands still
 * queued keeps them ahead of later ones; once the control listens every
 * command arrives, once, in the order given. */
static void a_full_queue_keeps_the_rest_held_in_order(void **state)
{
	struct fx *f = *state;
	static uint32_t pages[KVW_MAX_PAGES];
	struct kvw_engine *e;
	struct frame_msg m;
	struct wire_in in;
	uint64_t next = 1, room = 1;
	uint32_t held, chunks = 0;
	void *router;
	int rc;

	snprintf(f->ep2, sizeof f->ep2, "%s.later", f->ep);
	assert_int_equal(kvw_engine_open(f->ep2, f->table, f->pool, &f->e2,
					 err, sizeof err), 0);
	e = f->e2;
	assert_int_equal(kvw_engine_hold(e, 1), 0);
	do { /* CLEARs until the queue is full */
		assert_int_equal(kvw_clear(e, room++), 0);
		rc = kvw_engine_flush(e);
		assert_true(room < 100000);
	} while (rc == 0);
	assert_int_equal(rc, KVW_EAGAIN);
	assert_non_null(strstr(kvw_engine_error(e), "full"));
	held = kvw_engine_held(e);
	assert_true(held >= 1);
	/* The hold ends with its commands still queued: a command given now
	 * goes behind them, not ahead. */
	assert_int_equal(kvw_engine_hold(e, 0), KVW_EAGAIN);
	assert_int_equal(kvw_engine_held(e), held);
	assert_int_equal(kvw_clear(e, room++), 0);
	assert_int_equal(kvw_engine_held(e), ++held);
	assert_int_equal(kvw_engine_hold(e, 1), 0);
	/* Whole page lists until the hold is past API_HOLD_MAX and the
	 * queue takes none of it: that chunk is refused, nothing held. */
	while ((rc = kvw_send_chunk(e, room, pages, KVW_MAX_PAGES, 0)) == 0) {
		room++;
		chunks++;
		assert_true(chunks < 64);
	}
	assert_int_equal(rc, KVW_EAGAIN);
	assert_int_equal(kvw_engine_held(e), held + chunks);

	router = f->router2 = wire_socket(f->ctx, ZMQ_ROUTER, 0, err,
					  sizeof err);
	assert_non_null(router);
	assert_int_equal(wire_bind(router, f->ep2, 0600, err, sizeof err), 0);
	/* The queue reopens when libzmq's I/O thread tells the socket it
	 * took messages, which can come after the ROUTER read them all:
	 * flush again until everything arrived, within a bound. */
	for (int tries = 0; next < room; tries++) {
		zmq_pollitem_t it = { router, 0, ZMQ_POLLIN, 0 };

		assert_true(tries < 10000);
		rc = kvw_engine_flush(e);
		assert_true(rc == 0 || rc == KVW_EAGAIN);
		if (zmq_poll(&it, 1, 1) < 1)
			continue;
		while (wire_recv(router, 1, &in, &m, err, sizeof err) == 0) {
			assert_true(m.hdr.room == next);
			assert_int_equal(m.hdr.type, next < room - chunks
					 ? FRAME_CLEAR : FRAME_SEND_CHUNK);
			next++;
			wire_in_release(&in);
		}
	}
	assert_int_equal(kvw_engine_held(e), 0);
	assert_int_equal(kvw_engine_hold(e, 0), 0);
}

static void bad_arguments_are_einval_and_send_nothing(void **state)
{
	struct fx *f = *state;
	char longep[KVW_MAX_STR + 2];
	uint32_t pg = 1;

	assert_int_equal(kvw_send_chunk(f->e, 1, NULL, 2, 0), KVW_EINVAL);
	assert_int_equal(kvw_send_chunk(f->e, 1, &pg, 0, 0), KVW_EINVAL);
	assert_non_null(strstr(kvw_engine_error(f->e), "not the last"));
	assert_int_equal(kvw_send_chunk(f->e, 1, &pg, KVW_MAX_PAGES + 1, 1),
			 KVW_EINVAL);
	assert_int_equal(kvw_recv_begin(f->e, 1, "", 0, &pg, 1, 0, 0), KVW_EINVAL);
	assert_int_equal(kvw_recv_begin(f->e, 1, NULL, 0, &pg, 1, 0, 0),
			 KVW_EINVAL);
	memset(longep, 'a', sizeof longep - 1);
	longep[sizeof longep - 1] = '\0';
	assert_int_equal(kvw_recv_begin(f->e, 1, longep, 0, &pg, 1, 0, 0),
			 KVW_EINVAL);
	assert_int_equal(kvw_recv_begin(f->e, 1, "ipc://b", 0, NULL, 1, 0, 0),
			 KVW_EINVAL);
	nothing_waiting(f);
}

static void pool_mapping_is_the_files(void **state)
{
	struct fx *f = *state;
	uint8_t *mine;

	assert_int_equal(kvw_pool_size(f->e), 1 << 16);
	mine = kvw_pool_base(f->e);
	assert_non_null(mine);
	mine[100] = 0xAB;
	mine[65535] = 0xCD;
	assert_int_equal(((uint8_t *)pool_base(f->p))[100], 0xAB);
	assert_int_equal(((uint8_t *)pool_base(f->p))[65535], 0xCD);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			open_refuses_missing_files_and_bad_endpoint, setup,
			teardown),
		cmocka_unit_test_setup_teardown(poll_unknown_room_is_enoent,
						setup, teardown),
		cmocka_unit_test_setup_teardown(poll_many_answers_as_poll_does,
						setup, teardown),
		cmocka_unit_test_setup_teardown(room_times_are_the_incarnations,
						setup, teardown),
		cmocka_unit_test_setup_teardown(poll_reads_what_the_owner_wrote,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			poll_shows_sending_while_jobs_are_outstanding,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			poll_after_clear_and_reuse_sees_the_new_generation,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			poll_after_clear_and_rebegin_never_shows_the_old,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			poll_shows_an_incarnation_opened_before_begin, setup,
			teardown),
		cmocka_unit_test_setup_teardown(cleared_ids_are_swept, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			held_commands_go_at_the_flush_in_order, setup, teardown),
		cmocka_unit_test_setup_teardown(
			a_full_queue_keeps_the_rest_held_in_order, setup,
			teardown),
		cmocka_unit_test_setup_teardown(commands_arrive_as_their_frames,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			bad_arguments_are_einval_and_send_nothing, setup,
			teardown),
		cmocka_unit_test_setup_teardown(pool_mapping_is_the_files, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
