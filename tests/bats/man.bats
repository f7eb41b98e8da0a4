#!/usr/bin/env bats
# Manual pages: every program (cmd/* but cmd/common, kv-up, kv-demo) has one, generated
# from its --help by mk/help2mdoc.sh (`make man`), it lints clean with
# `mandoc -T lint` (run among all of them, so the cross-references
# resolve), and the flags it documents are exactly the
# flags of --help: the two cannot drift.

load helpers

setup() {
	kvw_setup
	make -s -C "$KVW_ROOT" man
	MP="$KVW_ROOT/build/man"
}
teardown() { kvw_teardown; }

# programs: each folder of cmd/ is one, but cmd/common (the code they
# share).
programs() {
	ls "$KVW_ROOT/cmd" | grep -vx common
	echo kv-up
	echo kv-demo
}

# flags TEXT: the sorted set of --long-flags in TEXT.
flags() { grep -o -- '--[a-z][a-z0-9-]*' | sort -u; }

@test "every program has a page and every page lints clean with mandoc -T lint" {
	command -v mandoc >/dev/null || skip "mandoc not installed"
	n=0
	for p in $(programs); do
		page="$MP/man1/$p.1"
		[ -f "$page" ] || { echo "no page for $p" >&2; false; }
		# From the pages' directory: mandoc resolves .Xr among siblings.
		cd "$MP/man1"
		run mandoc -T lint "$p.1"
		[ "$status" -eq 0 ] || { echo "$p: $output" >&2; false; }
		[ -z "$output" ]
		n=$((n + 1))
	done
	[ "$n" -ge 10 ]
	# The lint bites: an unknown macro is reported.
	printf '.Xx bogus\n' | cat "$MP/man1/kv-stat.1" - >"$RUN/bad.1"
	cp "$RUN/bad.1" "$MP/man1/zz-bad.1"
	run mandoc -T lint zz-bad.1
	rm -f "$MP/man1/zz-bad.1"
	[ "$status" -ne 0 ]
}

@test "the flags of each page are exactly the flags of its --help" {
	command -v mandoc >/dev/null || skip "mandoc not installed"
	for p in $(programs); do
		"$KVW_BIN/$p" --help 2>&1 | flags >"$RUN/help.flags" || true
		mandoc -T ascii "$MP/man1/$p.1" | col -b | flags >"$RUN/page.flags"
		[ -s "$RUN/help.flags" ]
		diff "$RUN/help.flags" "$RUN/page.flags" || { echo "drift: $p" >&2; false; }
	done
	# kv-stat's new modes are in its page.
	mandoc -T ascii "$MP/man1/kv-stat.1" | col -b | grep -q -- '--serve ADDR'
}
