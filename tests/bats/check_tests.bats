#!/usr/bin/env bats
# The guard against checks that cannot fail: mk/check-tests.sh (run by
# `make test`) passes on the suite and refuses a bats test with `! CMD`
# before its last line and a cmocka test that asserts nothing.

load helpers

setup() { kvw_setup; }
teardown() { kvw_teardown; }

@test "check-tests passes on the repository's bats and cmocka tests" {
	run "$KVW_ROOT/mk/check-tests.sh" "$KVW_ROOT"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output =~ tests:\ [0-9]+\ passed,\ 0\ failed ]]
}

@test "check-tests refuses a negated command before a test's last line and a cmocka test without an assertion" {
	mkdir -p "$RUN/t"
	(cd "$KVW_ROOT" && cp --parents -t "$RUN/t" tests/bats/*.bats tests/unit/test_*.c mk/check-tests.sh)
	run "$RUN/t/mk/check-tests.sh" "$RUN/t"
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	# A bats test whose `! grep` (not its last line) can never fail it; a
	# negation as the last line and refute are fine.
	printf '\n@test "bad: a negation in the middle" {\n\ttrue\n\t! grep -q x /dev/null\n\ttrue\n}\n' \
		>>"$RUN/t/tests/bats/cli.bats"
	printf '\n@test "fine: refute, and a negation last" {\n\trefute grep -q x /dev/null\n\t! grep -q x /dev/null\n}\n' \
		>>"$RUN/t/tests/bats/cli.bats"
	# A cmocka test that calls the code under test and asserts nothing.
	sed -i 's/^int main(void)$/static void closes_and_checks_nothing(void **state)\n{\n\tstruct pool *p = NULL;\n\n\t(void)state;\n\tpool_close(\&p);\n}\n\nint main(void)/; s/^\t\tT(close_accepts_null_and_nulls_the_pointer),$/&\n\t\tcmocka_unit_test(closes_and_checks_nothing),/' \
		"$RUN/t/tests/unit/test_pool.c"
	grep -q "cmocka_unit_test(closes_and_checks_nothing)" "$RUN/t/tests/unit/test_pool.c"
	run "$RUN/t/mk/check-tests.sh" "$RUN/t"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ $output == *'tests/bats/cli.bats:'*': `!` before the last line of @test "bad: a negation in the middle"'* ]]
	[[ $output != *'@test "fine: refute, and a negation last"'* ]]
	[[ $output == *"tests/unit/test_pool.c: cmocka test closes_and_checks_nothing asserts nothing"* ]]
	[[ $output =~ tests:\ [0-9]+\ passed,\ 2\ failed ]]
}
