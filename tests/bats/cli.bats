#!/usr/bin/env bats
# Every program in bin/ answers the same way on its command line: --help
# prints its usage and exits 0; an unknown flag exits 100 with exactly one
# fatal line `prog: fatal: ...` on stderr. kv-demo passes its flags to
# kv-bench, so its fatal line is kv-bench's.

load helpers

setup() { kvw_setup; }
teardown() { kvw_teardown; }

# programs: every executable in $KVW_ROOT/bin, one per line.
programs() {
	local p
	for p in "$KVW_ROOT"/bin/*; do
		[ -f "$p" ] && [ -x "$p" ] && echo "${p##*/}"
	done
}

@test "there are programs to check (the build ran)" {
	[ "$(programs | wc -l)" -ge 10 ]
}

@test "every program: --help exits 0 with a usage on stdout" {
	local p
	for p in $(programs); do
		run timeout 30 "$KVW_BIN/$p" --help
		[ "$status" -eq 0 ] || { echo "$p --help: exit $status"; return 1; }
		[[ "$output" == *usage* ]] || { echo "$p --help: no usage"; return 1; }
	done
}

@test "every program: an unknown flag exits 100 with one fatal line" {
	local p want n rc
	for p in $(programs); do
		want=$p
		[ "$p" = kv-demo ] && want=kv-bench
		rc=0
		timeout 60 "$KVW_BIN/$p" --no-such-flag >/dev/null 2>"$RUN/err" || rc=$?
		[ "$rc" -eq 100 ] || { echo "$p: exit $rc"; cat "$RUN/err"; return 1; }
		n=$(grep -c ': fatal: ' "$RUN/err" || true)
		[ "$n" -eq 1 ] || { echo "$p: $n fatal lines"; cat "$RUN/err"; return 1; }
		grep -q "^$want: fatal: .*--no-such-flag" "$RUN/err" || {
			echo "$p: no '$want: fatal:' line naming the flag"; cat "$RUN/err"; return 1; }
	done
}
