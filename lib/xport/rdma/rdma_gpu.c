/*
 * rdma_gpu.c - GPU pools registered with the HCA: dmabuf, else peer
 * memory, else a refusal naming both (rdma_gpu.h).
 */
#include "rdma_gpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "mem/mem.h"
#include "rdma_pmap.h"
#include "rdma_qp.h"

struct rgpu {
	struct mem_region *r;
	const struct rdma_lib *lib; /* of the regions registered */
	struct ibv_mr **mr;        /* per buffer: its allocation's region,
				    * owned by the allocation's first buffer */
	uint8_t *owner;            /* per buffer: 1 when it owns mr[i] */
	struct rdma_pseg *seg;
	uint32_t *rkey;
	uint32_t nseg;
	int dmabuf;
};

int rgpu_open(struct rgpu **out, const char *pool_path, uint64_t size,
	      char *err, size_t errlen)
{
	struct rgpu *g = calloc(1, sizeof *g);
	int rc;

	*out = NULL;
	if (!g)
		return kvw_errf(err, errlen, KVW_ENOMEM, "rdma: out of memory");
	if ((rc = mem_region_open(&g->r, pool_path, size, 0, err, errlen))) {
		free(g);
		return rc;
	}
	*out = g;
	return 0;
}

int rgpu_stale(const struct rgpu *g)
{
	return mem_region_stale(g->r);
}

/* Drops every region and the record's handles. */
static void unload(struct rgpu *g)
{
	for (uint32_t i = 0; i < g->nseg; i++)
		if (g->owner[i] && g->mr[i])
			g->lib->dereg_mr(g->mr[i]);
	free(g->mr);
	free(g->owner);
	free(g->seg);
	free(g->rkey);
	g->mr = NULL;
	g->owner = NULL;
	g->seg = NULL;
	g->rkey = NULL;
	g->nseg = 0;
	g->dmabuf = 0;
	mem_region_unmap(g->r);
}

/* The dmabuf way for [base, base + size): the region, or NULL with why. */
static struct ibv_mr *by_dmabuf(const struct rgpu *g,
				const struct rdma_dev *dev, uint64_t base,
				uint64_t size, int access, char *why,
				size_t whylen)
{
	struct ibv_mr *mr;
	int fd, e;

	if (!dev->lib->reg_dmabuf_mr) {
		snprintf(why, whylen, "libibverbs has no ibv_reg_dmabuf_mr");
		return NULL;
	}
	if (mem_region_dmabuf_fd(g->r, base, size, &fd, why, whylen))
		return NULL;
	mr = dev->lib->reg_dmabuf_mr(dev->pd, 0, (size_t)size, base, fd,
				     access);
	e = errno;
	close(fd); /* the region holds its own reference */
	if (!mr)
		snprintf(why, whylen, "ibv_reg_dmabuf_mr: %s", strerror(e));
	return mr;
}

/* Registers the allocation [base, base + size): dmabuf, else peer memory,
 * else KVW_ESYS naming both. */
static int reg_alloc(struct rgpu *g, const struct rdma_dev *dev,
		     uint64_t base, uint64_t size, int access,
		     struct ibv_mr **mr, int *dmabuf, char *err, size_t errlen)
{
	char dw[160];

	*mr = by_dmabuf(g, dev, base, size, access, dw, sizeof dw);
	*dmabuf = *mr != NULL;
	if (*mr)
		return 0;
	*mr = dev->lib->reg_mr(dev->pd, (void *)(uintptr_t)base, (size_t)size,
			       access);
	if (*mr)
		return 0;
	return kvw_errf(err, errlen, KVW_ESYS,
			"rdma: GPU pool %s: unable to register device memory "
			"on %s: dmabuf: %s; peer memory: ibv_reg_mr: %s (is "
			"nvidia-peermem loaded?)",
			mem_region_name(g->r), dev->name, dw, strerror(errno));
}

/* Registers each allocation of the mapped GPU buffers once; every
 * buffer gets its allocation's keys. */
static int reg_all(struct rgpu *g, const struct rdma_dev *dev, int access,
		   char *err, size_t errlen)
{
	const struct mem_buf *b;
	uint32_t n = mem_region_bufs(g->r, &b);
	int all_dmabuf = 1;

	while (n > 0 && b[n - 1].where != MEM_GPU)
		n--; /* the AUX bytes past the buffers stay host memory */
	g->mr = calloc(n + 1, sizeof *g->mr);
	g->owner = calloc(n + 1, 1);
	g->seg = calloc(n + 1, sizeof *g->seg);
	g->rkey = calloc(n + 1, sizeof *g->rkey);
	if (!g->mr || !g->owner || !g->seg || !g->rkey)
		return kvw_errf(err, errlen, KVW_ENOMEM, "rdma: out of memory");
	g->lib = dev->lib;
	g->nseg = n;
	for (uint32_t i = 0; i < n; i++) {
		int dmabuf, rc;

		for (uint32_t j = 0; j < i && !g->mr[i]; j++)
			if (b[j].alloc_addr == b[i].alloc_addr)
				g->mr[i] = g->mr[j];
		if (!g->mr[i]) {
			rc = reg_alloc(g, dev, b[i].alloc_addr, b[i].alloc_size,
				       access, &g->mr[i], &dmabuf, err, errlen);
			if (rc)
				return rc;
			g->owner[i] = 1;
			all_dmabuf &= dmabuf;
		}
		g->seg[i] = (struct rdma_pseg){
			b[i].start, { b[i].addr, b[i].len, g->mr[i]->lkey } };
		g->rkey[i] = g->mr[i]->rkey;
	}
	g->dmabuf = all_dmabuf;
	return 0;
}

int rgpu_load(struct rgpu *g, const struct rdma_dev *dev, int access,
	      char *err, size_t errlen)
{
	int rc;

	unload(g);
	rc = mem_region_map(g->r, MEM_DEV_RECORD, err, errlen);
	if (rc || !mem_region_on_gpu(g->r)) /* a host pool: nothing to add */
		return rc;
	if ((rc = reg_all(g, dev, access, err, errlen))) {
		unload(g);
		return rc;
	}
	LOG(LOG_INFO, "rdma: GPU pool %s (epoch %016llx): %u buffers "
	    "registered on %s through %s", mem_region_name(g->r),
	    (unsigned long long)mem_region_epoch(g->r), g->nseg, dev->name,
	    g->dmabuf ? "dmabuf" : "peer memory");
	return 0;
}

uint32_t rgpu_nseg(const struct rgpu *g)
{
	return g->nseg;
}

const struct rdma_pseg *rgpu_segs(const struct rgpu *g)
{
	return g->seg;
}

uint32_t rgpu_rkey(const struct rgpu *g, uint32_t i)
{
	return g->rkey[i];
}

int rgpu_dmabuf(const struct rgpu *g)
{
	return g->dmabuf;
}

void rgpu_close(struct rgpu **gp)
{
	if (!gp || !*gp)
		return;
	unload(*gp);
	mem_region_close(&(*gp)->r);
	free(*gp);
	*gp = NULL;
}
