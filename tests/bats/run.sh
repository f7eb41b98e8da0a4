#!/bin/sh
# run.sh - runs the bats suites given (default: every tests/bats/*.bats) and
# ends with one closing line "bats: N passed, N failed, N skipped".
# The exit status is bats's own. Files run KVW_BATS_JOBS at a time
# (default 3: the tests mostly wait, and two at a time used 1.1 of the 2
# cores; on the idle 2-core machine 3 at a time took 418 s, 4 took 427 s.
# GNU parallel runs them, 1 without it), the tests of one file
# one after another: the files are independent (each test has its own
# mktemp run directory and /dev/shm names, fixed ports are each one
# file's, a check of /dev/shm looks only at names of its own test).
dir=$(dirname "$0")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
[ $# -gt 0 ] || set -- "$dir"
jobs=${KVW_BATS_JOBS:-3}
command -v parallel >/dev/null || jobs=1
if [ "$jobs" -gt 1 ]; then
	set -- --jobs "$jobs" --no-parallelize-within-files "$@"
fi
bats --tap --timing "$@" | tee "$out"
skipped=$(grep -c '^ok .* # skip' "$out")
passed=$(($(grep -c '^ok ' "$out") - skipped))
failed=$(grep -c '^not ok ' "$out")
echo "bats: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && grep -q '^1\.\.' "$out"
