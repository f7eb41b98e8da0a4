/*
 * rankmap.h - decode-side rank mapping (PROTOCOL-NOTES section 3): from
 * the prefill topology, the decode topology and one decode rank's
 * coordinates, which prefill ranks that decode rank talks to, which of
 * them are dummies (MLA fan-in), how many decode ranks send XFER_INFO to
 * one prefill rank (required_dst_info_num) and how many prefill ranks must
 * report Success (required_prefill_response_num). Pure function, no I/O.
 */
#ifndef KVW_RANKMAP_H
#define KVW_RANKMAP_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

#define RANKMAP_MAX_TARGETS 256u

/* What the mapping is computed from. Topology sizes must be >= 1. */
struct rankmap_in {
	struct kvw_topo prefill; /* prefill instance sizes (tp, pp, cp, dp) */
	struct kvw_topo decode;	 /* decode instance sizes */
	struct kvw_coord
	    decode_rank;      /* this decode rank; tp taken mod decode.tp */
	uint32_t prefill_dp;  /* prefill dp group this room goes to */
	uint32_t model_flags; /* KVW_MODEL_MLA */
	int all_cp_ranks;     /* pull from every prefill CP rank */
};

/* One prefill rank to contact. */
struct rankmap_target {
	struct kvw_coord coord; /* prefill rank coordinates, dp = prefill_dp */
	uint8_t dummy;		/* 1: dummy XFER_INFO, no data, no STATUS */
	uint8_t cp_split;	/* 1: sends only its CP share of the pages
				 * (plan_cp_split(total, cp_size, coord.cp)) */
	uint32_t cp_size;	/* prefill CP size, for the split */
};

struct rankmap {
	struct kvw_topo prefill;	/* the prefill topology mapped to */
	uint32_t target_tp;		/* the real (first) target TP rank */
	uint32_t required_dst_info_num; /* carried in every XFER_INFO */
	uint32_t required_prefill_response_num; /* distinct Success reports */
	uint32_t ntargets;
	/* Ordered by CP rank, then TP rank, then PP rank descending
	 * (higher PP stages bootstrap first). */
	struct rankmap_target targets[RANKMAP_MAX_TARGETS];
};

/* Computes the mapping into *out. Rules (PROTOCOL-NOTES 3), with
 * dtp = decode.tp, ptp = prefill.tp, e = decode_rank.tp % dtp:
 *  dtp == ptp: target e; dst_info 1; resp 1.
 *  dtp >  ptp: target e / (dtp/ptp); dst_info dtp/ptp; resp 1.
 *  dtp <  ptp: targets e*(ptp/dtp) .. (e+1)*(ptp/dtp)-1; dst_info 1;
 *              resp 1 if MLA (all but the first are dummies) else ptp/dtp.
 *  CP: decode.cp must be 1; prefill CP > 1 and all_cp_ranks -> every CP
 *      rank with cp_split set, resp *= cp; otherwise CP rank 0 only.
 *  PP: decode.pp == prefill.pp -> [decode_rank.pp]; decode.pp == 1 -> every
 *      prefill PP rank, resp *= prefill.pp; anything else is refused.
 * Returns 0, or KVW_EINVAL (zero sizes, TP sizes where the larger is not a
 * multiple of the smaller, decode CP != 1, decode PP not in {1, prefill
 * PP}, coordinates out of range, more than RANKMAP_MAX_TARGETS targets)
 * with a reason in err; *out is unspecified on error. */
int rankmap_compute(const struct rankmap_in *in, struct rankmap *out, char *err,
		    size_t errlen);

/* The unique rank of prefill rank c of topology t:
 * (c->cp * t->pp + c->pp) * t->tp + c->tp (= pp * tp_size + tp when cp is
 * 0). A prefill rank puts it in every header's src_rank; decode counts
 * distinct Success reports by it, so CP ranks sharing (tp, pp) differ. */
uint32_t rankmap_unique(const struct kvw_topo *t, const struct kvw_coord *c);

/* The page share target i holds of a room of total_pages pages: the whole
 * room (start 0) unless its cp_split is set. Returns 0 or KVW_EINVAL
 * (i >= ntargets). */
int rankmap_target_pages(const struct rankmap *m, uint32_t i,
			 uint32_t total_pages, uint32_t *start,
			 uint32_t *count);

#endif
