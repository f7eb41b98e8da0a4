#!/bin/sh
# run.sh - runs the bats suites given (default: every tests/bats/*.bats) and
# ends with one closing line "bats: N passed, N failed, N skipped".
# The exit status is bats's own. Files run KVW_BATS_JOBS at a time
# (default 5: the tests mostly wait; on the idle 2-core machine, in
# alphabetical order, 3 at a time took 418 s and kept 1.3 of the cores
# busy, 4 took 427 s; in the order below 5 took 379 s. GNU parallel runs
# them, 1 without it), the tests of one file one after another: the files are independent (each test has its own
# mktemp run directory and /dev/shm names, fixed ports are each one
# file's, a check of /dev/shm looks only at names of its own test).
dir=$(dirname "$0")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# The longest files first, then the rest largest first (size stands for
# run time well enough): the long files start at once and the short ones
# fill the gaps at the end, so the jobs finish together (in alphabetical
# order one job ran on alone for a minute). slow: over 100 s each in a
# run with five jobs (bats --timing); tamper.bats is small but relays
# every byte through Python.
if [ $# -eq 0 ]; then
	slow="tamper netns drain kvup crash"
	for f in $slow; do set -- "$@" "$dir/$f".bats; done
	for f in $(ls -S "$dir"/*.bats); do
		case " $slow " in *" $(basename "$f" .bats) "*) ;; *) set -- "$@" "$f" ;; esac
	done
fi
jobs=${KVW_BATS_JOBS:-5}
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
