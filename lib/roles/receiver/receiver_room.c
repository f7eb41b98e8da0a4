/*
 * receiver_room.c - kv-receiver's rooms: the private room record and map,
 * the counting rules (distinct prefill ranks reporting Success against
 * required_prefill_response_num; ABORT_ACKs from every target that got
 * XFER_INFO), the prefill peer cache, and the messages a room sends to its
 * targets (REGISTER once per peer epoch, XFER_INFO, ABORT). State changes
 * go through the room table's compare-and-swap, so a room that another
 * process (kv-heartbeat) already failed is never moved again.
 */
#include "receiver_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#include "base/log.h"
#include "base/proc.h"
#include "mem/pool.h"
#include "table/rtab_fence.h"
#include "table/rtab_grant.h"
#include "wire/dealers.h"
#include "wire/wire.h"
#include "xport/xport.h"

/* ---- distinct rank sets ---------------------------------------------- */

int receiver_rset_has(const struct receiver_rset *s, uint32_t x)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (s->v[i] == x)
			return 1;
	return 0;
}

int receiver_rset_add(struct receiver_rset *s, uint32_t x)
{
	if (receiver_rset_has(s, x))
		return 0;
	if (s->n == s->cap) {
		uint32_t cap = s->cap ? 2 * s->cap : 4;
		uint32_t *v = realloc(s->v, cap * sizeof *v);

		if (!v)
			return KVW_ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = x;
	return 1;
}

void receiver_rset_free(struct receiver_rset *s)
{
	free(s->v);
	memset(s, 0, sizeof *s);
}

/* ---- the room record -------------------------------------------------- */

struct rx_room *receiver_room_new(uint64_t id, const uint32_t *pages,
				  uint32_t npages)
{
	struct rx_room *room = calloc(1, sizeof *room);

	if (!room)
		return NULL;
	room->id = id;
	if (npages) {
		room->pages = malloc((size_t)npages * sizeof *room->pages);
		if (!room->pages) {
			free(room);
			return NULL;
		}
		memcpy(room->pages, pages, (size_t)npages * sizeof *pages);
	}
	room->npages = npages;
	return room;
}

void receiver_room_free(struct rx_room *room)
{
	if (!room)
		return;
	receiver_rset_free(&room->success);
	receiver_rset_free(&room->acked);
	free(room->targets);
	free(room->pages);
	free(room->state);
	free(room);
}

int receiver_room_set_targets(struct rx_room *room, const struct rankmap *m,
			      uint32_t prefill_tp)
{
	struct rx_target *t;

	if (m->ntargets == 0 || m->ntargets > RANKMAP_MAX_TARGETS ||
	    prefill_tp == 0)
		return KVW_EINVAL;
	t = calloc(m->ntargets, sizeof *t);
	if (!t)
		return KVW_ENOMEM;
	for (uint32_t i = 0; i < m->ntargets; i++) {
		const struct rankmap_target *g = &m->targets[i];

		t[i].coord = g->coord;
		t[i].unique = m->prefill.tp
				  ? rankmap_unique(&m->prefill, &g->coord)
				  : g->coord.pp * prefill_tp + g->coord.tp;
		t[i].dummy = g->dummy;
		if (rankmap_target_pages(m, i, room->npages, &t[i].page_start,
					 &t[i].page_count) != 0) {
			free(t);
			return KVW_EINVAL;
		}
	}
	free(room->targets);
	room->targets = t;
	room->ntargets = m->ntargets;
	room->ptopo = m->prefill;
	if (room->ptopo.tp == 0) /* a map that states no topology (tests) */
		room->ptopo = (struct kvw_topo){ .tp = prefill_tp, .pp = 1,
						 .cp = 1, .dp = 1 };
	room->required_dst_info_num = m->required_dst_info_num;
	room->required_resp = m->required_prefill_response_num;
	return 0;
}

int receiver_room_success(struct rx_room *room, uint32_t src)
{
	int real = 0, rc;

	for (uint32_t i = 0; i < room->ntargets; i++)
		if (room->targets[i].unique == src && !room->targets[i].dummy)
			real = 1;
	if (!real)
		return RX_IGNORED;
	rc = receiver_rset_add(&room->success, src);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return RX_DUP;
	return room->success.n >= room->required_resp ? RX_COMPLETE
						      : RX_COUNTED;
}

void receiver_room_mark_sent(struct rx_room *room)
{
	struct receiver_rset seen = { 0 };

	room->sent = 1;
	for (uint32_t i = 0; i < room->ntargets; i++)
		(void)receiver_rset_add(&seen, room->targets[i].unique);
	room->ack_needed = seen.n;
	receiver_rset_free(&seen);
}

int receiver_room_arm(struct rx_room *room, uint64_t token)
{
	if (token == 0 || room->armed)
		return KVW_EINVAL;
	receiver_rset_free(&room->acked);
	room->abort_token = token;
	room->armed = 1;
	return 0;
}

uint64_t receiver_room_target_token(const struct rx_room *room, uint32_t i)
{
	return room->abort_token + (room->inherited ? i : 0);
}

int receiver_room_ack(struct rx_room *room, uint32_t src, uint64_t token)
{
	int target = 0, rc;

	if (!room->armed || !room->sent)
		return RX_IGNORED;
	if (room->inherited) {
		uint64_t i = token - room->abort_token;

		if (i >= room->ntargets)
			return RX_IGNORED;
		src = room->targets[i].unique;
		target = 1;
	} else if (token == room->abort_token) {
		for (uint32_t i = 0; i < room->ntargets; i++)
			if (room->targets[i].unique == src)
				target = 1;
	}
	if (!target)
		return RX_IGNORED;
	rc = receiver_rset_add(&room->acked, src);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return RX_DUP;
	return room->acked.n >= room->ack_needed ? RX_COMPLETE : RX_COUNTED;
}

/* ---- the room map --------------------------------------------------------- */

int receiver_rooms_init(struct rx_rooms *h, uint32_t nbuckets)
{
	return idmap_init(&h->m, nbuckets);
}

static struct rx_room *room_of(struct idmap_node *n)
{
	return n ? idmap_entry(n, struct rx_room, node) : NULL;
}

struct rx_room *receiver_rooms_get(const struct rx_rooms *h, uint64_t id)
{
	return room_of(idmap_get(&h->m, id));
}

int receiver_rooms_put(struct rx_rooms *h, struct rx_room *room)
{
	return idmap_put(&h->m, &room->node);
}

struct rx_room *receiver_rooms_del(struct rx_rooms *h, uint64_t id)
{
	return room_of(idmap_del(&h->m, id));
}

struct rx_room *receiver_rooms_next(const struct rx_rooms *h,
				    struct idmap_iter *it)
{
	return room_of(idmap_next(&h->m, it));
}

uint32_t receiver_rooms_count(const struct rx_rooms *h)
{
	return h->m.n;
}

void receiver_rooms_free(struct rx_rooms *h)
{
	struct idmap_iter it = { 0 };
	struct rx_room *p;

	while ((p = receiver_rooms_next(h, &it)))
		receiver_room_free(receiver_rooms_del(h, p->id));
	idmap_fini(&h->m);
}

/* ---- peers --------------------------------------------------------------- */

uint32_t receiver_rand(struct receiver *r)
{
	/* xorshift32: jitter only, no secrecy needed. */
	uint32_t x = r->rnd ? r->rnd : 0x9e3779b9u;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	r->rnd = x;
	return x;
}

void receiver_token_init(struct receiver *r)
{
	uint64_t k[2] = { proc_epoch(), proc_epoch() };

	memcpy(r->token_key, k, sizeof r->token_key);
	r->abort_seq = 0;
	randombytes_buf(r->target_key, sizeof r->target_key);
}

uint64_t receiver_token(struct receiver *r)
{
	uint8_t out[crypto_shorthash_BYTES];
	uint64_t t;

	/* SipHash of a counter under this receiver's random key: distinct
	 * for every call (short of a 2^-64 coincidence), and nobody who saw
	 * other tokens can tell the next one, so only a target that got a
	 * room's XFER_INFO can echo its token. */
	do {
		r->abort_seq++;
		crypto_shorthash(out, (const uint8_t *)&r->abort_seq,
				 sizeof r->abort_seq, r->token_key);
		memcpy(&t, out, sizeof t);
	} while (t == 0);
	return t;
}

int receiver_room_token_ok(const struct rx_room *room, uint64_t token)
{
	for (uint32_t i = 0; token != 0 && i < room->ntargets; i++)
		if (room->targets[i].token == token)
			return 1;
	return 0;
}

uint64_t receiver_target_token(const struct receiver *r,
			       const struct rx_room *room, uint32_t i)
{
	/* The sinks check batches against the grant file's key. */
	return r->grant ? rtab_grant_token(r->grant, room->token, i)
			: rtab_grant_token_of(r->target_key, room->token, i);
}

struct rx_peer *receiver_peer_get(struct receiver *r, const char *ep,
				  uint32_t unique, char *err, size_t errlen)
{
	struct rx_peer *p;
	uint32_t id;
	int rc;

	for (uint32_t i = 0; i < r->npeers; i++)
		if (strcmp(r->peers[i]->ep, ep) == 0)
			return r->peers[i];
	rc = rtab_peer_upsert(r->tab, ep, 0, &id, NULL);
	if (rc) {
		kvw_seterr(err, errlen, "peer table: %s for %.120s",
			   kvw_strerror(rc), ep);
		return NULL;
	}
	if (r->npeers == r->cappeers) {
		uint32_t cap = r->cappeers ? 2 * r->cappeers : 8;
		struct rx_peer **v = realloc(r->peers, cap * sizeof *v);

		if (!v) {
			kvw_seterr(err, errlen, "out of memory");
			return NULL;
		}
		r->peers = v;
		r->cappeers = cap;
	}
	p = calloc(1, sizeof *p);
	if (!p) {
		kvw_seterr(err, errlen, "out of memory");
		return NULL;
	}
	snprintf(p->ep, sizeof p->ep, "%s", ep);
	p->id = id;
	p->unique = unique;
	p->sock = dealers_get(r->dealers, ep, err, errlen);
	if (!p->sock) {
		free(p);
		return NULL;
	}
	r->peers[r->npeers++] = p;
	LOG(LOG_INFO, "prefill peer %u: %s (rank %u)", id, ep, unique);
	return p;
}

int receiver_epoch_note(struct rx_peer *p, uint64_t epoch)
{
	if (epoch == 0 || epoch == p->epoch)
		return RX_EP_CURRENT;
	for (uint32_t i = 0; i < RX_RETIRED; i++)
		if (p->retired[i] == epoch)
			return RX_EP_STALE;
	if (p->epoch == 0) {
		p->epoch = epoch;
		return RX_EP_CURRENT;
	}
	p->retired[p->nretired++ % RX_RETIRED] = p->epoch;
	p->epoch = epoch;
	return RX_EP_NEW;
}

int receiver_peer_seen(struct receiver *r, struct rx_peer *p, uint64_t epoch)
{
	uint64_t was = p->epoch;
	int k = receiver_epoch_note(p, epoch);

	if (k == RX_EP_STALE) {
		rtab_counter_add(r->tab, RTAB_C_STALE, 1);
		LOG_RL(LOG_INFO, "prefill peer %s: message of its retired epoch "
		       "%016llx dropped", p->ep, (unsigned long long)epoch);
		return -1;
	}
	if (epoch)
		(void)rtab_peer_seen(r->tab, p->id, epoch, rtab_now_ns());
	if (k == RX_EP_CURRENT)
		return 0;
	LOG(LOG_WARN, "prefill peer %s restarted (epoch %016llx -> %016llx)",
	    p->ep, (unsigned long long)was, (unsigned long long)epoch);
	receiver_drain_peer_lost(r, p, KVW_R_PEER_RESTART);
	return 1;
}

static void peer_sync(struct receiver *r, struct rx_peer *p)
{
	struct rtab_peer_view v;
	uint64_t was = p->epoch;

	if (rtab_peer_get(r->tab, p->id, &v) != 0)
		return;
	if (receiver_epoch_note(p, v.epoch) == RX_EP_NEW) {
		LOG(LOG_WARN, "prefill peer %s has a new epoch %016llx (was "
		    "%016llx): its rooms fail, it is registered again", p->ep,
		    (unsigned long long)v.epoch, (unsigned long long)was);
		receiver_drain_peer_lost(r, p, KVW_R_PEER_RESTART);
	}
	if (v.liveness != RTAB_PEER_DEAD) {
		p->dead = 0;
	} else if (!p->dead) {
		p->dead = 1;
		p->dead_since_ns = rtab_now_ns();
		LOG(LOG_WARN, "prefill peer %s is dead: its rooms fail", p->ep);
		receiver_drain_peer_lost(r, p, KVW_R_PEER_DEAD);
	}
}

void receiver_peers_sync(struct receiver *r)
{
	for (uint32_t i = 0; i < r->npeers; i++)
		peer_sync(r, r->peers[i]);
}


static int peer_send(struct receiver *r, struct rx_peer *p,
		     const struct frame_msg *m)
{
	char err[160];
	int rc = wire_send(p->sock, m, NULL, 0, err, sizeof err);

	receiver_sent_on(r, p->sock);
	if (rc)
		LOG_RL(LOG_WARN, "to %s: %s", p->ep, err);
	return rc;
}

static int peer_register(struct receiver *r, struct rx_peer *p)
{
	struct frame_msg m;
	struct frame_register *g = &m.u.reg;

	frame_msg_init(&m, FRAME_REGISTER, r->my_rank, 0, r->epoch);
	g->coord = r->rank;
	g->topo = r->topo;
	snprintf(g->endpoint, sizeof g->endpoint, "%s", r->listen);
	snprintf(g->transport, sizeof g->transport, "%s", r->transport);
	g->desc.p = r->desc;
	g->desc.len = (uint32_t)r->desclen;
	g->model = r->model;
	g->bufs = frame_bufs_of(r->bufs, r->nbufs);
	if (peer_send(r, p, &m) != 0)
		return -1;
	p->registered = 1;
	LOG(LOG_DEBUG, "REGISTER sent to %s", p->ep);
	return 0;
}

int receiver_peer_ready(struct receiver *r, struct rx_peer *p)
{
	/* A restart or death another process saw first. A dead peer stays
	 * dead until it answers again (a PONG to the heartbeat, which keeps
	 * pinging it, or any frame of its own): a room for it would only
	 * wait for the heartbeat to count its misses once more. */
	peer_sync(r, p);
	if (p->dead)
		return RX_PEER_DEAD;
	if (!p->registered && peer_register(r, p) != 0)
		return -1;
	return 0;
}

void receiver_room_fail(struct receiver *r, struct rx_room *room,
			unsigned reason, const char *why)
{
	if (rtab_fail(r->tab, room->ref, reason) == 0)
		LOG_ROOM(LOG_WARN, room->id, "failed: %s%s%s",
			 kvw_reason_str(reason), why ? ": " : "", why ? why : "");
}

int receiver_pool_fresh(struct receiver *r)
{
	const struct xport_ops *ops = xport_find(r->transport);
	char err[400];
	int changed = 0;

	/* A transport that registered the pool's own pages (rdma's memory
	 * region) does not reach engine host memory laid over the pool
	 * (kvw_register_host): such a room must not begin. */
	if (ops && ops->pins_pages &&
	    (pool_refresh(r->pool, err, sizeof err) != 0 ||
	     pool_overlaid(r->pool))) {
		LOG_RL(LOG_ERROR, "%s: the engine's host memory "
		       "(kvw_register_host) is not registered with the "
		       "transport; use the pool or GPU memory", ops->name);
		return -1;
	}
	/* Only a transport whose registration follows the engine's memory
	 * (ops->refresh) is asked; r->xp is of this very transport. */
	if (!ops || !ops->refresh)
		return 0;
	if (xport_refresh(r->xp, r->pool_id, r->desc, sizeof r->desc,
			  &r->desclen, &changed, err, sizeof err) != 0) {
		LOG_RL(LOG_ERROR, "%s", err);
		return -1;
	}
	if (changed) {
		LOG(LOG_INFO, "%s: the engine's GPU pool changed (a new "
		    "epoch): REGISTER again to every prefill peer", ops->name);
		for (uint32_t i = 0; i < r->npeers; i++)
			r->peers[i]->registered = 0;
	}
	return 0;
}

int receiver_room_tell_only(const struct rx_room *room)
{
	return room->npages == 0 && room->aux_slot == RTAB_GRANT_NO_AUX;
}

/* Target i's XFER_INFO (its token set): its slice of the room's pages,
 * or, as a dummy destination, nothing of ours. peer_send's status. */
static int xfer_info_to(struct receiver *r, const struct rx_room *room,
			uint32_t i, int dummy)
{
	const struct rx_target *t = &room->targets[i];
	struct frame_msg m;
	struct frame_xfer_info *x = &m.u.xfer_info;

	frame_msg_init(&m, FRAME_XFER_INFO, r->my_rank, room->id, r->epoch);
	x->aux_slot = room->aux_slot;
	x->prefix_tokens = room->prefix_tokens;
	x->required_dst_info_num = room->required_dst_info_num;
	x->dummy = dummy;
	x->token = t->token;
	if (!dummy) {
		x->pages = frame_u32s_of(room->pages + t->page_start,
					 t->page_count);
		x->state = (struct frame_bytes){ room->state, room->state_len };
	}
	return peer_send(r, t->peer, &m);
}

/* Target i's ABORT, with the arming's token. peer_send's status. */
static int abort_to(struct receiver *r, const struct rx_room *room,
		    uint32_t i, unsigned reason)
{
	struct frame_msg m;

	frame_msg_init(&m, FRAME_ABORT, r->my_rank, room->id, r->epoch);
	m.u.abort.reason = reason;
	m.u.abort.token = receiver_room_target_token(room, i);
	return peer_send(r, room->targets[i].peer, &m);
}

/* An armed room is released at the latest one room timeout from now. */
static void ack_deadline_set(struct receiver *r, struct rx_room *room)
{
	room->ack_deadline_ns = rtab_now_ns() + r->timeout_ns;
	if (r->next_ack_deadline == 0 ||
	    room->ack_deadline_ns < r->next_ack_deadline)
		r->next_ack_deadline = room->ack_deadline_ns;
}

/* A room the engine aborted while its prefill ranks were looked up, now
 * that they are known: each gets a dummy XFER_INFO (it names no page of
 * ours: nothing can be written here) and the ABORT, which fails a prefill
 * room waiting for this decode now rather than at its bootstrap timeout.
 * No page was given, so the room is released at once; the acks that come
 * find it gone. */
static void tell_abort(struct receiver *r, struct rx_room *room)
{
	uint32_t told = 0;

	for (uint32_t i = 0; i < room->ntargets; i++) {
		if (receiver_peer_ready(r, room->targets[i].peer) != 0)
			continue; /* dead, or not reachable: its room ends
				   * with it or on its deadline */
		room->targets[i].token = receiver_target_token(r, room, i);
		if (xfer_info_to(r, room, i, 1) == 0)
			told += abort_to(r, room, i, KVW_R_ABORTED) == 0;
	}
	LOG_ROOM(LOG_INFO, room->id, "aborted before its XFER_INFO: %u of %u "
		 "prefill targets told", told, room->ntargets);
	room->ack_deadline_ns = 0;
	receiver_room_release(r, room, "no page was given to a prefill rank");
}

void receiver_room_send(struct receiver *r, struct rx_room *room)
{
	uint32_t first_real = 0;

	if (room->tell_abort) {
		tell_abort(r, room);
		return;
	}
	if (rtab_state(r->tab, room->ref) != KVW_BOOTSTRAPPING)
		return; /* aborted, expired or failed meanwhile */
	if (receiver_pool_fresh(r) != 0) {
		char why[48 + FRAME_STR_SIZE];

		snprintf(why, sizeof why,
			 "the engine's memory is not registered for %s",
			 r->transport);
		receiver_room_fail(r, room, KVW_R_TRANSFER, why);
		return;
	}
	for (uint32_t i = 0; i < room->ntargets; i++) {
		int rc = receiver_peer_ready(r, room->targets[i].peer);

		if (rc == RX_PEER_DEAD) {
			LOG_ROOM(LOG_INFO, room->id, "prefill peer %s is dead "
				 "(no answer since the heartbeat declared it): "
				 "the room fails now",
				 room->targets[i].peer->ep);
			receiver_room_fail(r, room, KVW_R_PEER_DEAD,
					   "prefill peer dead");
			return;
		}
		if (rc != 0) {
			receiver_room_fail(r, room, KVW_R_TRANSFER,
					   "REGISTER not sent");
			return;
		}
		room->targets[i].token = receiver_target_token(r, room, i);
	}
	/* The grant exists before any XFER_INFO can make a prefill rank
	 * write: a sink never refuses an honest first batch. */
	if (receiver_room_grant(r, room) != 0) {
		receiver_room_fail(r, room, KVW_R_TRANSFER,
				   "its pages could not be granted to the sinks");
		return;
	}
	for (uint32_t i = 0; i < room->ntargets; i++) {
		const struct rx_target *t = &room->targets[i];
		int dummy = t->dummy || receiver_room_tell_only(room);

		if (xfer_info_to(r, room, i, dummy) != 0) {
			receiver_room_mark_sent(room); /* abort what went out */
			receiver_room_abort(r, room, KVW_R_TRANSFER);
			return;
		}
		LOG_ROOM(LOG_DEBUG, room->id, "XFER_INFO to prefill rank %u: "
			 "token %llu", t->unique,
			 (unsigned long long)t->token);
		if (!dummy && first_real == 0)
			first_real = t->peer->id;
	}
	receiver_room_mark_sent(room);
	/* The base of the tokens every STATUS of this incarnation must echo
	 * (each target its own): named so an operator can tell incarnations
	 * apart. */
	LOG_ROOM(LOG_DEBUG, room->id, "XFER_INFO sent to %u targets, "
		 "incarnation base token %llu", room->ntargets,
		 (unsigned long long)room->token);
	(void)rtab_set_peer(r->tab, room->ref, first_real);
	if (rtab_transition_if(r->tab, room->ref, RTAB_M(KVW_BOOTSTRAPPING),
			       KVW_WAITING, 0, NULL) == 0)
		LOG_ROOM(LOG_DEBUG, room->id, "WaitingForInput (%u targets)",
			 room->ntargets);
}

void receiver_room_abort(struct receiver *r, struct rx_room *room,
			 unsigned reason)
{
	int st;

	(void)rtab_fail(r->tab, room->ref, reason);
	st = rtab_state(r->tab, room->ref);
	if (st != KVW_FAILED || room->armed)
		return; /* Success stays; an armed room already sent ABORT */
	(void)receiver_room_arm(room, receiver_token(r));
	/* An inherited room's targets get tokens token .. token + n - 1
	 * (receiver_room_target_token): no other draw lands among them,
	 * short of a 2^-64 coincidence, as every draw is a keyed hash. */
	/* Armed before any ABORT leaves, so an ack can never beat it. */
	(void)rtab_flags_or(r->tab, room->ref, RTAB_F_ARMED);
	if (!room->sent && reason == KVW_R_ABORTED &&
	    receiver_boot_waits(r, room)) {
		/* Its prefill ranks are still looked up, and may hold the
		 * room already: they are told once known (tell_abort),
		 * within the release deadline at the latest. */
		room->tell_abort = 1;
		ack_deadline_set(r, room);
		LOG_ROOM(LOG_DEBUG, room->id, "aborted while its prefill "
			 "ranks are looked up: they are told once known");
		return;
	}
	if (!room->sent || room->ack_needed == 0) {
		receiver_room_release(r, room, "no target got XFER_INFO");
		return;
	}
	for (uint32_t i = 0; i < room->ntargets; i++)
		(void)abort_to(r, room, i, reason);
	LOG_ROOM(LOG_INFO, room->id, "ABORT (%s) sent to %u targets",
		 kvw_reason_str(reason), room->ntargets);
	/* With sinks the prefill's acks still stop its workers, but the
	 * release waits only for our own writers. */
	if (r->fence) {
		receiver_room_release(r, room, "armed, no sink writes it");
		return;
	}
	ack_deadline_set(r, room);
}

void receiver_room_release(struct receiver *r, struct rx_room *room,
			   const char *why)
{
	room->tell_abort = 0; /* told, or no one left to tell */
	if (r->fence && rtab_fence_busy(r->fence, room->ref)) {
		if (!room->fence_wait)
			LOG_ROOM(LOG_DEBUG, room->id, "a sink is writing it: "
				 "releasable once it stops");
		room->fence_wait = 1;
		r->fence_waiting++;
		return;
	}
	room->fence_wait = 0;
	if (rtab_flags_or(r->tab, room->ref, RTAB_F_RELEASABLE) >= 0)
		LOG_ROOM(LOG_DEBUG, room->id, "releasable: %s", why);
	/* The engine may give the pages to another room now. */
	receiver_room_withdraw(r, room);
}

/* The aux slot a room's grant names: none when the layout has no AUX. */
static uint32_t grant_aux(const struct receiver *r, const struct rx_room *room)
{
	return r->shape.aux_slots ? room->aux_slot : RTAB_GRANT_NO_AUX;
}

static uint32_t state_lists(const struct rx_room *room)
{
	return frame_state_lists((struct frame_bytes){ room->state,
						       room->state_len });
}

/* Gives (or withdraws) the room's rows of state component c. */
static int grant_rows(struct receiver *r, const struct rx_room *room,
		      uint32_t c, int give)
{
	const struct frame_bytes st = { room->state, room->state_len };
	uint32_t rows[KVW_MAX_STATE_IDX];
	uint32_t n = frame_state_get(st, c, rows);

	if (!give) {
		rtab_grant_withdraw_rows(r->grant, room->ref, c, rows, n);
		return 0;
	}
	return rtab_grant_give_rows(r->grant, room->ref, c, rows, n);
}

int receiver_room_grant(struct receiver *r, struct rx_room *room)
{
	struct rtab_grant_target tg[RANKMAP_MAX_TARGETS];
	int rc;

	if (!r->grant)
		return 0;
	_Static_assert(RANKMAP_MAX_TARGETS <= RTAB_GRANT_MAX_TARGETS,
		       "a target index fits a token's low byte");
	for (uint32_t i = 0; i < room->ntargets; i++)
		receiver_target_slice(r, room, &room->targets[i], &tg[i]);
	rc = rtab_grant_give_targets(r->grant, room->ref, room->token, tg,
				     room->ntargets, room->pages, room->npages,
				     grant_aux(r, room));
	for (uint32_t c = 0, n = state_lists(room); rc == 0 && c < n; c++)
		rc = grant_rows(r, room, c, 1);
	if (rc)
		LOG_ROOM(LOG_ERROR, room->id, "grant refused: %s",
			 kvw_strerror(rc));
	return rc ? -1 : 0;
}

void receiver_room_withdraw(struct receiver *r, struct rx_room *room)
{
	if (!r->grant)
		return;
	if (rtab_grant_withdraw(r->grant, room->ref, room->pages,
				room->npages, grant_aux(r, room)))
		LOG_ROOM(LOG_DEBUG, room->id, "grant withdrawn");
	/* After the record: no batch of the room is live any more. */
	for (uint32_t c = 0, n = state_lists(room); c < n; c++)
		grant_rows(r, room, c, 0);
}

int receiver_fence_tick(struct receiver *r)
{
	struct idmap_iter it = { 0 };
	struct rx_room *q;

	/* A recount: rooms cleared meanwhile simply drop out. */
	r->fence_waiting = 0;
	while ((q = receiver_rooms_next(&r->rooms, &it)))
		if (q->fence_wait)
			receiver_room_release(r, q, "the last sink write ended");
	return r->fence_waiting > 0;
}
