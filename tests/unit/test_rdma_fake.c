/*
 * test_rdma_fake.c - the whole rdma transport (xport_rdma.c with its
 * exchange thread, queue pair bring-up and bookkeeping) driven over a fake
 * verbs device in this process (fake_verbs.h, installed with
 * rdma_lib_override). Proved, with no hardware:
 * connect brings both ends to RTS through the exchange (a wrong secret is
 * refused and counted); batches land byte-exact, one immediate each, at
 * most the send queue's depth in flight; a bad copy is refused before any
 * WR is posted; WRs held in flight keep their room busy and make a timed
 * wait time out until they complete; a failed WR fails the wait with the
 * verbs status text and its room, flushes and drains the rest, refuses
 * the remote's later batches, and after disconnect the decode drops its
 * queue pair and a fresh connect works.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/kvw.h"
#include "mem/pool.h"
#include "xport/rdma/rdma_desc.h"
#include "xport/rdma/rdma_lib.h"
#include "xport/rdma/xport_rdma.h"
#include "xport/xport.h"

#include "fake_verbs.h"


/* ---- fixture: a decode and a prefill instance on the fake ------------- */

#define PSZ (1u << 20)

struct fx {
	char sp[96], dp[96];
	struct pool *src, *dst;
	struct xport *pre, *dec;
	uint32_t src_id, dst_id;
	uint8_t desc[KVW_MAX_DESC];
	size_t desclen;
	char err[256];
};

/* Polls cond (a stats field test) for up to 5 s: the exchange thread
 * counts on its own time. */
static int stats_reach(struct fx *f, uint64_t conns, uint64_t batches,
		       uint64_t live)
{
	struct xport_rdma_stats st;

	for (int i = 0; i < 5000; i++) {
		const struct timespec t = { 0, 1000000 }; /* a poll, not a sync */

		assert_int_equal(xport_rdma_stats(f->dec, &st), 0);
		if (st.conns == conns && st.batches == batches && st.live == live)
			return 1;
		nanosleep(&t, NULL);
	}
	print_message("stats: conns %llu batches %llu live %llu\n",
		      (unsigned long long)st.conns,
		      (unsigned long long)st.batches,
		      (unsigned long long)st.live);
	return 0;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	uint8_t own[KVW_MAX_DESC];
	size_t ownlen;
	uint32_t did;
	struct pool *rw = NULL;

	rdma_lib_override(&FAKE);
	snprintf(f->sp, sizeof f->sp, "/dev/shm/kvwire.trf-%d-s.pool", (int)getpid());
	snprintf(f->dp, sizeof f->dp, "/dev/shm/kvwire.trf-%d-d.pool", (int)getpid());
	assert_int_equal(pool_create(f->sp, PSZ, &rw, f->err, sizeof f->err), 0);
	for (uint32_t i = 0; i < PSZ; i++)
		((uint8_t *)pool_base(rw))[i] = (uint8_t)(i * 7 + i / 251);
	pool_close(&rw);
	assert_int_equal(pool_open(f->sp, 0, &f->src, f->err, sizeof f->err), 0);
	assert_int_equal(pool_create(f->dp, PSZ, &f->dst, f->err, sizeof f->err), 0);
	assert_int_equal(xport_open(xport_find("rdma"), &f->dec, f->err,
				    sizeof f->err), 0);
	assert_int_equal(xport_rdma_listen(f->dec, "127.0.0.1:0", f->err,
					   sizeof f->err), 0);
	assert_int_equal(xport_register(f->dec, f->dst, &did, f->desc,
					sizeof f->desc, &f->desclen, f->err,
					sizeof f->err), 0);
	assert_int_equal(xport_open(xport_find("rdma"), &f->pre, f->err,
				    sizeof f->err), 0);
	assert_int_equal(xport_register(f->pre, f->src, &f->src_id, own,
					sizeof own, &ownlen, f->err,
					sizeof f->err), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	xport_close(&f->pre);
	xport_close(&f->dec);
	pool_close(&f->src);
	pool_close(&f->dst);
	unlink(f->sp);
	unlink(f->dp);
	assert_int_equal(F.live_qps, 0);
	assert_null(F.mrs);
	free(f);
	rdma_lib_override(NULL);
	return 0;
}

/* n scattered 1000-byte copies: source i*1300, destination a shuffle. */
static void copies(struct xport_copy *c, uint32_t n, uint32_t src,
		   uint32_t dst)
{
	for (uint32_t i = 0; i < n; i++)
		c[i] = (struct xport_copy){ (uint64_t)i * 1300,
					    (uint64_t)((i * 37) % n) * 1000,
					    1000, src, dst };
}

static void landed(const struct fx *f, const struct xport_copy *c, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		assert_memory_equal((uint8_t *)pool_base(f->dst) + c[i].dst_off,
				    (uint8_t *)pool_base(f->src) + c[i].src_off,
				    c[i].len);
}

static void test_batches_land_byte_exact_with_one_immediate_each(void **state)
{
	struct fx *f = *state;
	static struct xport_copy c[700];
	struct rdma_desc d;

	assert_int_equal(rdma_desc_decode(f->desc, f->desclen, &d, f->err,
					  sizeof f->err), 0);
	assert_int_not_equal(d.port, 0);
	assert_int_equal(d.gid[10], 0xff); /* the IPv4 GID was chosen */
	assert_int_equal(xport_connect(f->pre, f->desc, f->desclen, &f->dst_id,
				       f->err, sizeof f->err), 0);
	assert_true(stats_reach(f, 1, 0, 1));
	copies(c, 700, f->src_id, f->dst_id);
	xport_set_room(f->pre, 42);
	for (uint32_t i = 0; i < 700; i += 256) {
		uint32_t k = 700 - i < 256 ? 700 - i : 256;

		assert_int_equal(xport_write_batch(f->pre, c + i, k, f->err,
						   sizeof f->err), 0);
	}
	assert_int_equal(xport_wait(f->pre, -1, f->err, sizeof f->err), 0);
	assert_int_equal(xport_rdma_room_busy(f->pre, 42), 0);
	landed(f, c, 700);
	assert_true(stats_reach(f, 1, 3, 1));
	/* The same descriptor is the same remote. */
	{
		uint32_t again;

		assert_int_equal(xport_connect(f->pre, f->desc, f->desclen,
					       &again, f->err, sizeof f->err), 0);
		assert_int_equal(again, f->dst_id);
	}
}

static void test_a_bad_copy_or_secret_is_refused_before_anything_moves(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[4];
	uint8_t bad[KVW_MAX_DESC];
	uint32_t id;
	uint64_t before;

	assert_int_equal(xport_connect(f->pre, f->desc, f->desclen, &f->dst_id,
				       f->err, sizeof f->err), 0);
	copies(c, 4, f->src_id, f->dst_id);
	c[3].dst_off = PSZ - 10; /* past the decode pool */
	before = F.posted;
	assert_int_equal(xport_write_batch(f->pre, c, 4, f->err, sizeof f->err),
			 KVW_ERANGE);
	c[3].dst_off = 0;
	c[3].src = 9;
	assert_int_equal(xport_write_batch(f->pre, c, 4, f->err, sizeof f->err),
			 KVW_EINVAL);
	assert_int_equal(F.posted, before);
	/* A descriptor with another secret: the exchange refuses it. */
	memcpy(bad, f->desc, f->desclen);
	bad[48] ^= 1;
	assert_int_equal(xport_connect(f->pre, bad, f->desclen, &id, f->err,
				       sizeof f->err), KVW_EPEER);
	assert_non_null(strstr(f->err, "wrong secret"));
	assert_true(stats_reach(f, 1, 0, 1));
}

static void test_wrs_in_flight_keep_their_room_busy_and_a_timed_wait_times_out(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[300];

	assert_int_equal(xport_connect(f->pre, f->desc, f->desclen, &f->dst_id,
				       f->err, sizeof f->err), 0);
	copies(c, 300, f->src_id, f->dst_id);
	F.hold = 1;
	xport_set_room(f->pre, 7);
	/* 100 scattered copies: 100 WRs held in flight (the queue holds 128). */
	assert_int_equal(xport_write_batch(f->pre, c, 100, f->err, sizeof f->err),
			 0);
	assert_int_equal(xport_rdma_room_busy(f->pre, 7), 100);
	assert_int_equal(xport_rdma_room_busy(f->pre, 8), 0);
	assert_int_equal(xport_wait(f->pre, 30, f->err, sizeof f->err),
			 KVW_ETIMEDOUT);
	fake_release();
	assert_int_equal(xport_wait(f->pre, -1, f->err, sizeof f->err), 0);
	assert_int_equal(xport_rdma_room_busy(f->pre, 7), 0);
	/* Without holding: a batch over the queue's depth reaps as it goes. */
	assert_int_equal(xport_write_batch(f->pre, c, 300, f->err, sizeof f->err),
			 0);
	assert_int_equal(xport_wait(f->pre, -1, f->err, sizeof f->err), 0);
	landed(f, c, 300);
	assert_true(stats_reach(f, 1, 2, 1));
}

static void test_a_failed_wr_fails_the_wait_with_the_status_text_and_drains(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[50];
	uint32_t id;

	assert_int_equal(xport_connect(f->pre, f->desc, f->desclen, &f->dst_id,
				       f->err, sizeof f->err), 0);
	copies(c, 50, f->src_id, f->dst_id);
	xport_set_room(f->pre, 99);
	F.hold = 1;
	assert_int_equal(xport_write_batch(f->pre, c, 50, f->err, sizeof f->err),
			 0);
	/* WR 10 of them fails at the remote; the rest are flushed. */
	F.fail_at = F.posted - 40;
	pthread_mutex_lock(&F.mu);
	F.hold = 0;
	for (unsigned i = 0; i < F.nheld; i++) {
		int st = i == 10 ? IBV_WC_REM_ACCESS_ERR
				 : execute(F.held[i].qp, &F.held[i].wr);

		complete(F.held[i].qp, &F.held[i].wr, st);
	}
	F.nheld = 0;
	pthread_mutex_unlock(&F.mu);
	F.fail_at = 0;
	assert_int_equal(xport_wait(f->pre, -1, f->err, sizeof f->err), KVW_ESYS);
	assert_non_null(strstr(f->err, "remote access error"));
	assert_non_null(strstr(f->err, "room 99"));
	assert_int_equal(xport_rdma_room_busy(f->pre, 99), 0);
	/* The remote is broken until disconnected; the decode keeps its QP
	 * until the connection closes. */
	assert_int_equal(xport_write_batch(f->pre, c, 1, f->err, sizeof f->err),
			 KVW_ESYS);
	assert_non_null(strstr(f->err, "disconnect"));
	assert_int_equal(xport_wait(f->pre, -1, f->err, sizeof f->err), 0);
	xport_disconnect(f->pre, f->dst_id);
	assert_true(stats_reach(f, 1, 0, 0));
	assert_int_equal(xport_connect(f->pre, f->desc, f->desclen, &id, f->err,
				       sizeof f->err), 0);
	assert_true(stats_reach(f, 2, 0, 1));
	assert_int_equal(xport_write_batch(f->pre, c, 50, f->err, sizeof f->err),
			 0);
	assert_int_equal(xport_wait(f->pre, -1, f->err, sizeof f->err), 0);
	landed(f, c, 50);
	assert_true(stats_reach(f, 2, 1, 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_batches_land_byte_exact_with_one_immediate_each, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_bad_copy_or_secret_is_refused_before_anything_moves, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrs_in_flight_keep_their_room_busy_and_a_timed_wait_times_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_failed_wr_fails_the_wait_with_the_status_text_and_drains, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
