/*
 * xrdma.h - private to the rdma transport's two files: xport_rdma.c (the
 * instance, connections, the data path) and xrdma_reg.c (registrations
 * and the region maps a batch is cut by: host pools, GPU pools, remote
 * regions). Nothing else includes it.
 */
#ifndef KVW_XRDMA_H
#define KVW_XRDMA_H

#include <stddef.h>
#include <stdint.h>

#include "rdma_chain.h"
#include "rdma_cq.h"
#include "rdma_desc.h"
#include "rdma_gpu.h"
#include "rdma_pmap.h"
#include "rdma_qp.h"
#include "rdma_serve.h"
#include "xport/xport_impl.h"

#define XRDMA_MAX_MR 64u
#define XRDMA_SQ_DEPTH 256u   /* send WRs in flight per queue pair */
#define XRDMA_SIGNAL_EVERY 32u
#define XRDMA_MAX_SGE 16u
#define XRDMA_INLINE 64u      /* bytes a WR may carry inline (asked) */
#define XRDMA_CHAIN 64u       /* WRs per post_send */
#define XRDMA_WR_BYTES (16ull << 20) /* bytes per WR at most: each completes
				      * well inside the stall limit */
#define XRDMA_EXCHANGE_MS 5000
#define XRDMA_STALL_NS 30000000000ull /* no completion this long: failed */
#define XRDMA_DRAIN_NS 2000000000ull  /* flushed completions awaited */

struct xrdma_remote {
	int used;          /* 0: free slot */
	int broken;        /* failed: batches refused until disconnect */
	int told;          /* the failure was returned once */
	char why[240];     /* the failure */
	uint8_t *desc;     /* owned copy, to give the same id back */
	size_t desclen;
	struct rdma_region reg; /* the decode pool: addr, size, rkey */
	struct rdma_pseg *seg;   /* its GPU segments (flag GPU), or NULL */
	struct rdma_pmap map;   /* reg and seg, for rdma_pmap_split */
	struct rdma_region *flat; /* reg, then seg[k].r: pieces' dst ids */
	int fd;            /* the exchange connection, kept open */
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct rdma_chain_cfg cfg;
	uint32_t depth;    /* send queue depth granted */
	uint32_t since_signal;
	struct rdma_track tr;
	uint64_t progress_ns; /* last completion, or first post after idle */
};

struct xrdma_xport {
	struct xport base;
	struct rdma_dev dev;
	struct ibv_mr *mr[XRDMA_MAX_MR];
	struct rdma_region loc[XRDMA_MAX_MR]; /* by src id: the host pools */
	struct rgpu *gpu[XRDMA_MAX_MR];      /* by src id: their GPU pools */
	struct rdma_pmap lmap[XRDMA_MAX_MR]; /* by src id: loc and gpu */
	struct rdma_region *lflat; /* every lmap's regions: pieces' src ids */
	struct xport_copy *piece;  /* a batch cut at region ends */
	size_t cappiece;
	uint32_t nmr;
	struct xrdma_remote *rmt;
	uint32_t nrmt, caprmt;
	struct rdma_serve *srv; /* decode side: the exchange, or NULL */
	uint64_t room, next_batch;
	struct ibv_send_wr wr[XRDMA_CHAIN];
	struct ibv_sge sge[XRDMA_CHAIN * XRDMA_MAX_SGE];
};

/* The rdma instance behind x, or NULL for another transport. */
struct xrdma_xport *xrdma_of(const struct xport *x);

/* Polls r until fewer than `left` WRs are outstanding (xport_rdma.c). */
int xrdma_settle(struct xrdma_xport *x, struct xrdma_remote *r,
		 uint64_t left, uint64_t deadline);

/* xrdma_reg.c: the ops table's reg; see xport.h. */
int xrdma_reg(struct xport *xp, const struct pool *p, uint32_t *id,
	      uint8_t *desc, size_t desccap, size_t *desclen, char *err,
	      size_t errlen);
/* Before a batch: every source pool's GPU registration made current. */
int xrdma_fresh_locals(struct xrdma_xport *x, char *err, size_t errlen);
/* A remote's regions (reg, seg, map, flat) from its descriptor. */
int xrdma_remote_map(struct xrdma_remote *r, const struct rdma_desc *d,
		     char *err, size_t errlen);
/* The batch cut at region ends into x->piece, *np pieces. */
int xrdma_cut(struct xrdma_xport *x, const struct xrdma_remote *r,
	      const struct xport_copy *c, size_t n, size_t *np, char *err,
	      size_t errlen);

#endif
