#!/usr/bin/env bats
# xpyd.bats - xPyD on one host over shm (issue 34 item 1): several kv-up
# groups of one --cluster serve each other's pools, and one kv-bench
# (--peers) routes rooms over every (prefill, decode) pair of instances,
# each byte checked, with aborts: as two full groups, and as the 2P2D split
# layout docs/ARCHITECTURE.md shows (two prefill-only and two decode-only
# groups, each decode naming both prefill bootstraps). A prefill instance
# killed mid-run fails only rooms it sends, and its next incarnation
# serves every pair. Groups of no one cluster refuse each other's pools:
# the crossing rooms fail as refused, each group's own rooms succeed.

load helpers
load xpyd

SHAPE="--layers 2 --heads 2 --head-dim 16 --page-tokens 4 --pages 128 --aux-slots 32"

setup() {
	kvw_setup
	CL=c${RUN##*.} # a cluster of this run's own
}
teardown() {
	local g
	for g in "$RUN"/g*; do
		[ -d "$g/pids" ] && timeout 30 "$KVW_ROOT/bin/kv-up" --stop "$g" >/dev/null 2>&1
	done
	kvw_teardown
}

# up NAME ARGS...: a group in $RUN/NAME.
up() {
	local g=$RUN/$1
	shift
	timeout 60 "$KVW_ROOT/bin/kv-up" --daemon --run-dir "$g" --workers 2 "$@" $SHAPE || {
		tail -n 20 "$g"/logs/*.log "$g/kv-up.log" >&2 2>/dev/null
		return 1
	}
}

# summary FIELD: FIELD=N of kv-bench's summary line in $RUN/out.
summary() { grep -o "\b$1=[0-9]*" "$RUN/out" | head -n 1 | cut -d= -f2; }

@test "2x2 over shm, two groups of one cluster: 2,000 verified rooms with 10 % aborts over all four pairs, none failed, stuck or corrupt" {
	up ga --cluster "$CL"
	up gb --cluster "$CL"
	run timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN/ga" --peers "$RUN/gb" \
		--rooms 2000 --concurrency 16 --verify --abort-frac 0.1 --no-reference
	echo "$output"
	[ "$status" -eq 0 ]
	echo "$output" >"$RUN/out"
	[ "$(summary rooms)" = 2000 ]
	[ "$(summary failed)" = 0 ] && [ "$(summary stuck)" = 0 ] && [ "$(summary corrupt)" = 0 ]
	[ $(($(summary success) + $(summary aborted))) = 2000 ]
	[ "$(summary aborted)" -gt 0 ]
	# Round-robin: every pair carried a quarter of the rooms.
	for p in ga gb; do
		for d in ga gb; do
			[[ $output =~ $RUN/$p\ -\>\ $RUN/$d\ 500\ \([0-9]+\ ok\) ]] || { echo "not 500 rooms $p -> $d"; false; }
		done
	done
}

@test "2P2D split as docs/ARCHITECTURE.md shows: two prefill and two decode instances of one cluster, each decode naming both bootstraps; verified rooms with aborts over all four pairs, routed at random" {
	b=$(free_port_base 4000)
	up gp1 --role prefill --cluster "$CL" --transport shm --insecure --port-base "$b"
	up gp2 --role prefill --cluster "$CL" --transport shm --insecure --port-base $((b + 1000))
	boots="--bootstrap tcp://127.0.0.1:$b --bootstrap tcp://127.0.0.1:$((b + 1000))"
	up gd1 --role decode --cluster "$CL" --transport shm --insecure --port-base $((b + 2000)) $boots
	up gd2 --role decode --cluster "$CL" --transport shm --insecure --port-base $((b + 3000)) $boots
	grep -q "^member=bootstrap1 role=bootstrap listen=tcp://127.0.0.1:$((b + 1000))$" "$RUN/gd2/endpoints"
	run timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN/gd1" --peers "$RUN/gd2,$RUN/gp1,$RUN/gp2" \
		--route random --rooms 1000 --concurrency 16 --verify --abort-frac 0.1 --no-reference
	echo "$output"
	[ "$status" -eq 0 ]
	echo "$output" >"$RUN/out"
	[ "$(summary rooms)" = 1000 ]
	[ "$(summary failed)" = 0 ] && [ "$(summary stuck)" = 0 ] && [ "$(summary corrupt)" = 0 ]
	for p in gp1 gp2; do
		for d in gd1 gd2; do
			[[ $output =~ $RUN/$p\ -\>\ $RUN/$d\ [1-9] ]] || { echo "no rooms $p -> $d"; false; }
		done
	done
}

@test "2x2: a prefill instance killed mid-run fails only rooms it sends, never one of the other instance; its next incarnation serves every pair" {
	up ga --cluster "$CL"
	up gb --cluster "$CL"
	# One page a room: the pages of a failed room stay out of use for
	# the run, and the pools must outlast a few of them.
	"$KVW_BIN/kv-bench" --run-dir "$RUN/ga" --peers "$RUN/gb" --rooms 6000 \
		--pages-per-room 1 --chunk-pages 1 --concurrency 8 --verify \
		--room-timeout 60 --no-reference >"$RUN/out" 2>&1 &
	bench=$!
	echo "$bench" >>"$RUN/bg.pids"
	kill_prefill "$bench" gb
	rc=0
	wait "$bench" || rc=$?
	cat "$RUN/out"
	[ "$rc" -eq 0 ] || [ "$rc" -eq 1 ]
	[ "$(summary rooms)" = 6000 ] && [ "$(summary corrupt)" = 0 ] && [ "$(summary stuck)" = 0 ]
	[ "$(summary failed)" -gt 0 ] # the kill met rooms of gb's prefill
	# Every room ga's prefill sent succeeded, to either decode.
	pairs_carry "$(cat "$RUN/out")" 1500 1500 ga -- ga gb
	# The killed instance's new incarnation serves both decodes.
	wait_for 60 restarted gb
	run timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN/ga" --peers "$RUN/gb" --rooms 40 \
		--concurrency 4 --verify --no-reference
	echo "$output"
	[ "$status" -eq 0 ]
	pairs_carry "$output" 10 10 ga gb -- ga gb
}

@test "groups of no one cluster: the crossing rooms fail as refused, not as a layout mismatch; each group's own rooms succeed" {
	up ga --cluster "$CL"
	up gb
	run timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN/ga" --peers "$RUN/gb" \
		--rooms 40 --pages-per-room 2 --concurrency 4 --verify --room-timeout 30 --no-reference
	echo "$output"
	[ "$status" -eq 1 ]
	echo "$output" >"$RUN/out"
	[ "$(summary success)" = 20 ] && [ "$(summary failed)" = 20 ]
	[ "$(summary stuck)" = 0 ] && [ "$(summary corrupt)" = 0 ]
	# Round-robin: ten rooms a pair, so twenty crossing rooms failed. Each
	# decode's table shows them failed as refused and no room failed for
	# another reason (a failed room's pages stay out of use: two pages a
	# room leave the pools room for all of them).
	for g in ga gb; do
		run timeout 30 "$KVW_BIN/kv-stat" --run-dir "$RUN/$g" --json --all
		[ "$status" -eq 0 ]
		echo "$output" | jq -r '.tables[] | select(.name == "d0") | .rooms[] | "\(.state) \(.reason)"' | sort | uniq -c
		refused=$(echo "$output" | jq '[.tables[] | select(.name == "d0") | .rooms[] | select(.reason == "refused")] | length')
		other=$(echo "$output" | jq '[.tables[] | select(.name == "d0") | .rooms[] | select(.reason != "refused" and .reason != "none")] | length')
		[ "$refused" -ge 1 ] && [ "$other" = 0 ] || { echo "$g d0: $refused refused, $other other"; false; }
	done
}

@test "kv-bench --peers: refused with 100 before any room with --spawn, with --role, and for a group of another shape" {
	run "$KVW_BIN/kv-bench" --spawn --peers "$RUN/gb"
	[ "$status" -eq 100 ]
	[[ $output == *"--peers adds running groups to --run-dir's (one host): not with --spawn or --role"* ]]
	run "$KVW_BIN/kv-bench" --run-dir "$RUN/ga" --role decode --peer tcp://127.0.0.1:1 --insecure --peers "$RUN/gb"
	[ "$status" -eq 100 ]
	up ga --cluster "$CL"
	SHAPE="$SHAPE --heads 4" up gb --cluster "$CL"
	run timeout 60 "$KVW_BIN/kv-bench" --run-dir "$RUN/ga" --peers "$RUN/gb" --rooms 4 --no-reference
	[ "$status" -eq 100 ]
	[[ $output == *"--peers $RUN/gb: its group's shape is not --run-dir's"* ]]
}

@test "make demo XPYD=2x2 (kv-demo with KVW_XPYD): two prefill and two decode instances, every pair carries verified rooms, nothing left behind; a bad XPYD is refused with 100" {
	run env KVW_XPYD=9x1 "$KVW_ROOT/bin/kv-demo"
	[ "$status" -eq 100 ]
	[[ $output == *"KVW_XPYD (make demo XPYD=...) must be PxD, each 1..8, got '9x1'"* ]]
	run env KVW_XPYD=2x2 TMPDIR="$RUN" KVW_BENCH_NO_REFERENCE=1 timeout 300 \
		"$KVW_ROOT/bin/kv-demo" --rooms 32
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output == *"kv-demo: ok"* ]]
	[[ $output == *"rooms=32 success=32 failed=0 aborted=0 stuck=0 corrupt=0"* ]]
	for p in p1 p2; do
		for d in d1 d2; do
			[[ $output =~ /$p\ -\>\ [^\ ]*/$d\ 8 ]] || { echo "no 8 rooms $p -> $d"; false; }
		done
	done
	# Every group stopped and its run directory removed.
	[ -z "$(ls "$RUN" | grep '^kvw-demo\.')" ]
	[ -z "$(ls /dev/shm | grep -E '^kvwire\.demo[0-9]+\+[pd][0-9]+-')" ]
}
