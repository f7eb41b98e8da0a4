/*
 * bench_copy.c - kv-bench copy (see bench_copy.h). Layout: each pool holds
 * 2 x total_bytes cut into slots of one run (contiguous) or one page
 * (scattered); a pass uses every other slot, in a shuffled order chosen
 * independently for the source and the destination, so no two copied pages
 * of the scattered pattern are adjacent on either side and no pass walks
 * memory in address order.
 */
#include "bench_copy.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_copy_cuda.h"
#include "bench_cpu.h"
#include "bench_limit.h"
#include "bench_stream.h"
#include "base/proc.h"
#include "mem/pool.h"
#include "roles/sender/worker.h"
#include "xport/rdma/xport_rdma.h"
#include "xport/tcp/tcp_sink.h"
#include "xport/tcp/xport_tcp.h"
#include "xport/xport.h"

struct bc {
	pid_t sink; /* tcp: the forked sink writing into dst, 0: none */
	struct bcc *eng; /* cuda: the child owning the device memory */
	struct pool *src_rw, *src_ro, *dst;
	struct xport *px, *dx; /* prefill side, decode side */
	uint32_t src_id, dst_id;
	struct xport_copy *copies;
	struct bench_limit_span *spans;
	uint32_t n;
	char src_path[64], dst_path[64];
};

static uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* v[0..n) = 0, 2, 4, ... shuffled. */
static void even_slots(uint32_t *v, uint32_t n, uint64_t *seed)
{
	for (uint32_t i = 0; i < n; i++)
		v[i] = 2 * i;
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = (uint32_t)(mix(seed) % i), t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

static int build_list(struct bc *b, const struct bench_copy_cfg *c,
		      uint64_t copy_bytes, char *err, size_t errlen)
{
	uint64_t seed = c->seed;
	uint32_t *s = calloc(b->n, sizeof *s), *d = calloc(b->n, sizeof *d);
	uint8_t *sb = pool_base(b->src_ro), *db = pool_base(b->dst);
	int rc = 0;

	b->copies = calloc(b->n, sizeof *b->copies);
	b->spans = calloc(b->n, sizeof *b->spans);
	if (!s || !d || !b->copies || !b->spans) {
		kvw_seterr(err, errlen, "out of memory (%u copies)", b->n);
		rc = KVW_ENOMEM;
		goto out;
	}
	even_slots(s, b->n, &seed);
	even_slots(d, b->n, &seed);
	for (uint32_t i = 0; i < b->n; i++) {
		uint64_t so = (uint64_t)s[i] * copy_bytes;
		uint64_t dof = (uint64_t)d[i] * copy_bytes;

		b->copies[i] = (struct xport_copy){ so, dof, copy_bytes,
						    b->src_id, b->dst_id };
		b->spans[i] = (struct bench_limit_span){ db + dof, sb + so,
							 copy_bytes };
	}
out:
	free(s);
	free(d);
	return rc;
}

static pid_t bench_parent;

static int parent_gone(void)
{
	return proc_stopping() || getppid() != bench_parent;
}

/* tcp: a forked child serves the decode side's data port into dst, as a
 * kv-receiver sink does (no exec: this process has no threads). */
static int start_sink(struct bc *b, const uint8_t *group_key, char *err,
		      size_t errlen)
{
	struct tcp_sink_cfg sc = { .base = pool_base(b->dst),
				   .size = pool_size(b->dst),
				   .group_key = group_key,
				   .stop = parent_gone };
	uint8_t secret[16];
	int rc = xport_tcp_sink_info(b->dx, &sc.listen_fd, secret);

	if (rc < 0)
		return kvw_errf(err, errlen, rc, "tcp: no data port");
	sc.secret = secret;
	bench_parent = getpid();
	b->sink = fork();
	if (b->sink < 0)
		return kvw_errf(err, errlen, KVW_ESYS, "fork: %s",
				strerror(errno));
	if (b->sink == 0) {
		char e[128];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		_exit(tcp_sink_run(&sc, NULL, e, sizeof e) ? 1 : 0);
	}
	return 0;
}

static int setup_pools(struct bc *b, uint64_t size, char *err, size_t errlen)
{
	int rc;

	snprintf(b->src_path, sizeof b->src_path,
		 "/dev/shm/kvwire.bench-copy-%d-src.pool", (int)getpid());
	snprintf(b->dst_path, sizeof b->dst_path,
		 "/dev/shm/kvwire.bench-copy-%d-dst.pool", (int)getpid());
	(void)pool_unlink(b->src_path);
	(void)pool_unlink(b->dst_path);
	if ((rc = pool_create(b->src_path, size, &b->src_rw, err, errlen)) < 0 ||
	    (rc = pool_create(b->dst_path, size, &b->dst, err, errlen)) < 0 ||
	    (rc = pool_open(b->src_path, 0, &b->src_ro, err, errlen)) < 0)
		return rc;
	/* A pattern in the source, so the check after a pass means something. */
	for (uint64_t i = 0; i < size / 8; i++)
		((uint64_t *)pool_base(b->src_rw))[i] = i * 0x9e3779b97f4a7c15ULL;
	memset(pool_base(b->dst), 0, size);
	return 0;
}

/* The transports, once the copy list exists: the decode side registers
 * its pool; the prefill side registers its own (read-only) and connects the
 * decode one by descriptor. cuda: the engine child registers the device
 * memory first (before this process touches CUDA). */
static int setup_xport(struct bc *b, const struct bench_copy_cfg *c,
		       uint64_t size, char *err, size_t errlen)
{
	uint8_t desc[KVW_MAX_DESC], own[KVW_MAX_DESC];
	size_t desclen, ownlen;
	uint32_t decode_id;
	const struct xport_ops *ops = xport_find(c->cuda ? "cuda"
						 : c->rdma ? "rdma"
						 : c->tcp ? "tcp" : "shm");
	int tcp = c->tcp, rc;

	if (c->cuda && (rc = bcc_start(&b->eng, b->src_path, b->dst_path,
				       size, c->page_bytes, b->copies, b->n,
				       err, errlen)) < 0)
		return rc;
	if ((rc = xport_open(ops, &b->dx, err, errlen)) < 0 ||
	    (tcp && (rc = xport_tcp_listen(b->dx, "127.0.0.1:0", err,
					   errlen)) < 0) ||
	    (c->rdma && (rc = xport_rdma_listen(b->dx, "127.0.0.1:0", err,
						errlen)) < 0) ||
	    (rc = xport_register(b->dx, b->dst, &decode_id, desc, sizeof desc,
				 &desclen, err, errlen)) < 0 ||
	    (tcp && (rc = start_sink(b, c->group_key, err, errlen)) < 0) ||
	    (rc = xport_open(ops, &b->px, err, errlen)) < 0 ||
	    (tcp && c->group_key &&
	     (rc = xport_tcp_set_group_key(b->px, c->group_key)) < 0) ||
	    (rc = xport_register(b->px, b->src_ro, &b->src_id, own, sizeof own,
				 &ownlen, err, errlen)) < 0 ||
	    (rc = xport_connect(b->px, desc, desclen, &b->dst_id, err,
				errlen)) < 0)
		return rc;
	for (uint32_t i = 0; i < b->n; i++) {
		b->copies[i].src = b->src_id;
		b->copies[i].dst = b->dst_id;
	}
	return 0;
}

static void teardown(struct bc *b)
{
	if (b->sink > 0) {
		kill(b->sink, SIGTERM);
		waitpid(b->sink, NULL, 0);
	}
	xport_close(&b->px);
	xport_close(&b->dx);
	bcc_stop(&b->eng); /* after the transports closed their handles */
	pool_close(&b->src_ro);
	pool_close(&b->src_rw);
	pool_close(&b->dst);
	if (b->src_path[0])
		(void)pool_unlink(b->src_path);
	if (b->dst_path[0])
		(void)pool_unlink(b->dst_path);
	free(b->copies);
	free(b->spans);
}

/* One pass of the whole list through the transport, batch by batch as a
 * worker sends it. */
static int xport_pass(struct bc *b, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < b->n; i += WORKER_BATCH) {
		uint32_t k = b->n - i < WORKER_BATCH ? b->n - i : WORKER_BATCH;
		int rc = xport_write_batch(b->px, b->copies + i, k, err, errlen);

		if (rc < 0)
			return rc;
	}
	return xport_wait(b->px, -1, err, errlen);
}

/* Transport passes for at least min_s; GiB/s into *gibs. */
static int xport_timed(struct bc *b, uint64_t pass_bytes, double min_s,
		       double *gibs, double *cpu_gb, char *err, size_t errlen)
{
	double cpu0 = bench_cpu_s(b->sink);
	uint64_t t0 = proc_now_ns(), t, passes = 0;
	int rc;

	do {
		if ((rc = xport_pass(b, err, errlen)) < 0)
			return rc;
		passes++;
		t = proc_now_ns() - t0;
	} while (t < (uint64_t)(min_s * 1e9) && !proc_stopping());
	*gibs = (double)(pass_bytes * passes) / (1024.0 * 1024 * 1024) /
		((double)t / 1e9);
	*cpu_gb = (bench_cpu_s(b->sink) - cpu0) /
		  ((double)(pass_bytes * passes) / 1e9);
	return 0;
}

static int verify(const struct bc *b)
{
	for (uint32_t i = 0; i < b->n; i++)
		if (memcmp(b->spans[i].dst, b->spans[i].src, b->spans[i].len))
			return 0;
	return 1;
}

/* rdma: the decode's exchange thread saw every batch of `passes` passes
 * land (one immediate each), within a second. */
static int immediates_landed(const struct bc *b, uint64_t passes)
{
	uint64_t want = passes * ((b->n + WORKER_BATCH - 1) / WORKER_BATCH);
	struct xport_rdma_stats st = { 0 };

	for (int i = 0; i < 100; i++) {
		if (xport_rdma_stats(b->dx, &st) == 0 && st.batches >= want)
			return st.batches == want;
		usleep(10000);
	}
	return 0;
}

/* The reference of this transport: raw TCP stream, cudaMemcpy D2D of the
 * same list (in the engine child), or memcpy. */
static double limit(struct bc *b, const struct bench_copy_cfg *c,
		    uint64_t bytes, double *cpu_gb, int *rc, char *err,
		    size_t errlen)
{
	double g = 0;

	if (c->tcp)
		return bench_stream_gibs(bytes, c->min_s, cpu_gb);
	if (c->cuda)
		*rc = bcc_limit(b->eng, c->min_s, &g, err, errlen);
	else
		g = bench_limit_memcpy(b->spans, b->n, c->min_s);
	return g;
}

int bench_copy_run(const struct bench_copy_cfg *c, struct bench_copy_result *r,
		   char *err, size_t errlen)
{
	uint64_t copy_bytes = c->page_bytes *
			      (c->pattern == BENCH_COPY_CONTIGUOUS ? c->run_pages
								   : 1);
	struct bc b = { 0 };
	int rc;

	memset(r, 0, sizeof *r);
	if (c->page_bytes == 0 || c->run_pages == 0 || c->reps == 0 ||
	    copy_bytes > c->total_bytes || c->total_bytes / copy_bytes > UINT32_MAX) {
		return kvw_errf(err, errlen, KVW_EINVAL,
				"need page bytes, run pages, reps >= 1 and "
				"one copy (%llu bytes) <= bytes per pass (%llu)",
				(unsigned long long)copy_bytes,
				(unsigned long long)c->total_bytes);
	}
	b.n = (uint32_t)(c->total_bytes / copy_bytes);
	r->copies = b.n;
	r->copy_bytes = copy_bytes;
	r->bytes = (uint64_t)b.n * copy_bytes;
	rc = setup_pools(&b, 2 * r->bytes, err, errlen);
	if (rc == 0)
		rc = build_list(&b, c, copy_bytes, err, errlen);
	if (rc == 0)
		rc = setup_xport(&b, c, 2 * r->bytes, err, errlen);
	/* Untimed warm-up: faults in both sides' mappings. */
	if (rc == 0)
		rc = xport_pass(&b, err, errlen);
	if (rc == 0 && c->cuda)
		rc = bcc_verify(b.eng, &r->verified, err, errlen);
	else if (rc == 0) {
		r->verified = verify(&b) && (!c->rdma || immediates_landed(&b, 1));
		(void)bench_limit_memcpy(b.spans, b.n, 0);
	}
	for (uint32_t k = 0; rc == 0 && k < c->reps; k++) {
		double before, x = 0, after, xcpu = 0;

		/* SIGTERM: stop between measurements; teardown below still
		 * removes both pool files. */
		if (proc_stopping()) {
			rc = kvw_errf(err, errlen, KVW_EAGAIN,
				      "stopped by a signal");
			break;
		}
		before = limit(&b, c, r->bytes, &r->limit_cpu_gb, &rc, err,
			       errlen);
		if (rc == 0)
			rc = xport_timed(&b, r->bytes, c->min_s, &x, &xcpu, err,
					 errlen);
		after = rc ? 0 : limit(&b, c, r->bytes, &r->limit_cpu_gb, &rc,
				       err, errlen);
		r->before_gibs = before > r->before_gibs ? before : r->before_gibs;
		r->after_gibs = after > r->after_gibs ? after : r->after_gibs;
		if (x > r->xport_gibs) {
			r->xport_gibs = x;
			r->xport_cpu_gb = xcpu;
		}
	}
	if (rc == 0 && proc_stopping())
		rc = kvw_errf(err, errlen, KVW_EAGAIN, "stopped by a signal");
	if (rc == 0) {
		double lim = r->before_gibs > r->after_gibs ? r->before_gibs
							    : r->after_gibs;

		r->ratio = lim > 0 ? r->xport_gibs / lim : 0;
	}
	teardown(&b);
	return rc;
}
