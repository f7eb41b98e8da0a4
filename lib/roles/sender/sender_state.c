/*
 * sender_state.c - a room's state components in its final job (issue 32
 * item 3). For every component both layouts hold, the prefill engine's
 * rows (its last SEND_CHUNK's state part) go to the rows the decode named
 * (its XFER_INFO's), by the component's kind, as SGLang's backends send
 * them (python/sglang/srt/disaggregation/mooncake/conn.py at 0005973a,
 * maybe_send_extra and _send_mamba_state):
 *   slot   one row a side (a request's Mamba slot), else the room fails;
 *   paged  the two lists cut to the shorter one, warned (SWA and DSA/NSA
 *          indexer pages drift by a page between the two engines);
 *   exact  equal lists (rows by position: cutting would misalign them),
 *          else the room fails.
 * A replicated component goes to each decode rank from one prefill rank
 * only: the first of the prefill ranks that write to it (SGLang's
 * should_send_replicated_state). The copies join the job that carries the
 * room's last pages and its metadata rows, so the decode's Success comes
 * only once they have landed.
 */
#include "sender_impl.h"

#include <stdio.h>

#include "base/log.h"
#include "plan/shape.h"

/* With ptp > dtp, ptp / dtp prefill ranks write to one decode rank (the
 * rank map's rule): the first of them sends replicated rows. */
static int sends_replicated(const struct sender *s, const struct sender_peer *p)
{
	uint32_t ptp = s->topo.tp ? s->topo.tp : 1;
	uint32_t dtp = p->topo.tp ? p->topo.tp : 1;

	return ptp <= dtp || s->coord.tp % (ptp / dtp) == 0;
}

/* How many rows of component c go, by its kind: 0 with why set when the
 * room must fail. */
static int rows_to_send(const struct sender_room *r, uint32_t c,
			const struct kvw_state_spec *k, uint32_t ns,
			uint32_t nd, uint32_t *n, char *why, size_t whylen)
{
	const char *kind = shape_state_kind_str(k->kind);

	if (ns == 0)
		return kvw_errf(why, whylen, KVW_EINVAL,
				"state component %u (%s): the decode named %u "
				"rows, the prefill sent none", c, kind, nd);
	switch (k->kind) {
	case KVW_STATE_SLOT:
		if (ns != 1 || nd != 1)
			return kvw_errf(why, whylen, KVW_EINVAL,
					"state component %u (slot): %u source "
					"and %u destination rows, want one "
					"each", c, ns, nd);
		*n = 1;
		return 0;
	case KVW_STATE_EXACT:
		if (nd != ns)
			return kvw_errf(why, whylen, KVW_EINVAL,
					"state component %u (exact): %u source "
					"and %u destination rows (rows by "
					"position must match)", c, ns, nd);
		*n = ns;
		return 0;
	default:
		*n = ns < nd ? ns : nd;
		if (ns != nd)
			LOG_RL(LOG_WARN, "room %llu: state component %u "
			       "(%s): %u source and %u destination rows: the "
			       "first %u go", (unsigned long long)r->id, c,
			       kind, ns, nd, *n);
		return 0;
	}
}

int sender_state_copies(struct sender *s, const struct sender_room *r,
			uint32_t di, size_t *nc, char *why, size_t whylen)
{
	const struct sender_dst *d = &r->dst[di];
	const struct frame_bytes src = { r->src_state, r->src_state_len };
	const struct frame_bytes dst = { d->state, d->state_len };
	uint32_t srows[KVW_MAX_STATE_IDX], drows[KVW_MAX_STATE_IDX];

	for (uint32_t c = 0; c < s->shape.nstate && c < KVW_MAX_STATE; c++) {
		const struct kvw_state_spec *k = &s->shape.state[c];
		uint32_t nd = frame_state_get(dst, c, drows), ns, n = 0;
		size_t got;
		int rc;

		/* rows the decode does not ask for are not sent */
		if (nd == 0 || (k->replicated && !sends_replicated(s, d->peer)))
			continue;
		ns = frame_state_get(src, c, srows);
		rc = rows_to_send(r, c, k, ns, nd, &n, why, whylen);
		if (rc < 0)
			return rc;
		if (sender_scratch(s, *nc + plan_state_max(d->peer->plan, c, n)))
			return KVW_ENOMEM;
		rc = plan_state(d->peer->plan, c, srows, drows, n, s->pc + *nc,
				s->cap_copies - *nc, &got, why, whylen);
		if (rc < 0)
			return rc;
		*nc += got;
	}
	return 0;
}
