/*
 * api_inc.c - an engine's record of the incarnations it is done with (see
 * api_inc.h).
 */
#include "api_inc.h"

#include <stdlib.h>

#include "base/kvw.h"

struct api_inc_rec {
	struct idmap_node node; /* id = room */
	struct rtab_ref stale;  /* never reported; {0,0}: none (generations
				 * start at 1) */
	int begun;              /* a BEGIN since the last CLEAR */
};

int api_inc_init(struct api_inc *a)
{
	if (pthread_mutex_init(&a->lock, NULL) != 0)
		return KVW_ENOMEM;
	if (idmap_init(&a->map, 64) != 0) {
		pthread_mutex_destroy(&a->lock);
		return KVW_ENOMEM;
	}
	a->idle = 0;
	a->sweep_at = API_INC_SWEEP;
	a->ready = 1;
	return 0;
}

void api_inc_fini(struct api_inc *a)
{
	struct idmap_iter it = { 0 };
	struct idmap_node *n;

	if (!a->ready)
		return;
	while ((n = idmap_next(&a->map, &it)) != NULL) {
		idmap_del(&a->map, n->id);
		free(idmap_entry(n, struct api_inc_rec, node));
	}
	idmap_fini(&a->map);
	pthread_mutex_destroy(&a->lock);
	a->ready = 0;
}

/* The table's incarnation of room now: 0 with *ref and *state ({0,0} when
 * there is none), or KVW_EAGAIN. */
static int table_now(const struct rtab *t, uint64_t room,
		     struct rtab_ref *ref, unsigned *state, uint32_t *flags)
{
	struct rtab_view v;
	int rc;

	for (int tries = 0; tries < 4; tries++) {
		*ref = (struct rtab_ref){ 0, 0 };
		*state = KVW_CLEARED;
		*flags = 0;
		rc = rtab_lookup(t, room, ref);
		if (rc == KVW_ENOENT) {
			*ref = (struct rtab_ref){ 0, 0 };
			return 0;
		}
		if (rc < 0)
			return rc;
		rc = rtab_get(t, *ref, &v);
		if (rc == KVW_ESTALE)
			continue; /* the slot was reused meanwhile: look again */
		if (rc < 0)
			return rc;
		*state = v.state;
		*flags = v.flags;
		return 0;
	}
	return KVW_EAGAIN;
}

/* Drops the records of ids cleared and not begun again whose CLEAR the
 * table shows done (their incarnation Cleared, or gone). Under the lock. */
static void sweep(struct api_inc *a, const struct rtab *t)
{
	struct idmap_iter it = { 0 };
	struct idmap_node *n;

	while ((n = idmap_next(&a->map, &it)) != NULL) {
		struct api_inc_rec *r = idmap_entry(n, struct api_inc_rec, node);
		struct rtab_ref ref;
		unsigned state;
		uint32_t flags;

		if (r->begun || table_now(t, n->id, &ref, &state, &flags) < 0)
			continue;
		if (ref.gen != 0 && ref.slot == r->stale.slot &&
		    ref.gen == r->stale.gen && state != KVW_CLEARED)
			continue;
		idmap_del(&a->map, n->id);
		free(r);
		a->idle--;
	}
}

/* The record of room, made if missing; NULL when out of memory. Under the
 * lock. */
static struct api_inc_rec *rec_of(struct api_inc *a, uint64_t room)
{
	struct idmap_node *n = idmap_get(&a->map, room);
	struct api_inc_rec *r;

	if (n != NULL)
		return idmap_entry(n, struct api_inc_rec, node);
	r = calloc(1, sizeof *r);
	if (r == NULL)
		return NULL;
	r->node.id = room;
	r->begun = 1; /* the callers set it; counted as idle only by clear */
	if (idmap_put(&a->map, &r->node) != 0) {
		free(r);
		return NULL;
	}
	return r;
}

/* BEGIN (begin != 0) or CLEAR of room, before it is queued. */
static int note(struct api_inc *a, const struct rtab *t, uint64_t room,
		int begin)
{
	struct api_inc_rec *r;
	struct rtab_ref ref;
	unsigned state;
	uint32_t flags;
	int rc = table_now(t, room, &ref, &state, &flags);

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&a->lock);
	if (!begin && a->idle >= a->sweep_at) {
		sweep(a, t);
		/* What stays is waiting for its CLEAR to be taken: sweep
		 * again only once that many more piled up (amortised O(1)). */
		a->sweep_at = a->idle > API_INC_SWEEP / 2 ? 2 * a->idle
							   : API_INC_SWEEP;
	}
	r = rec_of(a, room);
	if (r != NULL) {
		/* CLEAR: the one the engine is done with. BEGIN: one that
		 * an engine began and is over is not this room's; a live
		 * one is, and so is one over that no engine began (its
		 * decode opened and failed it first: the engine must see
		 * that Failed); either kept hidden only if CLEAR recorded
		 * it. */
		if (ref.gen != 0 &&
		    (!begin ||
		     (rtab_terminal(state) && (flags & RTAB_F_BEGUN))))
			r->stale = ref;
		if (r->begun != begin)
			a->idle += begin ? -1u : 1u;
		r->begun = begin;
	}
	pthread_mutex_unlock(&a->lock);
	return r ? 0 : KVW_ENOMEM;
}

int api_inc_begin(struct api_inc *a, const struct rtab *t, uint64_t room)
{
	return note(a, t, room, 1);
}

int api_inc_clear(struct api_inc *a, const struct rtab *t, uint64_t room)
{
	return note(a, t, room, 0);
}

int api_inc_hidden(struct api_inc *a, const struct rtab_view *v)
{
	const struct api_inc_rec *r;
	struct idmap_node *n;
	int hide = 0;

	pthread_mutex_lock(&a->lock);
	n = idmap_get(&a->map, v->room);
	if (n != NULL) {
		r = idmap_entry(n, struct api_inc_rec, node);
		hide = v->state == KVW_CLEARED ||
		       (v->ref.slot == r->stale.slot &&
			v->ref.gen == r->stale.gen);
	}
	pthread_mutex_unlock(&a->lock);
	return hide;
}
