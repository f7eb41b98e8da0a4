/*
 * plan_params.c - the numbers a plan is built from, each a small pure
 * function: whether two engines' models can exchange KV at all, the head
 * slice a TP mismatch needs (PROTOCOL-NOTES 12.7), and a CP rank's share
 * of a room's pages (10.1).
 */
#include "plan_impl.h"

int plan_models_compat(const struct kvw_model *src, const struct kvw_model *dst,
		       char *err, size_t errlen)
{
	if (src == NULL || dst == NULL) {
		kvw_seterr(err, errlen, "model missing");
		return KVW_EINVAL;
	}
	if (src->page_tokens == 0 || src->page_tokens != dst->page_tokens) {
		kvw_seterr(err, errlen,
			   "page size differs: prefill %u, decode %u",
			   src->page_tokens, dst->page_tokens);
		return KVW_EINVAL;
	}
	if (src->dtype && dst->dtype && src->dtype != dst->dtype) {
		kvw_seterr(err, errlen,
			   "kv dtype differs: prefill %u, decode %u",
			   src->dtype, dst->dtype);
		return KVW_EINVAL;
	}
	if ((src->flags ^ dst->flags) & KVW_MODEL_MLA) {
		kvw_seterr(err, errlen, "one side is MLA, the other is not");
		return KVW_EINVAL;
	}
	if (src->head_bytes && dst->head_bytes &&
	    src->head_bytes != dst->head_bytes) {
		kvw_seterr(err, errlen,
			   "head bytes differ: prefill %u, decode %u",
			   src->head_bytes, dst->head_bytes);
		return KVW_EINVAL;
	}
	if (src->total_kv_heads && dst->total_kv_heads &&
	    src->total_kv_heads != dst->total_kv_heads) {
		kvw_seterr(err, errlen,
			   "total kv heads differ: prefill %u, decode %u",
			   src->total_kv_heads, dst->total_kv_heads);
		return KVW_EINVAL;
	}
	return 0;
}

int plan_heads_split(uint64_t heads, uint32_t tp)
{
	if (heads == 0 || tp == 0)
		return 0;
	return heads >= tp ? heads % tp == 0 : tp % heads == 0;
}

int plan_heads_compute(const struct kvw_model *m, uint32_t ptp, uint32_t prank,
		       uint32_t dtp, uint32_t drank, struct plan_heads *out,
		       char *err, size_t errlen)
{
	struct plan_heads h = {0};
	uint64_t H;
	uint32_t src_heads, dst_heads, rep, u;

	if (m == NULL || out == NULL || ptp == 0 || dtp == 0) {
		kvw_seterr(err, errlen,
			   "head slice: model, output and tp sizes needed");
		return KVW_EINVAL;
	}
	if ((ptp > dtp ? ptp % dtp : dtp % ptp) != 0) {
		kvw_seterr(err, errlen,
			   "head slice: tp sizes %u and %u do not divide", ptp,
			   dtp);
		return KVW_EINVAL;
	}
	H = m->total_kv_heads ? m->total_kv_heads
			      : (uint64_t)m->rank_kv_heads * ptp;
	if (H == 0 || H > UINT32_MAX || m->head_bytes == 0) {
		kvw_seterr(
		    err, errlen,
		    "head slice: model states no kv heads or head bytes");
		return KVW_EINVAL;
	}
	for (int side = 0; side < 2; side++) {
		uint32_t tp = side ? dtp : ptp;

		if (!plan_heads_split(H, tp)) {
			kvw_seterr(
			    err, errlen,
			    "head slice: %llu kv heads do not split over tp %u",
			    (unsigned long long)H, tp);
			return KVW_EINVAL;
		}
	}
	src_heads = H / ptp ? (uint32_t)(H / ptp) : 1;
	dst_heads = H / dtp ? (uint32_t)(H / dtp) : 1;
	prank %= ptp;
	drank %= dtp;
	if (ptp > dtp) {
		rep = ptp / H ? (uint32_t)(ptp / H) : 1;
		u = prank / rep;
		h.src_head_start = 0;
		h.n_heads = src_heads;
		h.dst_head_start =
		    (uint32_t)(((uint64_t)u * src_heads) % dst_heads);
	} else {
		rep = dtp / H ? (uint32_t)(dtp / H) : 1;
		u = drank / rep;
		h.src_head_start =
		    (uint32_t)(((uint64_t)u * dst_heads) % src_heads);
		h.n_heads = dst_heads;
		h.dst_head_start = 0;
	}
	h.head_bytes = m->head_bytes;
	h.src_tp = ptp;
	h.src_rank = prank;
	h.dst_tp = dtp;
	h.dst_rank = drank;
	if (h.src_head_start + h.n_heads > src_heads ||
	    h.dst_head_start + h.n_heads > dst_heads) {
		kvw_seterr(err, errlen,
			   "head slice: %u heads at src %u/dst %u do not fit "
			   "%u/%u heads per slot",
			   h.n_heads, h.src_head_start, h.dst_head_start,
			   src_heads, dst_heads);
		return KVW_EINVAL;
	}
	*out = h;
	return 0;
}

int plan_cp_split(uint32_t total_pages, uint32_t cp_size, uint32_t cp_rank,
		  uint32_t *start, uint32_t *count)
{
	uint32_t base, rem;

	if (cp_size == 0 || cp_rank >= cp_size || start == NULL ||
	    count == NULL)
		return KVW_EINVAL;
	base = total_pages / cp_size;
	rem = total_pages % cp_size;
	*start = cp_rank * base + (cp_rank < rem ? cp_rank : rem);
	*count = base + (cp_rank < rem);
	return 0;
}
