#!/usr/bin/env bats
# forget.bats - a long-lived group's room tables forget old Cleared rooms
# (rtab_reclaim). A Cleared room stays in its slot as a tombstone, and
# slots used to go only from EMPTY to taken: after some ten times a
# table's capacity in room ids every slot was a tombstone, and every
# lookup of an id not in the table walked all of them (on the real 65,536
# slots kv-bench fell from 35,000 to 800 rooms a second after 650,000
# rooms). Here the controls' tables have 256 slots (KVW_TEST_ROOM_CAPACITY)
# and one run moves twenty times that in rooms, some aborted mid-way: every
# room must end right (verified bytes, aborts acked, nothing stuck), and
# both tables must end with most slots EMPTY. The controls forget on a
# count of inserts (a pass each capacity / 8), so the verdict does not
# depend on the machine's speed.

load helpers

SHAPE="--layers 2 --page-tokens 4 --heads 1 --head-dim 16 --pages 256 --aux-slots 256"
CAP=256

setup() {
	kvw_setup
}

teardown() {
	kvw_teardown
}

# taken MEMBER: the slots of MEMBER's table that hold a room (in any
# state, Cleared included: kv-stat --all lists them all).
taken() {
	"$KVW_BIN/kv-stat" --run-dir "$RUN" --json --all |
		jq -r --arg m "$1" '.tables[] | select(.name == $m) | .rooms | length'
}

@test "twenty times the tables' capacity in rooms, some aborted: every room ends right and most slots stay EMPTY" {
	KVW_TEST_ROOM_CAPACITY=$CAP kv_up --workers 2 $SHAPE
	grep -q "test-only room table of $CAP slots" "$RUN/logs/p0.log"
	grep -q "test-only room table of $CAP slots" "$RUN/logs/d0.log"
	run timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms $((20 * CAP)) \
		--concurrency 16 --pages-per-room 1 --chunk-pages 1 --verify \
		--abort-frac 0.1
	echo "$output" | grep '^rooms='
	[ "$status" -eq 0 ]
	echo "$output" | grep -q "^rooms=$((20 * CAP)) .* stuck=0 corrupt=0 "
	for m in p0 d0; do
		n=$(taken "$m")
		echo "$m: $n of $CAP slots hold a room"
		# Without forgetting all 256 would (20 x 256 distinct ids).
		[ "$n" -le $((CAP * 3 / 4)) ]
	done
}
