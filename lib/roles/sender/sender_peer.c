/*
 * sender_peer.c - kv-sender's decode peers: REGISTER (store the peer's
 * layout and descriptor, build the plan from this rank's layout to its),
 * XFER_INFO (a room's destination), ABORT (fail, then ack once drained)
 * and PING on the peer ROUTER, plus the cached outbound DEALER per peer
 * endpoint that carries STATUS and ABORT_ACK back. A decode is known by
 * the (src_rank, epoch) of the header its REGISTER carried; anything from
 * an unknown decode is counted as malformed and changes nothing.
 */
#include "sender_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/proc.h"
#include "roles/authz.h"
#include "roles/malformed.h"
#include "wire/dealers.h"

static struct sender_peer *peer_by_endpoint(struct sender *s, const char *ep)
{
	for (uint32_t i = 0; i < s->npeers; i++)
		if (strcmp(s->peers[i]->endpoint, ep) == 0)
			return s->peers[i];
	return NULL;
}

static struct sender_peer *peer_by_hdr(struct sender *s,
				       const struct frame_hdr *h)
{
	for (uint32_t i = 0; i < s->npeers; i++)
		if (s->peers[i]->epoch == h->epoch &&
		    s->peers[i]->src_rank == h->src_rank)
			return s->peers[i];
	return NULL;
}

static void malformed(struct sender *s, const struct frame_msg *m,
		      const char *why)
{
	MALFORMED(s->t, "peer %s (rank %u, room %llu): %s",
		  frame_type_str(m->hdr.type), m->hdr.src_rank,
		  (unsigned long long)m->hdr.room, why);
}

/* Builds the plan from this rank's layout to the one REGISTER r states,
 * changing nothing else. Returns it (the caller's, plan_free), or NULL with
 * why[] saying why the decode cannot be served. */
static struct plan *register_plan(struct sender *s,
				  const struct frame_register *r, char *why,
				  size_t whylen)
{
	struct kvw_buf *dbufs = NULL;
	uint64_t dsize[1] = { 0 }, ssize[1] = { s->pool_bytes };
	struct plan_side src = { &s->model, s->bufs, s->nbufs, ssize, 1 };
	struct plan_side dst = { &r->model, NULL, r->bufs.n, dsize, 1 };
	struct plan_heads heads;
	struct plan *plan = NULL;
	int rc;

	why[0] = '\0';
	if (strcmp(r->transport, s->transport) != 0) {
		snprintf(why, whylen, "transport %.32s, this rank uses %.32s",
			 r->transport, s->transport);
		return NULL;
	}
	dbufs = calloc(r->bufs.n ? r->bufs.n : 1, sizeof *dbufs);
	if (!dbufs) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	for (uint32_t i = 0; i < r->bufs.n; i++) {
		uint64_t end;

		dbufs[i] = frame_bufs_get(r->bufs, i);
		/* The descriptor names one pool: everything must be in it. */
		if (dbufs[i].pool != 0) {
			snprintf(why, whylen, "buffer %u in pool %u; "
				 "only pool 0 is supported", i, dbufs[i].pool);
			goto out;
		}
		if (__builtin_mul_overflow((uint64_t)dbufs[i].pages,
					   dbufs[i].item_len, &end) ||
		    __builtin_add_overflow(end, dbufs[i].offset, &end)) {
			snprintf(why, whylen, "buffer %u overflows", i);
			goto out;
		}
		if (end > dsize[0])
			dsize[0] = end;
	}
	dst.bufs = dbufs;
	if (r->topo.tp != s->topo.tp) {
		rc = plan_heads_compute(&s->model, s->topo.tp, s->coord.tp,
					r->topo.tp, r->coord.tp, &heads, why,
					whylen);
		if (rc < 0)
			goto out;
	}
	plan_build(&src, &dst, r->topo.tp != s->topo.tp ? &heads : NULL, &plan,
		   why, whylen);
out:
	free(dbufs);
	return plan;
}

/* Fails every live room with a destination on p (its registration is
 * being replaced by a new incarnation of the decode). */
struct restart_arg {
	struct sender *s;
	struct sender_peer *p;
};

static void fail_if_dst(void *arg, struct sender_room *r)
{
	struct restart_arg *a = arg;

	for (uint32_t i = 0; i < r->ndst; i++)
		if (r->dst[i].peer == a->p) {
			sender_room_fail(a->s, r, KVW_R_PEER_RESTART,
					 "decode restarted");
			return;
		}
}

/* Adds an empty peer for endpoint ep: the new peer, or NULL (no memory;
 * nothing changed). */
static struct sender_peer *peer_add(struct sender *s, const char *ep)
{
	struct sender_peer **grown, *p = calloc(1, sizeof *p);

	if (!p)
		return NULL;
	grown = realloc(s->peers, (s->npeers + 1) * sizeof *grown);
	if (!grown) {
		free(p);
		return NULL;
	}
	s->peers = grown;
	s->peers[s->npeers++] = p;
	snprintf(p->endpoint, sizeof p->endpoint, "%s", ep);
	return p;
}

/* REGISTER: validate, then act. Everything that can fail or refuse comes
 * first and changes nothing: the endpoint, room in the peer list, the new
 * plan, the descriptor copy and the peer table entry (the last fallible
 * step). A REGISTER whose plan cannot be built never replaces a usable
 * registration (its rooms and plan stay as they were); a decode not yet
 * registered is recorded as unusable, so its rooms fail with the reason.
 * Only then does it act: the rooms of a replaced epoch fail, and the
 * peer's fields, descriptor and plan are swapped in. A descriptor naming
 * a pool the decode does not own (sender_authz.c) counts as unauthorised
 * and is treated like a plan that cannot be built. */
/* Decode endpoints registered from source id[len]. */
static uint32_t peers_of_source(const struct sender *s, const uint8_t *id,
				size_t len)
{
	uint32_t n = 0;

	if (len > RL_ID_MAX)
		len = RL_ID_MAX;
	for (uint32_t i = 0; i < s->npeers; i++)
		n += s->peers[i]->srclen == len &&
		     memcmp(s->peers[i]->src, id, len) == 0;
	return n;
}

static void on_register(struct sender *s, const struct wire_in *in,
			const struct frame_msg *m)
{
	const struct frame_register *r = &m->u.reg;
	struct sender_peer *p;
	struct plan *plan = NULL;
	uint8_t *desc;
	uint64_t dev, ino;
	uint32_t id;
	int changed = 0, rc, allowed;
	char why[sizeof p->why];

	if (!r->endpoint[0] || strlen(r->endpoint) >= RTAB_ENDPOINT_MAX) {
		malformed(s, m, "endpoint empty or too long");
		return;
	}
	p = peer_by_endpoint(s, r->endpoint);
	if (!p && s->npeers >= SENDER_MAX_PEERS &&
	    !sender_peers_reclaim(s, NULL, 0, proc_now_ns())) {
		malformed(s, m, "too many decode peers");
		return;
	}
	if (!p && peers_of_source(s, in->id, in->idlen) >=
		      SENDER_PEERS_PER_SOURCE &&
	    !sender_peers_reclaim(s, in->id, in->idlen, proc_now_ns())) {
		RATE_LIMITED(s->t, "decode %s: REGISTER of a new endpoint from "
			     "a source that registered %u already", r->endpoint,
			     SENDER_PEERS_PER_SOURCE);
		return;
	}
	allowed = sender_pool_allowed(s, p, r, &dev, &ino, why, sizeof why);
	if (allowed)
		plan = register_plan(s, r, why, sizeof why);
	else
		UNAUTHORISED(s->t, "decode %s: REGISTER names a pool it does "
			     "not own: %s", r->endpoint, why);
	if (!plan && p && p->plan) {
		if (allowed)
			MALFORMED(s->t, "decode %s: REGISTER refused (%s); "
				  "the registration of epoch %016llx stays",
				  p->endpoint, why,
				  (unsigned long long)p->epoch);
		return;
	}
	desc = malloc(r->desc.len ? r->desc.len : 1);
	if (!desc) {
		plan_free(&plan);
		return;
	}
	if (r->desc.len) /* an empty one has no bytes to point at */
		memcpy(desc, r->desc.p, r->desc.len);
	if (!p && !(p = peer_add(s, r->endpoint))) {
		plan_free(&plan);
		free(desc);
		return;
	}
	rc = rtab_peer_upsert(s->t, r->endpoint, m->hdr.epoch, &id, &changed);
	if (rc < 0) {
		LOG_RL(LOG_WARN, "decode %s: peer table: %s", r->endpoint,
		       kvw_strerror(rc));
		plan_free(&plan);
		free(desc);
		return;
	}
	if (p->epoch && p->epoch != m->hdr.epoch) {
		struct restart_arg a = { s, p };

		LOG(LOG_INFO, "decode %s restarted (new epoch)", p->endpoint);
		sender_rooms_foreach(&s->rooms, fail_if_dst, &a);
	}
	if (p->epoch != m->hdr.epoch) { /* a new registration */
		p->registered_ns = proc_now_ns();
		p->served = 0;
	}
	p->id = id;
	p->src_rank = m->hdr.src_rank;
	p->epoch = m->hdr.epoch;
	p->coord = r->coord;
	p->topo = r->topo;
	p->model = r->model;
	p->pool_dev = dev;
	p->pool_ino = ino;
	p->srclen = (uint8_t)(in->idlen < RL_ID_MAX ? in->idlen : RL_ID_MAX);
	memcpy(p->src, in->id, p->srclen);
	free(p->desc);
	p->desc = desc;
	p->desclen = r->desc.len;
	plan_free(&p->plan);
	p->plan = plan;
	memcpy(p->why, why, sizeof p->why);
	p->refused = !allowed;
	if (p->plan)
		LOG(LOG_INFO, "decode %s registered (rank %u, tp %u/%u, %u "
		    "buffers)", p->endpoint, p->src_rank, r->coord.tp,
		    r->topo.tp, r->bufs.n);
	else
		LOG(LOG_ERROR, "decode %s registered but unusable: %s",
		    p->endpoint, p->why);
}

/* XFER_INFO from a decode this process never saw REGISTER from: most
 * often one that registered with this rank's previous incarnation (the
 * sender restarted under the same endpoint). Its room cannot be served, so
 * STATUS(Failed, peer restart) goes straight back on the ROUTER identity
 * it came from: the decode fails that room at once instead of at its
 * deadline, learns this process's epoch, and registers again. */
static void reject_unregistered(struct sender *s, const struct wire_in *in,
				const struct frame_msg *m)
{
	struct frame_msg st;

	malformed(s, m, "XFER_INFO from a decode that did not REGISTER");
	frame_msg_init(&st, FRAME_STATUS, s->rank, m->hdr.room, s->epoch);
	st.u.status.state = KVW_FAILED;
	st.u.status.reason = KVW_R_PEER_RESTART;
	st.u.status.token = m->u.xfer_info.token;
	snprintf(st.u.status.text, FRAME_STR_SIZE, "not registered with "
		 "this prefill incarnation");
	sender_sent_on(s, s->peer_sock); /* the send below */
	if (wire_send(s->peer_sock, &st, in->id, in->idlen, NULL, 0))
		LOG_RL(LOG_DEBUG, "STATUS to an unregistered decode dropped");
}

/* Whether an XFER_INFO for `room` is late: about an incarnation the engine
 * already CLEARed, rather than the first word of a new one. The prefill
 * never saw the token of an incarnation whose XFER_INFO had not come, so
 * this is decided from the table's tombstone and the order one decode's
 * frames keep (one DEALER each, FIFO): with no private state for the id
 * here and its table entry Cleared, the frame is late iff no XFER_INFO
 * (real or dummy: RTAB_F_INFO) ever reached that cleared incarnation - the
 * decode's XFER_INFO for it is then still on its way, and this is it. An
 * incarnation that did get one (the normal end: Success, then CLEAR)
 * already consumed that decode's XFER_INFO, so the next one is a new
 * incarnation (room id reuse) and creates the room again; on an MLA dummy
 * rank too, whose XFER_INFOs set no table peer. Not told apart: an id
 * reused right after an incarnation the engine cleared before any
 * destination came, whose new XFER_INFO arrives before its SEND_BEGIN -
 * that room is then ignored here and ends on its deadline, never on stale
 * pages. */
static int xfer_info_late(struct sender *s, uint64_t room)
{
	struct rtab_ref ref;
	struct rtab_view v;

	if (sender_rooms_get(&s->rooms, room))
		return 0;
	return rtab_lookup(s->t, room, &ref) == 0 &&
	       rtab_get(s->t, ref, &v) == 0 && v.state == KVW_CLEARED &&
	       !(v.flags & RTAB_F_INFO);
}

/* A real destination whose XFER_INFO comes after its room failed (by
 * the deadline, a worker, the heartbeat) was not there when the room's
 * STATUS(Failed) went out: it hears it now, with its own token, instead
 * of waiting for its deadline. */
static void tell_failed(struct sender *s, struct sender_peer *p,
			const struct sender_room *r, uint64_t token)
{
	struct rtab_view v;
	struct frame_msg st;

	if (rtab_get(s->t, r->ref, &v) != 0 || v.state != KVW_FAILED)
		return;
	frame_msg_init(&st, FRAME_STATUS, s->rank, r->id, s->epoch);
	st.u.status.state = KVW_FAILED;
	st.u.status.reason = v.reason ? v.reason : KVW_R_TRANSFER;
	st.u.status.token = token;
	snprintf(st.u.status.text, FRAME_STR_SIZE, "%s (before this "
		 "destination's XFER_INFO came)", kvw_reason_str(v.reason));
	sender_peer_send(s, p, &st);
}

/* A room id still held by an ended incarnation that is not this
 * XFER_INFO's: the decode cleared and began the id again before this
 * prefill's engine cleared it, or before the cleared one's jobs were
 * answered (the decode hears the end from the worker, the engine from the
 * table, and each side's frames come on their own socket). One decode's
 * frames keep their order (one DEALER), so its XFER_INFO under another
 * token than the ended incarnation's destination is a later one's. It
 * waits on the old incarnation and is taken up when that goes, as if it
 * came then; dropped, the new incarnation would wait for a destination
 * until its deadline. An incarnation still running keeps the rule that
 * its destinations are fixed once its transfer started. */
static int hold_for_later(struct sender *s, struct sender_peer *p,
			  uint64_t id, const struct sender_xfer *x)
{
	struct sender_room *r = sender_rooms_get(&s->rooms, id);
	int st, rc;

	if (!r)
		return 0;
	if (r->cleared) {
		if (sender_room_gone(s, r))
			return 0;
	} else {
		st = rtab_state(s->t, r->ref);
		if (st < 0 || !rtab_terminal((unsigned)st) ||
		    !sender_room_is_later(r, p, x->token))
			return 0;
	}
	rc = sender_room_hold(r, p, x);
	if (rc < 0)
		LOG_RL(LOG_WARN, "room %llu: XFER_INFO for its next "
		       "incarnation dropped: %s", (unsigned long long)id,
		       kvw_strerror(rc));
	else
		LOG_ROOM(LOG_DEBUG, id, "XFER_INFO (token %llu) for the id's "
			 "next incarnation: held until this one is cleared",
			 (unsigned long long)x->token);
	return 1;
}

/* The decode's prefix (tokens it holds already) goes to the table for
 * the engine, which sends only the pages after it. Every real destination
 * of a room is one decode request and says the same; one that says
 * otherwise fails the room (the engine could honour only one), and is
 * told so like the destinations before it. 1 when the room goes on. */
static int prefix_agrees(struct sender *s, struct sender_peer *p,
			 struct sender_room *r, const struct sender_xfer *x)
{
	for (uint32_t i = 0; i < r->ndst; i++) {
		const struct sender_dst *d = &r->dst[i];

		if (d->dummy || d->prefix_tokens == x->prefix_tokens)
			continue;
		sender_room_fail(s, r, KVW_R_BAD_INDEX,
				 "its destinations hold different decode "
				 "prefixes");
		LOG_ROOM(LOG_WARN, r->id, "XFER_INFO says a decode prefix of "
			 "%u tokens, another destination %u: failed",
			 x->prefix_tokens, d->prefix_tokens);
		tell_failed(s, p, r, x->token);
		return 0;
	}
	(void)rtab_set_prefix(s->t, r->ref, x->prefix_tokens);
	return 1;
}

static void take_xfer_info(struct sender *s, struct sender_peer *p,
			   uint64_t id, const struct sender_xfer *x)
{
	struct sender_room *r;
	struct rtab_view v;
	int st, rc;

	if (xfer_info_late(s, id)) {
		rtab_counter_add(s->t, RTAB_C_STALE, 1);
		LOG_ROOM(LOG_DEBUG, id, "XFER_INFO for a room cleared "
			 "before any destination: late, ignored");
		return;
	}
	if (hold_for_later(s, p, id, x))
		return;
	r = sender_room_open(s, id);
	if (!r)
		return;
	if (!r->begun && !r->given_up &&
	    sender_given_up_take(&s->given_up, id, proc_now_ns(),
				 s->room_timeout_ns))
		r->given_up = 1;
	st = rtab_state(s->t, r->ref);
	if (st < 0 || rtab_terminal((unsigned)st)) {
		LOG_ROOM(LOG_DEBUG, r->id, "XFER_INFO for a %s room ignored",
			 kvw_state_str((unsigned)st));
		if (st == KVW_FAILED && !x->dummy)
			tell_failed(s, p, r, x->token);
		return;
	}
	if (st == KVW_TRANSFERRING || r->cursor > 0) {
		LOG_RL(LOG_WARN, "room %llu: XFER_INFO after the transfer "
		       "started; ignored", (unsigned long long)r->id);
		return;
	}
	if (!x->dummy && !prefix_agrees(s, p, r, x))
		return;
	rc = sender_room_set_dst(r, p, x);
	if (rc < 0) {
		sender_room_fail(s, r, KVW_R_BAD_INDEX,
				 rc == KVW_ERANGE ? "too many destinations"
						  : "out of memory");
		return;
	}
	r->required = x->required;
	(void)rtab_flags_or(s->t, r->ref, RTAB_F_INFO);
	if (!x->dummy && rtab_get(s->t, r->ref, &v) == 0 && v.peer == 0)
		rtab_set_peer(s->t, r->ref, p->id);
	if (sender_room_ready(r) && st == KVW_BOOTSTRAPPING)
		rtab_transition_if(s->t, r->ref, RTAB_M(KVW_BOOTSTRAPPING),
				   KVW_WAITING, 0, NULL);
	sender_dispatch(s, r);
}

void sender_peer_take_held(struct sender *s, uint64_t id,
			   const struct sender_dst *d, uint32_t required)
{
	struct sender_xfer x = { .pages = frame_u32s_of(d->pages, d->npages),
				 .state = { d->state, d->state_len },
				 .aux_slot = d->aux_slot, .required = required,
				 .prefix_tokens = d->prefix_tokens,
				 .token = d->token, .dummy = d->dummy };

	take_xfer_info(s, d->peer, id, &x);
}

static void on_xfer_info(struct sender *s, const struct wire_in *in,
			 const struct frame_msg *m)
{
	const struct frame_xfer_info *f = &m->u.xfer_info;
	struct sender_peer *p = peer_by_hdr(s, &m->hdr);
	struct sender_xfer x = { .pages = f->pages, .state = f->state,
				 .aux_slot = f->aux_slot,
				 .required = f->required_dst_info_num,
				 .prefix_tokens = f->prefix_tokens,
				 .token = f->token, .dummy = f->dummy };

	if (!p) {
		reject_unregistered(s, in, m);
		return;
	}
	p->served = 1;
	take_xfer_info(s, p, m->hdr.room, &x);
}

/* ABORT from a decode this process never saw REGISTER from: most often one
 * that registered with this rank's previous incarnation, whose workers died
 * with it (PR_SET_PDEATHSIG) and whose rooms failed when this one opened
 * the table. Nothing of that decode can be in flight from here (a job
 * needs a destination, a destination needs a REGISTER), so the ack goes
 * straight back on the ROUTER identity it came from, as XFER_INFO in the
 * same situation is answered: the decode releases now, not at its release
 * deadline. Only while no job of the room id is outstanding at all: then
 * it waits, like a registered decode's ABORT would. */
static void ack_unregistered(struct sender *s, const struct wire_in *in,
			     const struct frame_msg *m)
{
	struct sender_room *r = sender_rooms_get(&s->rooms, m->hdr.room);
	struct rtab_view v;
	struct frame_msg ack;

	if (r && (r->inflight ||
		  (rtab_get(s->t, r->ref, &v) == 0 && v.outstanding))) {
		malformed(s, m, "ABORT from a decode that did not REGISTER, "
			  "while jobs of the room are outstanding");
		return;
	}
	LOG_ROOM(LOG_INFO, m->hdr.room, "ABORT from an unregistered decode "
		 "(rank %u): nothing of it in flight here, acked",
		 m->hdr.src_rank);
	frame_msg_init(&ack, FRAME_ABORT_ACK, s->rank, m->hdr.room, s->epoch);
	ack.u.abort_ack.token = m->u.abort.token;
	sender_sent_on(s, s->peer_sock); /* the send below */
	if (wire_send(s->peer_sock, &ack, in->id, in->idlen, NULL, 0))
		LOG_RL(LOG_DEBUG, "ABORT_ACK to an unregistered decode dropped");
}

/* ABORT: the room is failed FIRST (workers drop its queued jobs and stop
 * between batches from then on, and no new job can be dispatched), THEN
 * the requester joins the room's ack-target set; the acks go out once the
 * room's outstanding count is zero (at once when it already is, else on
 * the JOB_DONE that drains it). A room cleared by the engine keeps its
 * targets until they are acked or their deadline passes. A room with no
 * private state (never seen, cleared and drained, or left by a previous
 * incarnation of this process) has nothing in flight from here: acked at
 * once, and nothing is created. Only a destination of the room may abort
 * it: anyone else's ABORT is counted as unauthorised (authz.h). */
static void ack_at_once(struct sender *s, struct sender_peer *p,
			const struct frame_msg *m)
{
	struct frame_msg ack;

	frame_msg_init(&ack, FRAME_ABORT_ACK, s->rank, m->hdr.room, s->epoch);
	ack.u.abort_ack.token = m->u.abort.token;
	sender_peer_send(s, p, &ack);
}

static void on_abort(struct sender *s, const struct wire_in *in,
		     const struct frame_msg *m)
{
	struct sender_peer *p = peer_by_hdr(s, &m->hdr);
	struct sender_room *r;
	int rc;

	if (!p) {
		ack_unregistered(s, in, m);
		return;
	}
	r = sender_rooms_get(&s->rooms, m->hdr.room);
	if (!r) {
		LOG_ROOM(LOG_DEBUG, m->hdr.room, "ABORT for an unknown room: "
			 "acked at once");
		ack_at_once(s, p, m);
		return;
	}
	if (!sender_room_has_dst(r, p)) {
		/* Only a destination may abort a room (issue 14). No job of
		 * the room writes to a non-destination, so the ack it gets
		 * is true and lets a decode whose XFER_INFO was ignored
		 * release at once; the room itself is left alone. */
		UNAUTHORISED(s->t, "ABORT of room %llu from decode %s, not a "
			     "destination of it: ignored",
			     (unsigned long long)r->id, p->endpoint);
		ack_at_once(s, p, m);
		return;
	}
	if (!r->cleared)
		sender_room_fail(s, r, KVW_R_ABORTED, "aborted by decode");
	(void)sender_orphan_end(s, r); /* acked and freed below */
	rc = sender_room_add_ack(r, p, m->u.abort.token,
				 proc_now_ns() + s->room_timeout_ns);
	if (rc < 0) {
		LOG_ROOM(LOG_ERROR, r->id, "out of memory: ABORT not tracked");
		return;
	}
	LOG_ROOM(LOG_DEBUG, r->id, "ABORT from %s: %u ack targets", p->endpoint,
		 r->nacks);
	if (r->nacks && (!s->ack_expiry_ns ||
			 r->ack_deadline_ns < s->ack_expiry_ns))
		s->ack_expiry_ns = r->ack_deadline_ns;
	sender_room_acks(s, r); /* may free r */
}

void sender_on_peer(struct sender *s, const struct wire_in *in,
		    const struct frame_msg *m)
{
	struct frame_msg pong;

	switch (m->hdr.type) {
	case FRAME_PING:
		frame_msg_init(&pong, FRAME_PONG, s->rank, m->hdr.room, s->epoch);
		sender_sent_on(s, s->peer_sock); /* the send below */
		if (wire_send(s->peer_sock, &pong, in->id, in->idlen, NULL, 0))
			LOG_RL(LOG_DEBUG, "PONG to a vanished pinger dropped");
		break;
	case FRAME_REGISTER:
		if (rl_take(&s->rl_register, in->id, in->idlen, proc_now_ns()))
			on_register(s, in, m);
		else
			RATE_LIMITED(s->t, "REGISTER from a source over %g/s",
				     SENDER_REGISTER_RATE);
		break;
	case FRAME_XFER_INFO:
		if (rl_take(&s->rl_xfer, in->id, in->idlen, proc_now_ns()))
			on_xfer_info(s, in, m);
		else
			RATE_LIMITED(s->t, "XFER_INFO from a source over %g/s",
				     SENDER_XFER_INFO_RATE);
		break;
	case FRAME_ABORT:
		on_abort(s, in, m);
		break;
	default:
		malformed(s, m, "unexpected type on the peer socket");
	}
}

int sender_peer_send(struct sender *s, struct sender_peer *p,
		     struct frame_msg *m)
{
	char why[256];
	int rc;

	if (!p->out) {
		p->out = dealers_get(s->dealers, p->endpoint, why, sizeof why);
		if (!p->out) {
			LOG_RL(LOG_ERROR, "decode %s: %s", p->endpoint, why);
			return KVW_ESYS;
		}
	}
	rc = wire_send(p->out, m, NULL, 0, why, sizeof why);
	if (rc < 0)
		LOG_RL(LOG_WARN, "room %llu: %s to decode %s: %s",
		       (unsigned long long)m->hdr.room,
		       frame_type_str(m->hdr.type), p->endpoint, why);
	return rc;
}

void sender_peers_free(struct sender *s)
{
	for (uint32_t i = 0; i < s->npeers; i++) {
		struct sender_peer *p = s->peers[i];

		plan_free(&p->plan);
		free(p->desc);
		free(p);
	}
	free(s->peers);
	s->peers = NULL;
	s->npeers = 0;
}
