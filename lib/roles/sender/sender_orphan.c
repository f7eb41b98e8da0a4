/*
 * sender_orphan.c - ended rooms nobody will clear (issue 34): a prefill
 * table must not fill up, over weeks, with rooms its engine never owned.
 *
 * The engine clears every room it began. A room it never began is one a
 * decode's XFER_INFO opened here (XFER_INFO may come before SEND_BEGIN).
 * When the decode aborts it, or it times out, it ends Failed, and the
 * engine may never clear it:
 *
 *   - The engine cleared the id before this control knew it (the decode
 *     aborted before SEND_BEGIN, and the engine cleared at once; on tcp the
 *     XFER_INFO often comes after that CLEAR). Such an id is remembered (a
 *     FIFO of SENDER_GIVEN_UP_MAX ids, each for the room timeout); a room a
 *     later XFER_INFO opens for it is marked given up and is cleared as
 *     soon as it ends (its ABORT acks still go out first). A SEND_BEGIN of
 *     the id takes it back: a new incarnation, which the engine clears.
 *   - Any other room that ended without a SEND_BEGIN and owes nothing (no
 *     ABORT ack, no job) is cleared once it has been seen ended for the
 *     room timeout: an engine that begins it later still finds it Failed
 *     until then.
 *
 * Each such clear is counted in the table (rooms_reclaimed) and logged
 * with the room.
 */
#include "sender_impl.h"

#include <stdlib.h>

#include "base/kvw.h"
#include "base/log.h"

int sender_given_up_init(struct sender_given_up *g)
{
	g->ring = calloc(SENDER_GIVEN_UP_MAX, sizeof *g->ring);
	if (!g->ring || idmap_init(&g->m, SENDER_GIVEN_UP_MAX) < 0) {
		free(g->ring);
		g->ring = NULL;
		return KVW_ENOMEM;
	}
	g->head = 0;
	return 0;
}

void sender_given_up_fini(struct sender_given_up *g)
{
	idmap_fini(&g->m); /* the ring owns the nodes */
	free(g->ring);
	g->ring = NULL;
}

/* Unlinks ring slot e if it is the record the map holds for its id (a
 * taken id's slot stays in the ring, unlinked; its id may be linked
 * again by a newer slot). */
static void slot_unlink(struct sender_given_up *g, struct sender_given_up_id *e)
{
	if (idmap_get(&g->m, e->node.id) == &e->node)
		idmap_del(&g->m, e->node.id);
}

void sender_given_up_add(struct sender_given_up *g, uint64_t id,
			 uint64_t now_ns)
{
	struct idmap_node *n;
	struct sender_given_up_id *e;

	if (!g->ring)
		return;
	n = idmap_get(&g->m, id);
	if (n) {
		idmap_entry(n, struct sender_given_up_id, node)->t_ns = now_ns;
		return;
	}
	e = &g->ring[g->head];
	slot_unlink(g, e); /* the oldest id is forgotten first */
	g->head = (g->head + 1) % SENDER_GIVEN_UP_MAX;
	e->node.id = id;
	e->t_ns = now_ns;
	(void)idmap_put(&g->m, &e->node); /* cannot fail: id is not linked */
}

int sender_given_up_take(struct sender_given_up *g, uint64_t id,
			 uint64_t now_ns, uint64_t max_age_ns)
{
	struct idmap_node *n = g->ring ? idmap_del(&g->m, id) : NULL;

	return n && now_ns - idmap_entry(n, struct sender_given_up_id,
					 node)->t_ns < max_age_ns;
}

/* Clears r, which ended and which no engine will clear. */
static void orphan_clear(struct sender *s, struct sender_room *r,
			 const char *why)
{
	LOG_ROOM(LOG_INFO, r->id, "ended without SEND_BEGIN, %s: cleared", why);
	rtab_clear(s->t, r->ref, KVW_R_CLEARED);
	sender_room_drop_chunks(r);
	r->cleared = 1;
	rtab_rooms_reclaimed_add(s->t, 1);
}

static int ended_unbegun(struct sender *s, const struct sender_room *r)
{
	int st;

	if (r->begun || r->cleared)
		return 0;
	st = rtab_state(s->t, r->ref);
	return st >= 0 && rtab_terminal((unsigned)st);
}

int sender_orphan_end(struct sender *s, struct sender_room *r)
{
	if (!r->given_up || !ended_unbegun(s, r))
		return 0;
	orphan_clear(s, r, "its engine cleared the id before it came");
	return 1;
}

struct orphan_sweep {
	struct sender *s;
	uint64_t now;
	struct sender_room *gone; /* retired after the walk (a retire may
				   * open rooms: not during it) */
};

static void orphan_one(void *arg, struct sender_room *r)
{
	struct orphan_sweep *a = arg;

	if (!ended_unbegun(a->s, r) || r->nacks || r->inflight) {
		r->ended_ns = 0;
		return;
	}
	if (!r->ended_ns)
		r->ended_ns = a->now;
	if (!r->given_up && a->now - r->ended_ns < a->s->room_timeout_ns)
		return;
	orphan_clear(a->s, r, r->given_up
				      ? "its engine cleared the id before it came"
				      : "not begun within the room timeout "
					"after it ended");
	if (sender_room_gone(a->s, r)) {
		r->gone_next = a->gone;
		a->gone = r;
	}
}

void sender_orphan_sweep(struct sender *s, uint64_t now)
{
	struct orphan_sweep a = { s, now, NULL };

	sender_rooms_foreach(&s->rooms, orphan_one, &a);
	while (a.gone) {
		struct sender_room *r = a.gone;

		a.gone = r->gone_next;
		sender_room_retire(s, r);
	}
}
