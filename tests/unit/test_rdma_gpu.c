/*
 * test_rdma_gpu.c - GPU pools over the rdma transport, with no GPU and no
 * HCA: the fake verbs device (fake_verbs.h, its ibv_reg_dmabuf_mr maps the
 * fd it is given) and the CPU stand-in CUDA runtime (tests/fakecuda/,
 * memfd "device memory", a stand-in cuMemGetHandleForAddressRange behind
 * cudaGetDriverEntryPoint). It proves the plumbing, never a GPU or an HCA.
 * Shown: the dmabuf way is taken where both libraries offer it, and WRITEs
 * go from a prefill engine's device memory to a decode engine's,
 * byte-exact, cut where buffers end on either side, AUX bytes host to
 * host; peer memory where dmabuf is missing or fails; a refusal naming
 * both ways where neither works (nothing left registered); a new engine
 * epoch at the decode deregisters the old regions and describes new rkeys
 * (the old queue pair's writes are refused by the HCA, a new connect
 * lands in the new memory), a removed record turns the pool back into a
 * host pool, and a new epoch at the prefill is read from the new memory.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"
#include "base/kvw.h"
#include "mem/cuda_rt.h"
#include "mem/gpool.h"
#include "mem/pool.h"
#include "xport/rdma/rdma_desc.h"
#include "xport/rdma/xport_rdma.h"
#include "xport/xport.h"

#include "fake_verbs.h"

#define BUF 4096u        /* each of the two GPU buffers of a pool */
#define KV (2u * BUF)    /* GPU bytes of a pool */
#define AUX 1024u        /* host bytes after them */
#define PSZ (KV + AUX)

static const struct curt *rt;
static struct rdma_lib lib; /* FAKE, with verbs taken out per test */

/* One engine's pool: the host pool and its GPU buffers. The decode keeps
 * each buffer in an allocation of its own, the prefill both in one. */
struct side {
	char path[96], rec[96];
	struct pool *p;
	void *alloc[2];
	uint8_t *buf[2];
};

struct fx {
	struct side s, d; /* prefill source, decode destination */
	struct xport *pre, *dec;
	uint32_t src_id, dst_id;
	uint8_t desc[KVW_MAX_DESC];
	size_t desclen;
	char err[512];
};

static int is_device(uint64_t a)
{
	uint64_t base;
	size_t size;

	return rt->mem_range(&base, &size, a) == 0;
}

static void fill(uint8_t *p, uint32_t n, uint32_t seed)
{
	for (uint32_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * seed + i / 253 + seed);
}

/* Fresh device memory for side s (seed: its bytes), then its record. */
static void engine(struct side *s, int shared, uint32_t seed, uint64_t epoch)
{
	uint64_t ptrs[2], lens[2] = { BUF, BUF };
	uint32_t items[2] = { 256, 256 };
	char err[256];

	if (shared) {
		assert_int_equal(rt->malloc_(&s->alloc[0], KV + 64), 0);
		s->alloc[1] = NULL;
		s->buf[0] = s->alloc[0];
		s->buf[1] = (uint8_t *)s->alloc[0] + 64 + BUF;
	} else {
		for (int i = 0; i < 2; i++) {
			assert_int_equal(rt->malloc_(&s->alloc[i], BUF), 0);
			s->buf[i] = s->alloc[i];
		}
	}
	fill(s->buf[0], BUF, seed);
	fill(s->buf[1], BUF, seed + 2);
	ptrs[0] = (uint64_t)(uintptr_t)s->buf[0];
	ptrs[1] = (uint64_t)(uintptr_t)s->buf[1];
	assert_int_equal(gpool_export(s->rec, 0, ptrs, lens, items, 2, PSZ,
				      epoch, err, sizeof err), 0);
}

static void engine_free(struct side *s)
{
	for (int i = 0; i < 2; i++)
		if (s->alloc[i])
			assert_int_equal(rt->free_(s->alloc[i]), 0);
	memset(s->alloc, 0, sizeof s->alloc);
}

static void side_init(struct side *s, const char *tag, uint32_t seed)
{
	struct pool *rw = NULL;
	char err[256];

	snprintf(s->path, sizeof s->path, "/dev/shm/kvwire.trg-%d-%s.pool",
		 (int)getpid(), tag);
	assert_int_equal(gpool_path_for(s->path, s->rec, sizeof s->rec), 0);
	assert_int_equal(pool_create(s->path, PSZ, &rw, err, sizeof err), 0);
	fill(pool_base(rw), PSZ, seed);
	pool_close(&rw);
	assert_int_equal(pool_open(s->path, 1, &s->p, err, sizeof err), 0);
}

static void side_fini(struct side *s)
{
	pool_close(&s->p);
	unlink(s->path);
	unlink(s->rec);
	engine_free(s);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);

	lib = FAKE;
	rdma_lib_override(&lib);
	F.device_mem = NULL;
	F.dmabuf_errno = 0;
	F.dmabuf_regs = F.plain_regs = 0;
	unsetenv("FAKECUDA_NO_DMABUF");
	side_init(&f->s, "s", 7);
	side_init(&f->d, "d", 3);
	engine(&f->s, 1, 11, 1);
	engine(&f->d, 0, 5, 1);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	xport_close(&f->pre);
	xport_close(&f->dec);
	side_fini(&f->s);
	side_fini(&f->d);
	assert_int_equal(F.live_qps, 0);
	assert_null(F.mrs); /* every region deregistered */
	rdma_lib_override(NULL);
	free(f);
	return 0;
}

/* Opens and registers the decode (listening) instance: its result. */
static int open_decode(struct fx *f)
{
	uint32_t id;

	assert_int_equal(xport_open(xport_find("rdma"), &f->dec, f->err,
				    sizeof f->err), 0);
	assert_int_equal(xport_rdma_listen(f->dec, "127.0.0.1:0", f->err,
					   sizeof f->err), 0);
	return xport_register(f->dec, f->d.p, &id, f->desc, sizeof f->desc,
			      &f->desclen, f->err, sizeof f->err);
}

static int open_prefill(struct fx *f)
{
	uint8_t own[KVW_MAX_DESC];
	size_t ownlen;

	assert_int_equal(xport_open(xport_find("rdma"), &f->pre, f->err,
				    sizeof f->err), 0);
	return xport_register(f->pre, f->s.p, &f->src_id, own, sizeof own,
			      &ownlen, f->err, sizeof f->err);
}

static uint8_t flags_of(const struct fx *f, struct rdma_desc *d)
{
	char err[200];

	assert_int_equal(rdma_desc_decode(f->desc, f->desclen, d, err,
					  sizeof err), 0);
	return d->flags;
}

/* Pool byte off of side s, wherever it lives. */
static uint8_t *at(const struct side *s, uint64_t off)
{
	if (off < KV)
		return s->buf[off / BUF] + off % BUF;
	return (uint8_t *)pool_base(s->p) + off;
}

/* Copies that cross both sides' buffer ends at other places, stay inside
 * buffers, and move AUX bytes; plus scattered small ones. */
static size_t batch(struct xport_copy *c, uint32_t src, uint32_t dst)
{
	size_t n = 0;

	c[n++] = (struct xport_copy){ BUF - 300, BUF - 100, 700, src, dst };
	c[n++] = (struct xport_copy){ 0, BUF + 1000, 2000, src, dst };
	c[n++] = (struct xport_copy){ KV - 50, KV - 20, 100, src, dst };
	c[n++] = (struct xport_copy){ KV + 10, KV + 500, 400, src, dst };
	for (uint32_t i = 0; i < 40; i++)
		c[n++] = (struct xport_copy){ 2000 + i * 97, 100 + i * 41, 30,
					      src, dst };
	return n;
}

static void assert_landed(const struct fx *f, const struct xport_copy *c,
			  size_t n)
{
	for (size_t i = 0; i < n; i++)
		for (uint64_t b = 0; b < c[i].len; b++)
			if (*at(&f->d, c[i].dst_off + b) !=
			    *at(&f->s, c[i].src_off + b))
				fail_msg("copy %zu byte %llu differs", i,
					 (unsigned long long)b);
}

/* Connects the prefill to the current descriptor and moves one batch. */
static void move_batch(struct fx *f)
{
	static struct xport_copy c[64];
	size_t n;

	assert_int_equal(xport_connect(f->pre, f->desc, f->desclen, &f->dst_id,
				       f->err, sizeof f->err), 0);
	n = batch(c, f->src_id, f->dst_id);
	assert_int_equal(xport_write_batch(f->pre, c, n, f->err, sizeof f->err),
			 0);
	assert_int_equal(xport_wait(f->pre, 5000, f->err, sizeof f->err), 0);
	assert_landed(f, c, n);
}

static void dmabuf_is_taken_when_offered_and_gpu_to_gpu_lands_byte_exact(
	void **state)
{
	struct fx *f = *state;
	struct rdma_desc d;

	assert_int_equal(open_decode(f), 0);
	assert_int_equal(flags_of(f, &d), RDMA_DESC_GPU | RDMA_DESC_DMABUF);
	assert_int_equal(d.nseg, 2);
	assert_int_equal(d.seg[0].len, BUF);
	assert_int_equal(d.seg[1].len, BUF);
	assert_int_equal(d.size, PSZ);
	assert_int_equal(F.dmabuf_regs, 2); /* one per allocation */
	assert_int_equal(open_prefill(f), 0);
	assert_int_equal(F.dmabuf_regs, 3); /* the prefill's one allocation */
	assert_int_equal(F.plain_regs, 2);  /* the host pools */
	move_batch(f);
}

static void peer_memory_where_dmabuf_is_missing_or_fails(void **state)
{
	struct fx *f = *state;
	struct rdma_desc d;

	for (int way = 0; way < 3; way++) {
		lib.reg_dmabuf_mr = way == 0 ? NULL : FAKE.reg_dmabuf_mr;
		if (way == 1)
			setenv("FAKECUDA_NO_DMABUF", "1", 1);
		F.dmabuf_errno = way == 2 ? EOPNOTSUPP : 0;
		F.dmabuf_regs = 0;
		assert_int_equal(open_decode(f), 0);
		assert_int_equal(flags_of(f, &d), RDMA_DESC_GPU);
		assert_int_equal(d.nseg, 2);
		assert_int_equal(F.dmabuf_regs, 0);
		if (way == 2) { /* a whole GPU-to-GPU move on peer memory */
			assert_int_equal(open_prefill(f), 0);
			move_batch(f);
			xport_close(&f->pre);
		}
		xport_close(&f->dec);
		unsetenv("FAKECUDA_NO_DMABUF");
	}
}

static void neither_way_is_refused_naming_both(void **state)
{
	struct fx *f = *state;

	lib.reg_dmabuf_mr = NULL;
	F.device_mem = is_device;
	assert_int_equal(open_decode(f), KVW_ESYS);
	assert_non_null(strstr(f->err, "unable to register device memory"));
	assert_non_null(strstr(f->err, "dmabuf: libibverbs has no "
					"ibv_reg_dmabuf_mr"));
	assert_non_null(strstr(f->err, "peer memory: ibv_reg_mr: Bad address"));
	assert_non_null(strstr(f->err, f->d.rec));
	lib.reg_dmabuf_mr = FAKE.reg_dmabuf_mr;
	F.dmabuf_errno = EOPNOTSUPP;
	assert_int_equal(open_prefill(f), KVW_ESYS);
	assert_non_null(strstr(f->err, "dmabuf: ibv_reg_dmabuf_mr: Operation "
					"not supported"));
	assert_non_null(strstr(f->err, "nvidia-peermem"));
	/* The refused registrations left nothing, host pools included. */
	assert_null(F.mrs);
}

static void a_decode_epoch_registers_again_with_new_rkeys(void **state)
{
	struct fx *f = *state;
	struct rdma_desc old, now;
	uint8_t first[KVW_MAX_DESC];
	size_t firstlen;
	struct xport_copy c[64];
	uint32_t old_id;
	int changed = 7, rc;

	assert_int_equal(open_decode(f), 0);
	assert_int_equal(open_prefill(f), 0);
	move_batch(f);
	old_id = f->dst_id;
	(void)flags_of(f, &old);
	memcpy(first, f->desc, f->desclen);
	firstlen = f->desclen;
	assert_int_equal(xport_rdma_refresh(f->dec, 0, f->desc, sizeof f->desc,
					    &f->desclen, &changed, f->err,
					    sizeof f->err), 0);
	assert_int_equal(changed, 0); /* same record: nothing to do */
	/* The engine restarts: new device memory, a new record. */
	engine_free(&f->d);
	engine(&f->d, 0, 9, 2);
	assert_int_equal(xport_rdma_refresh(f->dec, 0, f->desc, sizeof f->desc,
					    &f->desclen, &changed, f->err,
					    sizeof f->err), 0);
	assert_int_equal(changed, 1);
	assert_int_equal(flags_of(f, &now), RDMA_DESC_GPU | RDMA_DESC_DMABUF);
	assert_int_not_equal(now.seg[0].rkey, old.seg[0].rkey);
	assert_int_not_equal(now.seg[1].rkey, old.seg[1].rkey);
	assert_int_equal(now.rkey, old.rkey); /* the host pool stays */
	/* The old queue pair's writes into the old regions are refused. */
	rc = xport_write_batch(f->pre, c, batch(c, f->src_id, old_id), f->err,
			       sizeof f->err);
	if (rc == 0)
		rc = xport_wait(f->pre, 5000, f->err, sizeof f->err);
	assert_int_equal(rc, KVW_ESYS);
	assert_non_null(strstr(f->err, "remote access error"));
	xport_disconnect(f->pre, old_id);
	move_batch(f); /* a new queue pair, into the new memory */
	assert_memory_not_equal(first, f->desc, firstlen);
	/* The engine goes away: a host pool again. */
	unlink(f->d.rec);
	assert_int_equal(xport_rdma_refresh(f->dec, 0, f->desc, sizeof f->desc,
					    &f->desclen, &changed, f->err,
					    sizeof f->err), 0);
	assert_int_equal(changed, 1);
	assert_int_equal(flags_of(f, &now), 0);
}

static void a_prefill_epoch_is_read_from_the_new_memory(void **state)
{
	struct fx *f = *state;

	assert_int_equal(open_decode(f), 0);
	assert_int_equal(open_prefill(f), 0);
	move_batch(f);
	engine_free(&f->s);
	engine(&f->s, 1, 23, 2); /* other bytes, new memory */
	move_batch(f);          /* checks against the new bytes */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			dmabuf_is_taken_when_offered_and_gpu_to_gpu_lands_byte_exact,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			peer_memory_where_dmabuf_is_missing_or_fails, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			neither_way_is_refused_naming_both, setup, teardown),
		cmocka_unit_test_setup_teardown(
			a_decode_epoch_registers_again_with_new_rkeys, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			a_prefill_epoch_is_read_from_the_new_memory, setup,
			teardown),
	};
	char err[256];

	if (fakecuda_use() != 0 || curt_get(&rt, err, sizeof err) != 0) {
		fprintf(stderr, "test_rdma_gpu: the stand-in runtime: %s\n", err);
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
