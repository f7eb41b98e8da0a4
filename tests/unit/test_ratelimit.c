/*
 * test_ratelimit.c - the per-source token buckets (roles/ratelimit.h):
 * a source gets its burst, then its rate; another source is not charged
 * for it; a flood of 10,000 ever new sources never starves a known
 * source sending at its own pace (the table is fixed: an evicted source
 * comes back with a full bucket).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "roles/ratelimit.h"

#define SEC 1000000000ull

static struct ratelimit rl;

static int take(const char *id, uint64_t now)
{
	return rl_take(&rl, (const uint8_t *)id, strlen(id), now);
}

static void test_a_source_gets_its_burst_then_its_rate(void **state)
{
	int n = 0;

	(void)state;
	rl_init(&rl, 10.0, 5.0);
	for (int i = 0; i < 100; i++)
		n += take("flood", SEC);
	assert_int_equal(n, 5);
	/* Half a second later: 5 more tokens, not more. */
	n = 0;
	for (int i = 0; i < 100; i++)
		n += take("flood", SEC + SEC / 2);
	assert_int_equal(n, 5);
	/* Another source is not charged for the first one. */
	assert_true(take("decode", SEC + SEC / 2));
}

static void test_new_sources_by_the_thousand_leave_known_sources_served(void **state)
{
	char id[32];
	int served = 0;

	(void)state;
	rl_init(&rl, 1000.0, 2.0);
	for (int i = 0; i < 10000; i++) {
		snprintf(id, sizeof id, "fake-%d", i);
		(void)take(id, SEC + (uint64_t)i);
		/* The real source keeps sending at its pace: once a ms. */
		if (i % 1000 == 0)
			served += take("real", SEC + (uint64_t)i * 1000);
	}
	assert_int_equal(served, 10);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_source_gets_its_burst_then_its_rate),
		cmocka_unit_test(test_new_sources_by_the_thousand_leave_known_sources_served),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
