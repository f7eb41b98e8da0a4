/*
 * test_sink.c - the tcp sink's room hook (roles/receiver/sink.c) over a real room
 * table, fence and grant file in /dev/shm, mapped as a sink maps them: a
 * batch inside its room's granted pages is held in the fence until
 * room_end; a batch naming a page of another room is refused (DEST),
 * counted as dest_refused and fails its room with `integrity` while the
 * other room is untouched; a batch for a room that is unknown, terminal,
 * armed, not granted yet, or of another incarnation token is "not live";
 * and after CLEAR and a new begin under the same id, the old
 * incarnation's late batch is not live while the new one's passes. Last,
 * the same hook under the real tcp sink loop, fed by the real tcp client
 * over loopback: a well-formed batch for one room that names a page of
 * another is refused, that page's canary stays, and the other room's own
 * batch lands.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/kvw.h"
#include "mem/pool.h"
#include "roles/receiver/sink.h"
#include "table/rtab.h"
#include "table/rtab_fence.h"
#include "table/rtab_grant.h"
#include "xport/tcp/tcp_proto.h"
#include "xport/tcp/tcp_sink.h"
#include "xport/tcp/xport_tcp.h"
#include "xport/xport.h"

#define ITEM 512u
#define PAGES 32u
#define BASE 8192u

static const struct kvw_buf bufs[] = {
	{ .layer_id = 0, .role = KVW_ROLE_K, .offset = BASE, .item_len = ITEM,
	  .pages = PAGES },
	{ .layer_id = 0, .role = KVW_ROLE_V, .offset = BASE + ITEM * PAGES,
	  .item_len = ITEM, .pages = PAGES },
};

struct fx {
	char table[96], fence[128], grant[128];
	struct rtab *owner;            /* kv-receiver's */
	struct rtab_fence *rf;         /* kv-receiver's */
	struct rtab_grant *rg;         /* kv-receiver's */
	struct sink_hook h;            /* the sink's own mappings */
	struct rtab_ref a, b;          /* rooms 42 and 43 */
};

static const uint32_t pages_a[] = { 3, 4 }, pages_b[] = { 5 };

static int setup(void **state)
{
	static unsigned n;
	struct fx *f = test_calloc(1, sizeof *f);
	char err[200];
	int existed;

	snprintf(f->table, sizeof f->table, "/dev/shm/kvwire.tsink-%d-%u.rooms",
		 (int)getpid(), n++);
	if (sink_fence_path(f->table, f->fence, sizeof f->fence) ||
	    sink_grant_path(f->table, f->grant, sizeof f->grant) ||
	    rtab_create(f->table, 16, 4, 1, &f->owner, &existed, err,
			sizeof err) ||
	    rtab_fence_create(f->fence, 1, 4, &f->rf, err, sizeof err) ||
	    rtab_grant_create(f->grant, 16, bufs, 2, NULL, &f->rg, err, sizeof err) ||
	    rtab_open(f->table, 1, &f->h.t, err, sizeof err) ||
	    rtab_fence_open(f->fence, &f->h.f, err, sizeof err) ||
	    rtab_grant_open(f->grant, &f->h.g, err, sizeof err) ||
	    rtab_insert(f->owner, 42, 0, 0, &f->a) ||
	    rtab_insert(f->owner, 43, 0, 0, &f->b) ||
	    rtab_grant_give(f->rg, f->a, 0xa1, pages_a, 2, RTAB_GRANT_NO_AUX) ||
	    rtab_grant_give(f->rg, f->b, 0xb1, pages_b, 1, RTAB_GRANT_NO_AUX))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	rtab_grant_close(&f->h.g);
	rtab_fence_close(&f->h.f);
	rtab_close(&f->h.t);
	rtab_grant_close(&f->rg);
	rtab_fence_close(&f->rf);
	rtab_close(&f->owner);
	unlink(f->grant);
	unlink(f->fence);
	rtab_unlink(f->table);
	test_free(f);
	return 0;
}

/* The wire's copy list of n (offset, length) pairs. */
static const uint8_t *copies(const uint64_t *pairs, uint32_t n)
{
	static uint8_t buf[16 * TCP_COPY_LEN];

	for (uint32_t i = 0; i < 2 * n; i++)
		le_put(buf + 8 * i, pairs[i], 8);
	return buf;
}

static uint64_t page(unsigned k, uint32_t p)
{
	return bufs[k].offset + (uint64_t)p * ITEM;
}

static uint64_t dest_refused(const struct fx *f)
{
	struct rtab_metrics_view mv;

	rtab_metrics_get(f->owner, &mv);
	return mv.sec[RTAB_S_DEST_REFUSED];
}

/* The token of the grant's one target of a room given base token base. */
static uint64_t tok(const struct fx *f, uint64_t base)
{
	return rtab_grant_token(f->rg, base, 0);
}

static void test_a_batch_inside_its_pages_is_held_until_room_end(void **state)
{
	struct fx *f = *state;
	const uint64_t c[] = { page(0, 3), 2 * ITEM, page(1, 4) + 7, 100 };

	assert_int_equal(sink_room_begin(&f->h, 2, 42, tok(f, 0xa1),
						 copies(c, 2), 2),
			 TCP_ROOM_OK);
	assert_true(rtab_fence_busy(f->rf, f->a));
	sink_room_end(&f->h, 2);
	assert_false(rtab_fence_busy(f->rf, f->a));
	/* Incarnation 0, the base token, a token of no target: not live. */
	assert_int_equal(sink_room_begin(&f->h, 0, 42, 0, copies(c, 2), 2),
			 TCP_ROOM_NOT_LIVE);
	assert_int_equal(sink_room_begin(&f->h, 0, 42, 0xa1, copies(c, 2), 2),
			 TCP_ROOM_NOT_LIVE);
	assert_int_equal(sink_room_begin(&f->h, 0, 42,
					 rtab_grant_token(f->rg, 0xa1, 1),
					 copies(c, 2), 2), TCP_ROOM_NOT_LIVE);
	assert_false(rtab_fence_busy(f->rf, f->a));
	assert_int_equal(rtab_state(f->owner, f->a), KVW_BOOTSTRAPPING);
	assert_int_equal(dest_refused(f), 0);
}

static void test_a_copy_into_another_rooms_page_fails_its_room_only(void **state)
{
	struct fx *f = *state;
	/* The first copy is fine; the second lands in room 43's page 5. */
	const uint64_t c[] = { page(0, 3), ITEM, page(1, 5), 16 };
	struct rtab_view v;

	assert_int_equal(sink_room_begin(&f->h, 1, 42, tok(f, 0xa1),
						 copies(c, 2), 2),
			 TCP_ROOM_DEST);
	assert_false(rtab_fence_busy(f->rf, f->a));
	assert_int_equal(dest_refused(f), 1);
	assert_int_equal(rtab_get(f->owner, f->a, &v), 0);
	assert_int_equal(v.state, KVW_FAILED);
	assert_int_equal(v.reason, KVW_R_INTEGRITY);
	assert_int_equal(rtab_state(f->owner, f->b), KVW_BOOTSTRAPPING);
	/* Room 43's own batch to its page still passes. */
	assert_int_equal(sink_room_begin(&f->h, 1, 43, tok(f, 0xb1),
						 copies(c + 2, 1),
					 1), TCP_ROOM_OK);
	sink_room_end(&f->h, 1);
	/* A copy straddling a granted and an ungranted page, and one outside
	 * every buffer, of room 43. */
	{
		const uint64_t d[] = { page(0, 5) + ITEM - 8, 16 };
		const uint64_t e[] = { 0, 16 };

		assert_int_equal(sink_room_begin(&f->h, 1, 43, tok(f, 0xb1),
						 copies(d, 1), 1), TCP_ROOM_DEST);
		assert_int_equal(rtab_state(f->owner, f->b), KVW_FAILED);
		/* Now failed: not live, no second count. */
		assert_int_equal(sink_room_begin(&f->h, 1, 43, tok(f, 0xb1),
						 copies(e, 1), 1),
				 TCP_ROOM_NOT_LIVE);
	}
	assert_int_equal(dest_refused(f), 2);
}

static void test_rooms_not_live_for_this_batch_hold_nothing(void **state)
{
	struct fx *f = *state;
	const uint64_t c[] = { page(0, 3), ITEM };
	struct rtab_ref n;

	/* Unknown room; another incarnation token. */
	assert_int_equal(sink_room_begin(&f->h, 0, 7, 0, copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE);
	assert_int_equal(sink_room_begin(&f->h, 0, 42, tok(f, 0xa2),
						 copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE);
	/* Inserted but not granted yet (no XFER_INFO left). */
	assert_int_equal(rtab_insert(f->owner, 44, 0, 0, &n), 0);
	assert_int_equal(sink_room_begin(&f->h, 0, 44, 0, copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE);
	/* Armed for an abort. */
	assert_true(rtab_flags_or(f->owner, f->a, RTAB_F_ARMED) >= 0);
	assert_int_equal(sink_room_begin(&f->h, 0, 42, tok(f, 0xa1),
						 copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE);
	/* Terminal. */
	assert_int_equal(rtab_fail(f->owner, f->b, KVW_R_ABORTED), 0);
	assert_int_equal(sink_room_begin(&f->h, 0, 43, tok(f, 0xb1),
						 copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE);
	assert_false(rtab_fence_busy(f->rf, f->a));
	assert_false(rtab_fence_busy(f->rf, f->b));
	assert_false(rtab_fence_busy(f->rf, n));
	assert_int_equal(dest_refused(f), 0);
}

static void test_a_cleared_incarnations_late_batch_writes_nothing(void **state)
{
	struct fx *f = *state;
	const uint64_t c[] = { page(0, 3), ITEM };
	struct rtab_ref a2;

	/* CLEAR as kv-receiver does it, then a new begin under id 42 that
	 * the engine gives the same page. */
	assert_int_equal(rtab_clear(f->owner, f->a, KVW_R_CLEARED), 0);
	assert_int_equal(rtab_grant_withdraw(f->rg, f->a, pages_a, 2,
					     RTAB_GRANT_NO_AUX), 1);
	assert_int_equal(sink_room_begin(&f->h, 0, 42, tok(f, 0xa1),
						 copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE);
	assert_int_equal(rtab_insert(f->owner, 42, 0, 0, &a2), 0);
	assert_int_equal(sink_room_begin(&f->h, 0, 42, tok(f, 0xa1),
						 copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE); /* not granted yet */
	assert_int_equal(rtab_grant_give(f->rg, a2, 0xa2, pages_a, 2,
					 RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(sink_room_begin(&f->h, 0, 42, tok(f, 0xa1),
						 copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE); /* the old token */
	assert_int_equal(sink_room_begin(&f->h, 0, 42, tok(f, 0xa2),
						 copies(c, 1), 1),
			 TCP_ROOM_OK);
	assert_true(rtab_fence_busy(f->rf, a2));
	sink_room_end(&f->h, 0);
	assert_int_equal(dest_refused(f), 0);
}

/* TP 4 -> 2: two prefill ranks write the two halves of each token slot of
 * one granted page (their head slices). A copy of rank A into rank B's
 * half is refused as a copy outside the room's pages is (nothing held,
 * counted, the room fails with integrity); a batch is checked against the
 * slice of the target whose token it carries, so B's token on A's bytes
 * is refused too, and each rank's own bytes pass. */
static void test_a_rank_writes_only_its_own_head_slice(void **state)
{
	struct fx *f = *state;
	const struct rtab_grant_target tg[2] = {
		{ .layer_count = 1, .slot_len = 128, .slice_off = 0,
		  .slice_len = 64, .flags = RTAB_GRANT_T_AUX },
		{ .layer_count = 1, .slot_len = 128, .slice_off = 64,
		  .slice_len = 64, .flags = RTAB_GRANT_T_AUX },
	};
	const uint32_t pg[] = { 7 };
	/* A: token slot 0 of the K page, slot 1 of the V page. */
	const uint64_t a_own[] = { page(0, 7), 64, page(1, 7) + 128, 64 };
	const uint64_t b_own[] = { page(0, 7) + 3 * 128 + 64, 64 };
	const uint64_t into_b[] = { page(0, 7), 64, page(0, 7) + 64, 64 };
	struct rtab_ref r45, r46;
	struct rtab_view v;
	uint64_t ta, tb;

	assert_int_equal(rtab_insert(f->owner, 45, 0, 0, &r45), 0);
	assert_int_equal(rtab_insert(f->owner, 46, 0, 0, &r46), 0);
	assert_int_equal(rtab_grant_give_targets(f->rg, r45, 0xc1, tg, 2, pg,
						 1, RTAB_GRANT_NO_AUX), 0);
	ta = rtab_grant_token(f->rg, 0xc1, 0);
	tb = rtab_grant_token(f->rg, 0xc1, 1);
	assert_true(ta != tb);
	assert_int_equal(sink_room_begin(&f->h, 0, 45, ta, copies(a_own, 2),
					 2), TCP_ROOM_OK);
	sink_room_end(&f->h, 0);
	assert_int_equal(sink_room_begin(&f->h, 0, 45, tb, copies(b_own, 1),
					 1), TCP_ROOM_OK);
	sink_room_end(&f->h, 0);
	/* A's batch whose second copy is B's half of slot 0. */
	assert_int_equal(sink_room_begin(&f->h, 0, 45, ta, copies(into_b, 2),
					 2), TCP_ROOM_DEST);
	assert_false(rtab_fence_busy(f->rf, r45));
	assert_int_equal(dest_refused(f), 1);
	assert_int_equal(rtab_get(f->owner, r45, &v), 0);
	assert_int_equal(v.state, KVW_FAILED);
	assert_int_equal(v.reason, KVW_R_INTEGRITY);
	/* Room 46, the same two ranks (the same run of slices): B's token on
	 * A's bytes. */
	assert_int_equal(rtab_grant_give_targets(f->rg, r46, 0xd1, tg, 2, pg,
						 1, RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(sink_room_begin(&f->h, 0, 46,
					 rtab_grant_token(f->rg, 0xd1, 1),
					 copies(a_own, 1), 1), TCP_ROOM_DEST);
	assert_int_equal(dest_refused(f), 2);
	assert_int_equal(rtab_state(f->owner, r46), KVW_FAILED);
	/* Neither touched room 42. */
	assert_int_equal(rtab_state(f->owner, f->a), KVW_BOOTSTRAPPING);
}

/* ---- over the wire ---------------------------------------------------- */

#define POOL_BYTES (1u << 16)

static atomic_int stop_flag;
static int stop_now(void) { return atomic_load(&stop_flag); }

struct wire {
	char src_path[96], dst_path[96];
	struct pool *src, *dst;
	struct xport *dx, *px;
	struct tcp_sink_cfg cfg;
	struct tcp_sink_stats st;
	pthread_t th;
};

static void *sink_main(void *arg)
{
	struct wire *w = arg;
	char err[128];

	(void)tcp_sink_run(&w->cfg, &w->st, err, sizeof err);
	return NULL;
}

static void test_over_the_wire_a_batch_into_another_rooms_page_lands_nowhere(void **state)
{
	struct fx *f = *state;
	struct wire w = { 0 };
	uint8_t desc[KVW_MAX_DESC], secret[16], *d, *s;
	size_t desclen;
	uint32_t dst_id, src_id, rid;
	char err[256];
	int lfd;
	/* Room 42 (pages 3, 4) aims one copy at room 43's page 5. */
	struct xport_copy bad = { .src_off = 0, .dst_off = page(0, 5),
				  .len = ITEM };
	struct rtab_view v;

	snprintf(w.src_path, sizeof w.src_path, "/dev/shm/kvwire.tsinkw-s-%d.pool",
		 (int)getpid());
	snprintf(w.dst_path, sizeof w.dst_path, "/dev/shm/kvwire.tsinkw-d-%d.pool",
		 (int)getpid());
	assert_int_equal(pool_create(w.src_path, POOL_BYTES, &w.src, err,
				     sizeof err), 0);
	assert_int_equal(pool_create(w.dst_path, POOL_BYTES, &w.dst, err,
				     sizeof err), 0);
	s = pool_base(w.src);
	d = pool_base(w.dst);
	memset(s, 0x5a, POOL_BYTES);
	memset(d, 0xc3, POOL_BYTES); /* the canary, everywhere */
	assert_int_equal(xport_open(xport_find("tcp"), &w.dx, err, sizeof err), 0);
	assert_int_equal(xport_tcp_listen(w.dx, "127.0.0.1:0", err, sizeof err), 0);
	assert_int_equal(xport_register(w.dx, w.dst, &dst_id, desc, sizeof desc,
					&desclen, err, sizeof err), 0);
	assert_int_equal(xport_tcp_sink_info(w.dx, &lfd, secret), 0);
	w.cfg = (struct tcp_sink_cfg){ .listen_fd = lfd, .base = d,
		.size = POOL_BYTES, .secret = secret,
		.room_begin = sink_room_begin, .room_end = sink_room_end,
		.arg = &f->h, .stop = stop_now };
	atomic_store(&stop_flag, 0);
	assert_int_equal(pthread_create(&w.th, NULL, sink_main, &w), 0);
	assert_int_equal(xport_open(xport_find("tcp"), &w.px, err, sizeof err), 0);
	assert_int_equal(xport_register(w.px, w.src, &src_id,
					(uint8_t[KVW_MAX_DESC]){ 0 },
					KVW_MAX_DESC, &(size_t){ 0 }, err,
					sizeof err), 0);
	assert_int_equal(xport_connect(w.px, desc, desclen, &rid, err,
				       sizeof err), 0);
	bad.src = src_id;
	bad.dst = rid;
	xport_set_room(w.px, 42);
	xport_tcp_set_incarnation(w.px, tok(f, 0xa1));
	assert_int_equal(xport_write_batch(w.px, &bad, 1, err, sizeof err), 0);
	assert_true(xport_wait(w.px, -1, err, sizeof err) < 0);
	for (uint32_t i = 0; i < POOL_BYTES; i++)
		if (d[i] != 0xc3)
			fail_msg("byte %u written", i);
	assert_true(w.st.dest == 1);
	assert_int_equal(dest_refused(f), 1);
	assert_int_equal(rtab_get(f->owner, f->a, &v), 0);
	assert_int_equal(v.state, KVW_FAILED);
	assert_int_equal(v.reason, KVW_R_INTEGRITY);
	/* The same bytes from room 43, whose page it is, land. */
	xport_set_room(w.px, 43);
	xport_tcp_set_incarnation(w.px, tok(f, 0xb1));
	assert_int_equal(xport_write_batch(w.px, &bad, 1, err, sizeof err), 0);
	assert_int_equal(xport_wait(w.px, -1, err, sizeof err), 0);
	for (uint32_t i = 0; i < POOL_BYTES; i++)
		assert_int_equal(d[i], i >= page(0, 5) && i < page(0, 6) ? 0x5a
									 : 0xc3);
	assert_int_equal(rtab_state(f->owner, f->b), KVW_BOOTSTRAPPING);
	assert_false(rtab_fence_busy(f->rf, f->b));
	atomic_store(&stop_flag, 1);
	pthread_join(w.th, NULL);
	xport_close(&w.px);
	xport_close(&w.dx);
	pool_close(&w.src);
	pool_close(&w.dst);
	pool_unlink(w.src_path);
	pool_unlink(w.dst_path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_a_batch_inside_its_pages_is_held_until_room_end, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_copy_into_another_rooms_page_fails_its_room_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rooms_not_live_for_this_batch_hold_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_cleared_incarnations_late_batch_writes_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_rank_writes_only_its_own_head_slice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_over_the_wire_a_batch_into_another_rooms_page_lands_nowhere, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
