/*
 * receiver_slice.c - what each prefill rank of a room may write into the
 * room's pages (issue 29 item 3), for the grant the sinks check every copy
 * against. It follows what the prefill rank's own plan writes
 * (sender_peer.c builds it from the same shape flags): the layers of its
 * PP stage (shape_layers; never the decode's draft layers, which no
 * prefill rank sends; its share of a state component's own layers), the
 * room's aux slot, and under a TP mismatch only its head slice of each
 * K/V token slot (plan_heads_compute, the call the sender makes), and,
 * with more prefill ranks than decode ranks, only its part of each row of
 * a sharded state component (plan.c's state_row_part: part prank % (ptp /
 * dtp)). Where the sender could not
 * plan a slice, the grant does not narrow the slot either: an honest plan
 * is never refused.
 */
#include "receiver_impl.h"

#include "plan/plan.h"
#include "plan/shape.h"
#include "table/rtab_grant.h"

void receiver_target_slice(const struct receiver *r,
			   const struct rx_room *room,
			   const struct rx_target *t,
			   struct rtab_grant_target *out)
{
	struct kvw_model pm;
	struct plan_heads h;
	char why[160];

	*out = (struct rtab_grant_target){ 0 };
	if (t->dummy)
		return; /* sends no data: writes nothing */
	shape_layers(&r->shape, &room->ptopo, &t->coord, &out->layer_first,
		     &out->layer_count);
	/* Its share of a state component's own layers (the grant's
	 * kvw_pp_share of them, as shape_state_layers splits them). */
	out->stage = (room->ptopo.pp ? room->ptopo.pp : 1) << 16 |
		     (t->coord.pp & 0xFFFFu);
	out->flags = RTAB_GRANT_T_AUX; /* every real rank's last job */
	if (room->ptopo.tp > r->topo.tp && r->topo.tp &&
	    room->ptopo.tp % r->topo.tp == 0) {
		for (uint32_t c = 0; c < r->shape.nstate; c++)
			if (!r->shape.state[c].replicated)
				out->state_sharded |= 1u << c;
		out->state_parts = room->ptopo.tp / r->topo.tp;
		out->state_part = t->coord.tp % out->state_parts;
	}
	if (r->shape.mla || room->ptopo.tp == r->topo.tp ||
	    r->shape.page_tokens == 0)
		return; /* whole slots */
	/* The model the prefill rank plans with (sender.c: shape_model of
	 * its own rank), the decode rank it sends to (this one). */
	shape_model(&r->shape, &room->ptopo, &t->coord, &pm);
	if (plan_heads_compute(&pm, room->ptopo.tp, t->coord.tp, r->topo.tp,
			       r->rank.tp, &h, why, sizeof why) != 0)
		return;
	out->slot_len = r->model.head_bytes * r->model.rank_kv_heads;
	out->slice_off = h.dst_head_start * h.head_bytes;
	out->slice_len = h.n_heads * h.head_bytes;
}
