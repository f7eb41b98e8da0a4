/*
 * receiver_boot.c - kv-receiver's bootstrap cache: one entry per prefill
 * bootstrap endpoint, each with its own DEALER and a state machine
 * UNKNOWN -> TOPO_PENDING -> RANKS_PENDING -> READY. The topology lookup
 * (want = all FFFFFFFF) is answered NOT_READY until every prefill rank has
 * registered: it is retried after 100-500 ms with backoff. Rank endpoints
 * are cached per (bootstrap, coordinate). Rooms wait on an entry by room id
 * (a room cleared meanwhile simply drops out) and go on to REGISTER /
 * XFER_INFO as soon as all their targets are resolved. Nothing here blocks:
 * requests go out, replies come back through the receiver's poll loop, and
 * a request without a reply is sent again after a second. A request's tag
 * travels in the header's room field (0 = topology, i + 1 = coordinate i)
 * and the bootstrap copies it into its reply.
 */
#include "receiver_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "roles/malformed.h"
#include "wire/dealers.h"
#include "wire/wire.h"

#define RESEND_NS 1000000000ull /* no reply within 1 s: ask again */
#define MS 1000000ull

enum { RXB_UNKNOWN, RXB_TOPO_PENDING, RXB_RANKS_PENDING, RXB_READY };
enum { RXC_UNKNOWN, RXC_PENDING, RXC_OK, RXC_FAILED };

struct rx_coord {
	struct kvw_coord coord;
	int state;
	uint64_t retry_ns; /* when to send (again) while pending */
	uint32_t backoff_ms;
	struct rx_peer *peer;
};

struct rx_boot {
	char ep[FRAME_STR_SIZE];
	void *sock; /* its DEALER (r->dealers owns it) */
	int state;
	uint64_t retry_ns;
	uint32_t backoff_ms;
	struct kvw_topo ptopo;
	struct kvw_model pmodel;
	struct rx_coord *coords;
	uint32_t ncoords, capcoords;
	uint64_t *wait; /* room ids */
	uint32_t nwait, capwait;
	uint64_t used_ns; /* a room last asked for it */
};

uint32_t receiver_boot_backoff(uint32_t prev_ms, uint32_t rnd)
{
	uint32_t d = prev_ms ? 2 * prev_ms : 100;

	d += rnd % 50;
	if (d < 100)
		d = 100;
	return d > 500 ? 500 : d;
}

void *receiver_boot_sock(const struct rx_boot *b)
{
	return b->sock;
}

void receiver_boot_free(struct rx_boot *b)
{
	if (!b)
		return;
	free(b->coords);
	free(b->wait);
	free(b);
}

static struct rx_boot *boot_get(struct receiver *r, const char *ep, char *err,
				size_t errlen)
{
	struct rx_boot *b;

	for (uint32_t i = 0; i < r->nboots; i++)
		if (strcmp(r->boots[i]->ep, ep) == 0)
			return r->boots[i];
	if (r->nboots == r->capboots) {
		uint32_t cap = r->capboots ? 2 * r->capboots : 4;
		struct rx_boot **v = realloc(r->boots, cap * sizeof *v);

		if (!v) {
			kvw_seterr(err, errlen, "out of memory");
			return NULL;
		}
		r->boots = v;
		r->capboots = cap;
	}
	b = calloc(1, sizeof *b);
	if (!b) {
		kvw_seterr(err, errlen, "out of memory");
		return NULL;
	}
	snprintf(b->ep, sizeof b->ep, "%s", ep);
	b->sock = dealers_get(r->dealers, ep, err, errlen);
	if (!b->sock)
		goto fail;
	r->boots[r->nboots++] = b;
	return b;
fail:
	receiver_boot_free(b);
	return NULL;
}

static void lookup_send(struct receiver *r, struct rx_boot *b, uint64_t tag,
			const struct kvw_coord *want)
{
	struct frame_msg m;
	char err[160];

	frame_msg_init(&m, FRAME_BOOT_LOOKUP, r->my_rank, tag, r->epoch);
	if (want) {
		m.u.boot_lookup.want = *want;
	} else {
		m.u.boot_lookup.want.tp = FRAME_LOOKUP_TOPO_ONLY;
		m.u.boot_lookup.want.pp = FRAME_LOOKUP_TOPO_ONLY;
		m.u.boot_lookup.want.cp = FRAME_LOOKUP_TOPO_ONLY;
		m.u.boot_lookup.want.dp = FRAME_LOOKUP_TOPO_ONLY;
	}
	m.u.boot_lookup.model = r->model;
	if (wire_send(b->sock, &m, NULL, 0, err, sizeof err) != 0)
		LOG_RL(LOG_WARN, "bootstrap %s: %s", b->ep, err);
	receiver_sent_on(r, b->sock);
}

static int coord_eq(const struct kvw_coord *a, const struct kvw_coord *c)
{
	return a->tp == c->tp && a->pp == c->pp && a->cp == c->cp &&
	       a->dp == c->dp;
}

/* The cache entry of coordinate c, created UNKNOWN if absent; NULL when
 * out of memory. */
static struct rx_coord *coord_get(struct rx_boot *b, const struct kvw_coord *c)
{
	for (uint32_t i = 0; i < b->ncoords; i++)
		if (coord_eq(&b->coords[i].coord, c))
			return &b->coords[i];
	if (b->ncoords == b->capcoords) {
		uint32_t cap = b->capcoords ? 2 * b->capcoords : 8;
		struct rx_coord *v = realloc(b->coords, cap * sizeof *v);

		if (!v)
			return NULL;
		b->coords = v;
		b->capcoords = cap;
	}
	memset(&b->coords[b->ncoords], 0, sizeof b->coords[0]);
	b->coords[b->ncoords].coord = *c;
	return &b->coords[b->ncoords++];
}

/* A waiting room that cannot be resolved fails; one that waited only to
 * tell its prefill ranks of its abort (tell_abort) has no one to tell and
 * is released now. */
static void room_unresolved(struct receiver *r, struct rx_room *room,
			    const char *why)
{
	receiver_room_fail(r, room, KVW_R_BOOTSTRAP, why);
	if (room->tell_abort) {
		room->ack_deadline_ns = 0;
		receiver_room_release(r, room, "its prefill ranks were not "
				      "found: no one to tell of the abort");
	}
}

/* Tries to finish one waiting room: map its targets, resolve each (asking
 * for those not known yet), then send. Returns 1 when the room no longer
 * waits (sent or failed), 0 while lookups are outstanding. */
static int room_advance(struct receiver *r, struct rx_boot *b,
			struct rx_room *room)
{
	char err[200];
	uint32_t missing = 0;

	if (!room->targets) {
		struct rankmap map;
		struct rankmap_in in = {
			.prefill = b->ptopo, .decode = r->topo,
			.decode_rank = r->rank, .prefill_dp = room->prefill_dp,
			.model_flags = b->pmodel.flags & KVW_MODEL_MLA,
			.all_cp_ranks = r->all_cp_ranks,
		};

		if (rankmap_compute(&in, &map, err, sizeof err) != 0) {
			room_unresolved(r, room, err);
			return 1;
		}
		if (receiver_room_set_targets(room, &map, b->ptopo.tp) != 0) {
			room_unresolved(r, room, "cannot hold targets");
			return 1;
		}
	}
	for (uint32_t i = 0; i < room->ntargets; i++) {
		struct rx_target *t = &room->targets[i];
		struct rx_coord *c = coord_get(b, &t->coord);

		if (!c) {
			room_unresolved(r, room, "out of memory");
			return 1;
		}
		switch (c->state) {
		case RXC_OK:
			t->peer = c->peer;
			break;
		case RXC_FAILED:
			room_unresolved(r, room, "prefill rank not found");
			return 1;
		case RXC_UNKNOWN:
			c->state = RXC_PENDING;
			c->backoff_ms = 0;
			c->retry_ns = rtab_now_ns() + RESEND_NS;
			lookup_send(r, b, (uint64_t)(c - b->coords) + 1, &c->coord);
			missing++;
			break;
		default:
			missing++;
		}
	}
	if (missing)
		return 0;
	receiver_room_send(r, room);
	return 1;
}

/* Runs every waiting room forward; drops those that are done or gone. */
static void boot_progress(struct receiver *r, struct rx_boot *b)
{
	uint32_t keep = 0, pending = 0;

	for (uint32_t i = 0; i < b->nwait; i++) {
		struct rx_room *room = receiver_rooms_get(&r->rooms, b->wait[i]);

		if (!room || (!room->tell_abort &&
			      rtab_state(r->tab, room->ref) != KVW_BOOTSTRAPPING))
			continue;
		if (!room_advance(r, b, room))
			b->wait[keep++] = b->wait[i];
	}
	b->nwait = keep;
	for (uint32_t i = 0; i < b->ncoords; i++)
		pending += b->coords[i].state == RXC_PENDING;
	if (b->state >= RXB_RANKS_PENDING)
		b->state = pending ? RXB_RANKS_PENDING : RXB_READY;
}

/* Fails every waiting room (the bootstrap refused) and forgets them. */
static void boot_fail_waiting(struct receiver *r, struct rx_boot *b,
			      const char *why)
{
	for (uint32_t i = 0; i < b->nwait; i++) {
		struct rx_room *room = receiver_rooms_get(&r->rooms, b->wait[i]);

		if (room)
			room_unresolved(r, room, why);
	}
	b->nwait = 0;
}

/* Whether b has nothing to do: no room waits on it and none of its
 * coordinates names a peer or awaits an answer. */
static int boot_idle(const struct rx_boot *b)
{
	if (b->nwait)
		return 0;
	for (uint32_t k = 0; k < b->ncoords; k++)
		if (b->coords[k].peer || b->coords[k].state == RXC_PENDING)
			return 0;
	return 1;
}

void receiver_boots_forget_idle(struct receiver *r, uint64_t now)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < r->nboots; i++) {
		struct rx_boot *b = r->boots[i];

		if (!boot_idle(b) || now - b->used_ns < r->forget_ns) {
			r->boots[kept++] = b;
			continue;
		}
		LOG(LOG_INFO, "bootstrap %s forgotten: no prefill rank of it "
		    "known, no room for %.0f s", b->ep,
		    (double)(now - b->used_ns) / 1e9);
		dealers_drop(r->dealers, b->ep);
		receiver_boot_free(b);
	}
	r->nboots = kept;
}

int receiver_boot_waits(const struct receiver *r, const struct rx_room *room)
{
	for (uint32_t i = 0; i < r->nboots; i++) {
		const struct rx_boot *b = r->boots[i];

		if (strcmp(b->ep, room->boot_ep) != 0)
			continue;
		for (uint32_t k = 0; k < b->nwait; k++)
			if (b->wait[k] == room->id)
				return 1;
		return 0;
	}
	return 0;
}

void receiver_boot_want(struct receiver *r, struct rx_room *room)
{
	char err[200];
	struct rx_boot *b = boot_get(r, room->boot_ep, err, sizeof err);

	if (!b) {
		receiver_room_fail(r, room, KVW_R_BOOTSTRAP, err);
		return;
	}
	b->used_ns = rtab_now_ns();
	for (uint32_t i = 0; i < b->nwait; i++)
		if (b->wait[i] == room->id)
			goto queued;
	if (b->nwait == b->capwait) {
		uint32_t cap = b->capwait ? 2 * b->capwait : 16;
		uint64_t *v = realloc(b->wait, cap * sizeof *v);

		if (!v) {
			receiver_room_fail(r, room, KVW_R_BOOTSTRAP, "out of memory");
			return;
		}
		b->wait = v;
		b->capwait = cap;
	}
	b->wait[b->nwait++] = room->id;
queued:
	if (b->state == RXB_UNKNOWN) {
		b->state = RXB_TOPO_PENDING;
		b->backoff_ms = 0;
		b->retry_ns = rtab_now_ns() + RESEND_NS;
		lookup_send(r, b, 0, NULL);
	} else if (b->state >= RXB_RANKS_PENDING) {
		boot_progress(r, b);
	}
}

static void topo_reply(struct receiver *r, struct rx_boot *b,
		       const struct frame_boot_reply *y)
{
	if (b->state != RXB_TOPO_PENDING)
		return; /* an answer to a resent request: already have it */
	switch (y->status) {
	case FRAME_BOOT_OK:
		b->ptopo = y->topo;
		b->pmodel = y->model;
		b->state = RXB_RANKS_PENDING;
		LOG(LOG_INFO, "bootstrap %s: prefill tp %u pp %u cp %u dp %u",
		    b->ep, y->topo.tp, y->topo.pp, y->topo.cp, y->topo.dp);
		boot_progress(r, b);
		break;
	case FRAME_BOOT_NOT_READY:
		b->backoff_ms = receiver_boot_backoff(b->backoff_ms,
						      receiver_rand(r));
		b->retry_ns = rtab_now_ns() + b->backoff_ms * MS;
		LOG(LOG_DEBUG, "bootstrap %s not ready: retry in %u ms", b->ep,
		    b->backoff_ms);
		break;
	default:
		LOG_RL(LOG_ERROR, "bootstrap %s refused the lookup: %s", b->ep,
		       y->text[0] ? y->text : "no reason given");
		boot_fail_waiting(r, b, y->text[0] ? y->text : "lookup refused");
		b->state = RXB_UNKNOWN;
	}
}

/* Whether the heartbeat declared p dead in the incarnation `epoch`. */
static int dead_as_registered(struct receiver *r, const struct rx_peer *p,
			      uint64_t epoch)
{
	struct rtab_peer_view v;

	return rtab_peer_get(r->tab, p->id, &v) == 0 &&
	       v.liveness == RTAB_PEER_DEAD && v.epoch == epoch;
}

static void coord_reply(struct receiver *r, struct rx_boot *b,
			struct rx_coord *c, const struct frame_boot_reply *y)
{
	struct rx_peer *p;
	char err[200];

	if (c->state != RXC_PENDING)
		return;
	switch (y->status) {
	case FRAME_BOOT_OK:
		p = y->endpoint[0]
			? receiver_peer_get(r, y->endpoint,
					    rankmap_unique(&b->ptopo, &c->coord),
					    err, sizeof err)
			: NULL;
		if (!p) {
			LOG_RL(LOG_ERROR, "bootstrap %s: rank tp %u pp %u: %s",
			       b->ep, c->coord.tp, c->coord.pp,
			       y->endpoint[0] ? err : "empty endpoint");
			c->state = RXC_FAILED;
			break;
		}
		/* The incarnation the bootstrap knows: a restart that happens
		 * before the first PONG or STATUS is still noticed (and
		 * forgets what was cached of the old one, before this entry
		 * is filled). The bootstrap only tells what registered, not
		 * that it lives: the same epoch of a peer declared dead does
		 * not revive it. */
		if (!dead_as_registered(r, p, y->epoch))
			(void)receiver_peer_seen(r, p, y->epoch);
		c->peer = p;
		c->state = RXC_OK;
		break;
	case FRAME_BOOT_NOT_READY:
		c->backoff_ms = receiver_boot_backoff(c->backoff_ms,
						      receiver_rand(r));
		c->retry_ns = rtab_now_ns() + c->backoff_ms * MS;
		return;
	default:
		LOG_RL(LOG_ERROR, "bootstrap %s: rank tp %u pp %u cp %u dp %u: %s",
		       b->ep, c->coord.tp, c->coord.pp, c->coord.cp, c->coord.dp,
		       y->text[0] ? y->text : "not found");
		c->state = RXC_FAILED;
	}
	boot_progress(r, b);
	if (c->state == RXC_FAILED)
		c->state = RXC_UNKNOWN; /* a later room asks again */
}

void receiver_boot_reply(struct receiver *r, struct rx_boot *b,
			 const struct frame_msg *m)
{
	uint64_t tag = m->hdr.room;

	if (m->hdr.type != FRAME_BOOT_REPLY) {
		MALFORMED(r->tab, "bootstrap %s sent %s", b->ep,
			  frame_type_str(m->hdr.type));
		return;
	}
	if (tag == 0) {
		topo_reply(r, b, &m->u.boot_reply);
		return;
	}
	if (tag > b->ncoords) {
		LOG_RL(LOG_WARN, "bootstrap %s: reply to unknown request %llu",
		       b->ep, (unsigned long long)tag);
		return;
	}
	coord_reply(r, b, &b->coords[tag - 1], &m->u.boot_reply);
}

void receiver_boot_forget(struct receiver *r, const struct rx_peer *p)
{
	for (uint32_t i = 0; i < r->nboots; i++) {
		struct rx_boot *b = r->boots[i];
		int hit = 0;

		for (uint32_t k = 0; k < b->ncoords; k++)
			if (b->coords[k].peer == p) {
				b->coords[k].peer = NULL;
				b->coords[k].state = RXC_UNKNOWN;
				hit = 1;
			}
		if (!hit)
			continue;
		LOG(LOG_INFO, "bootstrap %s: forgetting prefill rank %s (it "
		    "restarted or died)", b->ep, p->ep);
		/* The topology too, unless rooms wait on it right now: the
		 * next room asks again. */
		if (b->nwait == 0)
			b->state = RXB_UNKNOWN;
	}
}

static uint64_t earlier(uint64_t a, uint64_t b)
{
	return a == 0 || (b != 0 && b < a) ? b : a;
}

uint64_t receiver_boot_tick(struct receiver *r, uint64_t now)
{
	uint64_t next = 0;

	for (uint32_t i = 0; i < r->nboots; i++) {
		struct rx_boot *b = r->boots[i];
		uint32_t keep = 0;

		for (uint32_t k = 0; k < b->nwait; k++) {
			struct rx_room *room = receiver_rooms_get(&r->rooms,
								  b->wait[k]);

			if (room && (room->tell_abort ||
				     rtab_state(r->tab, room->ref) ==
					     KVW_BOOTSTRAPPING))
				b->wait[keep++] = b->wait[k];
		}
		b->nwait = keep;
		if (b->nwait == 0) {
			/* Nobody waits: stop asking (a later room restarts). */
			if (b->state == RXB_TOPO_PENDING)
				b->state = RXB_UNKNOWN;
			for (uint32_t k = 0; k < b->ncoords; k++)
				if (b->coords[k].state == RXC_PENDING)
					b->coords[k].state = RXC_UNKNOWN;
			if (b->state == RXB_RANKS_PENDING)
				b->state = RXB_READY;
			continue;
		}
		if (b->state == RXB_TOPO_PENDING) {
			if (now >= b->retry_ns) {
				b->retry_ns = now + RESEND_NS;
				lookup_send(r, b, 0, NULL);
			}
			next = earlier(next, b->retry_ns);
		}
		for (uint32_t k = 0; k < b->ncoords; k++) {
			struct rx_coord *c = &b->coords[k];

			if (c->state != RXC_PENDING)
				continue;
			if (now >= c->retry_ns) {
				c->retry_ns = now + RESEND_NS;
				lookup_send(r, b, (uint64_t)k + 1, &c->coord);
			}
			next = earlier(next, c->retry_ns);
		}
	}
	return next;
}
