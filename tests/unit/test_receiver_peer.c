/*
 * test_receiver_peer.c - what kv-receiver's peer ROUTER lets through (issue
 * 14), on a real receiver (receiver_open on files in /tmp and /dev/shm; its
 * handlers are driven directly, without the poll loop, at clock values the
 * test picks). Proved: STATUS, ABORT_ACK and PING each have a token bucket
 * per source: a source gets its burst, then its rate, and what goes over
 * is counted rate_limited and reaches no handler, while another source is
 * untouched; types the socket does not take are not limited but counted
 * malformed as before. And a STATUS (or ABORT_ACK) for a room from a
 * prefill rank that is not its target changes nothing and is counted
 * stale, while the target's own STATUS completes the room; an ABORT_ACK
 * that names the room's target and a new epoch but not the token of an
 * ABORT it was sent is no restart of that peer (it failed every room of
 * the peer before), while the real ack of a restarted peer still is; and
 * the token of one room does not tell another's (they were handed out
 * one after another, so a member sent one room could report on the
 * next one of another rank's). And when a dead prefill peer may be
 * forgotten (receiver_forget.c).
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

#include "mem/pool.h"
#include "plan/rankmap.h"
#include "plan/shape.h"
#include "roles/receiver/receiver_impl.h"
#include "table/rtab.h"
#include "wire/wire.h"

#define T0 1000000000000ull /* the test's clock starts here (ns) */
#define ROOM 77u

struct fix {
	char dir[32], listen[96], eng[96], table[96], pool[96];
	struct receiver *r;
};

static int setup(void **state)
{
	struct fix *f = test_calloc(1, sizeof *f);
	struct receiver_cfg cfg = { 0 };
	char err[256];

	snprintf(f->dir, sizeof f->dir, "/tmp/kvwrp.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->listen, sizeof f->listen, "ipc://%s/d", f->dir);
	snprintf(f->eng, sizeof f->eng, "ipc://%s/e", f->dir);
	snprintf(f->table, sizeof f->table, "%s/t.rooms", f->dir);
	snprintf(f->pool, sizeof f->pool, "/dev/shm/kvwire.trxp-%d.pool",
		 (int)getpid());
	cfg.listen = f->listen;
	cfg.engine = f->eng;
	cfg.table = f->table;
	cfg.pool = f->pool;
	cfg.transport = "shm";
	cfg.topo = (struct kvw_topo){ 1, 1, 1, 1 };
	shape_default(&cfg.shape);
	cfg.shape.layers = 2;
	cfg.shape.pages = 16;
	cfg.waiting_timeout_ns = 60000000000ull;
	if (receiver_open(&cfg, &f->r, err, sizeof err) != 0) {
		fprintf(stderr, "receiver_open: %s\n", err);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;
	char path[128];

	receiver_close(&f->r);
	unlink(f->table);
	pool_unlink(f->pool);
	snprintf(path, sizeof path, "%s/d", f->dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/e", f->dir);
	unlink(path);
	rmdir(f->dir);
	test_free(f);
	return 0;
}

static uint64_t sec(struct fix *f, unsigned which)
{
	struct rtab_metrics_view v;

	rtab_metrics_get(f->r->tab, &v);
	return v.sec[which];
}

static uint64_t counter(struct fix *f, unsigned which)
{
	return rtab_counter_get(f->r->tab, which);
}

/* The room's flags in the table (RTAB_F_*). */
static uint32_t flags(struct fix *f, const struct rx_room *room)
{
	int was = rtab_flags_or(f->r->tab, room->ref, 0);

	assert_true(was >= 0);
	return (uint32_t)was;
}

/* A message of type (a STATUS: Success with token) from ROUTER identity
 * `src` (5 bytes, as libzmq makes them) claiming prefill rank `rank`,
 * taken at now_ns as the loop takes it. */
static void from(struct fix *f, uint32_t src, unsigned type, uint32_t rank,
		 uint64_t room, uint64_t token, uint64_t now_ns)
{
	struct wire_in in = { .idlen = 5 };
	struct frame_msg m;

	in.id[0] = 0;
	memcpy(in.id + 1, &src, 4);
	frame_msg_init(&m, type, rank, room, 0x5eed);
	if (type == FRAME_STATUS) {
		m.u.status.state = KVW_SUCCESS;
		m.u.status.token = token;
	} else if (type == FRAME_ABORT_ACK) {
		m.u.abort_ack.token = token;
	}
	receiver_peer_in(f->r, &in, &m, now_ns);
}

/* n messages of type from src at now_ns (STATUS: for an unknown room). */
static void burst(struct fix *f, uint32_t src, unsigned type, uint32_t n,
		  uint64_t now_ns)
{
	for (uint32_t i = 0; i < n; i++)
		from(f, src, type, 0, 1000000 + i, 1, now_ns);
}

static void status_flood_gets_its_burst_then_its_rate_per_source(void **state)
{
	struct fix *f = *state;
	uint64_t refused = counter(f, RTAB_C_REFUSED);

	/* A whole table's worth at one instant passes: every one reaches the
	 * handler (an unknown room: refused). */
	burst(f, 1, FRAME_STATUS, (uint32_t)RX_STATUS_BURST, T0);
	assert_int_equal(counter(f, RTAB_C_REFUSED) - refused, RX_STATUS_BURST);
	assert_int_equal(sec(f, RTAB_S_RATE_LIMITED), 0);
	/* The next one from that source is over: counted, never handled. */
	burst(f, 1, FRAME_STATUS, 10, T0);
	assert_int_equal(sec(f, RTAB_S_RATE_LIMITED), 10);
	assert_int_equal(counter(f, RTAB_C_REFUSED) - refused, RX_STATUS_BURST);
	/* Another source is untouched. */
	burst(f, 2, FRAME_STATUS, 5, T0);
	assert_int_equal(counter(f, RTAB_C_REFUSED) - refused,
			 RX_STATUS_BURST + 5);
	/* 1 ms later the first source has RX_STATUS_RATE / 1000 again. */
	burst(f, 1, FRAME_STATUS, (uint32_t)(RX_STATUS_RATE / 1000) + 1,
	      T0 + 1000000);
	assert_int_equal(counter(f, RTAB_C_REFUSED) - refused,
			 RX_STATUS_BURST + 5 + RX_STATUS_RATE / 1000);
	assert_int_equal(sec(f, RTAB_S_RATE_LIMITED), 11);
	assert_int_equal(sec(f, RTAB_S_UNAUTHORISED), 0);
}

static void ping_and_abort_ack_have_buckets_of_their_own(void **state)
{
	struct fix *f = *state;
	uint64_t stale = counter(f, RTAB_C_STALE);

	/* A STATUS flood leaves the same source's PINGs and acks alone. */
	burst(f, 3, FRAME_STATUS, (uint32_t)RX_STATUS_BURST + 1, T0);
	assert_int_equal(sec(f, RTAB_S_RATE_LIMITED), 1);
	burst(f, 3, FRAME_PING, (uint32_t)RX_PING_BURST, T0);
	assert_int_equal(sec(f, RTAB_S_RATE_LIMITED), 1);
	burst(f, 3, FRAME_PING, 1, T0);
	assert_int_equal(sec(f, RTAB_S_RATE_LIMITED), 2);
	/* One second later a full PING bucket again. */
	burst(f, 3, FRAME_PING, (uint32_t)RX_PING_BURST, T0 + 1000000000);
	assert_int_equal(sec(f, RTAB_S_RATE_LIMITED), 2);
	/* ABORT_ACKs of unknown rooms: handled (dropped) up to the burst. */
	burst(f, 3, FRAME_ABORT_ACK, (uint32_t)RX_ACK_BURST + 3, T0);
	assert_int_equal(sec(f, RTAB_S_RATE_LIMITED), 5);
	assert_int_equal(counter(f, RTAB_C_STALE), stale);
}

static void types_the_socket_does_not_take_are_malformed_not_limited(void **state)
{
	struct fix *f = *state;
	uint64_t bad = counter(f, RTAB_C_MALFORMED);

	/* PONG: nobody is pinged through the ROUTER. */
	burst(f, 4, FRAME_PONG, 3000, T0);
	assert_int_equal(counter(f, RTAB_C_MALFORMED) - bad, 3000);
	assert_int_equal(sec(f, RTAB_S_RATE_LIMITED), 0);
}

/* Room id, whose one target is prefill rank 0 (peer p0); the receiver
 * also knows prefill rank 1 (peer p1). XFER_INFO went out: the room waits. */
static struct rx_room *room_id_of_rank0(struct fix *f, uint64_t id)
{
	struct receiver *r = f->r;
	struct rankmap_in in = { .prefill = { 1, 1, 1, 1 },
				 .decode = { 1, 1, 1, 1 } };
	static const uint32_t pages[] = { 2, 3 };
	struct frame_msg m;
	struct rankmap map;
	struct rx_room *room;
	char ep[2][128], err[200];

	for (int i = 0; i < 2; i++)
		snprintf(ep[i], sizeof ep[i], "ipc://%s/p%d", f->dir, i);
	frame_msg_init(&m, FRAME_RECV_BEGIN, 0, id, 0x1);
	snprintf(m.u.recv_begin.bootstrap, sizeof m.u.recv_begin.bootstrap,
		 "ipc://%s/boot", f->dir);
	m.u.recv_begin.pages = frame_u32s_of(pages, 2);
	receiver_dispatch(r, 1, &m);
	room = receiver_rooms_get(&r->rooms, id);
	assert_non_null(room);
	assert_int_equal(rankmap_compute(&in, &map, err, sizeof err), 0);
	assert_int_equal(receiver_room_set_targets(room, &map, 1), 0);
	assert_int_equal(room->ntargets, 1);
	room->targets[0].peer = receiver_peer_get(r, ep[0], 0, err, sizeof err);
	assert_non_null(room->targets[0].peer);
	assert_non_null(receiver_peer_get(r, ep[1], 1, err, sizeof err));
	receiver_room_send(r, room);
	assert_int_equal(rtab_state(r->tab, room->ref), KVW_WAITING);
	return room;
}

static struct rx_room *room_of_rank0(struct fix *f)
{
	return room_id_of_rank0(f, ROOM);
}

static void status_from_a_rank_not_the_rooms_target_changes_nothing(void **state)
{
	struct fix *f = *state;
	struct rx_room *room = room_of_rank0(f);
	uint64_t stale = counter(f, RTAB_C_STALE), now = T0;
	uint64_t tok = room->targets[0].token; /* what rank 0 was sent */

	/* Prefill rank 1 reports the room as done, even with rank 0's token
	 * (a member that learnt it): dropped, counted, the room still
	 * waits. */
	from(f, 9, FRAME_STATUS, 1, ROOM, tok, now);
	assert_int_equal(counter(f, RTAB_C_STALE) - stale, 1);
	assert_int_equal(rtab_state(f->r->tab, room->ref), KVW_WAITING);
	/* ... and as failed: nothing fails. */
	{
		struct wire_in in = { .idlen = 1 };
		struct frame_msg m;

		frame_msg_init(&m, FRAME_STATUS, 1, ROOM, 0x5eed);
		m.u.status.state = KVW_FAILED;
		m.u.status.reason = KVW_R_TRANSFER;
		m.u.status.token = tok;
		receiver_peer_in(f->r, &in, &m, now);
	}
	assert_int_equal(counter(f, RTAB_C_STALE) - stale, 2);
	assert_int_equal(rtab_state(f->r->tab, room->ref), KVW_WAITING);
	/* Its own target with another token (another incarnation's, or the
	 * room's base token, which no target is sent): stale. */
	from(f, 8, FRAME_STATUS, 0, ROOM, tok + 1, now);
	assert_int_equal(counter(f, RTAB_C_STALE) - stale, 3);
	from(f, 8, FRAME_STATUS, 0, ROOM, room->token, now);
	assert_int_equal(counter(f, RTAB_C_STALE) - stale, 4);
	assert_int_equal(rtab_state(f->r->tab, room->ref), KVW_WAITING);
	/* An ABORT_ACK from rank 1 releases nothing (the room is not armed,
	 * and rank 1 is no target). */
	from(f, 9, FRAME_ABORT_ACK, 1, ROOM, tok, now);
	assert_int_equal(counter(f, RTAB_C_STALE) - stale, 5);
	assert_int_equal(rtab_state(f->r->tab, room->ref), KVW_WAITING);
	/* The target itself, with its own token: Success. */
	from(f, 8, FRAME_STATUS, 0, ROOM, tok, now);
	assert_int_equal(rtab_state(f->r->tab, room->ref), KVW_SUCCESS);
	assert_int_equal(counter(f, RTAB_C_STALE) - stale, 5);
	assert_int_equal(sec(f, RTAB_S_RATE_LIMITED), 0);
}

static void ack_naming_a_target_and_a_new_epoch_is_no_restart(void **state)
{
	struct fix *f = *state;
	struct rx_room *room = room_of_rank0(f);
	struct rx_peer *p0 = room->targets[0].peer;
	struct wire_in in = { .idlen = 1 };
	uint64_t stale = counter(f, RTAB_C_STALE);
	struct frame_msg m;

	assert_int_equal(receiver_peer_seen(f->r, p0, 0xE1), 0);
	/* Anyone on the socket: rank 0, an epoch of its own, a made-up token
	 * (from() sends epoch 0x5eed). */
	from(f, 9, FRAME_ABORT_ACK, 0, ROOM, room->token, T0);
	assert_int_equal(counter(f, RTAB_C_STALE) - stale, 1);
	assert_int_equal(p0->epoch, 0xE1);
	assert_int_equal(rtab_state(f->r->tab, room->ref), KVW_WAITING);
	/* The engine aborts the room: armed, ABORT sent to rank 0. A guess
	 * at the arming's token is still nobody's restart. */
	frame_msg_init(&m, FRAME_RECV_ABORT, 0, ROOM, 0x1);
	receiver_dispatch(f->r, 1, &m);
	assert_true(room->armed);
	from(f, 9, FRAME_ABORT_ACK, 0, ROOM, room->abort_token + 1, T0);
	assert_int_equal(p0->epoch, 0xE1);
	assert_int_equal(counter(f, RTAB_C_STALE) - stale, 2);
	assert_false(flags(f, room) & RTAB_F_RELEASABLE);
	/* Rank 0, restarted, acks with the token its ABORT carried: a
	 * restart (the new epoch recorded) that acks the room. */
	frame_msg_init(&m, FRAME_ABORT_ACK, 0, ROOM, 0xE2);
	m.u.abort_ack.token = room->abort_token;
	receiver_peer_in(f->r, &in, &m, T0);
	assert_int_equal(p0->epoch, 0xE2);
	assert_true(flags(f, room) & RTAB_F_RELEASABLE);
}

static void another_rooms_token_does_not_tell_this_ones(void **state)
{
	struct fix *f = *state;
	struct rx_room *a = room_of_rank0(f), *b = room_id_of_rank0(f, ROOM + 1);
	struct wire_in in = { .idlen = 1 };
	uint64_t stale = counter(f, RTAB_C_STALE);
	struct frame_msg m;

	assert_int_equal(receiver_peer_seen(f->r, a->targets[0].peer, 0xE1), 0);
	/* A member that got room b's XFER_INFO (its token) claims rank 0 and
	 * its epoch (lookups tell both) and reports room a done, with every
	 * token near b's: tokens handed out one after another once made
	 * this a hit at the first or second guess. */
	for (int64_t d = -4096; d <= 4096; d++) {
		frame_msg_init(&m, FRAME_STATUS, 0, ROOM, 0xE1);
		m.u.status.state = KVW_SUCCESS;
		m.u.status.token = b->targets[0].token + (uint64_t)d;
		receiver_peer_in(f->r, &in, &m, T0);
	}
	assert_int_equal(rtab_state(f->r->tab, a->ref), KVW_WAITING);
	assert_int_equal(counter(f, RTAB_C_STALE) - stale, 8193);
}

/* When a prefill peer may be forgotten (receiver_forget.c): only dead,
 * dead for the whole grace, and named by no room; a stamp a little after
 * "now" (taken in the same sync pass) is not a wrap to forever. */
static void a_peer_is_forgotten_only_dead_for_the_grace_and_unnamed(void **state)
{
	struct rx_peer p = { .dead = 1, .dead_since_ns = 1000 };
	const uint64_t grace = 500;

	(void)state;
	assert_false(receiver_peer_departed(&p, 1499, grace));
	assert_true(receiver_peer_departed(&p, 1500, grace));
	assert_false(receiver_peer_departed(&p, 999, grace)); /* no wrap */
	p.busy = 1; /* a room names it */
	assert_false(receiver_peer_departed(&p, 5000, grace));
	p.busy = 0;
	p.dead = 0; /* it came back */
	assert_false(receiver_peer_departed(&p, 5000, grace));
	p.dead = 1;
	p.dead_since_ns = 0; /* never stamped */
	assert_false(receiver_peer_departed(&p, 5000, grace));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			status_flood_gets_its_burst_then_its_rate_per_source,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			ping_and_abort_ack_have_buckets_of_their_own, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			types_the_socket_does_not_take_are_malformed_not_limited,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			status_from_a_rank_not_the_rooms_target_changes_nothing,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			ack_naming_a_target_and_a_new_epoch_is_no_restart,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			another_rooms_token_does_not_tell_this_ones, setup,
			teardown),
		cmocka_unit_test(
			a_peer_is_forgotten_only_dead_for_the_grace_and_unnamed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
