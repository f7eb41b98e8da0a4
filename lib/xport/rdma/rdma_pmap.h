/*
 * rdma_pmap.h - a pool as the HCA sees it, and a batch cut to fit. A host
 * pool is one registered region. An engine's GPU pool (gpool.h) is
 * several: its buffers stand for pool bytes [0, sum of their lens), each
 * in device memory under the key of its allocation's registration, and the
 * host region serves what lies past them (the AUX slots). Pure functions,
 * no verb called: rdma_pmap_split turns a checked copy list (pool offsets)
 * into pieces that each lie inside one region on both sides, naming the
 * regions by their index in flat tables, which is what rdma_chain_build
 * takes (its src and dst arrays).
 */
#ifndef KVW_RDMA_PMAP_H
#define KVW_RDMA_PMAP_H

#include <stddef.h>
#include <stdint.h>

#include "rdma_chain.h"

/* One segment: pool bytes [start, start + r.size) at r.addr under r.key. */
struct rdma_pseg {
	uint64_t start;
	struct rdma_region r;
};

/* One pool's regions. Its host region is entry `base` of the flat table
 * the pieces name, segment k entry base + 1 + k. */
struct rdma_pmap {
	struct rdma_region host;    /* addr: pool byte 0; size: the pool */
	const struct rdma_pseg *seg; /* sorted, adjacent from start 0 */
	uint32_t nseg;              /* 0: a host pool */
	uint32_t base;
};

/* The flat-table index of the region holding pool byte off of m, the
 * byte's offset inside it in *rel and the bytes from it to the region's
 * end in *run. off is inside the pool. */
uint32_t rdma_pmap_at(const struct rdma_pmap *m, uint64_t off, uint64_t *rel,
		     uint64_t *run);

/* Cuts the copies c[0..n) (checked against the pools: rdma_chain_check)
 * where a region ends on either side: src maps are indexed by the copies'
 * src ids, dst is the one remote's. Each piece names flat-table indices
 * (src: the src maps' bases; dst: dst's) and offsets inside those
 * regions; empty copies make no piece. Writes at most cap pieces to out
 * and returns how many the list needs (more than cap: call again with
 * room for that many). */
size_t rdma_pmap_split(const struct xport_copy *c, size_t n,
		      const struct rdma_pmap *src, const struct rdma_pmap *dst,
		      struct xport_copy *out, size_t cap);

#endif
