/*
 * test_cli.c - the programs' shared command-line handling: common options
 * (--ready-fd, --log-level, --name, shape flags) are applied and a program
 * option comes back with its value in either spelling; --help, an unknown
 * option, a missing value, a bad common value and a stray operand give
 * CLI_HELP / CLI_BAD; operands stay when allowed; with no shape struct a
 * valid shape flag is returned for later; the number parsers take whole
 * decimal or 0x strings in range and leave *out alone otherwise; KVW_E*
 * codes map to the documented exit codes; the control processes' member
 * flags (CLI_MEMBER) parse one way: --topo with 2 or 4 sizes, none zero,
 * --rank inside --topo, the four endpoints/paths required.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "base/kvw.h"
#include "base/log.h"
#include "common/cli.h"
#include "plan/shape.h"

enum { O_LISTEN = 256, O_FLAG };

static const struct option own[] = {
	{ "listen", required_argument, NULL, O_LISTEN },
	{ "flag", no_argument, NULL, O_FLAG },
	{ NULL, 0, NULL, 0 },
};

/* Runs cli_next over argv until CLI_END or an error; returns the last
 * value (CLI_END when all went through) and the count of own options. */
static int drive(struct cli *c, char **argv, int *nown)
{
	int argc = 0, v;

	while (argv[argc])
		argc++;
	*nown = 0;
	while ((v = cli_next(c, argc, argv, own)) != CLI_END) {
		if (v == CLI_HELP || v == CLI_BAD || v == CLI_SHAPE_OPT)
			return v;
		(*nown)++;
	}
	return CLI_END;
}

static void test_common_options_applied_and_own_returned(void **state)
{
	char *argv[] = { "p", "--listen=ipc://a", "--ready-fd", "7",
			 "--log-level", "debug", "--name", "d0", "--layers",
			 "3", "--mla", "--flag", NULL };
	struct shape s;
	struct cli c;
	int n;

	(void)state;
	shape_default(&s);
	cli_init(&c, "p", CLI_READY_FD | CLI_LOG_LEVEL | CLI_NAME | CLI_SHAPE,
		 LOG_INFO, &s);
	assert_int_equal(drive(&c, argv, &n), CLI_END);
	assert_int_equal(n, 2);
	assert_int_equal(c.ready_fd, 7);
	assert_int_equal(c.log_level, LOG_DEBUG);
	assert_string_equal(c.log_level_arg, "debug");
	assert_string_equal(c.name, "d0");
	assert_int_equal(s.layers, 3);
	assert_int_equal(s.mla, 1);
}

static void test_own_option_value_in_both_spellings(void **state)
{
	char *a1[] = { "p", "--listen", "x", NULL };
	char *a2[] = { "p", "--listen=y", NULL };
	struct cli c;

	(void)state;
	cli_init(&c, "p", 0, LOG_INFO, NULL);
	assert_int_equal(cli_next(&c, 3, a1, own), O_LISTEN);
	assert_string_equal(c.opt, "listen");
	assert_string_equal(c.arg, "x");
	cli_init(&c, "p", 0, LOG_INFO, NULL);
	assert_int_equal(cli_next(&c, 2, a2, own), O_LISTEN);
	assert_string_equal(c.arg, "y");
}

static void test_help_is_always_taken(void **state)
{
	char *argv[] = { "p", "--help", NULL };
	struct cli c;
	int n;

	(void)state;
	cli_init(&c, "p", 0, LOG_INFO, NULL);
	assert_int_equal(drive(&c, argv, &n), CLI_HELP);
}

static void test_usage_errors_are_bad(void **state)
{
	char *unknown[] = { "p", "--bogus", NULL };
	char *novalue[] = { "p", "--listen", NULL };
	char *badfd[] = { "p", "--ready-fd", "-1", NULL };
	char *badlvl[] = { "p", "--log-level", "loud", NULL };
	char *badshape[] = { "p", "--layers", "0", NULL };
	char *operand[] = { "p", "--flag", "stray", NULL };
	char *notaken[] = { "p", "--name", "x", NULL };
	char **cases[] = { unknown, novalue, badfd, badlvl, badshape, operand,
			   notaken };
	struct shape s;
	struct cli c;
	int n;

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		shape_default(&s);
		cli_init(&c, "p", i == 6 ? 0 : CLI_READY_FD | CLI_LOG_LEVEL |
			 CLI_SHAPE, LOG_INFO, &s);
		assert_int_equal(drive(&c, cases[i], &n), CLI_BAD);
	}
}

static void test_operands_stay_when_allowed(void **state)
{
	char *argv[] = { "p", "cmd", "--flag", "ep", NULL };
	struct cli c;
	int n;

	(void)state;
	cli_init(&c, "p", CLI_OPERANDS, LOG_INFO, NULL);
	assert_int_equal(drive(&c, argv, &n), CLI_END);
	assert_int_equal(n, 1);
	assert_int_equal(optind, 2); /* operands permuted to the end */
	assert_string_equal(argv[optind], "cmd");
	assert_string_equal(argv[optind + 1], "ep");
}

static void test_shape_flag_returned_without_shape_struct(void **state)
{
	char *argv[] = { "p", "--heads", "4", NULL };
	struct cli c;

	(void)state;
	cli_init(&c, "p", CLI_SHAPE, LOG_INFO, NULL);
	assert_int_equal(cli_next(&c, 3, argv, own), CLI_SHAPE_OPT);
	assert_string_equal(c.opt, "heads");
	assert_string_equal(c.arg, "4");
}

static void test_u64_takes_decimal_and_hex_in_range(void **state)
{
	uint64_t v = 5;
	uint32_t w = 5;

	(void)state;
	assert_int_equal(cli_u64("010", 0, 100, &v), 0);
	assert_int_equal(v, 10); /* not octal */
	assert_int_equal(cli_u64("0x1F", 0, 100, &v), 0);
	assert_int_equal(v, 31);
	assert_int_equal(cli_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(cli_u32("4294967295", 0, UINT32_MAX, &w), 0);
	assert_true(w == UINT32_MAX);
}

static void test_u64_refuses_junk_sign_and_range(void **state)
{
	const char *bad[] = { "", "-1", "+1", " 1", "1 ", "1x", "0x", "0xg",
			      "18446744073709551616", "101" };
	uint64_t v = 5;
	uint32_t w = 5;

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(cli_u64(bad[i], 0, 100, &v), KVW_EINVAL);
	assert_int_equal(cli_u64(NULL, 0, 100, &v), KVW_EINVAL);
	assert_int_equal(cli_u32("0", 1, 9, &w), KVW_EINVAL);
	assert_int_equal(cli_u32("4294967296", 0, UINT32_MAX, &w), KVW_EINVAL);
	assert_int_equal(v, 5);
	assert_int_equal(w, 5);
}

static void test_double_and_seconds_bounds(void **state)
{
	double d = 9;
	uint64_t ns = 9;

	(void)state;
	assert_int_equal(cli_double("0", 0, 1, &d), 0);
	assert_true(d == 0);
	assert_int_equal(cli_double("1.5", 0, 1, &d), KVW_EINVAL);
	assert_int_equal(cli_double("nan", 0, 1, &d), KVW_EINVAL);
	assert_int_equal(cli_double("0.5s", 0, 1, &d), KVW_EINVAL);
	assert_int_equal(cli_double("", 0, 1, &d), KVW_EINVAL);
	assert_true(d == 0);
	assert_int_equal(cli_seconds("0.25", 0.05, 10, &ns), 0);
	assert_int_equal(ns, 250000000);
	assert_int_equal(cli_seconds("0.01", 0.05, 10, &ns), KVW_EINVAL);
	assert_int_equal(cli_seconds("11", 0.05, 10, &ns), KVW_EINVAL);
	assert_int_equal(ns, 250000000);
}

static void test_exit_codes_of_kvw_errors(void **state)
{
	(void)state;
	assert_int_equal(cli_exit_code(0), KVW_EXIT_OK);
	assert_int_equal(cli_exit_code(KVW_EINVAL), KVW_EXIT_USAGE);
	assert_int_equal(cli_exit_code(KVW_ENODEV), KVW_EXIT_SKIP);
	assert_int_equal(cli_exit_code(KVW_ETIMEDOUT), KVW_EXIT_TIMEOUT);
	assert_int_equal(cli_exit_code(KVW_ESYS), KVW_EXIT_SYS);
	assert_int_equal(cli_exit_code(KVW_ENOMEM), KVW_EXIT_SYS);
	assert_int_equal(cli_fatal("p", 42, "x %d", 1), 42);
}

/* Parses argv with CLI_MEMBER only; returns the last cli_next value. */
static int member_parse(struct cli *c, char **argv)
{
	int argc = 0, v;

	while (argv[argc])
		argc++;
	cli_init(c, "p", CLI_MEMBER, LOG_INFO, NULL);
	while ((v = cli_next(c, argc, argv, NULL)) != CLI_END)
		if (v == CLI_BAD || v == CLI_HELP)
			return v;
	return CLI_END;
}

static void test_member_flags_fill_the_member_and_default_the_rest(void **state)
{
	char *full[] = { "p", "--listen", "ipc://l", "--engine=ipc://e",
			 "--table", "/t", "--pool", "/p", "--transport", "tcp",
			 "--topo", "4,2,1,3", "--rank", "3,1,0,2", NULL };
	char *least[] = { "p", "--listen", "a", "--engine", "b", "--table", "c",
			  "--pool", "d", "--topo", "2,2", NULL };
	struct cli c;

	(void)state;
	assert_int_equal(member_parse(&c, full), CLI_END);
	assert_string_equal(c.member.listen, "ipc://l");
	assert_string_equal(c.member.engine, "ipc://e");
	assert_string_equal(c.member.table, "/t");
	assert_string_equal(c.member.pool, "/p");
	assert_string_equal(c.member.transport, "tcp");
	assert_int_equal(c.member.topo.tp, 4);
	assert_int_equal(c.member.topo.pp, 2);
	assert_int_equal(c.member.topo.cp, 1);
	assert_int_equal(c.member.topo.dp, 3);
	assert_int_equal(c.member.rank.tp, 3);
	assert_int_equal(c.member.rank.dp, 2);
	assert_int_equal(cli_member_check(&c), 0);
	/* Two sizes: cp and dp are 1; no --rank: 0,0,0,0; transport shm. */
	assert_int_equal(member_parse(&c, least), CLI_END);
	assert_string_equal(c.member.transport, "shm");
	assert_int_equal(c.member.topo.tp, 2);
	assert_int_equal(c.member.topo.cp, 1);
	assert_int_equal(c.member.topo.dp, 1);
	assert_int_equal(c.member.rank.tp, 0);
	assert_int_equal(cli_member_check(&c), 0);
}

static void test_member_flags_refuse_a_zero_size_and_a_rank_outside(void **state)
{
	char *zero[] = { "p", "--topo", "2,0", NULL };
	char *junk[] = { "p", "--rank", "1,x", NULL };
	char *outside[] = { "p", "--listen", "a", "--engine", "b", "--table",
			    "c", "--pool", "d", "--topo", "2,2", "--rank", "0,2",
			    NULL };
	char *missing[] = { "p", "--listen", "a", "--engine", "b", "--table",
			    "c", NULL };
	struct cli c;

	(void)state;
	assert_int_equal(member_parse(&c, zero), CLI_BAD);
	assert_int_equal(member_parse(&c, junk), CLI_BAD);
	assert_int_equal(member_parse(&c, outside), CLI_END);
	assert_int_equal(cli_member_check(&c), KVW_EXIT_USAGE);
	assert_int_equal(member_parse(&c, missing), CLI_END);
	assert_int_equal(cli_member_check(&c), KVW_EXIT_USAGE);
}

static void test_member_flags_are_unknown_without_cli_member(void **state)
{
	char *argv[] = { "p", "--topo", "2,2", NULL };
	struct cli c;

	(void)state;
	cli_init(&c, "p", 0, LOG_INFO, NULL);
	assert_int_equal(cli_next(&c, 3, argv, NULL), CLI_BAD);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_common_options_applied_and_own_returned),
		cmocka_unit_test(test_own_option_value_in_both_spellings),
		cmocka_unit_test(test_help_is_always_taken),
		cmocka_unit_test(test_usage_errors_are_bad),
		cmocka_unit_test(test_operands_stay_when_allowed),
		cmocka_unit_test(test_shape_flag_returned_without_shape_struct),
		cmocka_unit_test(test_u64_takes_decimal_and_hex_in_range),
		cmocka_unit_test(test_u64_refuses_junk_sign_and_range),
		cmocka_unit_test(test_double_and_seconds_bounds),
		cmocka_unit_test(test_exit_codes_of_kvw_errors),
		cmocka_unit_test(test_member_flags_fill_the_member_and_default_the_rest),
		cmocka_unit_test(test_member_flags_refuse_a_zero_size_and_a_rank_outside),
		cmocka_unit_test(test_member_flags_are_unknown_without_cli_member),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
