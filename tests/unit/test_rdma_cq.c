/*
 * test_rdma_cq.c - completion bookkeeping (lib/xport/rdma/rdma_cq.h) driven
 * with synthetic completions, no device: one completion settles every WR
 * up to it (signalled every N); rooms and batches are asked what they have
 * in flight; posts of one room and batch merge; a full ring refuses a post
 * and changes nothing; ids that are not outstanding (again, zero, ahead)
 * are refused and change nothing; the first failed completion is kept with
 * its room and the library's status text (the flushes after it are not);
 * abandon settles everything. A model run with random posts, rooms and
 * completions across many ring wraps agrees with a per-WR array.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/kvw.h"
#include "xport/rdma/rdma_cq.h"

static void test_one_completion_settles_every_wr_up_to_it(void **state)
{
	struct rdma_track t;

	(void)state;
	assert_int_equal(rdma_track_init(&t, 8, NULL), 0);
	assert_int_equal(rdma_track_next_id(&t), 1);
	assert_int_equal(rdma_track_post(&t, 3, 100, 1), 0); /* ids 1..3 */
	assert_int_equal(rdma_track_post(&t, 2, 200, 2), 0); /* ids 4..5 */
	assert_int_equal(rdma_track_outstanding(&t), 5);
	assert_int_equal(rdma_track_room_left(&t, 100), 3);
	assert_int_equal(rdma_track_room_left(&t, 200), 2);
	assert_int_equal(rdma_track_room_left(&t, 300), 0);
	assert_int_equal(rdma_track_batch_left(&t, 2), 2);
	assert_int_equal(rdma_track_complete(&t, 2, 0, 0), 0);
	assert_int_equal(rdma_track_outstanding(&t), 3);
	assert_int_equal(rdma_track_room_left(&t, 100), 1);
	assert_int_equal(rdma_track_batch_left(&t, 1), 1);
	assert_int_equal(rdma_track_complete(&t, 5, 0, 0), 0);
	assert_int_equal(rdma_track_outstanding(&t), 0);
	assert_int_equal(rdma_track_room_left(&t, 100), 0);
	assert_int_equal(rdma_track_room_left(&t, 200), 0);
	assert_int_equal(rdma_track_next_id(&t), 6);
	assert_int_equal(t.completions, 2);
	assert_int_equal(t.status, 0);
	rdma_track_free(&t);
}

static void test_ids_not_outstanding_are_refused_and_change_nothing(void **state)
{
	struct rdma_track t;

	(void)state;
	assert_int_equal(rdma_track_init(&t, 4, NULL), 0);
	assert_int_equal(rdma_track_complete(&t, 1, 0, 0), KVW_EINVAL);
	assert_int_equal(rdma_track_post(&t, 4, 1, 1), 0);
	assert_int_equal(rdma_track_complete(&t, 2, 0, 0), 0);
	assert_int_equal(rdma_track_complete(&t, 2, 0, 0), KVW_EINVAL);
	assert_int_equal(rdma_track_complete(&t, 1, 0, 0), KVW_EINVAL);
	assert_int_equal(rdma_track_complete(&t, 0, 0, 0), KVW_EINVAL);
	assert_int_equal(rdma_track_complete(&t, 5, 0, 0), KVW_EINVAL);
	assert_int_equal(rdma_track_complete(&t, UINT64_MAX, 10, 0), KVW_EINVAL);
	assert_int_equal(rdma_track_outstanding(&t), 2);
	assert_int_equal(t.completions, 1);
	assert_int_equal(t.status, 0);
	assert_int_equal(rdma_track_post(&t, 0, 1, 1), KVW_EINVAL);
	assert_int_equal(rdma_track_outstanding(&t), 2);
	rdma_track_free(&t);
}

static void test_posts_of_one_room_and_batch_merge_and_a_full_ring_refuses(void **state)
{
	struct rdma_track t;

	(void)state;
	assert_int_equal(rdma_track_init(&t, 2, NULL), 0);
	assert_int_equal(rdma_track_post(&t, 1, 7, 1), 0);
	assert_int_equal(rdma_track_post(&t, 5, 7, 1), 0); /* merges */
	assert_int_equal(t.count, 1);
	assert_int_equal(rdma_track_post(&t, 1, 7, 2), 0); /* new batch */
	assert_int_equal(t.count, 2);
	assert_int_equal(rdma_track_post(&t, 1, 8, 2), KVW_ENOMEM);
	assert_int_equal(t.count, 2);
	assert_int_equal(rdma_track_outstanding(&t), 7);
	assert_int_equal(rdma_track_room_left(&t, 8), 0);
	assert_int_equal(rdma_track_post(&t, 3, 7, 2), 0); /* merges again */
	assert_int_equal(rdma_track_outstanding(&t), 10);
	assert_int_equal(rdma_track_batch_left(&t, 2), 4);
	assert_int_equal(rdma_track_complete(&t, 6, 0, 0), 0);
	assert_int_equal(t.count, 1);
	assert_int_equal(rdma_track_post(&t, 1, 8, 3), 0);
	assert_int_equal(rdma_track_room_left(&t, 8), 1);
	rdma_track_free(&t);
}

static void test_the_first_failure_is_kept_with_its_room_and_status_text(void **state)
{
	char why[160];
	const struct rdma_lib *lib = rdma_lib_get(why, sizeof why);
	struct rdma_track t;

	(void)state;
	/* libibverbs is a build dependency: its status texts are there even
	 * on a machine without a device. */
	assert_non_null(lib);
	assert_int_equal(rdma_track_init(&t, 8, lib), 0);
	assert_int_equal(rdma_track_post(&t, 2, 11, 1), 0);
	assert_int_equal(rdma_track_post(&t, 2, 22, 2), 0);
	assert_int_equal(rdma_track_post(&t, 2, 33, 3), 0);
	assert_int_equal(rdma_track_complete(&t, 2, 0, 0), 0);
	/* WR 4 (room 22) fails: remote access error. */
	assert_int_equal(rdma_track_complete(&t, 4, IBV_WC_REM_ACCESS_ERR, 0x88),
			 KVW_ESYS);
	assert_int_equal(t.status, IBV_WC_REM_ACCESS_ERR);
	assert_int_equal(t.bad_room, 22);
	assert_non_null(strstr(t.why, "remote access error"));
	assert_non_null(strstr(t.why, "vendor error 0x88"));
	assert_non_null(strstr(t.why, "room 22"));
	/* The flush that follows is a failure too, but not the first. */
	assert_int_equal(rdma_track_complete(&t, 6, IBV_WC_WR_FLUSH_ERR, 0),
			 KVW_ESYS);
	assert_int_equal(t.status, IBV_WC_REM_ACCESS_ERR);
	assert_int_equal(t.bad_room, 22);
	assert_int_equal(rdma_track_outstanding(&t), 0);
	rdma_track_clear_error(&t);
	assert_int_equal(t.status, 0);
	assert_string_equal(t.why, "");
	rdma_track_free(&t);
	/* Without the library: the number. */
	assert_int_equal(rdma_track_init(&t, 8, NULL), 0);
	assert_int_equal(rdma_track_post(&t, 1, 5, 1), 0);
	assert_int_equal(rdma_track_complete(&t, 1, IBV_WC_RETRY_EXC_ERR, 0),
			 KVW_ESYS);
	assert_non_null(strstr(t.why, "status 12"));
	rdma_track_free(&t);
}

static void test_abandon_settles_everything(void **state)
{
	struct rdma_track t;

	(void)state;
	assert_int_equal(rdma_track_init(&t, 4, NULL), 0);
	assert_int_equal(rdma_track_post(&t, 3, 1, 1), 0);
	assert_int_equal(rdma_track_post(&t, 3, 2, 1), 0);
	rdma_track_abandon(&t);
	assert_int_equal(rdma_track_outstanding(&t), 0);
	assert_int_equal(rdma_track_room_left(&t, 1), 0);
	assert_int_equal(rdma_track_room_left(&t, 2), 0);
	assert_int_equal(t.count, 0);
	assert_int_equal(rdma_track_post(&t, 1, 3, 1), 0);
	assert_int_equal(rdma_track_next_id(&t), 8);
	rdma_track_free(&t);
}

static uint64_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

static void test_a_random_run_agrees_with_a_per_wr_model(void **state)
{
	enum { CAP = 16, DEPTH = 64, STEPS = 200000 };
	uint64_t room_of[DEPTH * 4]; /* by id % size */
	uint64_t s = 99, posted = 0, done = 0;
	struct rdma_track t;

	(void)state;
	assert_int_equal(rdma_track_init(&t, CAP, NULL), 0);
	for (int step = 0; step < STEPS; step++) {
		if (rnd(&s) % 2 && posted - done < DEPTH) {
			uint32_t n = 1 + (uint32_t)(rnd(&s) % 6);
			uint64_t room = rnd(&s) % 3, batch = rnd(&s) % 2;
			int rc;

			if (posted - done + n > DEPTH)
				n = (uint32_t)(DEPTH - (posted - done));
			rc = rdma_track_post(&t, n, room, batch);
			if (rc == KVW_ENOMEM) {
				assert_int_equal(t.count, CAP);
				continue;
			}
			assert_int_equal(rc, 0);
			for (uint32_t i = 1; i <= n; i++)
				room_of[(posted + i) % (DEPTH * 4)] = room;
			posted += n;
		} else if (posted > done) {
			uint64_t id = done + 1 + rnd(&s) % (posted - done);

			assert_int_equal(rdma_track_complete(&t, id, 0, 0), 0);
			done = id;
		}
		assert_int_equal(rdma_track_outstanding(&t), posted - done);
		if (step % 97 == 0)
			for (uint64_t room = 0; room < 3; room++) {
				uint64_t want = 0;

				for (uint64_t id = done + 1; id <= posted; id++)
					want += room_of[id % (DEPTH * 4)] == room;
				assert_int_equal(rdma_track_room_left(&t, room),
						 want);
			}
	}
	rdma_track_free(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_completion_settles_every_wr_up_to_it),
		cmocka_unit_test(test_ids_not_outstanding_are_refused_and_change_nothing),
		cmocka_unit_test(test_posts_of_one_room_and_batch_merge_and_a_full_ring_refuses),
		cmocka_unit_test(test_the_first_failure_is_kept_with_its_room_and_status_text),
		cmocka_unit_test(test_abandon_settles_everything),
		cmocka_unit_test(test_a_random_run_agrees_with_a_per_wr_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
