/*
 * test_receiver.c - the pure rules of kv-receiver: distinct-rank sets,
 * Success counted once per prefill rank against
 * required_prefill_response_num (dummies never count), ABORT_ACK counting
 * over every target that got XFER_INFO, the room map, and the bootstrap
 * retry backoff bounds.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>

#include "plan/rankmap.h"
#include "roles/receiver/receiver_impl.h"

static struct rx_room *room_for(struct kvw_topo pre, struct kvw_topo dec,
				uint32_t dtp, uint32_t flags)
{
	static const uint32_t pages[] = { 3, 4, 5, 9 };
	struct rankmap_in in = { .prefill = pre, .decode = dec,
				 .decode_rank = { dtp, 0, 0, 0 },
				 .model_flags = flags };
	struct rankmap m;
	struct rx_room *room = receiver_room_new(42, pages, 4);

	assert_non_null(room);
	assert_int_equal(rankmap_compute(&in, &m, NULL, 0), 0);
	assert_int_equal(receiver_room_set_targets(room, &m, pre.tp), 0);
	return room;
}

static void rset_counts_each_value_once(void **state)
{
	struct receiver_rset s = { 0 };

	(void)state;
	assert_int_equal(receiver_rset_add(&s, 7), 1);
	assert_int_equal(receiver_rset_add(&s, 7), 0);
	for (uint32_t i = 0; i < 100; i++)
		assert_true(receiver_rset_add(&s, 1000 + i) == 1);
	assert_int_equal(s.n, 101);
	assert_true(receiver_rset_has(&s, 1050));
	assert_false(receiver_rset_has(&s, 8));
	receiver_rset_free(&s);
	assert_int_equal(s.n, 0);
}

static void success_needs_every_prefill_rank_of_a_tp_fanin(void **state)
{
	/* prefill tp 2, decode tp 1, MHA: two real targets, both must report */
	struct rx_room *room = room_for((struct kvw_topo){ 2, 1, 1, 1 },
					(struct kvw_topo){ 1, 1, 1, 1 }, 0, 0);

	(void)state;
	assert_int_equal(room->ntargets, 2);
	assert_int_equal(room->required_resp, 2);
	assert_int_equal(receiver_room_success(room, 0), RX_COUNTED);
	assert_int_equal(receiver_room_success(room, 0), RX_DUP);
	assert_int_equal(room->success.n, 1);
	assert_int_equal(receiver_room_success(room, 1), RX_COMPLETE);
	receiver_room_free(room);
}

static void success_from_a_rank_that_is_not_a_target_is_ignored(void **state)
{
	struct rx_room *room = room_for((struct kvw_topo){ 2, 1, 1, 1 },
					(struct kvw_topo){ 1, 1, 1, 1 }, 0, 0);

	(void)state;
	assert_int_equal(receiver_room_success(room, 5), RX_IGNORED);
	assert_int_equal(room->success.n, 0);
	receiver_room_free(room);
}

static void mla_fanin_dummies_never_count_as_success(void **state)
{
	/* MLA, prefill tp 4 -> decode tp 1: rank 0 real, 1..3 dummies, resp 1 */
	struct rx_room *room = room_for((struct kvw_topo){ 4, 1, 1, 1 },
					(struct kvw_topo){ 1, 1, 1, 1 }, 0,
					KVW_MODEL_MLA);

	(void)state;
	assert_int_equal(room->ntargets, 4);
	assert_int_equal(room->required_resp, 1);
	assert_int_equal(receiver_room_success(room, 2), RX_IGNORED);
	assert_int_equal(receiver_room_success(room, 0), RX_COMPLETE);
	receiver_room_free(room);
}

static void pp_targets_have_distinct_unique_ranks(void **state)
{
	/* prefill tp 2 pp 2, decode tp 2 pp 1: decode rank 1 -> tp 1 of both
	 * stages, unique ranks pp * 2 + tp = 1 and 3 */
	struct rx_room *room = room_for((struct kvw_topo){ 2, 2, 1, 1 },
					(struct kvw_topo){ 2, 1, 1, 1 }, 1, 0);
	int seen1 = 0, seen3 = 0;

	(void)state;
	assert_int_equal(room->ntargets, 2);
	for (uint32_t i = 0; i < room->ntargets; i++) {
		seen1 += room->targets[i].unique == 1;
		seen3 += room->targets[i].unique == 3;
	}
	assert_int_equal(seen1 + seen3, 2);
	assert_int_equal(seen1, 1);
	assert_int_equal(receiver_room_success(room, 3), RX_COUNTED);
	assert_int_equal(receiver_room_success(room, 1), RX_COMPLETE);
	receiver_room_free(room);
}

static void acks_count_only_when_armed_and_include_dummies(void **state)
{
	struct rx_room *room = room_for((struct kvw_topo){ 4, 1, 1, 1 },
					(struct kvw_topo){ 1, 1, 1, 1 }, 0,
					KVW_MODEL_MLA);

	(void)state;
	receiver_room_mark_sent(room);
	assert_int_equal(room->ack_needed, 4);
	assert_int_equal(receiver_room_ack(room, 0, 5), RX_IGNORED); /* not armed */
	assert_int_equal(receiver_room_arm(room, 5), 0);
	assert_int_equal(receiver_room_ack(room, 0, 5), RX_COUNTED);
	assert_int_equal(receiver_room_ack(room, 0, 5), RX_DUP);
	assert_int_equal(receiver_room_ack(room, 9, 5), RX_IGNORED);
	assert_int_equal(receiver_room_ack(room, 1, 5), RX_COUNTED);
	assert_int_equal(receiver_room_ack(room, 3, 5), RX_COUNTED);
	assert_int_equal(receiver_room_ack(room, 2, 5), RX_COMPLETE);
	receiver_room_free(room);
}

/* An inherited room's targets have no known ranks: each ABORT carries its
 * own token (the arming's + i), and an ack counts for the target whose
 * token it echoes, whatever rank it names; a token outside the range
 * (another arming, another incarnation) counts for nothing. */
static void inherited_acks_are_told_apart_by_token(void **state)
{
	struct rx_room *room = receiver_room_new(7, NULL, 0);

	(void)state;
	assert_non_null(room);
	room->targets = calloc(3, sizeof *room->targets);
	assert_non_null(room->targets);
	room->inherited = 1;
	room->ntargets = 3;
	for (uint32_t i = 0; i < 3; i++)
		room->targets[i].unique = UINT32_MAX - i;
	receiver_room_mark_sent(room);
	assert_int_equal(room->ack_needed, 3);
	assert_int_equal(receiver_room_arm(room, 100), 0);
	assert_int_equal(receiver_room_target_token(room, 0), 100);
	assert_int_equal(receiver_room_target_token(room, 2), 102);
	assert_int_equal(receiver_room_ack(room, 0, 99), RX_IGNORED);
	assert_int_equal(receiver_room_ack(room, 0, 103), RX_IGNORED);
	/* The rank in the frame does not matter: 0 twice, two targets. */
	assert_int_equal(receiver_room_ack(room, 0, 101), RX_COUNTED);
	assert_int_equal(receiver_room_ack(room, 0, 100), RX_COUNTED);
	assert_int_equal(receiver_room_ack(room, 5, 101), RX_DUP);
	assert_int_equal(receiver_room_ack(room, 5, 102), RX_COMPLETE);
	receiver_room_free(room);
}

static void acks_are_ignored_before_xfer_info_went_out(void **state)
{
	struct rx_room *room = room_for((struct kvw_topo){ 1, 1, 1, 1 },
					(struct kvw_topo){ 1, 1, 1, 1 }, 0, 0);

	(void)state;
	assert_int_equal(receiver_room_arm(room, 1), 0);
	assert_int_equal(receiver_room_ack(room, 0, 1), RX_IGNORED);
	receiver_room_free(room);
}

/* G10/G11: an ack for an unarmed room is dropped, and an ack of an older
 * incarnation (another token) never counts for a later room of the same
 * id, however the two interleave. */
static void acks_of_another_incarnation_never_count(void **state)
{
	struct rx_room *old = room_for((struct kvw_topo){ 2, 1, 1, 1 },
				       (struct kvw_topo){ 1, 1, 1, 1 }, 0, 0);
	struct rx_room *room = room_for((struct kvw_topo){ 2, 1, 1, 1 },
					(struct kvw_topo){ 1, 1, 1, 1 }, 0, 0);

	(void)state;
	receiver_room_mark_sent(old);
	receiver_room_mark_sent(room);
	assert_int_equal(room->ack_needed, 2);
	assert_int_equal(receiver_room_arm(old, 40), 0);
	assert_int_equal(receiver_room_ack(old, 0, 40), RX_COUNTED);
	/* the later incarnation, not armed yet: the old acks are dropped */
	assert_int_equal(receiver_room_ack(room, 1, 40), RX_IGNORED);
	assert_int_equal(receiver_room_arm(room, 41), 0);
	assert_int_equal(receiver_room_arm(room, 42), KVW_EINVAL); /* once */
	assert_int_equal(receiver_room_arm(room, 0), KVW_EINVAL);
	/* armed: the old token still counts for nothing, from any rank */
	assert_int_equal(receiver_room_ack(room, 0, 40), RX_IGNORED);
	assert_int_equal(receiver_room_ack(room, 1, 40), RX_IGNORED);
	assert_int_equal(room->acked.n, 0);
	assert_int_equal(receiver_room_ack(room, 0, 41), RX_COUNTED);
	assert_int_equal(receiver_room_ack(room, 1, 40), RX_IGNORED);
	assert_int_equal(receiver_room_ack(room, 1, 41), RX_COMPLETE);
	receiver_room_free(old);
	receiver_room_free(room);
}

/* A STATUS counts only for the incarnation whose XFER_INFO token it
 * echoes, and each target has its own: the tokens of the room id's
 * previous incarnation, the bare base token, or 0, never. (receiver.c
 * compares a STATUS with the token of the very target that sends it.) */
static void status_token_must_be_this_incarnations(void **state)
{
	struct rx_room *old = receiver_room_new(9, NULL, 0);
	struct rx_room *room = receiver_room_new(9, NULL, 0);

	(void)state;
	old->targets = calloc(1, sizeof *old->targets);
	room->targets = calloc(2, sizeof *room->targets);
	assert_non_null(old->targets);
	assert_non_null(room->targets);
	old->ntargets = 1;
	room->ntargets = 2;
	old->token = 0x50;
	old->targets[0].token = 0x51;
	room->token = 0x52;
	room->targets[0].token = 0x5300;
	room->targets[1].token = 0x5301;
	assert_true(receiver_room_token_ok(old, 0x51));
	assert_true(receiver_room_token_ok(room, 0x5300));
	assert_true(receiver_room_token_ok(room, 0x5301));
	assert_false(receiver_room_token_ok(room, 0x51));
	assert_false(receiver_room_token_ok(room, 0x52));
	assert_false(receiver_room_token_ok(room, 0));
	room->targets[0].token = 0; /* never sent: nothing matches */
	assert_false(receiver_room_token_ok(room, 0));
	receiver_room_free(old);
	receiver_room_free(room);
}

static void room_map_puts_gets_and_deletes_colliding_keys(void **state)
{
	struct rx_rooms h;

	(void)state;
	/* The one map rule (lib/base/idmap.h): any size, rounded up, grown
	 * as rooms come; a second room with an id already linked is refused. */
	assert_int_equal(receiver_rooms_init(&h, 3), 0);
	for (uint64_t id = 0; id < 64; id++)
		assert_int_equal(receiver_rooms_put(&h, receiver_room_new(id * 4,
									  NULL, 0)),
				 0);
	assert_int_equal(receiver_rooms_count(&h), 64);
	struct rx_room *dup = receiver_room_new(252, NULL, 0);
	assert_int_equal(receiver_rooms_put(&h, dup), KVW_EEXIST);
	receiver_room_free(dup);
	assert_non_null(receiver_rooms_get(&h, 0));
	assert_non_null(receiver_rooms_get(&h, 252));
	assert_null(receiver_rooms_get(&h, 1));
	receiver_room_free(receiver_rooms_del(&h, 128));
	assert_null(receiver_rooms_get(&h, 128));
	assert_null(receiver_rooms_del(&h, 128));
	assert_non_null(receiver_rooms_get(&h, 124));
	assert_int_equal(receiver_rooms_count(&h), 63);
	receiver_rooms_free(&h);
}

static void room_copies_its_pages_and_cp_share(void **state)
{
	struct rx_room *room = room_for((struct kvw_topo){ 1, 1, 1, 1 },
					(struct kvw_topo){ 1, 1, 1, 1 }, 0, 0);

	(void)state;
	assert_int_equal(room->npages, 4);
	assert_int_equal(room->pages[3], 9);
	assert_int_equal(room->targets[0].page_start, 0);
	assert_int_equal(room->targets[0].page_count, 4);
	receiver_room_free(room);
}

static void boot_backoff_stays_between_100_and_500_ms(void **state)
{
	uint32_t d = 0;

	(void)state;
	for (uint32_t i = 0; i < 20; i++) {
		d = receiver_boot_backoff(d, i * 2654435761u);
		assert_in_range(d, 100, 500);
	}
	assert_int_equal(d, 500);
	assert_in_range(receiver_boot_backoff(0, 0), 100, 149);
}

/* Epochs are random: "older" can only mean "one this peer had before".
 * The first heard is adopted, a different one is a restart (the old one
 * retired), a retired one is stale forever after (within the last
 * RX_RETIRED), 0 means no epoch. */
static void epochs_first_adopted_new_is_restart_retired_is_stale(void **state)
{
	struct rx_peer p = { 0 };

	(void)state;
	assert_int_equal(receiver_epoch_note(&p, 0), RX_EP_CURRENT);
	assert_int_equal(receiver_epoch_note(&p, 0xa), RX_EP_CURRENT);
	assert_true(p.epoch == 0xa);
	assert_int_equal(receiver_epoch_note(&p, 0xa), RX_EP_CURRENT);
	assert_int_equal(receiver_epoch_note(&p, 0xb), RX_EP_NEW);
	assert_true(p.epoch == 0xb);
	assert_int_equal(receiver_epoch_note(&p, 0xa), RX_EP_STALE);
	assert_true(p.epoch == 0xb); /* a stale message changes nothing */
	assert_int_equal(receiver_epoch_note(&p, 0), RX_EP_CURRENT);
	for (uint64_t e = 0xc; e < 0xc + RX_RETIRED; e++)
		assert_int_equal(receiver_epoch_note(&p, e), RX_EP_NEW);
	/* 0xa fell out of the last RX_RETIRED; 0xb (retired since) did not. */
	assert_int_equal(receiver_epoch_note(&p, 0xc), RX_EP_STALE);
	assert_int_equal(receiver_epoch_note(&p, 0xa), RX_EP_NEW);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rset_counts_each_value_once),
		cmocka_unit_test(success_needs_every_prefill_rank_of_a_tp_fanin),
		cmocka_unit_test(success_from_a_rank_that_is_not_a_target_is_ignored),
		cmocka_unit_test(mla_fanin_dummies_never_count_as_success),
		cmocka_unit_test(pp_targets_have_distinct_unique_ranks),
		cmocka_unit_test(acks_count_only_when_armed_and_include_dummies),
		cmocka_unit_test(inherited_acks_are_told_apart_by_token),
		cmocka_unit_test(acks_are_ignored_before_xfer_info_went_out),
		cmocka_unit_test(acks_of_another_incarnation_never_count),
		cmocka_unit_test(status_token_must_be_this_incarnations),
		cmocka_unit_test(room_map_puts_gets_and_deletes_colliding_keys),
		cmocka_unit_test(room_copies_its_pages_and_cp_share),
		cmocka_unit_test(boot_backoff_stays_between_100_and_500_ms),
		cmocka_unit_test(epochs_first_adopted_new_is_restart_retired_is_stale),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
