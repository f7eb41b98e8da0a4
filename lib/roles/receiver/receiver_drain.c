/*
 * receiver_drain.c - kv-receiver's drain point: every room that failed, by
 * whoever saw the failure first, gets an ABORT/ABORT_ACK round that the
 * receiver starts itself, so the decode learns in bounded time that no byte
 * of the room will land any more (docs/ARCHITECTURE.md, "Failure
 * semantics"). The receiver's own failures (deadline, RECV_ABORT, CLEAR)
 * already abort; here are the others: a STATUS(Failed) from a prefill rank,
 * a prefill peer that restarted or died (seen in a message or in the peer
 * table kv-heartbeat writes), a room kv-heartbeat failed in the table, and
 * a room inherited from a previous incarnation of this receiver that the
 * engine aborts. A prefill rank that came back as a new incarnation counts
 * as having acked every abort armed before: its control's workers died with
 * it (PR_SET_PDEATHSIG) and its new control owns the table only after the
 * old one is gone (the owner lock), so nothing of the old rooms is in
 * flight from it any more.
 */
#include "receiver_impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* The release of an armed room once its acks are complete. */
static void released(struct receiver *r, struct rx_room *room, const char *how)
{
	room->ack_deadline_ns = 0;
	LOG_ROOM(LOG_INFO, room->id, "acked: %s", how);
	/* With sinks (tcp) still only once none writes the room. */
	receiver_room_release(r, room, how);
}

void receiver_drain_failed(struct receiver *r, struct rx_room *room,
			   unsigned reason, const char *why)
{
	if (rtab_fail(r->tab, room->ref, reason) == 0)
		LOG_ROOM(LOG_WARN, room->id, "failed: %s%s%s",
			 kvw_reason_str(reason), why ? ": " : "", why ? why : "");
	receiver_room_abort(r, room, reason);
}

/* Counts peer p's ack for every room armed while p was its old
 * incarnation (see the file comment). */
static void implicit_acks(struct receiver *r, struct rx_peer *p)
{
	struct idmap_iter it = { 0 };
	struct rx_room *q;

	while ((q = receiver_rooms_next(&r->rooms, &it))) {
		int rc = RX_IGNORED;

		if (!q->armed || !q->ack_deadline_ns)
			continue;
		for (uint32_t i = 0; i < q->ntargets; i++)
			if (q->targets[i].peer == p)
				rc = receiver_room_ack(
					q, q->targets[i].unique,
					receiver_room_target_token(q, i));
		if (rc == RX_COMPLETE)
			released(r, q, "the last target restarted");
	}
}

void receiver_drain_peer_lost(struct receiver *r, struct rx_peer *p,
			      unsigned reason)
{
	struct idmap_iter it = { 0 };
	struct rx_room *q;

	p->registered = 0;
	receiver_boot_forget(r, p);
	while ((q = receiver_rooms_next(&r->rooms, &it))) {
		/* A room no XFER_INFO of which has left told the old
		 * incarnation nothing: it goes to the new one, registered
		 * again first (a room begun while this receiver had not yet
		 * seen the restart that the peer table already showed failed
		 * here, and the new member kept its own room until its
		 * bootstrap timeout). */
		if (reason == KVW_R_PEER_RESTART && !q->sent)
			continue;
		for (uint32_t i = 0; i < q->ntargets; i++)
			if (q->targets[i].peer == p) {
				receiver_drain_failed(r, q, reason, p->ep);
				break;
			}
	}
	if (reason == KVW_R_PEER_RESTART)
		implicit_acks(r, p);
}

void receiver_drain_scan(struct receiver *r)
{
	struct idmap_iter it = { 0 };
	struct rx_room *q;

	while ((q = receiver_rooms_next(&r->rooms, &it))) {
		struct rtab_view v;

		if (q->armed || !q->sent || rtab_get(r->tab, q->ref, &v) != 0 ||
		    v.state != KVW_FAILED)
			continue;
		LOG_ROOM(LOG_INFO, q->id, "failed in the table by another "
			 "process (%s): aborting its targets",
			 kvw_reason_str(v.reason));
		receiver_room_abort(r, q, v.reason);
	}
}

/* Appends peer v (from the table) to room's targets, its pseudo rank
 * UINT32_MAX - index: never a real rank, so no frame's rank matches it
 * (its acks are told apart by token). 0, or -1 when its socket cannot be
 * made (logged). */
static int inherited_target(struct receiver *r, struct rx_room *room,
			    const struct rtab_peer_view *v)
{
	struct rx_target *t = &room->targets[room->ntargets];
	char err[200];

	t->peer = receiver_peer_get(r, v->endpoint, UINT32_MAX, err, sizeof err);
	if (t->peer == NULL) {
		LOG_ROOM(LOG_ERROR, room->id, "inherited room: %s: %s",
			 v->endpoint, err);
		return -1;
	}
	t->unique = UINT32_MAX - room->ntargets;
	room->ntargets++;
	return 0;
}

/* The private room for an inherited incarnation. The table names one
 * prefill rank of it (the first real target: the table keeps no more),
 * but a room may have had several (prefill TP larger than decode TP, or
 * PP): so its targets are that rank and every other prefill rank in the
 * peer table not known dead. One that had nothing of the room acks at
 * once; one that still runs a job of it fails the room and acks when the
 * job is over. Marked as having had XFER_INFO. NULL when none can be made
 * (logged). */
static struct rx_room *inherited_room(struct receiver *r, uint64_t id,
				      struct rtab_ref ref, uint32_t peer)
{
	struct rtab_peer_view pv;
	struct rx_room *room;
	uint32_t cur = 0, n = 0;

	if (rtab_peer_get(r->tab, peer, &pv) != 0) {
		LOG_ROOM(LOG_WARN, id, "inherited room names no known peer");
		return NULL;
	}
	while (rtab_peer_next(r->tab, &cur, &(struct rtab_peer_view){ 0 }) == 0)
		n++;
	room = receiver_room_new(id, NULL, 0);
	if (room)
		room->targets = calloc(n + 1, sizeof *room->targets);
	if (!room || !room->targets) {
		LOG_ROOM(LOG_ERROR, id, "inherited room: out of memory");
		receiver_room_free(room);
		return NULL;
	}
	room->ref = ref;
	room->token = receiver_token(r);
	room->inherited = 1;
	if (inherited_target(r, room, &pv) != 0) {
		receiver_room_free(room);
		return NULL;
	}
	cur = 0;
	while (room->ntargets <= n && rtab_peer_next(r->tab, &cur, &pv) == 0)
		if (pv.id != peer && pv.liveness != RTAB_PEER_DEAD)
			(void)inherited_target(r, room, &pv);
	room->required_resp = room->ntargets;
	receiver_room_mark_sent(room);
	if (receiver_rooms_put(&r->rooms, room) != 0) {
		receiver_room_free(room);
		return NULL;
	}
	return room;
}

void receiver_drain_inherited(struct receiver *r, uint64_t id)
{
	struct rtab_ref ref;
	struct rtab_view v;
	struct rx_room *room;

	if (rtab_lookup(r->tab, id, &ref) != 0 || rtab_get(r->tab, ref, &v) != 0 ||
	    v.state != KVW_FAILED || (v.flags & RTAB_F_RELEASABLE)) {
		LOG_ROOM(LOG_DEBUG, id, "RECV_ABORT: unknown room");
		return;
	}
	if (v.peer == 0) {
		/* No real target ever got its XFER_INFO (the table peer is
		 * set once they all went out): nothing can be in flight.
		 * (Not covered: a receiver that died between its last
		 * XFER_INFO and recording the peer, microseconds.) */
		(void)rtab_flags_or(r->tab, ref, RTAB_F_ARMED | RTAB_F_RELEASABLE);
		LOG_ROOM(LOG_INFO, id, "inherited room without targets: "
			 "releasable");
		return;
	}
	room = inherited_room(r, id, ref, v.peer);
	if (!room)
		return;
	/* A REGISTER of this epoch first: a prefill rank then fails whatever
	 * it still runs for our previous epoch and tracks the ABORT. */
	for (uint32_t i = 0; i < room->ntargets; i++)
		if (receiver_peer_ready(r, room->targets[i].peer) < 0)
			LOG_ROOM(LOG_WARN, id, "inherited room: REGISTER to "
				 "%s not sent", room->targets[i].peer->ep);
	LOG_ROOM(LOG_INFO, id, "inherited from a previous incarnation: "
		 "aborting at its prefill rank %s and %u other known rank(s)",
		 room->targets[0].peer->ep, room->ntargets - 1);
	receiver_room_abort(r, room, KVW_R_ABORTED);
}

int receiver_drain_ack(struct receiver *r, struct rx_room *room, uint32_t src,
		       uint64_t token)
{
	int rc = receiver_room_ack(room, src, token);

	if (rc == RX_COMPLETE)
		released(r, room, "every target acked the abort");
	return rc;
}
