/*
 * rtab_peer.c - the peer table beside the rooms (endpoint, epoch, liveness,
 * misses, last seen; ids are index + 1, and a slot the owner retired is
 * used again under a sequence word, rtab.h) and the sweeps
 * that fail rooms in bulk: by deadline, by peer id, and after an owner
 * restart. Every failure is one legal CAS of the room's state word, so a
 * sweep racing with workers or with another sweep never changes a terminal
 * room and counts each room it failed exactly once.
 */
#include <stdlib.h>
#include <string.h>

#include "rtab_impl.h"

/* ---- sweeps ------------------------------------------------------------ */

/* Fails slot s's current incarnation if it is non-terminal and `match`
 * says so; returns 1 if this call failed it. */
static int sweep_one(struct rtab *t, uint32_t s, unsigned reason,
		     int (*match)(const struct rtab_view *, const void *),
		     const void *marg, rtab_room_cb *cb, void *arg)
{
	struct rtab_view v;

	if (rtab_snap(t, s, 0, &v) < 0 || rtab_terminal(v.state) ||
	    !match(&v, marg))
		return 0;
	if (rtab_transition_if(t, v.ref, RTAB_M_ACTIVE, KVW_FAILED, reason,
			       NULL) < 0)
		return 0;
	FLD_ADD(&t->hdr->counters[RTAB_C_FAILED], 1);
	if (cb != NULL && rtab_snap(t, s, v.ref.gen, &v) == 0)
		cb(arg, &v);
	return 1;
}

static int sweep(struct rtab *t, unsigned reason,
		 int (*match)(const struct rtab_view *, const void *),
		 const void *marg, rtab_room_cb *cb, void *arg)
{
	int n = 0;

	if (!t->writable)
		return KVW_EINVAL;
	for (uint32_t s = 0; s < t->cap; s++)
		n += sweep_one(t, s, reason, match, marg, cb, arg);
	return n;
}

static int match_overdue(const struct rtab_view *v, const void *now)
{
	return v->deadline_ns != 0 && v->deadline_ns <= *(const uint64_t *)now;
}

static int match_peer(const struct rtab_view *v, const void *peer)
{
	return v->peer == *(const uint32_t *)peer;
}

static int match_all(const struct rtab_view *v, const void *unused)
{
	(void)v;
	(void)unused;
	return 1;
}

int rtab_expire(struct rtab *t, uint64_t now_ns, rtab_room_cb *cb, void *arg)
{
	return sweep(t, KVW_R_TIMEOUT, match_overdue, &now_ns, cb, arg);
}

int rtab_fail_peer(struct rtab *t, uint32_t peer, unsigned reason,
		   rtab_room_cb *cb, void *arg)
{
	if (peer == 0)
		return KVW_EINVAL;
	return sweep(t, reason, match_peer, &peer, cb, arg);
}

int rtab_fail_stale_owner(struct rtab *t, uint64_t new_epoch,
			  rtab_room_cb *cb, void *arg)
{
	int n;

	if (!t->owner)
		return KVW_EINVAL;
	PUB_STORE(&t->hdr->owner_epoch, new_epoch);
	n = sweep(t, KVW_R_OWNER_RESTART, match_all, NULL, cb, arg);
	/* The old epoch's workers are gone: nothing they held is in flight. */
	for (uint32_t s = 0; s < t->cap; s++) {
		struct rtab_entry *e = &t->ent[s];
		uint64_t w = sw_load(e);

		if (sw_kind(w) == RTAB_K_LIVE)
			atomic_store_explicit(&e->outstanding,
					      ow_pack(sw_gen(w), 0),
					      memory_order_release);
	}
	return n;
}

/* ---- peers ------------------------------------------------------------- */

static uint32_t peer_count(const struct rtab *t)
{
	uint32_t n = PUB_LOAD(&t->hdr->peer_count);

	return n < t->peer_cap ? n : t->peer_cap;
}

/* The peer slot of id if it is allocated, else NULL. */
static struct rtab_peer *peer_slot(const struct rtab *t, uint32_t id)
{
	struct rtab_peer *p;

	if (id == 0 || id > peer_count(t))
		return NULL;
	p = &t->peers[id - 1];
	return PUB_LOAD(&p->id) == id ? p : NULL;
}

int rtab_peer_upsert(struct rtab *t, const char *endpoint, uint64_t epoch,
		     uint32_t *id, int *epoch_changed)
{
	uint32_t n, free_slot;
	size_t len;
	struct rtab_peer *p;

	if (epoch_changed != NULL)
		*epoch_changed = 0;
	if (!t->owner || endpoint == NULL)
		return KVW_EINVAL;
	len = strnlen(endpoint, RTAB_ENDPOINT_MAX);
	if (len == 0 || len >= RTAB_ENDPOINT_MAX)
		return KVW_EINVAL;
	n = free_slot = peer_count(t);
	for (uint32_t i = 0; i < n; i++) {
		p = &t->peers[i];
		if (PUB_LOAD(&p->id) != i + 1) {
			if (free_slot == n) /* the first a retire freed */
				free_slot = i;
			continue;
		}
		if (strncmp(p->endpoint, endpoint, RTAB_ENDPOINT_MAX) != 0)
			continue;
		if (epoch != 0) {
			uint64_t old = atomic_exchange_explicit(
				&p->epoch, epoch, memory_order_acq_rel);

			if (epoch_changed != NULL)
				*epoch_changed = old != 0 && old != epoch;
		}
		*id = i + 1;
		return 0;
	}
	if (free_slot == n && n >= t->peer_cap)
		return KVW_ENOMEM;
	p = &t->peers[free_slot];
	if (free_slot == n) /* a fresh slot: the retire's odd seq stands in */
		atomic_fetch_add_explicit(&p->seq, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release); /* seq odd before bytes */
	memset(p->endpoint, 0, sizeof(p->endpoint));
	memcpy(p->endpoint, endpoint, len);
	FLD_STORE(&p->epoch, epoch);
	FLD_STORE(&p->liveness, RTAB_PEER_UNKNOWN);
	FLD_STORE(&p->misses, 0);
	FLD_STORE(&p->last_seen_ns, 0);
	PUB_STORE(&p->seq, PUB_LOAD(&p->seq) + 1); /* even: written */
	PUB_STORE(&p->id, free_slot + 1);
	if (free_slot == n)
		PUB_STORE(&t->hdr->peer_count, n + 1);
	*id = free_slot + 1;
	return 0;
}

int rtab_peers_retire(struct rtab *t, const uint32_t *ids, uint32_t n,
		      uint8_t *done)
{
	uint8_t *live;
	struct rtab_view v;
	int retired = 0;

	if (!t->owner)
		return KVW_EINVAL;
	live = calloc((size_t)t->peer_cap + 1, 1);
	if (!live)
		return KVW_ENOMEM;
	/* Only the owner inserts rooms or sets their peer, so no room can
	 * come to name an id between this scan and its retire. */
	for (uint32_t s = 0; s < t->cap; s++)
		if (rtab_snap(t, s, 0, &v) == 0 && !rtab_terminal(v.state) &&
		    v.peer <= t->peer_cap)
			live[v.peer] = 1;
	for (uint32_t i = 0; i < n; i++) {
		struct rtab_peer *p = peer_slot(t, ids[i]);

		if (done)
			done[i] = 0;
		if (!p || live[ids[i]])
			continue;
		PUB_STORE(&p->seq, PUB_LOAD(&p->seq) + 1); /* odd: back off */
		PUB_STORE(&p->id, 0);
		if (done)
			done[i] = 1;
		retired++;
	}
	free(live);
	return retired;
}

int rtab_peer_get(const struct rtab *t, uint32_t id, struct rtab_peer_view *v)
{
	const struct rtab_peer *p = peer_slot(t, id);

	uint32_t seq;

	if (p == NULL)
		return KVW_ENOENT;
	/* A sequence lock: the snapshot counts only if seq was even before
	 * and unchanged after, and the slot still holds id (a retire and
	 * reuse in between make it another peer: gone for this caller). */
	seq = PUB_LOAD(&p->seq);
	if (seq & 1u)
		return KVW_ENOENT;
	v->id = id;
	v->liveness = FLD_LOAD(&p->liveness);
	v->misses = FLD_LOAD(&p->misses);
	v->epoch = PUB_LOAD(&p->epoch);
	v->last_seen_ns = FLD_LOAD(&p->last_seen_ns);
	memcpy(v->endpoint, p->endpoint, sizeof(v->endpoint));
	v->endpoint[sizeof(v->endpoint) - 1] = '\0';
	atomic_thread_fence(memory_order_acquire);
	if (FLD_LOAD(&p->seq) != seq || PUB_LOAD(&p->id) != id)
		return KVW_ENOENT;
	return 0;
}

int rtab_peer_seen(struct rtab *t, uint32_t id, uint64_t epoch,
		   uint64_t now_ns)
{
	struct rtab_peer *p;
	int changed = 0;

	if (!t->writable)
		return KVW_EINVAL;
	if ((p = peer_slot(t, id)) == NULL)
		return KVW_ENOENT;
	if (epoch != 0) {
		uint64_t old = atomic_exchange_explicit(&p->epoch, epoch,
							memory_order_acq_rel);

		changed = old != 0 && old != epoch;
	}
	FLD_STORE(&p->misses, 0);
	FLD_STORE(&p->last_seen_ns, now_ns);
	PUB_STORE(&p->liveness, RTAB_PEER_ALIVE);
	return changed;
}

int rtab_peer_miss(struct rtab *t, uint32_t id)
{
	struct rtab_peer *p;
	uint32_t m;

	if (!t->writable)
		return KVW_EINVAL;
	if ((p = peer_slot(t, id)) == NULL)
		return KVW_ENOENT;
	m = FLD_ADD(&p->misses, 1) + 1;
	return m > INT32_MAX ? INT32_MAX : (int)m;
}

int rtab_peer_set_liveness(struct rtab *t, uint32_t id, unsigned liveness)
{
	struct rtab_peer *p;

	if (!t->writable || liveness > RTAB_PEER_DEAD)
		return KVW_EINVAL;
	if ((p = peer_slot(t, id)) == NULL)
		return KVW_ENOENT;
	PUB_STORE(&p->liveness, liveness);
	return 0;
}

int rtab_peer_next(const struct rtab *t, uint32_t *cursor,
		   struct rtab_peer_view *v)
{
	uint32_t n = peer_count(t);

	while (*cursor < n) {
		uint32_t id = ++(*cursor);

		if (rtab_peer_get(t, id, v) == 0)
			return 0;
	}
	return KVW_ENOENT;
}
