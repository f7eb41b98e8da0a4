/*
 * bench_gpu.c - the device mirror of a simulated engine's KV (bench_gpu.h).
 */
#include "bench_gpu.h"

#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "mem/cuda_rt.h"

struct bgpu {
	const struct curt *rt;
	uint8_t *host, *dev;
	uint64_t kv; /* bytes mirrored: pool offsets [0, kv) */
	const struct kvw_buf *bufs;
	uint32_t nbufs; /* the buffers before the first AUX */
};

int bgpu_attach(struct bgpu **out, struct kvw_engine *e,
		const struct kvw_buf *bufs, uint32_t n, int device, char *err,
		size_t errlen)
{
	uint64_t *ptrs = NULL, *lens = NULL;
	uint32_t *items = NULL, k = 0;
	struct bgpu *g;
	int rc;

	*out = NULL;
	g = calloc(1, sizeof *g);
	if (!g)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	g->bufs = bufs;
	g->host = kvw_pool_base(e);
	/* The GPU holds every buffer before the AUX ones, back to back. */
	for (; k < n && bufs[k].role != KVW_ROLE_AUX; k++) {
		if (bufs[k].offset != g->kv) {
			rc = kvw_errf(err, errlen, KVW_EINVAL,
				      "gpu mirror: buffer %u is not packed", k);
			goto fail;
		}
		g->kv += (uint64_t)bufs[k].item_len * bufs[k].pages;
	}
	g->nbufs = k;
	ptrs = calloc(k + 1, sizeof *ptrs);
	lens = calloc(k + 1, sizeof *lens);
	items = calloc(k + 1, sizeof *items);
	if (!ptrs || !lens || !items) {
		rc = kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = curt_get(&g->rt, err, errlen)) ||
	    (rc = curt_ok(g->rt, g->rt->set_device(device), "cudaSetDevice",
			  err, errlen)) ||
	    (rc = curt_ok(g->rt, g->rt->malloc_((void **)&g->dev, g->kv),
			  "cudaMalloc", err, errlen)) ||
	    (rc = curt_ok(g->rt, g->rt->memcpy_(g->dev, g->host, g->kv,
						CURT_MEMCPY_DEFAULT),
			  "cudaMemcpy", err, errlen)))
		goto fail;
	for (uint32_t i = 0; i < k; i++) {
		ptrs[i] = (uint64_t)(uintptr_t)(g->dev + bufs[i].offset);
		lens[i] = (uint64_t)bufs[i].item_len * bufs[i].pages;
		items[i] = bufs[i].item_len;
	}
	rc = kvw_register_gpu_pool(e, device, ptrs, lens, items, k, err,
				   errlen);
	if (rc)
		goto fail;
	free(ptrs);
	free(lens);
	free(items);
	*out = g;
	return 0;
fail:
	free(ptrs);
	free(lens);
	free(items);
	bgpu_close(&g);
	return rc;
}

static int bgpu_move(struct bgpu *g, const uint32_t *pages, uint32_t n,
		     int push)
{
	if (g == NULL)
		return 0;
	for (uint32_t b = 0; b < g->nbufs; b++) {
		const struct kvw_buf *x = &g->bufs[b];

		for (uint32_t i = 0; i < n; i++) {
			uint64_t o = x->offset + (uint64_t)pages[i] * x->item_len;
			int rc = push ? g->rt->memcpy_(g->dev + o, g->host + o,
						       x->item_len,
						       CURT_MEMCPY_DEFAULT)
				      : g->rt->memcpy_(g->host + o, g->dev + o,
						       x->item_len,
						       CURT_MEMCPY_DEFAULT);

			if (rc != CURT_SUCCESS)
				return KVW_ESYS;
			/* Pushed: the GPU alone holds the page now. A
			 * transport that sent the host copy instead (a
			 * missed device-to-host stage) fails the verify. */
			if (push)
				memset(g->host + o, 0xEE, x->item_len);
		}
	}
	return 0;
}

int bgpu_push(struct bgpu *g, const uint32_t *pages, uint32_t n)
{
	return bgpu_move(g, pages, n, 1);
}

int bgpu_pull(struct bgpu *g, const uint32_t *pages, uint32_t n)
{
	return bgpu_move(g, pages, n, 0);
}

void bgpu_close(struct bgpu **g)
{
	if (g == NULL || *g == NULL)
		return;
	if ((*g)->dev)
		(*g)->rt->free_((*g)->dev);
	free(*g);
	*g = NULL;
}
