#!/bin/sh
# run.sh - runs the bats suites given (default: every tests/bats/*.bats) and
# ends with one closing line "bats: N passed, N failed, N skipped".
# The exit status is bats's own.
dir=$(dirname "$0")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
[ $# -gt 0 ] || set -- "$dir"
bats --tap --timing "$@" | tee "$out"
skipped=$(grep -c '^ok .* # skip' "$out")
passed=$(($(grep -c '^ok ' "$out") - skipped))
failed=$(grep -c '^not ok ' "$out")
echo "bats: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && grep -q '^1\.\.' "$out"
