/*
 * receiver_engine.c - kv-receiver's engine messages: RECV_BEGIN (a room's
 * destination pages, aux slot, prefix and state rows, each checked against
 * this rank's layout before any prefill rank hears of the room), RECV_ABORT
 * and CLEAR. The frames are decoded already (lib/wire/frame.c); what
 * breaks a rule here fails the room with its reason.
 */
#include "receiver_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "roles/malformed.h"


/* The first destination page the room names twice, as its position, or
 * room->npages when none repeats. r->page_seen (one bit per pool page) is
 * left all clear again. */
static uint32_t repeated_page(struct receiver *r, const struct rx_room *room)
{
	uint32_t i, dup = room->npages;

	for (i = 0; i < room->npages; i++) {
		uint32_t p = room->pages[i];
		uint64_t bit = 1ull << (p % 64);

		if (r->page_seen[p / 64] & bit) {
			dup = i;
			break;
		}
		r->page_seen[p / 64] |= bit;
	}
	while (i-- > 0)
		r->page_seen[room->pages[i] / 64] = 0;
	return dup;
}

/* Why the room's state rows cannot be granted ("" when they can): every
 * list names a component of the layout, every row lies inside it, and a
 * slot component names one row. */
static void state_bad(const struct receiver *r, const struct rx_room *room,
		      char *why, size_t whylen)
{
	const struct frame_bytes st = { room->state, room->state_len };
	uint32_t rows[KVW_MAX_STATE_IDX];
	uint32_t lists = frame_state_lists(st);

	if (!room->state_len)
		return;
	if (lists > r->shape.nstate) {
		snprintf(why, whylen, "%u state lists, the layout has %u "
			 "components", lists, r->shape.nstate);
		return;
	}
	for (uint32_t c = 0; c < lists; c++) {
		uint32_t n = frame_state_get(st, c, rows);

		if (r->shape.state[c].kind == KVW_STATE_SLOT && n > 1) {
			snprintf(why, whylen, "state component %u (slot): %u "
				 "rows, want one", c, n);
			return;
		}
		for (uint32_t i = 0; i < n; i++)
			if (rows[i] >= r->shape.state[c].rows) {
				snprintf(why, whylen, "state component %u: "
					 "row %u (position %u) outside its %u "
					 "rows", c, rows[i], i,
					 r->shape.state[c].rows);
				return;
			}
	}
}

/* The engine's page indices and aux slot must lie inside this rank's pool,
 * no destination page may be named twice (two source pages would land
 * on one), and a decode prefix must end on a page boundary (the prefill
 * skips whole pages; a page half held and half sent has no owner): a room
 * breaking one fails at once (bad index; page lists differ) and nothing
 * of it reaches a prefill rank. Returns 1 when the room was failed. */
static int pages_bad(struct receiver *r, struct rx_room *room)
{
	unsigned reason = KVW_R_BAD_INDEX;
	char why[160] = "";
	uint32_t i;

	for (i = 0; i < room->npages; i++)
		if (room->pages[i] >= r->shape.pages)
			break;
	if (i < room->npages) {
		snprintf(why, sizeof why, "page index %u (position %u) outside "
			 "the %u-page pool", room->pages[i], i, r->shape.pages);
	} else if (r->shape.aux_slots && room->aux_slot >= r->shape.aux_slots &&
		   !receiver_room_tell_only(room)) {
		snprintf(why, sizeof why, "aux slot %u outside the %u slots",
			 room->aux_slot, r->shape.aux_slots);
	} else if (room->prefix_tokens % r->shape.page_tokens) {
		snprintf(why, sizeof why, "decode prefix of %u tokens is not a "
			 "whole number of %u-token pages", room->prefix_tokens,
			 r->shape.page_tokens);
	} else if (state_bad(r, room, why, sizeof why), why[0]) {
		/* why says it */
	} else if ((i = repeated_page(r, room)) < room->npages) {
		snprintf(why, sizeof why, "destination page %u given twice "
			 "(again at position %u)", room->pages[i], i);
		reason = KVW_R_PAGES;
	} else {
		return 0;
	}
	MALFORMED(r->tab, "room %llu: RECV_BEGIN: %s",
		  (unsigned long long)room->id, why);
	receiver_room_fail(r, room, reason, why);
	return 1;
}

static void recv_begin(struct receiver *r, const struct frame_msg *m)
{
	const struct frame_recv_begin *b = &m->u.recv_begin;
	uint64_t id = m->hdr.room, deadline = rtab_now_ns() + r->timeout_ns;
	struct rx_room *room = receiver_rooms_get(&r->rooms, id);
	struct rtab_ref ref;
	int rc;

	if (room) {
		int st = rtab_state(r->tab, room->ref);

		if (st >= 0 && st != KVW_CLEARED) {
			LOG_RL(LOG_WARN, "room %llu: RECV_BEGIN for a room that "
			       "exists (%s): ignored", (unsigned long long)id,
			       kvw_state_str((unsigned)st));
			return;
		}
		receiver_room_withdraw(r, room);
		receiver_room_free(receiver_rooms_del(&r->rooms, id));
	}
	rc = rtab_insert(r->tab, id, 0, deadline, &ref);
	if (rc) {
		LOG_RL(LOG_WARN, "room %llu: RECV_BEGIN: cannot insert: %s",
		       (unsigned long long)id, kvw_strerror(rc));
		return;
	}
	(void)rtab_set_expected(r->tab, ref, b->pages.n);
	(void)rtab_flags_or(r->tab, ref, RTAB_F_BEGUN); /* only BEGIN opens */
	room = receiver_room_new(id, NULL, 0);
	if (room && b->pages.n) {
		room->pages = malloc((size_t)b->pages.n * sizeof *room->pages);
		if (room->pages)
			for (uint32_t i = 0; i < b->pages.n; i++)
				room->pages[i] = frame_u32s_get(b->pages, i);
		room->npages = b->pages.n;
	}
	if (room && b->state.len && (room->state = malloc(b->state.len))) {
		memcpy(room->state, b->state.p, b->state.len);
		room->state_len = b->state.len;
	}
	if (!room || (b->pages.n && !room->pages) ||
	    (b->state.len && !room->state)) {
		receiver_room_free(room);
		(void)rtab_fail(r->tab, ref, KVW_R_BOOTSTRAP);
		LOG_ROOM(LOG_ERROR, id, "out of memory");
		return;
	}
	room->ref = ref;
	room->token = receiver_token(r);
	room->aux_slot = b->aux_slot;
	room->prefill_dp = b->prefill_dp_rank;
	room->prefix_tokens = b->prefix_tokens;
	(void)rtab_set_prefix(r->tab, ref, b->prefix_tokens);
	snprintf(room->boot_ep, sizeof room->boot_ep, "%s", b->bootstrap);
	/* The id is free (any old room was dropped above): only a map that
	 * was never initialised could refuse. */
	if (receiver_rooms_put(&r->rooms, room) != 0) {
		receiver_room_free(room);
		(void)rtab_fail(r->tab, ref, KVW_R_BOOTSTRAP);
		LOG_ROOM(LOG_ERROR, id, "room map refused the room");
		return;
	}
	if (r->next_deadline == 0 || deadline < r->next_deadline)
		r->next_deadline = deadline;
	LOG_ROOM(LOG_DEBUG, id, "RECV_BEGIN: %u pages via %s (prefix of %u "
		 "tokens held)", room->npages, room->boot_ep,
		 room->prefix_tokens);
	if (!b->bootstrap[0]) {
		receiver_room_fail(r, room, KVW_R_BOOTSTRAP, "no bootstrap address");
		return;
	}
	if (pages_bad(r, room))
		return;
	receiver_boot_want(r, room);
}

void receiver_engine_msg(struct receiver *r, const struct frame_msg *m)
{
	struct rx_room *room = receiver_rooms_get(&r->rooms, m->hdr.room);
	struct rtab_ref ref;

	switch (m->hdr.type) {
	case FRAME_RECV_BEGIN:
		recv_begin(r, m);
		return;
	case FRAME_RECV_ABORT:
		if (room)
			receiver_room_abort(r, room, KVW_R_ABORTED);
		else
			receiver_drain_inherited(r, m->hdr.room);
		return;
	case FRAME_CLEAR:
		if (room && !rtab_terminal((unsigned)rtab_state(r->tab, room->ref)))
			receiver_room_abort(r, room, KVW_R_CLEARED);
		if (rtab_lookup(r->tab, m->hdr.room, &ref) == 0)
			(void)rtab_clear(r->tab, ref, KVW_R_CLEARED);
		/* A late batch of this incarnation writes nothing. */
		if (room)
			receiver_room_withdraw(r, room);
		receiver_room_free(receiver_rooms_del(&r->rooms, m->hdr.room));
		return;
	default:
		MALFORMED(r->tab, "engine sent %s: dropped",
			  frame_type_str(m->hdr.type));
	}
}
