/*
 * rdma_chain.h - pure functions from a batch's copy list to RDMA WRITE work
 * requests, with no verb called (verbs.h for the types): first the whole
 * list is checked against the local regions and the one remote region, then
 * WRs are built into caller-owned arrays, as many as the send queue has room
 * for, resuming where the last call stopped.
 *
 * The rules: one WR writes one run of remote bytes; copies whose
 * destinations follow each other in one remote region join one WR, one scatter/gather entry per
 * copy (or one for several copies whose sources follow each other too), up
 * to max_sge entries and max_msg bytes; a copy longer than max_msg is split.
 * Zero-length copies make nothing. A WR of at most max_inline bytes is sent
 * inline. At least every signal_every-th WR is signalled, and so is the last
 * WR of every chain (so a full send queue always has a completion coming).
 * The batch's very last WR is RDMA WRITE WITH IMMEDIATE carrying the batch
 * id (its low 32 bits, network order), so the decode sees each batch land.
 * wr_id is the WR's sequence number on its queue pair (first_id, +1, ...),
 * which rdma_cq.h's bookkeeping counts by.
 */
#ifndef KVW_RDMA_CHAIN_H
#define KVW_RDMA_CHAIN_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#include "xport/xport.h"

/* A registered region as the HCA sees it: addr is the first byte's
 * registered address, key the lkey (local) or rkey (remote). */
struct rdma_region {
	uint64_t addr;
	uint64_t size;
	uint32_t key;
};

struct rdma_chain_cfg {
	uint32_t max_sge;      /* scatter/gather entries per WR, >= 1 */
	uint32_t max_inline;   /* a WR of at most this many bytes goes inline
				* (0: none) */
	uint32_t signal_every; /* >= 1 */
	uint64_t max_msg;      /* bytes per WR, 1 .. 2^31 */
};

/* Checks every copy before anything is built: its src id names one of
 * src[0..nsrc) with size > 0, its dst is `dst` (one remote per batch),
 * and off + len neither overflows nor passes its region (remote:
 * dst_size). 0, KVW_EINVAL (unknown id, a second remote) or KVW_ERANGE,
 * err naming the copy. */
int rdma_chain_check(const struct xport_copy *c, size_t n,
		     const struct rdma_region *src, uint32_t nsrc, uint32_t dst,
		     uint64_t dst_size, char *err, size_t errlen);

/* Where the next WR starts: copy i, byte off of it. Zeroed: the batch's
 * beginning; i == n: everything is built. */
struct rdma_cursor {
	size_t i;
	uint64_t off;
};

/* Caller-owned room for one chain. */
struct rdma_chain {
	struct ibv_send_wr *wr;
	uint32_t cap_wr;
	struct ibv_sge *sge;
	uint32_t cap_sge;
	uint32_t nwr;          /* out: WRs built, linked wr[0] -> ... */
	uint32_t since_signal; /* in/out: unsignalled WRs posted since the
				* last signalled one (per queue pair) */
};

/* Builds at most max_wr WRs (and at most ch->cap_wr, ch->cap_sge entries)
 * of the checked copies c[0..n) from *cur on, advancing *cur, into ch.
 * src is indexed by the copies' src ids, dst by their dst ids (the
 * transport gives it the pieces rdma_pmap_split made: a remote's host
 * region and its GPU segments). Returns the
 * number built (ch->nwr): 0 only when nothing is left (cur->i == n after
 * skipping empty copies) or max_wr is 0. The last WR built is signalled;
 * when it ends the batch it carries imm. */
uint32_t rdma_chain_build(const struct rdma_chain_cfg *cfg,
			  const struct xport_copy *c, size_t n,
			  const struct rdma_region *src,
			  const struct rdma_region *dst,
			  struct rdma_cursor *cur, uint32_t max_wr,
			  uint64_t first_id, uint32_t imm,
			  struct rdma_chain *ch);

#endif
