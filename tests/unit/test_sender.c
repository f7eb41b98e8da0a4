/*
 * test_sender.c - the pure bookkeeping of kv-sender's control process
 * (lib/roles/sender/sender_room.c): the room map, destinations keyed by decode peer,
 * readiness at required_dst_info_num, chunk queueing bounds, slicing of a
 * destination's pages per chunk, job sizing under KVW_MAX_COPIES, the
 * per-worker FIFO of jobs in flight (and its bytes), and how a room's
 * worker is picked.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"
#include "roles/sender/sender_impl.h"

static struct frame_u32s view(const uint32_t *a, uint32_t n)
{
	return frame_u32s_of(a, n);
}

/* An XFER_INFO's destination: pages a[0..n), aux slot, dummy, token, and
 * the destinations it says the room needs. */
#define XF(a, n, aux, dum, tok, req)                                    \
	(&(struct sender_xfer){ .pages = frame_u32s_of((a), (n)),       \
				.aux_slot = (aux), .dummy = (dum),      \
				.token = (tok), .required = (req) })

static void test_room_map_add_get_delete_and_grow(void **state)
{
	struct sender_rooms m;
	struct sender_room *r;
	uint32_t n = 5000;

	(void)state;
	assert_int_equal(sender_rooms_init(&m, 16), 0);
	for (uint64_t i = 0; i < n; i++) {
		assert_int_equal(sender_rooms_add(&m, i * 7919, &r), 0);
		assert_non_null(r);
		assert_true(r->id == i * 7919);
	}
	assert_int_equal(m.m.n, n);
	assert_true(m.m.nb >= n); /* grew from 16 buckets */
	assert_int_equal(sender_rooms_add(&m, 7919, &r), KVW_EEXIST);
	assert_true(r == sender_rooms_get(&m, 7919));
	for (uint64_t i = 0; i < n; i += 2)
		sender_rooms_del(&m, i * 7919);
	for (uint64_t i = 0; i < n; i++)
		assert_true((sender_rooms_get(&m, i * 7919) != NULL) == (i % 2 == 1));
	sender_rooms_del(&m, 123456789); /* absent: no-op */
	assert_int_equal(m.m.n, n / 2);
	sender_rooms_free(&m);
	sender_rooms_free(&m); /* zeroed map: safe */
}

struct count_arg {
	struct sender_rooms *m;
	uint32_t seen;
};

static void count_and_delete(void *arg, struct sender_room *r)
{
	struct count_arg *a = arg;

	a->seen++;
	sender_rooms_del(a->m, r->id);
}

static void test_room_map_foreach_may_delete_current(void **state)
{
	struct sender_rooms m;
	struct sender_room *r;
	struct count_arg a = { &m, 0 };

	(void)state;
	assert_int_equal(sender_rooms_init(&m, 16), 0);
	for (uint64_t i = 0; i < 100; i++)
		assert_int_equal(sender_rooms_add(&m, i, &r), 0);
	sender_rooms_foreach(&m, count_and_delete, &a);
	assert_int_equal(a.seen, 100);
	assert_int_equal(m.m.n, 0);
	sender_rooms_free(&m);
}

static void test_destinations_keyed_by_peer_and_ready_at_required(void **state)
{
	struct sender_peer p1, p2, p3;
	struct sender_room r;
	uint32_t a[3] = { 5, 6, 7 }, b[2] = { 9, 10 }, c[4] = { 1, 2, 3, 4 };

	(void)state;
	memset(&r, 0, sizeof r);
	r.required = 2;
	assert_int_equal(sender_room_set_dst(&r, &p1, XF(a, 3, 1, 0, 7, 0)), 0);
	assert_false(sender_room_ready(&r));
	/* The same peer again overwrites, it does not count twice. */
	assert_int_equal(sender_room_set_dst(&r, &p1, XF(b, 2, 2, 0, 8, 0)), 0);
	assert_int_equal(r.ndst, 1);
	assert_int_equal(r.dst[0].npages, 2);
	assert_int_equal(r.dst[0].pages[1], 10);
	assert_int_equal(r.dst[0].aux_slot, 2);
	assert_true(r.dst[0].token == 8); /* the later XFER_INFO's incarnation */
	assert_false(sender_room_ready(&r));
	assert_int_equal(sender_room_set_dst(&r, &p2, XF(NULL, 0, 0, 1, 9, 0)), 1);
	assert_true(sender_room_ready(&r));
	assert_int_equal(sender_room_nreal(&r), 1);
	assert_int_equal(sender_room_set_dst(&r, &p3, XF(c, 4, 0, 0, 10, 0)), 2);
	assert_int_equal(sender_room_nreal(&r), 2);
	/* Done only when every real destination is done; dummies never are. */
	assert_false(sender_room_all_done(&r));
	r.dst[0].done = 1;
	assert_false(sender_room_all_done(&r));
	r.dst[2].done = 1;
	assert_true(sender_room_all_done(&r));
	for (uint32_t i = 0; i < r.ndst; i++)
		free(r.dst[i].pages);
	free(r.dst);
}

static void test_all_dummy_room_is_never_all_done(void **state)
{
	struct sender_peer p;
	struct sender_room r;

	(void)state;
	memset(&r, 0, sizeof r);
	assert_false(sender_room_ready(&r)); /* no XFER_INFO: required 0 */
	r.required = 1;
	assert_int_equal(sender_room_set_dst(&r, &p, XF(NULL, 0, 0, 1, 11, 0)), 0);
	assert_true(sender_room_ready(&r));
	assert_false(sender_room_all_done(&r));
	assert_int_equal(sender_room_nreal(&r), 0);
	free(r.dst[0].pages);
	free(r.dst);
}

/* An XFER_INFO from a destination under another token is a later
 * incarnation's: held (one per peer, the newest kept, bounded), never
 * taken as this room's destination. */
static void test_later_incarnation_xfer_info_is_held_per_peer(void **state)
{
	static struct sender_peer peers[SENDER_MAX_DST + 1];
	struct sender_room r;
	uint32_t a[2] = { 5, 6 }, b[2] = { 12, 13 }, c[1] = { 14 };

	(void)state;
	memset(&r, 0, sizeof r);
	assert_int_equal(sender_room_set_dst(&r, &peers[0], XF(a, 2, 1, 0, 7, 0)), 0);
	assert_false(sender_room_is_later(&r, &peers[0], 7)); /* a resend */
	assert_true(sender_room_is_later(&r, &peers[0], 8));
	assert_false(sender_room_is_later(&r, &peers[1], 8)); /* not a dst yet */
	assert_int_equal(sender_room_hold(&r, &peers[0], XF(b, 2, 3, 0, 8, 1)), 0);
	assert_int_equal(sender_room_hold(&r, &peers[0], XF(c, 1, 2, 0, 9, 1)), 0);
	assert_int_equal(r.nheld, 1);
	assert_true(r.held[0].token == 9);
	assert_int_equal(r.held[0].npages, 1);
	assert_int_equal(r.held[0].pages[0], 14);
	assert_int_equal(r.held[0].aux_slot, 2);
	assert_int_equal(r.ndst, 1); /* the room's own destination unchanged */
	assert_int_equal(r.dst[0].pages[0], 5);
	for (uint32_t i = 1; i < SENDER_MAX_DST; i++)
		assert_int_equal(sender_room_hold(&r, &peers[i], XF(NULL, 0, 0, 1, 1, 2)), 0);
	assert_int_equal(sender_room_hold(&r, &peers[SENDER_MAX_DST],
					  XF(NULL, 0, 0, 1, 1, 2)), KVW_ERANGE);
	assert_int_equal(r.held_required, 2);
	for (uint32_t i = 0; i < r.nheld; i++)
		free(r.held[i].pages);
	free(r.held);
	free(r.dst[0].pages);
	free(r.dst);
}

static void test_too_many_destinations_is_erange(void **state)
{
	static struct sender_peer peers[SENDER_MAX_DST + 1];
	struct sender_room r;

	(void)state;
	memset(&r, 0, sizeof r);
	for (uint32_t i = 0; i < SENDER_MAX_DST; i++)
		assert_int_equal(sender_room_set_dst(&r, &peers[i], XF(NULL, 0, 0, 1, 1, 0)), (int)i);
	assert_int_equal(sender_room_set_dst(&r, &peers[SENDER_MAX_DST],
					     XF(NULL, 0, 0, 1, 1, 0)), KVW_ERANGE);
	for (uint32_t i = 0; i < r.ndst; i++)
		free(r.dst[i].pages);
	free(r.dst);
}

static void test_chunks_bounded_by_num_pages_and_last(void **state)
{
	struct sender_room r;
	uint32_t p[6] = { 0, 1, 2, 3, 4, 5 };

	(void)state;
	memset(&r, 0, sizeof r);
	r.num_pages = 5;
	assert_int_equal(sender_room_push_chunk(&r, view(p, 3), 0), 0);
	/* 3 + 3 > 5: refused, nothing queued. */
	assert_int_equal(sender_room_push_chunk(&r, view(p, 3), 1), KVW_ERANGE);
	assert_int_equal(r.nq, 1);
	assert_int_equal(r.queued_pages, 3);
	assert_int_equal(sender_room_push_chunk(&r, view(p + 3, 2), 1), 0);
	assert_int_equal(sender_room_push_chunk(&r, view(p, 0), 0), KVW_ERANGE);
	assert_int_equal(r.nq, 2);
	sender_room_pop_chunk(&r);
	assert_int_equal(r.nq, 1);
	assert_int_equal(r.q[0].n, 2);
	assert_int_equal(r.q[0].pages[0], 3);
	assert_true(r.q[0].is_last);
	sender_room_drop_chunks(&r);
	sender_room_pop_chunk(&r); /* empty: no-op */
	assert_int_equal(r.nq, 0);
	free(r.q);
}

static void test_dst_slice_follows_cursor_and_refuses_overrun(void **state)
{
	uint32_t pages[5] = { 10, 11, 12, 13, 14 };
	struct sender_dst d = { .pages = pages, .npages = 5 };
	const uint32_t *out = NULL;

	(void)state;
	assert_int_equal(sender_dst_slice(&d, 0, 2, &out), 0);
	assert_ptr_equal(out, pages);
	assert_int_equal(sender_dst_slice(&d, 2, 3, &out), 0);
	assert_int_equal(out[0], 12);
	assert_int_equal(sender_dst_slice(&d, 5, 0, &out), 0);
	assert_int_equal(sender_dst_slice(&d, 3, 3, &out), KVW_ERANGE);
	assert_int_equal(sender_dst_slice(&d, 6, 0, &out), KVW_ERANGE);
	assert_int_equal(sender_dst_slice(&d, 1, UINT32_MAX, &out), KVW_ERANGE);
}

static void test_job_pages_keeps_each_job_under_the_copy_cap(void **state)
{
	struct kvw_model m = { .page_tokens = 4, .dtype = 2, .total_kv_heads = 2,
			       .rank_kv_heads = 2, .head_bytes = 16 };
	struct layout_spec spec = { .layers = 3, .item_len = 128, .pages = 100,
				    .aux_slots = 2, .naux = 1, .aux_item_lens = (const uint32_t[]){ 8 } };
	struct kvw_buf bufs[16];
	uint32_t n;
	uint64_t end;
	struct plan *p = NULL;
	char err[256];

	(void)state;
	assert_int_equal(layout_make(&spec, bufs, 16, &n, &end, err, sizeof err), 0);
	struct plan_side side = { &m, bufs, n, &end, 1 };
	assert_int_equal(plan_build(&side, &side, NULL, &p, err, sizeof err), 0);
	/* 6 K/V pairs per page + 1 aux pair. */
	assert_int_equal(sender_job_pages(p, 10, 1, 1000), 10);
	assert_int_equal(sender_job_pages(p, 10, 1, 61), 10);
	assert_int_equal(sender_job_pages(p, 10, 1, 60), 9);
	assert_int_equal(sender_job_pages(p, 10, 0, 60), 10);
	assert_int_equal(sender_job_pages(p, 10, 1, 13), 2);
	assert_true(plan_chunk_max(p, 2, 1) <= 13);
	assert_int_equal(sender_job_pages(p, 10, 1, 3), 1); /* at least 1 */
	assert_int_equal(sender_job_pages(p, 0, 1, 3), 0);
	plan_free(&p);
}

static void test_job_queue_is_fifo_across_wraps_and_growth(void **state)
{
	struct sender_jobq q;
	struct sender_jobrec j = { 0 };
	uint64_t next_pop = 0, next_push = 0;

	(void)state;
	memset(&q, 0, sizeof q);
	assert_null(sender_jobq_head(&q));
	sender_jobq_pop(&q); /* empty: no-op */
	for (int round = 0; round < 50; round++) {
		for (int k = 0; k < 7; k++) {
			j.room = next_push++;
			assert_int_equal(sender_jobq_push(&q, &j), 0);
		}
		for (int k = 0; k < 5; k++) {
			assert_true(sender_jobq_head(&q)->room == next_pop);
			sender_jobq_pop(&q);
			next_pop++;
		}
	}
	assert_int_equal(q.n, next_push - next_pop);
	while (q.n) {
		assert_true(sender_jobq_head(&q)->room == next_pop++);
		sender_jobq_pop(&q);
	}
	sender_jobq_free(&q);
}

static void test_ack_targets_are_a_set_of_peer_and_token(void **state)
{
	struct sender_peer p1, p2;
	struct sender_room r;

	(void)state;
	memset(&r, 0, sizeof r);
	assert_int_equal(sender_room_add_ack(&r, &p1, 7, 1000), 1);
	assert_int_equal(r.ack_deadline_ns, 1000);
	/* the same ABORT twice (a retry) is one target */
	assert_int_equal(sender_room_add_ack(&r, &p1, 7, 2000), 0);
	/* a second decode rank aborting the room: kept beside the first */
	assert_int_equal(sender_room_add_ack(&r, &p2, 7, 2000), 1);
	/* the same decode aborting a later incarnation: its own target */
	assert_int_equal(sender_room_add_ack(&r, &p1, 8, 2000), 1);
	assert_int_equal(r.nacks, 3);
	/* the first target's deadline stands */
	assert_int_equal(r.ack_deadline_ns, 1000);
	assert_ptr_equal(r.acks[0].peer, &p1);
	assert_true(r.acks[0].token == 7);
	assert_ptr_equal(r.acks[1].peer, &p2);
	assert_true(r.acks[1].token == 7);
	assert_ptr_equal(r.acks[2].peer, &p1);
	assert_true(r.acks[2].token == 8);
	free(r.acks);
}

static void test_acks_are_due_only_with_targets_and_nothing_outstanding(void **state)
{
	struct sender_peer p1;
	struct sender_room r;

	(void)state;
	memset(&r, 0, sizeof r);
	assert_false(sender_room_ack_due(&r, 0)); /* nobody asked */
	assert_int_equal(sender_room_add_ack(&r, &p1, 9, 1), 1);
	assert_false(sender_room_ack_due(&r, 1)); /* a job still copying */
	assert_false(sender_room_ack_due(&r, 3));
	assert_true(sender_room_ack_due(&r, 0));
	free(r.acks);
}

static void test_job_queue_counts_its_bytes(void **state)
{
	struct sender_jobq q;
	struct sender_jobrec j = { 0 };

	(void)state;
	memset(&q, 0, sizeof q);
	for (uint64_t i = 1; i <= 40; i++) {
		j.bytes = i;
		assert_int_equal(sender_jobq_push(&q, &j), 0);
	}
	assert_true(q.bytes == 40 * 41 / 2);
	sender_jobq_pop(&q);          /* takes 1 */
	sender_jobq_unpush(&q);       /* takes 40 back */
	assert_true(q.bytes == 40 * 41 / 2 - 1 - 40);
	while (q.n)
		sender_jobq_pop(&q);
	assert_true(q.bytes == 0);
	sender_jobq_unpush(&q); /* empty: no-op */
	assert_true(q.bytes == 0);
	sender_jobq_free(&q);
}

/* Gives worker k a queue of `jobs` jobs of `each` bytes. */
static void load(struct sender *s, uint32_t k, uint32_t jobs, uint64_t each)
{
	struct sender_jobrec j = { 0 };

	j.bytes = each;
	while (s->w[k].q.n)
		sender_jobq_pop(&s->w[k].q);
	for (uint32_t i = 0; i < jobs; i++)
		assert_int_equal(sender_jobq_push(&s->w[k].q, &j), 0);
}

static void test_worker_pick_packs_small_jobs_and_spreads_big_ones(void **state)
{
	struct sender *s = calloc(1, sizeof *s);
	const uint64_t tiny = 16 << 10, big = SENDER_PACK_BYTES;

	(void)state;
	assert_non_null(s);
	s->nworkers = 4;
	assert_int_equal(sender_worker_pick(s), SENDER_NO_WORKER); /* none up */
	s->w[2].up = 1;
	assert_int_equal(sender_worker_pick(s), 2);
	s->w[0].up = s->w[1].up = s->w[3].up = 1;
	/* All idle: the one used last (warm caches). */
	assert_int_equal(sender_worker_pick(s), 2);
	s->last_worker = 3;
	assert_int_equal(sender_worker_pick(s), 3);
	/* A worker already awake with small jobs takes the next room... */
	load(s, 1, 3, tiny);
	assert_int_equal(sender_worker_pick(s), 1);
	/* ... the busiest such one ... */
	load(s, 0, 5, tiny);
	assert_int_equal(sender_worker_pick(s), 0);
	/* ... until its queue passes the mark: then the next busiest. */
	load(s, 0, 1, big);
	assert_int_equal(sender_worker_pick(s), 1);
	/* Every queue past the mark: the least loaded. */
	load(s, 1, 2, big);
	load(s, 2, 3, big);
	load(s, 3, 4, big);
	assert_int_equal(sender_worker_pick(s), 0);
	/* A worker that is not up is never picked. */
	s->w[0].up = 0;
	assert_int_equal(sender_worker_pick(s), 1);
	for (uint32_t k = 0; k < 4; k++)
		sender_jobq_free(&s->w[k].q);
	free(s);
}

static void test_rank_of_is_pp_major(void **state)
{
	struct kvw_topo t = { 4, 2, 1, 1 };
	struct kvw_coord c = { 1, 1, 0, 0 }, d = { 3, 0, 0, 0 };

	(void)state;
	/* pp-major: pp * tp_size + tp (tp-major would give 3 and 6). */
	assert_int_equal(sender_rank_of(&t, &c), 5);
	assert_int_equal(sender_rank_of(&t, &d), 3);
}

/* The ids an engine cleared before the control knew them
 * (sender_orphan.c): each taken once, within its age; at most
 * SENDER_GIVEN_UP_MAX of them, the oldest forgotten first, whatever was
 * taken or added again in between. */
static void test_given_up_ids_are_a_bounded_fifo(void **state)
{
	struct sender_given_up g;
	const uint64_t age = 1000;

	(void)state;
	assert_int_equal(sender_given_up_init(&g), 0);
	sender_given_up_add(&g, 0, 10); /* id 0 is an id like any other */
	sender_given_up_add(&g, 7, 10);
	assert_int_equal(sender_given_up_take(&g, 7, 20, age), 1);
	assert_int_equal(sender_given_up_take(&g, 7, 20, age), 0); /* once */
	assert_int_equal(sender_given_up_take(&g, 8, 20, age), 0);
	/* Too old: forgotten, and not given up. */
	sender_given_up_add(&g, 9, 10);
	assert_int_equal(sender_given_up_take(&g, 9, 10 + age, age), 0);
	assert_int_equal(sender_given_up_take(&g, 9, 10, age), 0);
	/* Adding again refreshes the time, not the slot count. */
	sender_given_up_add(&g, 0, 500);
	assert_int_equal(g.m.n, 1);
	/* MAX new ids: the ring goes round once. Id 0, in the first slot
	 * written, is forgotten; the slots of the taken ids 7 and 9 are
	 * reused; every new id is there. */
	for (uint64_t i = 0; i < SENDER_GIVEN_UP_MAX; i++)
		sender_given_up_add(&g, 1000 + i, 600);
	assert_int_equal(g.m.n, SENDER_GIVEN_UP_MAX);
	assert_int_equal(sender_given_up_take(&g, 0, 700, age), 0);
	assert_int_equal(sender_given_up_take(&g, 1000, 700, age), 1);
	assert_int_equal(sender_given_up_take(&g, 1003, 700, age), 1);
	assert_int_equal(sender_given_up_take(&g, 1000 + SENDER_GIVEN_UP_MAX - 1,
					      700, age), 1);
	for (uint64_t i = 0; i < 3 * SENDER_GIVEN_UP_MAX; i++)
		sender_given_up_add(&g, 100000 + i, 800);
	assert_int_equal(g.m.n, SENDER_GIVEN_UP_MAX);
	assert_int_equal(sender_given_up_take(&g, 100000 + 3 * SENDER_GIVEN_UP_MAX - 1,
					      800, age), 1);
	assert_int_equal(sender_given_up_take(&g, 100000, 800, age), 0);
	sender_given_up_fini(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_room_map_add_get_delete_and_grow),
		cmocka_unit_test(test_room_map_foreach_may_delete_current),
		cmocka_unit_test(test_destinations_keyed_by_peer_and_ready_at_required),
		cmocka_unit_test(test_all_dummy_room_is_never_all_done),
		cmocka_unit_test(test_later_incarnation_xfer_info_is_held_per_peer),
		cmocka_unit_test(test_too_many_destinations_is_erange),
		cmocka_unit_test(test_chunks_bounded_by_num_pages_and_last),
		cmocka_unit_test(test_dst_slice_follows_cursor_and_refuses_overrun),
		cmocka_unit_test(test_job_pages_keeps_each_job_under_the_copy_cap),
		cmocka_unit_test(test_job_queue_is_fifo_across_wraps_and_growth),
		cmocka_unit_test(test_ack_targets_are_a_set_of_peer_and_token),
		cmocka_unit_test(test_acks_are_due_only_with_targets_and_nothing_outstanding),
		cmocka_unit_test(test_job_queue_counts_its_bytes),
		cmocka_unit_test(test_worker_pick_packs_small_jobs_and_spreads_big_ones),
		cmocka_unit_test(test_rank_of_is_pp_major),
		cmocka_unit_test(test_given_up_ids_are_a_bounded_fifo),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
