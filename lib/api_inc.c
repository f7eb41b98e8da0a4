/*
 * api_inc.c - an engine's record of the incarnation each BEGIN replaced
 * (see api_inc.h).
 */
#include "api_inc.h"

#include <stdlib.h>

#include "base/kvw.h"

struct api_inc_rec {
	struct idmap_node node;  /* id = room */
	struct rtab_ref stale;   /* over when the BEGIN was queued; {0,0}:
				  * none (generations start at 1) */
};

int api_inc_init(struct api_inc *a)
{
	if (pthread_mutex_init(&a->lock, NULL) != 0)
		return KVW_ENOMEM;
	if (idmap_init(&a->map, 64) != 0) {
		pthread_mutex_destroy(&a->lock);
		return KVW_ENOMEM;
	}
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

/* The incarnation of room the table shows now if it is over, else {0,0}:
 * 0 or KVW_EAGAIN. */
static int over_now(const struct rtab *t, uint64_t room, struct rtab_ref *out)
{
	struct rtab_ref ref;
	struct rtab_view v;
	int rc;

	*out = (struct rtab_ref){ 0, 0 };
	for (int tries = 0; tries < 4; tries++) {
		rc = rtab_lookup(t, room, &ref);
		if (rc == KVW_ENOENT)
			return 0;
		if (rc < 0)
			return rc;
		rc = rtab_get(t, ref, &v);
		if (rc == KVW_ESTALE)
			continue; /* the slot was reused meanwhile: look again */
		if (rc < 0)
			return rc;
		if (rtab_terminal(v.state))
			*out = ref;
		return 0;
	}
	return KVW_EAGAIN;
}

int api_inc_begin(struct api_inc *a, const struct rtab *t, uint64_t room)
{
	struct api_inc_rec *r;
	struct idmap_node *n;
	struct rtab_ref stale;
	int rc = over_now(t, room, &stale);

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&a->lock);
	n = idmap_get(&a->map, room);
	if (n != NULL) {
		r = idmap_entry(n, struct api_inc_rec, node);
		/* A second BEGIN without CLEAR: the control refuses it while
		 * the first incarnation lives; keep what the first hid. */
		if (stale.gen != 0)
			r->stale = stale;
		pthread_mutex_unlock(&a->lock);
		return 0;
	}
	r = calloc(1, sizeof *r);
	if (r == NULL) {
		pthread_mutex_unlock(&a->lock);
		return KVW_ENOMEM;
	}
	r->node.id = room;
	r->stale = stale;
	rc = idmap_put(&a->map, &r->node);
	pthread_mutex_unlock(&a->lock);
	if (rc < 0)
		free(r);
	return rc;
}

void api_inc_clear(struct api_inc *a, uint64_t room)
{
	struct idmap_node *n;

	pthread_mutex_lock(&a->lock);
	n = idmap_del(&a->map, room);
	pthread_mutex_unlock(&a->lock);
	if (n != NULL)
		free(idmap_entry(n, struct api_inc_rec, node));
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
