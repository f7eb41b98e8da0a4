#!/bin/sh
# check-tests.sh - checks that the tests can fail, run by `make test`.
# Prints one line per breach and "tests: N passed, N failed".
#  1. bats: no test body has a `! CMD` line that is not its last command.
#     bash's errexit ignores a negated command, so bats would pass the test
#     whatever CMD did; write `refute CMD` (tests/bats/helpers.bash). A line
#     ending in a continuation (`||`, `&&`, `|`, `\`) is part of a bigger
#     command and is left alone.
#  2. cmocka: every test registered in a tests[] array of a test_*.c
#     asserts: its body calls assert_* or fail* or (transitively) a
#     function or macro of the same file that does.
#  3. mutants: every record of tests/mutants/list names a file that has
#     its line exactly once (what `make mutants` needs, checked here in
#     seconds: a record left behind by an edit failed CI after 25 min).
# Usage: mk/check-tests.sh [ROOT] (default: the repository this is in).
set -u
root=${1:-$(dirname "$0")/..}
cd "$root" || exit 111
passed=0
failed=0

# tally BREACHES: a file passes when its check printed nothing; each line
# printed is one breach.
tally() {
	if [ -n "$1" ]; then
		echo "$1"
		failed=$((failed + $(printf '%s\n' "$1" | wc -l)))
	else
		passed=$((passed + 1))
	fi
}

for f in tests/bats/*.bats; do
	[ -f "$f" ] || continue
	out=$(awk -v file="$f" '
	function flush() {
		if (neg && neg != last)
			printf "tests: %s:%d: `!` before the last line of @test %s: write refute\n", file, neg, name
		neg = 0
	}
	/^@test / { intest = 1; name = $0; sub(/^@test /, "", name); sub(/ *\{ *$/, "", name); neg = 0; last = 0; next }
	intest && /^}/ { flush(); intest = 0; next }
	!intest { next }
	/^[ \t]*(#|$)/ { next }
	{
		last = NR
		if (neg) {
			# a later command: the negated one was not the last
			printf "tests: %s:%d: `!` before the last line of @test %s: write refute\n", file, neg, name
			neg = 0
		}
		if ($0 ~ /^[ \t]*![ \t]/ && $0 !~ /(\|\||&&|\||\\)[ \t]*$/)
			neg = NR
	}' "$f")
	tally "$out"
done

for f in tests/unit/test_*.c; do
	[ -f "$f" ] || continue
	out=$(awk -v file="$f" '
	# Bodies of top-level functions (signature starts at column 0, body
	# from a "{" line to a "}" line at column 0) and of #define macros.
	/^#define [A-Za-z_][A-Za-z0-9_]*\(/ {
		m = $2; sub(/\(.*/, "", m); body[m] = $0
		while ($0 ~ /\\$/ && (getline line) > 0) { $0 = line; body[m] = body[m] " " line }
		next
	}
	/^[A-Za-z_].*[A-Za-z_][A-Za-z0-9_]*\(/ && !/;[ \t]*$/ {
		sig = $0; cur = sig; sub(/\(.*/, "", cur); sub(/.*[ *]/, "", cur)
		isvoidtest[cur] = (sig ~ /^(static )?void /)
		next
	}
	/^\{/ && cur != "" { inbody = 1; body[cur] = ""; next }
	/^\}/ && inbody { inbody = 0; cur = ""; next }
	inbody { body[cur] = body[cur] " " $0 }
	/CMUnitTest tests\[\] = \{/ { inarr = 1; next }
	inarr && /^[ \t]*\};/ { inarr = 0; next }
	inarr {
		s = $0
		while (match(s, /[A-Za-z_][A-Za-z0-9_]*/)) {
			w = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
			listed[w] = 1
		}
	}
	END {
		for (n in body)
			asserts[n] = body[n] ~ /(^|[^A-Za-z0-9_])(assert_[a-z_]+|fail_msg|fail)[ \t]*\(/
		do {
			changed = 0
			for (n in body) {
				if (asserts[n]) continue
				for (g in asserts)
					if (asserts[g] && body[n] ~ ("(^|[^A-Za-z0-9_])" g "[ \t]*\\(")) {
						asserts[n] = 1; changed = 1; break
					}
			}
		} while (changed)
		ok = 0
		for (n in listed)
			if ((n in body) && isvoidtest[n]) {
				if (asserts[n]) ok++
				else printf "tests: %s: cmocka test %s asserts nothing\n", file, n
			}
		if (ok == 0) printf "tests: %s: no cmocka test found\n", file
	}' "$f")
	tally "$out"
done
# The list's records: "key<TAB>value" lines, a blank line ends one; a
# line is compared without its indentation, as tests/mutants/run.sh does.
list=tests/mutants/list
if [ -f "$list" ]; then
	out=$(awk -F '\t' -v list="$list" '
	function check(   n, s, f) {
		if (name == "" || file == "") return
		n = 0
		while ((getline s < file) > 0) { sub(/^[ \t]+/, "", s); if (s == from) n++ }
		close(file)
		if (n != 1)
			printf "tests: %s: mutant %s: %s has its line %d times: %s\n", list, name, file, n, from
		name = file = from = ""
	}
	/^$/ { check(); next }
	/^#/ { next }
	$1 == "mutant" { name = $2 }
	$1 == "file" { file = $2 }
	$1 == "line" { from = substr($0, 6) }
	END { check() }' "$list")
	tally "$out"
fi
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
