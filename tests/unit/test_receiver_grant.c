/*
 * test_receiver_grant.c - kv-receiver's side of the destination grants
 * (table/rtab_grant.h) on a real receiver (receiver_open on files in /tmp
 * and /dev/shm, handlers driven directly), with a grant file attached as
 * receiver_sinks_start attaches it on tcp. Proved: a room has no grant
 * until its XFER_INFO goes out, then exactly its pages under its token;
 * CLEAR withdraws it, and the next incarnation under the same id gets its
 * own token (the old one stays refused); the release of an aborted room
 * withdraws it; and a grant that cannot be written fails the room before
 * any XFER_INFO leaves. Then, per target (issue 29 item 3): each target of
 * a room gets its own token, and for TP 4 -> 2, TP 2 -> 4, PP 2 -> 1 with
 * draft layers, TP and PP at once, MLA and replicated heads, every copy of
 * each prefill rank's honest plan (built as sender_peer.c builds it) lies
 * in the slice granted for its token, and, where ranks split the bytes,
 * in no other rank's slice.
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
#include "plan/plan.h"
#include "plan/rankmap.h"
#include "plan/shape.h"
#include "roles/receiver/receiver_impl.h"
#include "roles/receiver/sink.h"
#include "table/rtab.h"
#include "table/rtab_grant.h"

struct fix {
	char dir[32], listen[96], eng[96], table[96], pool[96];
	struct receiver *r;
	struct rtab_grant *sink; /* a sink's read-only view */
};

/* Opens a receiver and attaches a grant file of its layout, cut to
 * `pages` pages per buffer when pages != 0. */
static int open_fix(void **state, uint32_t pages)
{
	struct fix *f = test_calloc(1, sizeof *f);
	struct receiver_cfg cfg = { 0 };
	struct kvw_buf b[KVW_MAX_BUFFERS];
	char err[256], path[160];

	snprintf(f->dir, sizeof f->dir, "/tmp/kvwrg.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->listen, sizeof f->listen, "ipc://%s/d", f->dir);
	snprintf(f->eng, sizeof f->eng, "ipc://%s/e", f->dir);
	snprintf(f->table, sizeof f->table, "%s/t.rooms", f->dir);
	snprintf(f->pool, sizeof f->pool, "/dev/shm/kvwire.trxg-%d.pool",
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
	memcpy(b, f->r->bufs, f->r->nbufs * sizeof *b);
	for (uint32_t i = 0; pages && i < f->r->nbufs; i++)
		if (b[i].role != KVW_ROLE_AUX)
			b[i].pages = pages;
	if (sink_grant_path(f->table, path, sizeof path) ||
	    rtab_grant_create(path, rtab_capacity(f->r->tab), b, f->r->nbufs, NULL,
			      &f->r->grant, err, sizeof err) ||
	    rtab_grant_open(path, &f->sink, err, sizeof err)) {
		fprintf(stderr, "grant: %s\n", err);
		return -1;
	}
	*state = f;
	return 0;
}

static int setup(void **state) { return open_fix(state, 0); }
static int setup_short(void **state) { return open_fix(state, 2); }

static int teardown(void **state)
{
	struct fix *f = *state;
	char path[128];

	rtab_grant_close(&f->sink);
	receiver_close(&f->r); /* closes and removes the grant file */
	unlink(f->table);
	pool_unlink(f->pool);
	snprintf(path, sizeof path, "%s/d", f->dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/e", f->dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/t.rooms.grant", f->dir);
	assert_int_equal(access(path, F_OK), -1);
	rmdir(f->dir);
	test_free(f);
	return 0;
}

/* RECV_BEGIN for room id with pages {2, 3}, its one target prefill rank
 * 0 resolved; not sent yet. */
static struct rx_room *begin_room(struct fix *f, uint64_t id)
{
	struct receiver *r = f->r;
	struct rankmap_in in = { .prefill = { 1, 1, 1, 1 },
				 .decode = { 1, 1, 1, 1 } };
	static const uint32_t pages[] = { 2, 3 };
	struct frame_msg m;
	struct rankmap map;
	struct rx_room *room;
	char ep[128], err[200];

	snprintf(ep, sizeof ep, "ipc://%s/p0", f->dir);
	frame_msg_init(&m, FRAME_RECV_BEGIN, 0, id, 0x1);
	snprintf(m.u.recv_begin.bootstrap, sizeof m.u.recv_begin.bootstrap,
		 "ipc://%s/boot", f->dir);
	m.u.recv_begin.pages = frame_u32s_of(pages, 2);
	receiver_dispatch(r, 1, &m);
	room = receiver_rooms_get(&r->rooms, id);
	assert_non_null(room);
	assert_int_equal(rankmap_compute(&in, &map, err, sizeof err), 0);
	assert_int_equal(receiver_room_set_targets(room, &map, 1), 0);
	room->targets[0].peer = receiver_peer_get(r, ep, 0, err, sizeof err);
	assert_non_null(room->targets[0].peer);
	return room;
}

static void engine(struct fix *f, unsigned type, uint64_t id)
{
	struct frame_msg m;

	frame_msg_init(&m, type, 0, id, 0x1);
	receiver_dispatch(f->r, 1, &m);
}

/* What a sink would answer for one copy of page p of the first buffer:
 * 1 written, 0 refused for its destination, -1 not live. */
static int sink_says(const struct fix *f, struct rtab_ref ref, uint64_t tok,
		     uint32_t p)
{
	const struct kvw_buf *b = &f->r->bufs[0];
	struct rtab_grant_read rd;
	int ok;

	if (rtab_grant_begin(f->sink, ref, tok, &rd) != RTAB_GRANT_OK)
		return -1;
	ok = rtab_grant_covers(f->sink, &rd, b->offset + (uint64_t)p * b->item_len,
			       b->item_len);
	return rtab_grant_still(f->sink, &rd) ? ok : -1;
}

static void a_room_is_granted_its_pages_when_its_xfer_info_goes_out(void **state)
{
	struct fix *f = *state;
	struct rx_room *room = begin_room(f, 7);
	uint64_t tok;

	assert_int_equal(sink_says(f, room->ref, room->token, 2), -1);
	receiver_room_send(f->r, room);
	assert_true(room->sent);
	assert_int_equal(rtab_state(f->r->tab, room->ref), KVW_WAITING);
	tok = room->targets[0].token; /* what its XFER_INFO carried */
	assert_true(tok != 0 && tok != room->token);
	assert_int_equal(tok, rtab_grant_token(f->sink, room->token, 0));
	assert_int_equal(sink_says(f, room->ref, tok, 2), 1);
	assert_int_equal(sink_says(f, room->ref, tok, 3), 1);
	assert_int_equal(sink_says(f, room->ref, tok, 1), 0);
	assert_int_equal(sink_says(f, room->ref, tok, 4), 0);
	assert_int_equal(sink_says(f, room->ref, tok + 1, 2), -1);
	assert_int_equal(sink_says(f, room->ref, room->token, 2), -1);
	assert_true(receiver_room_token_ok(room, tok));
	assert_false(receiver_room_token_ok(room, room->token));
	assert_false(receiver_room_token_ok(room, 0));
}

static void clear_withdraws_and_the_next_incarnation_has_its_own_token(void **state)
{
	struct fix *f = *state;
	struct rx_room *room = begin_room(f, 7);
	struct rtab_ref old;
	uint64_t tok;

	receiver_room_send(f->r, room);
	old = room->ref;
	tok = room->targets[0].token;
	engine(f, FRAME_CLEAR, 7);
	assert_int_equal(sink_says(f, old, tok, 2), -1);
	assert_int_equal(sink_says(f, old, 0, 2), -1);
	room = begin_room(f, 7); /* same id, same pages */
	assert_true(room->ref.gen != old.gen || room->ref.slot != old.slot);
	assert_int_equal(sink_says(f, room->ref, 0, 2), -1); /* not sent yet */
	receiver_room_send(f->r, room);
	assert_true(room->targets[0].token != tok);
	assert_int_equal(sink_says(f, room->ref, tok, 2), -1); /* late batch */
	assert_int_equal(sink_says(f, room->ref, room->targets[0].token, 2),
			 1);
}

static void the_release_of_an_aborted_room_withdraws_its_grant(void **state)
{
	struct fix *f = *state;
	struct rx_room *room = begin_room(f, 9);

	receiver_room_send(f->r, room);
	engine(f, FRAME_RECV_ABORT, 9);
	assert_true(room->armed);
	/* The armed room's batches are refused by the live check already;
	 * once releasable its pages may go to another room. */
	receiver_room_release(f->r, room, "test");
	assert_int_equal(sink_says(f, room->ref, room->targets[0].token, 2),
			 -1);
}

static void a_grant_that_cannot_be_written_sends_no_xfer_info(void **state)
{
	struct fix *f = *state; /* grants hold 2 pages: 2 and 3 are outside */
	struct rx_room *room = begin_room(f, 11);
	struct rtab_view v;

	receiver_room_send(f->r, room);
	assert_false(room->sent);
	assert_int_equal(rtab_get(f->r->tab, room->ref, &v), 0);
	assert_int_equal(v.state, KVW_FAILED);
	assert_int_equal(v.reason, KVW_R_TRANSFER);
	assert_int_equal(sink_says(f, room->ref, room->token, 2), -1);
}

/* ---- per target: the slices against the planner ---------------------- */

#define SL_CAP 1024u

/* Every copy of target i's plan (out[0..n)) lies in i's grant, and one
 * below `alone` (the bytes only i writes) in no other target's. */
static void copies_granted_to(struct rtab_grant *g, const struct rx_room *room,
			      uint32_t i, const struct plan_copy *out, size_t n,
			      uint64_t alone)
{
	for (uint32_t j = 0; j < room->ntargets; j++) {
		struct rtab_grant_read rd;

		assert_int_equal(rtab_grant_begin(g, (struct rtab_ref){ 1, 1 },
						  rtab_grant_token(g, 0x77, j),
						  &rd),
				 RTAB_GRANT_OK);
		for (size_t k = 0; k < n; k++) {
			int in_j = rtab_grant_covers(g, &rd, out[k].dst_off,
						     out[k].len);

			if (j == i)
				assert_true(in_j);
			else if (out[k].dst_off < alone)
				assert_false(in_j);
		}
	}
}

/* The room's row of every state component (the decode's), and the
 * prefill's row it comes from. */
static const uint32_t SL_ROW = 1, SL_SRC_ROW = 0;

/* Target i's honest plan of the room's state rows (plan_state, as
 * sender_state.c plans them) lies in i's grant; a sharded component's
 * part of a row, where `split`, in no other real target's (each prefill
 * rank writes its own part: receiver_slice.c narrows the grant to it). */
static void state_rows_cover_the_plan(struct rtab_grant *g,
				      const struct shape *s,
				      const struct rx_room *room, uint32_t i,
				      const struct plan *p, int split)
{
	static struct plan_copy out[SL_CAP];

	for (uint32_t c = 0; c < s->nstate; c++) {
		size_t n = 0;
		char err[200];

		assert_int_equal(plan_state(p, c, &SL_SRC_ROW, &SL_ROW, 1, out,
					    SL_CAP, &n, err, sizeof err), 0);
		assert_true(n > 0); /* a row in each layer's buffer */
		copies_granted_to(g, room, i, out, n,
				  split && !s->state[c].replicated ? UINT64_MAX
								    : 0);
	}
}

/* Decode rank drank (tp) of dt, a room of pages {5, 6} and aux slot 3
 * whose targets rankmap gives over pt: every copy of each real target's
 * honest plan lies in the slice granted for that target's token; where
 * `split` (the ranks write disjoint bytes) in no other target's slice,
 * the shared aux slot excepted. A dummy's token grants nothing. */
static void slices_cover_the_plans(const struct shape *s, struct kvw_topo pt,
				   struct kvw_topo dt, uint32_t drank,
				   int split)
{
	static struct plan_copy out[SL_CAP];
	static const uint32_t pages[] = { 5, 6 };
	struct receiver r = { 0 };
	struct kvw_buf db[64], sb[64];
	struct rtab_grant_target tg[RANKMAP_MAX_TARGETS];
	struct rankmap_in in = { .prefill = pt, .decode = dt };
	struct rankmap map;
	struct rx_room *room;
	struct rtab_grant *g;
	uint64_t dsize, ssize, aux_at = 0;
	uint32_t dn, sn;
	char err[200], path[96];

	r.shape = *s;
	r.topo = dt;
	r.rank.tp = drank;
	in.decode_rank.tp = drank;
	in.model_flags = s->mla ? KVW_MODEL_MLA : 0;
	shape_model(s, &dt, &r.rank, &r.model);
	assert_int_equal(shape_layout(s, &dt, &r.rank, 1, db, 64, &dn, &dsize,
				      err, sizeof err), 0);
	for (uint32_t k = 0; k < dn; k++)
		if (db[k].role == KVW_ROLE_AUX)
			aux_at = db[k].offset;
	assert_int_equal(rankmap_compute(&in, &map, err, sizeof err), 0);
	room = receiver_room_new(1, pages, 2);
	assert_non_null(room);
	assert_int_equal(receiver_room_set_targets(room, &map, pt.tp), 0);
	snprintf(path, sizeof path, "/dev/shm/kvwire.trgs-%d.grant",
		 (int)getpid());
	assert_int_equal(rtab_grant_create(path, 4, db, dn, NULL, &g, err,
					   sizeof err), 0);
	for (uint32_t i = 0; i < room->ntargets; i++)
		receiver_target_slice(&r, room, &room->targets[i], &tg[i]);
	assert_int_equal(rtab_grant_give_targets(g, (struct rtab_ref){ 1, 1 },
						 0x77, tg, room->ntargets,
						 pages, 2, 3), 0);
	for (uint32_t c = 0; c < s->nstate; c++)
		assert_int_equal(rtab_grant_give_rows(g, (struct rtab_ref){ 1, 1 },
						      c, &SL_ROW, 1), 0);
	for (uint32_t i = 0; i < room->ntargets; i++) {
		const struct rx_target *t = &room->targets[i];
		struct kvw_model pm;
		struct plan_heads h;
		struct plan_side src, dst;
		struct plan *p = NULL;
		size_t n = 0;

		if (t->dummy) {
			assert_int_equal(tg[i].layer_count, 0);
			assert_int_equal(tg[i].flags, 0);
			continue;
		}
		shape_model(s, &pt, &t->coord, &pm);
		assert_int_equal(shape_layout(s, &pt, &t->coord, 0, sb, 64, &sn,
					      &ssize, err, sizeof err), 0);
		src = (struct plan_side){ &pm, sb, sn, &ssize, 1 };
		dst = (struct plan_side){ &r.model, db, dn, &dsize, 1 };
		if (pt.tp != dt.tp)
			assert_int_equal(plan_heads_compute(&pm, pt.tp,
							    t->coord.tp, dt.tp,
							    drank, &h, err,
							    sizeof err), 0);
		assert_int_equal(plan_build(&src, &dst,
					    pt.tp != dt.tp ? &h : NULL, &p,
					    err, sizeof err), 0);
		assert_int_equal(plan_chunk(p, pages, pages, 2, 1, 0, 3, out,
					    SL_CAP, &n, err, sizeof err), 0);
		assert_true(n > 0);
		copies_granted_to(g, room, i, out, n, split ? aux_at : 0);
		state_rows_cover_the_plan(g, s, room, i, p, split);
		plan_free(&p);
	}
	/* A token of no target. */
	assert_int_equal(rtab_grant_begin(g, (struct rtab_ref){ 1, 1 },
					  rtab_grant_token(g, 0x77,
							   room->ntargets),
					  &(struct rtab_grant_read){ 0 }),
			 RTAB_GRANT_NOT_LIVE);
	rtab_grant_close(&g);
	unlink(path);
	receiver_room_free(room);
}

static struct shape small_shape(void)
{
	struct shape s;

	shape_default(&s);
	s.layers = 4;
	s.page_tokens = 4;
	s.head_dim = 8;
	s.pages = 8;
	s.aux_slots = 4;
	return s;
}

static void each_prefill_rank_is_granted_what_its_plan_writes(void **state)
{
	struct shape s = small_shape();
	const struct kvw_topo t1 = { 1, 1, 1, 1 }, t2 = { 2, 1, 1, 1 },
			      t4 = { 4, 1, 1, 1 }, pp2 = { 1, 2, 1, 1 },
			      tp2pp2 = { 2, 2, 1, 1 };

	(void)state;
	slices_cover_the_plans(&s, t4, t2, 0, 1); /* halves of each slot */
	slices_cover_the_plans(&s, t4, t2, 1, 1);
	slices_cover_the_plans(&s, t2, t4, 3, 0); /* whole decode slots */
	slices_cover_the_plans(&s, t1, t1, 0, 0);
	slices_cover_the_plans(&s, tp2pp2, t1, 0, 1); /* 4 ranks, 2 x 2 */
	s.draft_layers = 2; /* on decode only: nobody's to write */
	slices_cover_the_plans(&s, pp2, t1, 0, 1);
	s.draft_layers = 0;
	s.kv_heads = 2; /* fewer heads than prefill ranks: replicated */
	slices_cover_the_plans(&s, t4, t2, 0, 0);
	s.kv_heads = 8;
	s.mla = 1; /* one real target, whole slots; the dummy nothing */
	slices_cover_the_plans(&s, t4, t2, 0, 0);
}

/* State rows under a TP mismatch: a sharded component's row is written
 * part by part (prefill TP 4 -> decode TP 2: each decode row of two
 * parts, one per prefill rank of the decode rank's pair), and each rank's
 * grant holds its part only; a replicated one's whole row; TP 2 -> 4 and
 * equal TP, whole decode rows. */
static void each_prefill_rank_is_granted_its_part_of_a_state_row(void **st)
{
	struct shape s = small_shape();
	const struct kvw_topo t1 = { 1, 1, 1, 1 }, t2 = { 2, 1, 1, 1 },
			      t4 = { 4, 1, 1, 1 };
	char err[200];

	(void)st;
	assert_int_equal(shape_option(&s, "state",
				      "slot:3:64,paged:8:32:rep", err,
				      sizeof err), 1);
	slices_cover_the_plans(&s, t4, t2, 0, 1);
	slices_cover_the_plans(&s, t4, t2, 1, 1);
	slices_cover_the_plans(&s, t2, t1, 0, 1);
	slices_cover_the_plans(&s, t2, t4, 3, 0);
	slices_cover_the_plans(&s, t2, t2, 1, 0);
}

/* A state component of its own layers (5 Mamba-like buffers, 4 model
 * layers) over prefill PP 2 -> decode PP 1: each stage's target may write
 * the rows of its share of the five (0-2, 3-4: the split the prefill
 * stage lays its pool out by), and no other stage's. */
static void each_pp_stage_is_granted_its_share_of_own_state_layers(void **st)
{
	static const uint32_t pages[] = { 5, 6 }, row[] = { 1 };
	struct shape s = small_shape();
	const struct kvw_topo pp2 = { 1, 2, 1, 1 }, t1 = { 1, 1, 1, 1 };
	struct receiver r = { 0 };
	struct kvw_buf db[64];
	struct rtab_grant_target tg[RANKMAP_MAX_TARGETS];
	struct rankmap_in in = { .prefill = pp2, .decode = t1 };
	struct rankmap map;
	struct rx_room *room;
	struct rtab_grant *g;
	uint32_t dn, own[KVW_MAX_STATE] = { 0 }, seen = 0;
	uint64_t dsize;
	char err[200], path[96];

	(void)st;
	assert_int_equal(shape_option(&s, "state", "slot:2:16:layers=5", err,
				      sizeof err), 1);
	own[0] = 5;
	r.shape = s;
	r.topo = t1;
	shape_model(&s, &t1, &r.rank, &r.model);
	assert_int_equal(shape_layout(&s, &t1, &r.rank, 1, db, 64, &dn, &dsize,
				      err, sizeof err), 0);
	assert_int_equal(rankmap_compute(&in, &map, err, sizeof err), 0);
	room = receiver_room_new(1, pages, 2);
	assert_non_null(room);
	assert_int_equal(receiver_room_set_targets(room, &map, 1), 0);
	assert_int_equal(room->ntargets, 2);
	snprintf(path, sizeof path, "/dev/shm/kvwire.trgo-%d.grant",
		 (int)getpid());
	assert_int_equal(rtab_grant_create(path, 4, db, dn, own, &g, err,
					   sizeof err), 0);
	for (uint32_t i = 0; i < room->ntargets; i++)
		receiver_target_slice(&r, room, &room->targets[i], &tg[i]);
	assert_int_equal(rtab_grant_give_targets(g, (struct rtab_ref){ 1, 1 },
						 0x78, tg, room->ntargets,
						 pages, 2, 3), 0);
	assert_int_equal(rtab_grant_give_rows(g, (struct rtab_ref){ 1, 1 }, 0,
					      row, 1), 0);
	for (uint32_t j = 0; j < room->ntargets; j++) {
		uint32_t stage = room->targets[j].coord.pp;
		struct rtab_grant_read rd;

		assert_int_equal(rtab_grant_begin(g, (struct rtab_ref){ 1, 1 },
						  rtab_grant_token(g, 0x78, j),
						  &rd),
				 RTAB_GRANT_OK);
		for (uint32_t k = 0; k < dn; k++) {
			uint32_t l = db[k].layer_id & 0xFFFFu;

			if (db[k].role != KVW_ROLE_STATE)
				continue;
			seen++;
			assert_int_equal(rtab_grant_covers(g, &rd,
							   db[k].offset + 16,
							   16),
					 stage ? l >= 3 : l <= 2);
		}
	}
	assert_int_equal(seen, 10); /* five buffers, two targets */
	rtab_grant_close(&g);
	unlink(path);
	receiver_room_free(room);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(a_room_is_granted_its_pages_when_its_xfer_info_goes_out, setup, teardown),
		cmocka_unit_test_setup_teardown(clear_withdraws_and_the_next_incarnation_has_its_own_token, setup, teardown),
		cmocka_unit_test_setup_teardown(the_release_of_an_aborted_room_withdraws_its_grant, setup, teardown),
		cmocka_unit_test_setup_teardown(a_grant_that_cannot_be_written_sends_no_xfer_info, setup_short, teardown),
		cmocka_unit_test(each_prefill_rank_is_granted_what_its_plan_writes),
		cmocka_unit_test(each_pp_stage_is_granted_its_share_of_own_state_layers),
		cmocka_unit_test(each_prefill_rank_is_granted_its_part_of_a_state_row),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
