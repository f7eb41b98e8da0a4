/*
 * sender_reclaim.c - frees the decode peers that hold a slot for nothing
 * (issue 14): a flood of REGISTERs must not use the peer list or the
 * table's peer slots up for good. Called only when a REGISTER of a new
 * endpoint finds the list full, or its source at its bound, so a quiet
 * group never loses a registration.
 *
 * A peer may go when no room names it (as a destination or an ABORT ack
 * target: rooms keep plain pointers) and its registration is dead or never
 * completed:
 *   - refused or unusable (no plan: a pool it does not own, a layout this
 *     rank cannot serve): it can never be sent to;
 *   - declared dead by the heartbeat (liveness DEAD in the table);
 *   - never served a room, never answered a heartbeat (liveness UNKNOWN)
 *     and registered SENDER_REGISTER_GRACE_NS ago.
 * A real decode whose slot went is not lost: its next XFER_INFO is
 * answered STATUS(Failed, peer restart) (reject_unregistered), and it
 * registers again.
 */
#include "sender_impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "wire/dealers.h"

/* Marks (busy = 1) every candidate a room names. */
static void mark_named(void *arg, struct sender_room *r)
{
	(void)arg;
	for (uint32_t i = 0; i < r->ndst; i++)
		r->dst[i].peer->busy = 1;
	for (uint32_t i = 0; i < r->nacks; i++)
		r->acks[i].peer->busy = 1;
	for (uint32_t i = 0; i < r->nheld; i++)
		r->held[i].peer->busy = 1;
}

static int never_completed(const struct sender *s,
			   const struct sender_peer *p, uint64_t now_ns)
{
	struct rtab_peer_view v;

	if (!p->plan || p->id == 0)
		return 1;
	if (rtab_peer_get(s->t, p->id, &v) != 0)
		return 1;
	if (v.liveness == RTAB_PEER_DEAD)
		return 1;
	return v.liveness == RTAB_PEER_UNKNOWN && !p->served &&
	       now_ns >= p->registered_ns + SENDER_REGISTER_GRACE_NS;
}

static void peer_free(struct sender *s, struct sender_peer *p)
{
	if (p->out)
		dealers_drop(s->dealers, p->endpoint);
	plan_free(&p->plan);
	free(p->desc);
	free(p);
}

uint32_t sender_peers_reclaim(struct sender *s, const uint8_t *src,
			      size_t srclen, uint64_t now_ns)
{
	uint32_t *ids, n = 0, kept = 0, freed = 0;
	uint8_t *done;

	if (srclen > RL_ID_MAX)
		srclen = RL_ID_MAX;
	for (uint32_t i = 0; i < s->npeers; i++)
		s->peers[i]->busy = 0;
	sender_rooms_foreach(&s->rooms, mark_named, NULL);
	ids = calloc(s->npeers ? s->npeers : 1, sizeof *ids);
	done = calloc(s->npeers ? s->npeers : 1, 1);
	if (!ids || !done)
		goto out;
	/* Candidates first (busy = 2), so the table is scanned once. */
	for (uint32_t i = 0; i < s->npeers; i++) {
		struct sender_peer *p = s->peers[i];

		if (p->busy || (src && (p->srclen != srclen ||
					memcmp(p->src, src, srclen) != 0)) ||
		    !never_completed(s, p, now_ns))
			continue;
		p->busy = 2;
		ids[n++] = p->id;
	}
	if (n == 0 || rtab_peers_retire(s->t, ids, n, done) < 0)
		goto out;
	/* A candidate goes if its table slot went (or it never had one). */
	for (uint32_t i = 0, k = 0; i < s->npeers; i++) {
		struct sender_peer *p = s->peers[i];

		int go = p->busy == 2 && (p->id == 0 || done[k]);

		k += p->busy == 2; /* done[] follows the candidates' order */
		if (go) {
			LOG(LOG_INFO, "decode %s: peer slot reclaimed (%s)",
			    p->endpoint, p->plan ? "dead or never served"
						 : "registration refused");
			peer_free(s, p);
			freed++;
			continue;
		}
		s->peers[kept++] = p;
	}
	s->npeers = kept;
	rtab_sec_add(s->t, RTAB_S_RECLAIMED, freed);
out:
	free(ids);
	free(done);
	return freed;
}
