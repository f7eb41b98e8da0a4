/*
 * test_sink.c - the tcp sink's room hook (roles/sink.c) over a real room
 * table, fence and grant file in /dev/shm, mapped as a sink maps them: a
 * batch inside its room's granted pages is held in the fence until
 * room_end; a batch naming a page of another room is refused (DEST),
 * counted as dest_refused and fails its room with `integrity` while the
 * other room is untouched; a batch for a room that is unknown, terminal,
 * armed, not granted yet, or of another incarnation token is "not live";
 * and after CLEAR and a new begin under the same id, the old
 * incarnation's late batch is not live while the new one's passes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/kvw.h"
#include "roles/sink.h"
#include "table/rtab.h"
#include "table/rtab_fence.h"
#include "table/rtab_grant.h"
#include "xport/tcp_proto.h"
#include "xport/tcp_sink.h"

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
	    rtab_grant_create(f->grant, 16, bufs, 2, &f->rg, err, sizeof err) ||
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

static void test_a_batch_inside_its_pages_is_held_until_room_end(void **state)
{
	struct fx *f = *state;
	const uint64_t c[] = { page(0, 3), 2 * ITEM, page(1, 4) + 7, 100 };

	assert_int_equal(sink_room_begin(&f->h, 2, 42, 0xa1, copies(c, 2), 2),
			 TCP_ROOM_OK);
	assert_true(rtab_fence_busy(f->rf, f->a));
	sink_room_end(&f->h, 2);
	assert_false(rtab_fence_busy(f->rf, f->a));
	/* Incarnation 0: a wire that does not carry it. */
	assert_int_equal(sink_room_begin(&f->h, 0, 42, 0, copies(c, 2), 2),
			 TCP_ROOM_OK);
	sink_room_end(&f->h, 0);
	assert_int_equal(rtab_state(f->owner, f->a), KVW_BOOTSTRAPPING);
	assert_int_equal(dest_refused(f), 0);
}

static void test_a_copy_into_another_rooms_page_fails_its_room_only(void **state)
{
	struct fx *f = *state;
	/* The first copy is fine; the second lands in room 43's page 5. */
	const uint64_t c[] = { page(0, 3), ITEM, page(1, 5), 16 };
	struct rtab_view v;

	assert_int_equal(sink_room_begin(&f->h, 1, 42, 0xa1, copies(c, 2), 2),
			 TCP_ROOM_DEST);
	assert_false(rtab_fence_busy(f->rf, f->a));
	assert_int_equal(dest_refused(f), 1);
	assert_int_equal(rtab_get(f->owner, f->a, &v), 0);
	assert_int_equal(v.state, KVW_FAILED);
	assert_int_equal(v.reason, KVW_R_INTEGRITY);
	assert_int_equal(rtab_state(f->owner, f->b), KVW_BOOTSTRAPPING);
	/* Room 43's own batch to its page still passes. */
	assert_int_equal(sink_room_begin(&f->h, 1, 43, 0xb1, copies(c + 2, 1),
					 1), TCP_ROOM_OK);
	sink_room_end(&f->h, 1);
	/* A copy straddling a granted and an ungranted page, and one outside
	 * every buffer, of room 43. */
	{
		const uint64_t d[] = { page(0, 5) + ITEM - 8, 16 };
		const uint64_t e[] = { 0, 16 };

		assert_int_equal(sink_room_begin(&f->h, 1, 43, 0xb1,
						 copies(d, 1), 1), TCP_ROOM_DEST);
		assert_int_equal(rtab_state(f->owner, f->b), KVW_FAILED);
		/* Now failed: not live, no second count. */
		assert_int_equal(sink_room_begin(&f->h, 1, 43, 0xb1,
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
	assert_int_equal(sink_room_begin(&f->h, 0, 42, 0xa2, copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE);
	/* Inserted but not granted yet (no XFER_INFO left). */
	assert_int_equal(rtab_insert(f->owner, 44, 0, 0, &n), 0);
	assert_int_equal(sink_room_begin(&f->h, 0, 44, 0, copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE);
	/* Armed for an abort. */
	assert_true(rtab_flags_or(f->owner, f->a, RTAB_F_ARMED) >= 0);
	assert_int_equal(sink_room_begin(&f->h, 0, 42, 0xa1, copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE);
	/* Terminal. */
	assert_int_equal(rtab_fail(f->owner, f->b, KVW_R_ABORTED), 0);
	assert_int_equal(sink_room_begin(&f->h, 0, 43, 0xb1, copies(c, 1), 1),
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
	assert_int_equal(sink_room_begin(&f->h, 0, 42, 0xa1, copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE);
	assert_int_equal(rtab_insert(f->owner, 42, 0, 0, &a2), 0);
	assert_int_equal(sink_room_begin(&f->h, 0, 42, 0xa1, copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE); /* not granted yet */
	assert_int_equal(rtab_grant_give(f->rg, a2, 0xa2, pages_a, 2,
					 RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(sink_room_begin(&f->h, 0, 42, 0xa1, copies(c, 1), 1),
			 TCP_ROOM_NOT_LIVE); /* the old token */
	assert_int_equal(sink_room_begin(&f->h, 0, 42, 0xa2, copies(c, 1), 1),
			 TCP_ROOM_OK);
	assert_true(rtab_fence_busy(f->rf, a2));
	sink_room_end(&f->h, 0);
	assert_int_equal(dest_refused(f), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_a_batch_inside_its_pages_is_held_until_room_end, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_copy_into_another_rooms_page_fails_its_room_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rooms_not_live_for_this_batch_hold_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_cleared_incarnations_late_batch_writes_nothing, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
