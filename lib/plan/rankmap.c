/*
 * rankmap.c - decode-side rank mapping, PROTOCOL-NOTES section 3: the TP
 * fan-in/fan-out rule picks the target TP ranks and the two counters, then
 * the CP and PP rules multiply the target list and the response count.
 * Validation comes first; the table is filled only for a legal topology.
 */
#include "rankmap.h"

#include "plan.h"

static int topo_ok(const struct kvw_topo *t)
{
	return t->tp && t->pp && t->cp && t->dp;
}

/* Rejects any topology section 3 does not define. */
static int rankmap_check(const struct rankmap_in *in, char *err, size_t errlen)
{
	const struct kvw_topo *P = &in->prefill, *D = &in->decode;

	if (!topo_ok(P) || !topo_ok(D)) {
		kvw_seterr(err, errlen,
			   "topology sizes must be >= 1 (prefill tp %u pp %u cp %u "
			   "dp %u, decode tp %u pp %u cp %u dp %u)",
			   P->tp, P->pp, P->cp, P->dp, D->tp, D->pp, D->cp, D->dp);
		return KVW_EINVAL;
	}
	if ((D->tp > P->tp ? D->tp % P->tp : P->tp % D->tp) != 0) {
		kvw_seterr(err, errlen,
			   "decode tp %u and prefill tp %u: the larger is not a "
			   "multiple of the smaller",
			   D->tp, P->tp);
		return KVW_EINVAL;
	}
	if (D->cp != 1) {
		kvw_seterr(err, errlen,
			   "decode cp %u not supported (must be 1)", D->cp);
		return KVW_EINVAL;
	}
	if (D->pp != 1 && D->pp != P->pp) {
		kvw_seterr(err, errlen,
			   "decode pp %u must be 1 or equal prefill pp %u",
			   D->pp, P->pp);
		return KVW_EINVAL;
	}
	if (in->decode_rank.pp >= D->pp || in->decode_rank.cp >= D->cp ||
	    in->prefill_dp >= P->dp) {
		kvw_seterr(err, errlen,
			   "decode rank pp %u cp %u or prefill dp %u out of range",
			   in->decode_rank.pp, in->decode_rank.cp, in->prefill_dp);
		return KVW_EINVAL;
	}
	return 0;
}

int rankmap_compute(const struct rankmap_in *in, struct rankmap *out, char *err,
		    size_t errlen)
{
	uint32_t dtp, ptp, e, tp_first, tp_n, cp_n, pp_first, pp_n, resp;
	int mla, cp_split;
	uint64_t total;
	int rc;

	if (in == NULL || out == NULL) {
		kvw_seterr(err, errlen, "rankmap: missing argument");
		return KVW_EINVAL;
	}
	if ((rc = rankmap_check(in, err, errlen)) < 0)
		return rc;
	dtp = in->decode.tp;
	ptp = in->prefill.tp;
	e = in->decode_rank.tp % dtp;
	mla = (in->model_flags & KVW_MODEL_MLA) != 0;

	out->required_dst_info_num = 1;
	resp = 1;
	tp_n = 1;
	if (dtp == ptp) {
		tp_first = e;
	} else if (dtp > ptp) {
		tp_first = e / (dtp / ptp);
		out->required_dst_info_num = dtp / ptp;
	} else {
		tp_n = ptp / dtp;
		tp_first = e * tp_n;
		resp = mla ? 1 : tp_n;
	}

	cp_split = in->prefill.cp > 1 && in->all_cp_ranks;
	cp_n = cp_split ? in->prefill.cp : 1;
	resp *= cp_n;

	if (in->decode.pp == in->prefill.pp) {
		pp_first = in->decode_rank.pp;
		pp_n = 1;
	} else { /* decode pp 1: every prefill stage sends its layers */
		pp_first = 0;
		pp_n = in->prefill.pp;
		resp *= pp_n;
	}

	total = (uint64_t)tp_n * cp_n * pp_n;
	if (total > RANKMAP_MAX_TARGETS) {
		kvw_seterr(err, errlen, "rankmap: %llu targets (max %u)",
			   (unsigned long long)total, RANKMAP_MAX_TARGETS);
		return KVW_EINVAL;
	}
	out->prefill = in->prefill;
	out->target_tp = tp_first;
	out->required_prefill_response_num = resp;
	out->ntargets = 0;
	for (uint32_t c = 0; c < cp_n; c++) {
		for (uint32_t t = tp_first; t < tp_first + tp_n; t++) {
			for (uint32_t k = pp_n; k-- > 0;) {
				struct rankmap_target *g =
				    &out->targets[out->ntargets++];

				g->coord =
				    (struct kvw_coord){.tp = t,
						       .pp = pp_first + k,
						       .cp = c,
						       .dp = in->prefill_dp};
				g->dummy = mla && t != tp_first;
				g->cp_split = (uint8_t)cp_split;
				g->cp_size = in->prefill.cp;
			}
		}
	}
	return 0;
}

uint32_t rankmap_unique(const struct kvw_topo *t, const struct kvw_coord *c)
{
	return (c->cp * t->pp + c->pp) * t->tp + c->tp;
}

int rankmap_target_pages(const struct rankmap *m, uint32_t i,
			 uint32_t total_pages, uint32_t *start, uint32_t *count)
{
	const struct rankmap_target *g;

	if (m == NULL || i >= m->ntargets || start == NULL || count == NULL)
		return KVW_EINVAL;
	g = &m->targets[i];
	if (!g->cp_split) {
		*start = 0;
		*count = total_pages;
		return 0;
	}
	return plan_cp_split(total_pages, g->cp_size, g->coord.cp, start,
			     count);
}
