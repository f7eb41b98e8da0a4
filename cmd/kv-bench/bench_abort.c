/*
 * bench_abort.c - kv-bench --abort-frac: which rooms are aborted and when,
 * the RECV_ABORTs, and the canaries written over an aborted room's
 * destination pages once it is releasable (a byte landing after the
 * release changes one: counted corrupt).
 */
#include <stdlib.h>
#include <string.h>

#include "bench_impl.h"

static uint64_t abort_rnd(struct run *r)
{
	uint64_t z = r->arng += 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Decides whether and when the room just started is aborted. */
void bench_plan_abort(struct run *r, struct room *x)
{
	uint32_t n = r->c->pages_per_room, cp = r->c->chunk_pages;
	uint32_t full = n / cp; /* chunks before a possible short last one */

	x->abort_at = AB_NONE;
	x->aborted = 0;
	x->abort_pages = 0;
	if (!(r->c->abort_frac > 0) ||
	    (double)(abort_rnd(r) >> 11) / 9007199254740992.0 >= r->c->abort_frac)
		return;
	x->abort_at = (uint8_t)(AB_BEFORE + abort_rnd(r) % 3);
	if (x->abort_at == AB_BETWEEN) {
		uint32_t k = (n + cp - 1) / cp; /* chunks carrying pages */

		if (k < 2 || full < 1)
			x->abort_at = AB_COPYING;
		else
			x->abort_pages = cp * (uint32_t)(1 + abort_rnd(r) %
							 (k - 1));
	}
}

/* 1 when the planned moment of the abort has come. */
int bench_abort_due(struct room *x)
{
	struct kvw_room_status st;
	uint32_t k;

	for (k = 0; k < x->pi->np; k++) {
		if (x->pf[k] & F_FAILED)
			continue;
		if (x->abort_at == AB_BETWEEN && x->cur[k] < x->abort_pages)
			return 0;
		if (x->abort_at == AB_COPYING && !(x->pf[k] & F_DONE))
			return 0;
	}
	if (x->abort_at != AB_COPYING)
		return 1;
	/* Copies in flight (Transferring), or already over. */
	if (kvw_poll(x->pi->p[0].e, x->id, &st) < 0)
		return 0;
	return st.state != KVW_BOOTSTRAPPING && st.state != KVW_WAITING;
}

/* Writes the canary over the destination pages of every decode rank and
 * keeps them in the canary list. */
static void canary_keep(struct run *r, const struct room *x)
{
	uint32_t n = r->c->pages_per_room;
	struct canary *c;

	for (uint32_t k = 0; k < x->di->nd; k++)
		bench_fill(kvw_pool_base(x->di->d[k].e), &x->di->d[k].g,
			   x->id ^ CANARY_SALT, x->dst, n, x->dst_aux);
	if (r->ncan == r->capcan) {
		uint32_t cap = r->capcan ? 2 * r->capcan : 16;

		c = realloc(r->can, cap * sizeof *c);
		if (!c)
			return; /* out of memory: those pages stay out of use */
		r->can = c;
		r->capcan = cap;
	}
	c = &r->can[r->ncan];
	c->dst = malloc(n * sizeof *c->dst);
	if (!c->dst)
		return;
	memcpy(c->dst, x->dst, n * sizeof *c->dst);
	c->di = x->di;
	c->key = x->id ^ CANARY_SALT;
	c->dst_aux = x->dst_aux;
	r->ncan++;
}

/* Checks every kept canary (a changed one counts as corrupt: a byte
 * landed after its room was released) and gives the pages back. */
void bench_canary_flush(struct run *r)
{
	uint32_t n = r->c->pages_per_room;

	for (uint32_t i = 0; i < r->ncan; i++) {
		struct canary *c = &r->can[i];
		uint64_t bad = 0;

		for (uint32_t k = 0; k < c->di->nd; k++)
			bad += bench_verify(kvw_pool_base(c->di->d[k].e),
					    &c->di->d[k].g, c->key, c->dst, n,
					    c->dst_aux);
		if (bad)
			r->res->corrupt++;
		bench_alloc_put(&c->di->da, n, c->dst);
		bench_alloc_put(&c->di->daux, 1, &c->dst_aux);
		free(c->dst);
	}
	r->ncan = 0;
}

/* An aborted room: RECV_ABORT to every decode rank, then waits until each
 * shows its room releasable (every prefill target acked; Success counts:
 * nothing can land after it), writes the canary and moves on to CLEAR; the
 * room's deadline passing first makes it stuck. Returns progress, 0, or a
 * fatal error. */
int bench_step_aborted(struct run *r, struct room *x, uint64_t now)
{
	struct kvw_room_status st;
	uint32_t k, rel = 0;
	int rc, prog = 0;

	for (k = 0; k < x->di->nd; k++) {
		struct eng *d = &x->di->d[k];

		if (!(x->df[k] & F_ABORT)) {
			rc = bench_sent(r, d, kvw_abort(d->e, x->id));
			if (rc < 0)
				return rc;
			x->df[k] |= rc ? F_ABORT : 0;
			prog |= rc;
		}
		if ((x->df[k] & (F_ABORT | F_REL)) == F_ABORT &&
		    kvw_poll(d->e, x->id, &st) == 0 &&
		    (st.state == KVW_SUCCESS ||
		     (st.state == KVW_FAILED &&
		      (st.flags & KVW_ROOM_F_RELEASABLE)))) {
			x->df[k] |= F_REL;
			prog = 1;
		}
		rel += (x->df[k] & F_REL) != 0;
	}
	if (rel == x->di->nd) {
		canary_keep(r, x);
		x->outcome = O_ABORTED;
	} else if (now >= x->deadline) {
		x->outcome = O_ABORT_STUCK;
	} else {
		return prog;
	}
	x->phase = R_CLEAR;
	return 1;
}
