/*
 * bench_plan.c - how long plan_build and plan_chunk take for a 64-layer
 * MHA layout (128 K/V buffers + AUX) and a 1000-page room, with a
 * contiguous and with a scattered page list. Prints microseconds per call;
 * the target is well under 1 ms per plan_chunk. Not a test: no pass/fail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "plan/layout.h"
#include "plan/plan.h"

#define NPAGES	   1000u
#define POOL_PAGES 4096u

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void bench_chunk(const struct plan *p, const char *name,
			const uint32_t *sp, const uint32_t *dp,
			struct plan_copy *out, size_t cap)
{
	char err[256];
	size_t n = 0;
	double best = 1e30, sum = 0;

	if (plan_chunk(p, sp, dp, NPAGES, 1, 3, 7, out, cap, &n, err,
		       sizeof err) < 0) {
		fprintf(stderr, "bench_plan: plan_chunk: %s\n", err);
		exit(1);
	}
	/* batches of 50 calls; the best batch is the figure least disturbed
	 * by whatever else the machine runs */
	for (int b = 0; b < 40; b++) {
		double t0 = now_us(), per;

		for (int i = 0; i < 50; i++)
			plan_chunk(p, sp, dp, NPAGES, 1, 3, 7, out, cap, &n,
				   err, sizeof err);
		per = (now_us() - t0) / 50;
		sum += per;
		if (per < best)
			best = per;
	}
	printf("plan_chunk %-10s %4u pages -> %7zu copies: best %8.2f us/call, "
	       "mean %8.2f\n",
	       name, NPAGES, n, best, sum / 40);
}

int main(void)
{
	static struct kvw_buf b[200];
	static uint32_t sp[NPAGES], dp[NPAGES];
	struct layout_spec spec = {.layers = 64,
				   .mla = 0,
				   .item_len = 16 * 8 * 128 * 2,
				   .pages = POOL_PAGES,
				   .aux_slots = 64,
				   .naux = 1, .aux_item_lens = (const uint32_t[]){ 256 }};
	uint64_t pool = 0;
	uint32_t nb = 0;
	struct plan_side side = {0};
	struct kvw_model m = {
	    .page_tokens = 16, .rank_kv_heads = 8, .head_bytes = 256};
	struct plan *p = NULL;
	struct plan_copy *out;
	size_t cap;
	char err[256];
	double t0, t1;
	int iters = 2000;

	if (layout_make(&spec, b, 200, &nb, &pool, err, sizeof err) < 0) {
		fprintf(stderr, "bench_plan: layout: %s\n", err);
		return 1;
	}
	side = (struct plan_side){&m, b, nb, &pool, 1};
	t0 = now_us();
	for (int i = 0; i < iters; i++) {
		if (plan_build(&side, &side, NULL, &p, err, sizeof err) < 0) {
			fprintf(stderr, "bench_plan: plan_build: %s\n", err);
			return 1;
		}
		plan_free(&p);
	}
	t1 = now_us();
	printf("plan_build %u buffers: %8.2f us/call\n", nb, (t1 - t0) / iters);
	plan_build(&side, &side, NULL, &p, err, sizeof err);

	cap = plan_chunk_max(p, NPAGES, 1);
	out = malloc(cap * sizeof *out);
	if (out == NULL)
		return 1;
	for (uint32_t i = 0; i < NPAGES; i++) {
		sp[i] = 100 + i;
		dp[i] = 2000 + i;
	}
	bench_chunk(p, "contiguous", sp, dp, out, cap);
	srand(1);
	for (uint32_t i = 0; i < NPAGES; i++) { /* distinct random pages */
		sp[i] = i * 4 + (uint32_t)(rand() % 4);
		dp[i] = (i * 7919u) % POOL_PAGES;
	}
	bench_chunk(p, "scattered", sp, dp, out, cap);
	free(out);
	plan_free(&p);
	return 0;
}
