/*
 * test_rdma_xport.c - the rdma transport's surface on a machine without a
 * device (where one is present the device-only assertions are skipped):
 * probe and open say "rdma: not available: <why>" with KVW_ENODEV and
 * leave nothing; a device named in KVW_RDMA_DEVICE that does not exist is
 * "not available" too, and a KVW_RDMA_GID_INDEX that is not a number is a
 * usage error (KVW_EINVAL) before any device is looked at; the rdma-only
 * calls refuse another transport's instance; libibverbs itself loads (a
 * build dependency) and names completion statuses; --rdma-device and
 * --rdma-gid-index reach the environment (hex index normalised) and a bad
 * index is refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/kvw.h"
#include "common/cli.h"
#include "xport/rdma/rdma_lib.h"
#include "xport/rdma/xport_rdma.h"
#include "xport/xport.h"

static int no_device(void)
{
	char err[256];

	return xport_probe("rdma", err, sizeof err) == KVW_ENODEV;
}

static void test_probe_and_open_say_not_available_and_leave_nothing(void **state)
{
	const struct xport_ops *ops = xport_find("rdma");
	struct xport *x = (struct xport *)&x;
	char err[256] = "";

	(void)state;
	assert_non_null(ops);
	if (!no_device())
		skip();
	assert_int_equal(ops->probe(err, sizeof err), KVW_ENODEV);
	assert_non_null(strstr(err, "rdma: not available: "));
	err[0] = '\0';
	assert_int_equal(xport_open(ops, &x, err, sizeof err), KVW_ENODEV);
	assert_null(x);
	assert_non_null(strstr(err, "rdma: not available: "));
}

static void test_the_environment_choice_is_checked(void **state)
{
	char err[256] = "";

	(void)state;
	setenv("KVW_RDMA_GID_INDEX", "three", 1);
	assert_int_equal(xport_probe("rdma", err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "--rdma-gid-index"));
	setenv("KVW_RDMA_GID_INDEX", "70000", 1);
	assert_int_equal(xport_probe("rdma", err, sizeof err), KVW_EINVAL);
	unsetenv("KVW_RDMA_GID_INDEX");
	setenv("KVW_RDMA_DEVICE", "kvw_no_such_device", 1);
	assert_int_equal(xport_probe("rdma", err, sizeof err), KVW_ENODEV);
	assert_non_null(strstr(err, "rdma: not available: "));
	unsetenv("KVW_RDMA_DEVICE");
}

static void test_rdma_only_calls_refuse_another_transport(void **state)
{
	struct xport *x = NULL;
	struct xport_rdma_stats st;
	char err[256] = "", buf[64];

	(void)state;
	assert_int_equal(xport_open(xport_find("shm"), &x, err, sizeof err), 0);
	assert_int_equal(xport_rdma_listen(x, "127.0.0.1:0", err, sizeof err),
			 KVW_EINVAL);
	assert_int_equal(xport_rdma_address(x, buf, sizeof buf), KVW_ENOENT);
	assert_int_equal(xport_rdma_stats(x, &st), KVW_EINVAL);
	assert_int_equal(xport_rdma_room_busy(x, 1), 0);
	assert_int_equal(xport_rdma_room_busy(NULL, 1), 0);
	xport_close(&x);
}

static void test_the_library_loads_and_names_statuses(void **state)
{
	char why[160] = "", buf[96];
	const struct rdma_lib *l = rdma_lib_get(why, sizeof why);

	(void)state;
	assert_non_null(l);
	assert_ptr_equal(rdma_lib_get(NULL, 0), l); /* once per process */
	assert_non_null(strstr(rdma_status_text(l, IBV_WC_REM_ACCESS_ERR, buf,
						sizeof buf),
			       "remote access error (status 10)"));
	assert_string_equal(rdma_status_text(NULL, 5, buf, sizeof buf),
			    "status 5");
}

static void test_the_flags_reach_the_environment(void **state)
{
	char *ok[] = { "kv-x", "--rdma-device", "mlx5_1", "--rdma-gid-index",
		       "0x3", NULL };
	char *bad[] = { "kv-x", "--rdma-gid-index", "-1", NULL };
	struct cli c;

	(void)state;
	cli_init(&c, "kv-x", CLI_RDMA, 0, NULL);
	assert_int_equal(cli_next(&c, 5, ok, NULL), CLI_END);
	assert_string_equal(getenv("KVW_RDMA_DEVICE"), "mlx5_1");
	assert_string_equal(getenv("KVW_RDMA_GID_INDEX"), "3");
	cli_init(&c, "kv-x", CLI_RDMA, 0, NULL);
	assert_int_equal(cli_next(&c, 3, bad, NULL), CLI_BAD);
	unsetenv("KVW_RDMA_DEVICE");
	unsetenv("KVW_RDMA_GID_INDEX");
	/* Without CLI_RDMA (or CLI_MEMBER) the flags are unknown. */
	cli_init(&c, "kv-x", 0, 0, NULL);
	assert_int_equal(cli_next(&c, 5, ok, NULL), CLI_BAD);
	assert_null(getenv("KVW_RDMA_DEVICE"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_probe_and_open_say_not_available_and_leave_nothing),
		cmocka_unit_test(test_the_environment_choice_is_checked),
		cmocka_unit_test(test_rdma_only_calls_refuse_another_transport),
		cmocka_unit_test(test_the_library_loads_and_names_statuses),
		cmocka_unit_test(test_the_flags_reach_the_environment),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
