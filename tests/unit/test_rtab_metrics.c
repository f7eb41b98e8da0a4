/*
 * test_rtab_metrics.c - the measures the room table keeps in its header
 * (lib/table/rtab_metrics.c): every state entry is counted once per room,
 * failures by reason, the three histograms count exactly the rooms that
 * made the measured move and put each in the bucket of its duration, bytes
 * are summed, the `off` word stops all of it, counters survive an owner
 * restart, and a read-only mapping reads them but cannot switch them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "table/rtab.h"

static char errbuf[256];
static char path[160];

static int unlink_path(void **state)
{
	(void)state;
	unlink(path);
	return 0;
}

static struct rtab *table(const char *what)
{
	struct rtab *t = NULL;
	int existed = -1;

	snprintf(path, sizeof path, "/dev/shm/kvwire.test-rmet.%ld.%s.rooms",
		 (long)getpid(), what);
	unlink(path);
	assert_int_equal(rtab_create(path, 64, 4, 0x1, &t, &existed, errbuf,
				     sizeof errbuf), 0);
	assert_int_equal(existed, 0);
	return t;
}

static void done(struct rtab **t)
{
	rtab_close(t);
	unlink(path);
}

/* Bootstrapping -> Waiting -> Transferring -> Success -> Cleared. */
static void succeed(struct rtab *t, uint64_t room)
{
	struct rtab_ref r;

	assert_int_equal(rtab_insert(t, room, 0, 0, &r), 0);
	assert_int_equal(rtab_transition(t, r, KVW_WAITING, 0), 0);
	assert_int_equal(rtab_transition(t, r, KVW_TRANSFERRING, 0), 0);
	assert_int_equal(rtab_bytes_add(t, r, 1000), 0);
	assert_int_equal(rtab_transition(t, r, KVW_SUCCESS, 0), 0);
	assert_int_equal(rtab_clear(t, r, KVW_R_CLEARED), 0);
}

static void test_state_entries_reasons_bytes_and_histogram_counts(void **state)
{
	struct rtab *t = table("count");
	struct rtab_metrics_view m;
	struct rtab_ref r;

	(void)state;
	for (uint64_t i = 0; i < 5; i++)
		succeed(t, i);
	/* Two failures: one while bootstrapping (timeout), one waiting. */
	assert_int_equal(rtab_insert(t, 100, 0, 0, &r), 0);
	assert_int_equal(rtab_fail(t, r, KVW_R_TIMEOUT), 0);
	assert_int_equal(rtab_insert(t, 101, 0, 0, &r), 0);
	assert_int_equal(rtab_transition(t, r, KVW_WAITING, 0), 0);
	assert_int_equal(rtab_fail(t, r, KVW_R_PEER_DEAD), 0);
	/* A refused move is not counted. */
	assert_int_equal(rtab_transition(t, r, KVW_SUCCESS, 0), KVW_ESTATE);
	rtab_metrics_get(t, &m);
	assert_int_equal(m.off, 0);
	assert_int_equal(m.entered[KVW_BOOTSTRAPPING], 7);
	assert_int_equal(m.entered[KVW_WAITING], 6);
	assert_int_equal(m.entered[KVW_TRANSFERRING], 5);
	assert_int_equal(m.entered[KVW_SUCCESS], 5);
	assert_int_equal(m.entered[KVW_CLEARED], 5);
	assert_int_equal(m.entered[KVW_FAILED], 2);
	assert_int_equal(m.failed[KVW_R_TIMEOUT], 1);
	assert_int_equal(m.failed[KVW_R_PEER_DEAD], 1);
	assert_int_equal(m.failed[KVW_R_ABORTED], 0);
	/* Transfer: the 5 successes; bootstrap: the 6 that reached Waiting. */
	assert_int_equal(m.hist[RTAB_H_TRANSFER].count, 5);
	assert_int_equal(m.hist[RTAB_H_BOOTSTRAP].count, 6);
	assert_int_equal(m.hist[RTAB_H_ABORT_DRAIN].count, 0);
	assert_true(m.hist[RTAB_H_TRANSFER].sum_ns > 0);
	assert_int_equal(rtab_counter_get(t, RTAB_C_BYTES), 5000);
	done(&t);
}

static void test_a_slow_transfer_lands_in_the_bucket_of_its_duration(void **state)
{
	struct rtab *t = table("bucket");
	struct timespec d = { 0, 30 * 1000 * 1000 }; /* 30 ms */
	struct rtab_metrics_view m;
	struct rtab_ref r;
	unsigned i = 0;

	(void)state;
	assert_int_equal(rtab_insert(t, 7, 0, 0, &r), 0);
	assert_int_equal(rtab_transition(t, r, KVW_WAITING, 0), 0);
	nanosleep(&d, NULL); /* the duration measured, not a synchronisation */
	assert_int_equal(rtab_transition(t, r, KVW_TRANSFERRING, 0), 0);
	assert_int_equal(rtab_transition(t, r, KVW_SUCCESS, 0), 0);
	rtab_metrics_get(t, &m);
	while (i < RTAB_HIST_BUCKETS && m.hist[RTAB_H_TRANSFER].bucket[i] == 0)
		i++;
	/* One observation: its duration is the sum, and its bucket is the
	 * first whose bound is not below it. */
	assert_true(i < RTAB_HIST_BUCKETS);
	assert_int_equal(m.hist[RTAB_H_TRANSFER].count, 1);
	assert_true(m.hist[RTAB_H_TRANSFER].sum_ns >= 30000000ULL);
	assert_true(rtab_hist_bound_ns(i) >= m.hist[RTAB_H_TRANSFER].sum_ns);
	assert_true(i > 0);
	assert_true(rtab_hist_bound_ns(i - 1) < m.hist[RTAB_H_TRANSFER].sum_ns);
	assert_true(rtab_hist_bound_ns(RTAB_HIST_BOUNDS) == UINT64_MAX);
	done(&t);
}

static void test_abort_drain_is_armed_to_releasable(void **state)
{
	struct rtab *t = table("drain");
	struct rtab_metrics_view m;
	struct rtab_ref r;

	(void)state;
	assert_int_equal(rtab_insert(t, 9, 0, 0, &r), 0);
	assert_int_equal(rtab_flags_or(t, r, RTAB_F_ARMED), 0);
	assert_int_equal(rtab_flags_or(t, r, RTAB_F_ARMED), RTAB_F_ARMED);
	assert_int_equal(rtab_flags_or(t, r, RTAB_F_RELEASABLE), RTAB_F_ARMED);
	/* Setting it again is not a second drain. */
	rtab_flags_or(t, r, RTAB_F_RELEASABLE);
	rtab_metrics_get(t, &m);
	assert_int_equal(m.hist[RTAB_H_ABORT_DRAIN].count, 1);
	done(&t);
}

static void test_off_stops_the_measures_and_a_reader_cannot_switch(void **state)
{
	struct rtab *t = table("off"), *ro = NULL;
	struct rtab_metrics_view m;

	(void)state;
	assert_int_equal(rtab_open(path, 0, &ro, errbuf, sizeof errbuf), 0);
	assert_int_equal(rtab_metrics_set_off(ro, 1), KVW_EINVAL);
	assert_int_equal(rtab_metrics_set_off(t, 1), 0);
	succeed(t, 1);
	rtab_metrics_get(ro, &m);
	assert_int_equal(m.off, 1);
	for (unsigned s = 0; s < KVW_NSTATES; s++)
		assert_int_equal(m.entered[s], 0);
	assert_int_equal(m.hist[RTAB_H_TRANSFER].count, 0);
	assert_int_equal(rtab_counter_get(t, RTAB_C_BYTES), 0);
	/* The plain counters still count. */
	assert_int_equal(rtab_counter_get(t, RTAB_C_INSERTED), 1);
	assert_int_equal(rtab_metrics_set_off(t, 0), 0);
	succeed(t, 2);
	rtab_metrics_get(ro, &m);
	assert_int_equal(m.off, 0);
	assert_int_equal(m.entered[KVW_SUCCESS], 1);
	rtab_close(&ro);
	done(&t);
}

static void test_counters_survive_an_owner_restart(void **state)
{
	struct rtab *t = table("restart");
	struct rtab_metrics_view m;
	struct rtab_ref r;
	int existed = 0;

	(void)state;
	succeed(t, 1);
	assert_int_equal(rtab_insert(t, 2, 0, 0, &r), 0);
	rtab_close(&t);
	assert_int_equal(rtab_create(path, 64, 4, 0x2, &t, &existed, errbuf,
				     sizeof errbuf), 0);
	assert_int_equal(existed, 1);
	assert_int_equal(rtab_fail_stale_owner(t, 0x2, NULL, NULL), 1);
	rtab_metrics_get(t, &m);
	assert_int_equal(m.entered[KVW_SUCCESS], 1);
	assert_int_equal(m.entered[KVW_BOOTSTRAPPING], 2);
	assert_int_equal(m.failed[KVW_R_OWNER_RESTART], 1);
	assert_int_equal(rtab_counter_get(t, RTAB_C_OWNER_RESTART), 1);
	assert_int_equal(rtab_counter_get(t, RTAB_C_BYTES), 1000);
	done(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_state_entries_reasons_bytes_and_histogram_counts),
		cmocka_unit_test(test_a_slow_transfer_lands_in_the_bucket_of_its_duration),
		cmocka_unit_test(test_abort_drain_is_armed_to_releasable),
		cmocka_unit_test(test_off_stops_the_measures_and_a_reader_cannot_switch),
		cmocka_unit_test(test_counters_survive_an_owner_restart),
	};

	return cmocka_run_group_tests(tests, NULL, unlink_path);
}
