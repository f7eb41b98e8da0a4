#!/usr/bin/env bats
# dest.bats - issue 29 item 3 with real processes (tcp, loopback): every
# decode receiver writes its rooms' destination grants (<table>.grant)
# before their XFER_INFO, and its sinks write a batch only into the pages
# granted to its room, and only into the slice of them granted to the
# prefill rank whose token the batch carries (its PP stage's layers, its
# head slice of each token slot). Honest groups must never trip the check:
# TP 4 -> 2 (two prefill ranks write head slices of each decode page),
# prefill PP 2 -> decode PP 1 with draft layers on decode (each stage
# writes only its layers, nobody the drafts) and TP 1 -> 1 with half of
# the rooms aborted, all with pages handed from room to room all run
# long, stay byte-exact with no batch refused for its destination
# (kv-stat's dest_refused), and the grant files go with their group. A
# batch that names another room's page, or another rank's head slice, is
# refused with real sockets in tests/unit/test_sink.c (its canary
# untouched).

load helpers

SHAPE="--layers 2 --pages 512 --heads 8 --head-dim 16 --aux-slots 64"

setup() { kvw_setup; }
teardown() { kvw_teardown; }

bench() {
	run timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN" "$@"
	echo "$output"
}

stat_json() { "$KVW_BIN/kv-stat" --run-dir "$RUN" --json; }

# The sum of a security counter over every table of the group.
sec_sum() { stat_json | jq "[.tables[].security.$1] | add"; }

# The grant files of the group's decode tables that exist now.
grants() {
	stat_json | jq -r '.tables[].path' | while read -r t; do
		[ -f "$t.grant" ] && echo "$t.grant"
	done
	return 0
}

@test "dest: TP 4 -> 2, head slices of one page from two prefill ranks, pages reused room after room: byte-exact, nothing refused for its destination" {
	kv_up --transport tcp --workers 2 --prefill-tp 4 --decode-tp 2 $SHAPE
	[ "$(grants | wc -l)" -eq 2 ] # one per decode rank
	bench --prefill-tp 4 --decode-tp 2 --rooms 600 --pages-per-room 8 \
		--chunk-pages 3 --verify
	[ "$status" -eq 0 ]
	clean 600
	[ "$(summary success)" = 600 ]
	[ "$(sec_sum dest_refused)" = 0 ]
	local g
	g=$(grants)
	timeout 60 "$KVW_ROOT/bin/kv-up" --stop "$RUN"
	for f in $g; do [ ! -e "$f" ]; done
}

@test "dest: prefill PP 2 -> decode PP 1 with 2 draft layers, and PP 2 x TP 2 -> 1: each stage and rank writes only its slice, byte-exact, nothing refused" {
	kv_up --transport tcp --workers 2 --prefill-pp 2 --prefill-tp 2 \
		$SHAPE --layers 4 --draft-layers 2
	bench --prefill-pp 2 --prefill-tp 2 --decode-tp 1 --rooms 400 \
		--pages-per-room 8 --chunk-pages 3 --verify
	[ "$status" -eq 0 ]
	clean 400
	[ "$(summary success)" = 400 ]
	[ "$(sec_sum dest_refused)" = 0 ]
}

@test "dest: TP 1 -> 1 with half of the rooms aborted: grants withdrawn and given again as pages move on, no honest batch refused" {
	kv_up --transport tcp --workers 2 $SHAPE
	bench --rooms 1000 --pages-per-room 16 --chunk-pages 5 --verify \
		--abort-frac 0.5
	clean 1000
	[ "$(summary failed)" = 0 ]
	[ "$(summary aborted)" -gt 0 ]
	[ "$(sec_sum dest_refused)" = 0 ]
}
