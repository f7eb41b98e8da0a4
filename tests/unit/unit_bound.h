/*
 * unit_bound.h - every cmocka test under its own bound. The Makefile
 * force-includes this into each tests/unit/test_*.c (-include), after
 * which cmocka_run_group_tests() runs each test with an alarm: a test
 * (or its setup and teardown) still running after KVW_UNIT_TEST_TIMEOUT
 * seconds (default 120) fails with a message naming it, and the next test
 * runs; one that does not even come back from that failure within the
 * bound again ends the binary (exit 124) with a message. cmocka 1.1 has
 * no per-test timeout of its own. KVW_UNIT_FILTER (a glob) runs only the
 * tests whose name matches, as tests/mutants/run.sh needs.
 */
#ifndef KVW_UNIT_BOUND_H
#define KVW_UNIT_BOUND_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fnmatch.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct {
	const struct CMUnitTest *orig; /* the selected tests, in order */
	size_t n, cur;
	unsigned secs;
	pthread_t main;
	volatile sig_atomic_t fired;
} unit_bound;

/* SIGALRM: first time in a test, fails it (cmocka longjmps back to its
 * runner from here, which is why the handler runs on the main thread and
 * with SA_NODEFER); a second time, the failure itself hung: exit. */
static inline void unit_bound_alarm(int sig)
{
	static const char gone[] = "unit: a timed-out test did not come "
				   "back within its bound: exiting\n";

	if (!pthread_equal(pthread_self(), unit_bound.main)) {
		pthread_kill(unit_bound.main, sig);
		return;
	}
	if (unit_bound.fired++) {
		(void)!write(2, gone, sizeof gone - 1);
		_exit(124);
	}
	alarm(unit_bound.secs);
	fail_msg("unit: %s did not finish within its bound of %u s "
		 "(KVW_UNIT_TEST_TIMEOUT)",
		 unit_bound.orig[unit_bound.cur - 1].name, unit_bound.secs);
}

static inline int unit_bound_setup(void **state)
{
	const struct CMUnitTest *t = &unit_bound.orig[unit_bound.cur++];

	unit_bound.fired = 0;
	alarm(unit_bound.secs);
	return t->setup_func ? t->setup_func(state) : 0;
}

static inline int unit_bound_teardown(void **state)
{
	const struct CMUnitTest *t = &unit_bound.orig[unit_bound.cur - 1];
	int rc = t->teardown_func ? t->teardown_func(state) : 0;

	alarm(0);
	return rc;
}

static inline int unit_bound_run(const char *group,
				 const struct CMUnitTest *tests, size_t n,
				 CMFixtureFunction setup,
				 CMFixtureFunction teardown)
{
	const char *e = getenv("KVW_UNIT_TEST_TIMEOUT");
	const char *filter = getenv("KVW_UNIT_FILTER");
	struct CMUnitTest *sel = calloc(n ? n : 1, sizeof *sel);
	struct CMUnitTest *orig = calloc(n ? n : 1, sizeof *orig);
	struct sigaction sa;
	size_t k = 0;
	int rc;

	if (!sel || !orig) {
		free(sel);
		free(orig);
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		if (filter && *filter && fnmatch(filter, tests[i].name, 0) != 0)
			continue;
		orig[k] = tests[i];
		sel[k] = tests[i];
		sel[k].setup_func = unit_bound_setup;
		sel[k].teardown_func = unit_bound_teardown;
		k++;
	}
	unit_bound.orig = orig;
	unit_bound.n = k;
	unit_bound.cur = 0;
	unit_bound.secs = e && atoi(e) > 0 ? (unsigned)atoi(e) : 120;
	unit_bound.main = pthread_self();
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = unit_bound_alarm;
	sa.sa_flags = SA_NODEFER;
	sigaction(SIGALRM, &sa, NULL);
	rc = _cmocka_run_group_tests(group, sel, k, setup, teardown);
	alarm(0);
	free(sel);
	free(orig);
	return rc;
}

#undef cmocka_run_group_tests
#define cmocka_run_group_tests(group_tests, group_setup, group_teardown)     \
	unit_bound_run(#group_tests, group_tests,                            \
		       sizeof(group_tests) / sizeof((group_tests)[0]),       \
		       group_setup, group_teardown)

#endif
