#!/bin/sh
# run.sh - runs every cmocka test binary given as arguments and prints one
# closing line "unit: N passed, N failed" (test cases, summed over binaries),
# after a line naming the binaries that failed, if any (a verdict read
# through `| tail` keeps the names).
# Exit status is non-zero when any case failed or a binary crashed. Each
# binary runs under `timeout` (KVW_UNIT_TIMEOUT seconds, default 300): a
# hang fails that binary instead of stalling `make test`. Inside it, each
# test has its own bound (KVW_UNIT_TEST_TIMEOUT, tests/unit/unit_bound.h):
# a hung test fails with its name and the next one runs.
limit=${KVW_UNIT_TIMEOUT:-300}
passed=0
failed=0
status=0
names=
for t in "$@"; do
	out=$(timeout -k 5 "$limit" "$t" 2>&1)
	rc=$?
	printf '%s\n' "$out"
	p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
	f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
	passed=$((passed + p))
	failed=$((failed + f))
	if [ "$rc" -ne 0 ]; then
		status=1
		names="$names $(basename "$t")"
		# A crash reports no FAILED line: count the binary itself.
		if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
			failed=$((failed + 1))
			echo "unit: $t timed out after ${limit}s"
		elif [ "$f" -eq 0 ]; then
			failed=$((failed + 1))
			echo "unit: $t exited $rc"
		fi
	fi
done
[ -z "$names" ] || echo "unit: failed in:$names"
echo "unit: $passed passed, $failed failed"
exit $status
