/*
 * test_receiver_rdma.c - kv-receiver follows its engine's GPU epochs over
 * rdma (receiver_pool_fresh), on the fake verbs device (fake_verbs.h) and
 * the CPU stand-in CUDA runtime (tests/fakecuda/): it proves the
 * plumbing, never a GPU or an HCA. A receiver registers its host pool at
 * start; once the engine registers a GPU pool the next room's check
 * describes it (flag GPU, its rkeys) and marks every prefill peer for a
 * new REGISTER; the same record again changes nothing; a new engine epoch
 * gives new rkeys and marks them again; a GPU pool that cannot be
 * registered is refused (the room fails) and the peers keep what they
 * had; another transport is never touched; engine host memory laid over
 * the pool (kvw_register_host), which the pool's memory region does not
 * reach, is refused room by room while it is registered.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fakecuda.h"
#include "mem/cuda_rt.h"
#include "mem/gpool.h"
#include "mem/hostmem.h"
#include "mem/pool.h"
#include "roles/receiver/receiver_impl.h"
#include "xport/rdma/rdma_desc.h"
#include "xport/rdma/xport_rdma.h"
#include "xport/xport.h"

#include "fake_verbs.h"

#define BUF 4096u
#define PSZ (2u * BUF + 512u)

static const struct curt *rt;
static struct rdma_lib lib;

struct fx {
	struct receiver r;
	struct rx_peer peer[2], *peers[2];
	char path[96], rec[96];
	void *alloc;
};

static int is_device(uint64_t a)
{
	uint64_t base;
	size_t size;

	return rt->mem_range(&base, &size, a) == 0;
}

/* The engine registers a GPU pool of two buffers in one new allocation. */
static void engine(struct fx *f, uint64_t epoch)
{
	uint64_t ptrs[2], lens[2] = { BUF, BUF };
	uint32_t items[2] = { 256, 256 };
	char err[256];

	if (f->alloc)
		assert_int_equal(rt->free_(f->alloc), 0);
	assert_int_equal(rt->malloc_(&f->alloc, 2 * BUF), 0);
	ptrs[0] = (uint64_t)(uintptr_t)f->alloc;
	ptrs[1] = ptrs[0] + BUF;
	assert_int_equal(gpool_export(f->rec, 0, ptrs, lens, items, 2, PSZ,
				      epoch, err, sizeof err), 0);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	char err[256];
	int reused;

	lib = FAKE;
	rdma_lib_override(&lib);
	F.device_mem = NULL;
	snprintf(f->path, sizeof f->path, "/dev/shm/kvwire.trr-%d.pool",
		 (int)getpid());
	assert_int_equal(gpool_path_for(f->path, f->rec, sizeof f->rec), 0);
	/* A control process's pool, with its host memory record. */
	assert_int_equal(pool_adopt(f->path, PSZ, &f->r.pool, &reused, err,
				    sizeof err), 0);
	snprintf(f->r.transport, sizeof f->r.transport, "rdma");
	assert_int_equal(xport_open(xport_find("rdma"), &f->r.xp, err,
				    sizeof err), 0);
	assert_int_equal(xport_rdma_listen(f->r.xp, "127.0.0.1:0", err,
					   sizeof err), 0);
	assert_int_equal(xport_register(f->r.xp, f->r.pool, &f->r.pool_id,
					f->r.desc, sizeof f->r.desc,
					&f->r.desclen, err, sizeof err), 0);
	for (int i = 0; i < 2; i++) {
		f->peer[i].registered = 1;
		f->peers[i] = &f->peer[i];
	}
	f->r.peers = f->peers;
	f->r.npeers = 2;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	xport_close(&f->r.xp);
	pool_close(&f->r.pool);
	(void)pool_unlink(f->path);
	unlink(f->rec);
	if (f->alloc)
		assert_int_equal(rt->free_(f->alloc), 0);
	assert_null(F.mrs);
	rdma_lib_override(NULL);
	free(f);
	return 0;
}

static struct rdma_desc described(const struct fx *f)
{
	struct rdma_desc d;
	char err[200];

	assert_int_equal(rdma_desc_decode(f->r.desc, f->r.desclen, &d, err,
					  sizeof err), 0);
	return d;
}

static int both_registered(const struct fx *f)
{
	return f->peer[0].registered + f->peer[1].registered;
}

static void an_engine_epoch_is_described_and_registered_again(void **state)
{
	struct fx *f = *state;
	struct rdma_desc d;
	uint32_t rkey;

	assert_int_equal(described(f).flags, 0); /* a host pool at start */
	assert_int_equal(receiver_pool_fresh(&f->r), 0);
	assert_int_equal(both_registered(f), 2); /* no record: nothing */
	engine(f, 1);
	assert_int_equal(receiver_pool_fresh(&f->r), 0);
	d = described(f);
	assert_int_equal(d.flags, RDMA_DESC_GPU | RDMA_DESC_DMABUF);
	assert_int_equal(d.nseg, 2);
	assert_int_equal(d.seg[0].rkey, d.seg[1].rkey); /* one allocation */
	rkey = d.seg[0].rkey;
	assert_int_equal(both_registered(f), 0);
	f->peer[0].registered = f->peer[1].registered = 1; /* REGISTERs sent */
	assert_int_equal(receiver_pool_fresh(&f->r), 0);
	assert_int_equal(both_registered(f), 2); /* same record: nothing */
	engine(f, 2);
	assert_int_equal(receiver_pool_fresh(&f->r), 0);
	d = described(f);
	assert_int_not_equal(d.seg[0].rkey, rkey);
	assert_int_equal(both_registered(f), 0);
}

static void an_unregistrable_gpu_pool_fails_the_room(void **state)
{
	struct fx *f = *state;
	uint8_t before[KVW_MAX_DESC];
	size_t len = f->r.desclen;

	memcpy(before, f->r.desc, len);
	lib.reg_dmabuf_mr = NULL;
	F.device_mem = is_device;
	engine(f, 1);
	assert_int_equal(receiver_pool_fresh(&f->r), -1);
	assert_int_equal(receiver_pool_fresh(&f->r), -1); /* each room, again */
	assert_int_equal(both_registered(f), 2);
	assert_int_equal(f->r.desclen, len);
	assert_memory_equal(f->r.desc, before, len);
	F.device_mem = NULL; /* nvidia-peermem loaded after all */
	assert_int_equal(receiver_pool_fresh(&f->r), 0);
	assert_int_equal(described(f).flags, RDMA_DESC_GPU);
	assert_int_equal(both_registered(f), 0);
}

static void another_transport_is_never_touched(void **state)
{
	struct fx *f = *state;

	snprintf(f->r.transport, sizeof f->r.transport, "shm");
	engine(f, 1);
	assert_int_equal(receiver_pool_fresh(&f->r), 0);
	assert_int_equal(both_registered(f), 2);
	assert_int_equal(described(f).flags, 0);
}

static void engine_host_memory_is_refused_while_registered(void **state)
{
	struct fx *f = *state;
	struct hostmem_map m;
	char err[256];
	void *base;

	assert_int_equal(hostmem_alloc(f->path, 0x5eed, BUF, &base, &m.dev,
				       &m.ino, err, sizeof err), 0);
	m.start = 0;
	m.len = BUF;
	m.file_off = 0;
	m.key = 0x5eed;
	assert_int_equal(hostmem_view_write(pool_host_record(f->r.pool), &m, 1,
					    PSZ, 1, err, sizeof err), 0);
	assert_int_equal(receiver_pool_fresh(&f->r), -1);
	assert_int_equal(receiver_pool_fresh(&f->r), -1); /* each room */
	assert_int_equal(both_registered(f), 2);
	/* Taken back: rooms begin again. */
	assert_int_equal(hostmem_view_write(pool_host_record(f->r.pool), NULL,
					    0, PSZ, 2, err, sizeof err), 0);
	assert_int_equal(receiver_pool_fresh(&f->r), 0);
	munmap(base, BUF);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			an_engine_epoch_is_described_and_registered_again, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			engine_host_memory_is_refused_while_registered, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			an_unregistrable_gpu_pool_fails_the_room, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			another_transport_is_never_touched, setup, teardown),
	};
	char err[256] = "";

	if (fakecuda_use() != 0 || curt_get(&rt, err, sizeof err) != 0) {
		fprintf(stderr, "test_receiver_rdma: the stand-in runtime: %s\n",
			err);
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
