/*
 * xrdma_reg.c - the rdma transport's registrations and region maps: a
 * host pool is one memory region; an engine's GPU pool beside it adds its
 * device memory (rdma_gpu.h: dmabuf, else peer memory, else refused), made
 * current with the engine's epoch (the record on disk). The regions of
 * every local pool and of each remote are kept as flat tables, which is
 * what the pieces of a cut batch (rdma_pmap.h) name.
 */
#include "xport_rdma.h"
#include "xrdma.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/pool.h"

/* What a registration allows: remote writes when this instance listens
 * (the decode side), else local reads only (a source: the prefill pool is
 * mapped read-only). */
static int access_of(const struct xrdma_xport *x)
{
	return x->srv ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0;
}

/* Rebuilds the table of local regions that pieces name by src id: each
 * registration's host region, then its GPU segments (rdma_pmap.h). */
static int flat_local(struct xrdma_xport *x, char *err, size_t errlen)
{
	uint32_t n = 1, k = 0;
	struct rdma_region *f;

	for (uint32_t i = 0; i < x->nmr; i++)
		n += 1 + rgpu_nseg(x->gpu[i]);
	f = realloc(x->lflat, n * sizeof *f);
	if (!f)
		return kvw_errf(err, errlen, KVW_ENOMEM, "rdma: out of memory");
	x->lflat = f;
	for (uint32_t i = 0; i < x->nmr; i++) {
		const struct rdma_pseg *sg = rgpu_segs(x->gpu[i]);

		x->lmap[i] = (struct rdma_pmap){ x->loc[i], sg,
						 rgpu_nseg(x->gpu[i]), k };
		f[k++] = x->loc[i];
		for (uint32_t j = 0; j < x->lmap[i].nseg; j++)
			f[k++] = sg[j].r;
	}
	return 0;
}

/* Registration id's descriptor (rdma_desc.h) into desc: the host region
 * and, on the decode side, the GPU segments with their rkeys. */
static int describe(const struct xrdma_xport *x, uint32_t id, uint8_t *desc,
		    size_t desccap, size_t *desclen, char *err, size_t errlen)
{
	const struct rgpu *g = x->gpu[id];
	struct rdma_desc d = { .ib_port = x->dev.port, .mtu = x->dev.mtu,
			       .link = x->dev.link, .lid = x->dev.lid,
			       .addr = x->loc[id].addr, .size = x->loc[id].size,
			       .rkey = x->mr[id]->rkey };

	memcpy(d.gid, x->dev.gid, 16);
	if (x->srv) {
		memcpy(d.secret, rdma_serve_secret(x->srv), RDMA_SECRET_LEN);
		d.port = rdma_serve_port(x->srv);
		snprintf(d.host, sizeof d.host, "%s", rdma_serve_host(x->srv));
	} else {
		snprintf(d.host, sizeof d.host, "-"); /* port 0: not dialled */
	}
	if (x->srv && rgpu_nseg(g) > RDMA_DESC_SEG_MAX)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: a GPU pool of %u buffers; a descriptor "
				"holds at most %u",
				rgpu_nseg(g), (unsigned)RDMA_DESC_SEG_MAX);
	if (x->srv && rgpu_nseg(g) > 0) {
		d.flags = RDMA_DESC_GPU | (rgpu_dmabuf(g) ? RDMA_DESC_DMABUF : 0);
		d.nseg = (uint16_t)rgpu_nseg(g);
		for (uint32_t i = 0; i < d.nseg; i++)
			d.seg[i] = (struct rdma_desc_seg){
				rgpu_segs(g)[i].r.size, rgpu_segs(g)[i].r.addr,
				rgpu_rkey(g, i) };
	}
	return rdma_desc_encode(&d, desc, desccap < KVW_MAX_DESC ? desccap
								: KVW_MAX_DESC,
				desclen, err, errlen);
}

/* Registers the host pool, then its GPU pool where the engine has one
 * (rdma_gpu.h: dmabuf, else peer memory, else refused). */
int xrdma_reg(struct xport *xp, const struct pool *p, uint32_t *id,
		     uint8_t *desc, size_t desccap, size_t *desclen, char *err,
		     size_t errlen)
{
	struct xrdma_xport *x = XPORT_SELF(struct xrdma_xport, xp);
	uint32_t i = x->nmr;
	struct ibv_mr *mr;
	int rc;

	if (i == XRDMA_MAX_MR)
		return kvw_errf(err, errlen, KVW_ENOMEM,
				"rdma: more than %u registered pools",
				XRDMA_MAX_MR);
	mr = x->dev.lib->reg_mr(x->dev.pd, pool_base(p), (size_t)pool_size(p),
				access_of(x));
	if (!mr)
		return kvw_errf(err, errlen, KVW_ESYS,
				"rdma: unable to register %s on %s: %s%s",
				pool_path(p), x->dev.name, strerror(errno),
				errno == ENOMEM ? " (pinned memory is bounded "
						  "by RLIMIT_MEMLOCK: ulimit -l)"
						: "");
	x->mr[i] = mr;
	x->loc[i] = (struct rdma_region){ (uint64_t)(uintptr_t)pool_base(p),
					  pool_size(p), mr->lkey };
	rc = rgpu_open(&x->gpu[i], pool_path(p), pool_size(p), err, errlen);
	if (rc == 0 && rgpu_stale(x->gpu[i]))
		rc = rgpu_load(x->gpu[i], &x->dev, access_of(x), err, errlen);
	x->nmr++;
	if (rc == 0)
		rc = flat_local(x, err, errlen);
	if (rc == 0)
		rc = describe(x, i, desc, desccap, desclen, err, errlen);
	if (rc) {
		x->nmr--;
		rgpu_close(&x->gpu[i]);
		x->dev.lib->dereg_mr(mr);
		x->mr[i] = NULL;
		return rc;
	}
	*id = i;
	return 0;
}

/* Registers pool i's GPU record anew (rgpu_load) and rebuilds the flat
 * table whatever came of it: the old segments are gone. */
static int reload(struct xrdma_xport *x, uint32_t i, char *err,
		  size_t errlen)
{
	int rc = rgpu_load(x->gpu[i], &x->dev, access_of(x), err, errlen);

	if (flat_local(x, rc ? NULL : err, errlen) != 0 && rc == 0)
		rc = KVW_ENOMEM;
	return rc;
}

int xport_rdma_refresh(struct xport *xp, uint32_t id, uint8_t *desc,
		       size_t desccap, size_t *desclen, int *changed,
		       char *err, size_t errlen)
{
	struct xrdma_xport *x = xrdma_of(xp);
	int rc;

	*changed = 0;
	if (!x || id >= x->nmr)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: no registration %u", id);
	if (!rgpu_stale(x->gpu[id]))
		return 0;
	*changed = 1;
	rc = reload(x, id, err, errlen);
	return rc ? rc : describe(x, id, desc, desccap, desclen, err, errlen);
}

/* Before a batch: every source pool's GPU registration made current (one
 * stat each). A new engine epoch is registered anew only once no WR is
 * in flight on any queue pair: none may read a region being dropped. */
int xrdma_fresh_locals(struct xrdma_xport *x, char *err, size_t errlen)
{
	int stale = 0, rc = 0;

	for (uint32_t i = 0; i < x->nmr; i++)
		stale |= rgpu_stale(x->gpu[i]);
	if (!stale)
		return 0;
	for (uint32_t i = 0; i < x->nrmt; i++)
		if (x->rmt[i].used)
			(void)xrdma_settle(x, &x->rmt[i], 0, 0);
	for (uint32_t i = 0; i < x->nmr && rc == 0; i++)
		if (rgpu_stale(x->gpu[i]))
			rc = reload(x, i, err, errlen);
	return rc;
}

/* A remote's regions from its descriptor: the host region, then each GPU
 * segment (pool bytes from the sum of the lens before it). */
int xrdma_remote_map(struct xrdma_remote *r, const struct rdma_desc *d,
		      char *err, size_t errlen)
{
	uint64_t start = 0;

	r->reg = (struct rdma_region){ d->addr, d->size, d->rkey };
	r->flat = calloc(1u + d->nseg, sizeof *r->flat);
	r->seg = calloc(d->nseg ? d->nseg : 1, sizeof *r->seg);
	if (!r->flat || !r->seg)
		return kvw_errf(err, errlen, KVW_ENOMEM, "rdma: out of memory");
	r->flat[0] = r->reg;
	for (uint16_t k = 0; k < d->nseg; k++) {
		r->seg[k] = (struct rdma_pseg){
			start, { d->seg[k].addr, d->seg[k].len, d->seg[k].rkey } };
		r->flat[1 + k] = r->seg[k].r;
		start += d->seg[k].len;
	}
	r->map = (struct rdma_pmap){ r->reg, r->seg, d->nseg, 0 };
	return 0;
}

/* The batch cut where a region ends on either side, into x->piece: *np
 * pieces naming x->lflat (src) and r->flat (dst). */
int xrdma_cut(struct xrdma_xport *x, const struct xrdma_remote *r,
	       const struct xport_copy *c, size_t n, size_t *np, char *err,
	       size_t errlen)
{
	size_t k = rdma_pmap_split(c, n, x->lmap, &r->map, x->piece,
				  x->cappiece);

	if (k > x->cappiece) {
		struct xport_copy *p = realloc(x->piece, k * sizeof *p);

		if (!p)
			return kvw_errf(err, errlen, KVW_ENOMEM,
					"rdma: out of memory");
		x->piece = p;
		x->cappiece = k;
		(void)rdma_pmap_split(c, n, x->lmap, &r->map, p, k);
	}
	*np = k;
	return 0;
}
