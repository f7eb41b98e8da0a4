#!/usr/bin/env bats
# reuse_bench.bats - a room id used again through the engine API (issue 29,
# item 4): `kv-bench --seed S` twice on one group draws the same room ids
# twice, so every room of the second run is a CLEAR + new BEGIN of an id
# whose previous incarnation the table still shows. Both runs must succeed
# and verify every byte, on shm and on tcp. On e31ad33 the second shm run
# gave success=26 failed=58 stuck=16 (the engines' polls read the old
# incarnation's Cleared tombstone and took it for their room's end).

load helpers

setup() {
	kvw_setup
}

teardown() {
	kvw_teardown
}

twice() {
	local i
	kv_up "$@"
	for i in 1 2; do
		run timeout 120 kv-bench --run-dir "$RUN" --seed 7 --rooms 60 \
			--verify --room-timeout 60
		echo "run $i: $output" | grep -E 'rooms=|error' >&2
		[ "$status" -eq 0 ]
		clean 60
		[ "$(summary success)" = 60 ]
		[ "$(summary failed)" = 0 ]
	done
}

@test "kv-bench --seed twice on one shm group: both runs all succeed" {
	twice
}

@test "kv-bench --seed twice on one tcp group: both runs all succeed" {
	twice --transport tcp
}
