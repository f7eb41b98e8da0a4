#!/usr/bin/env bats
# loss.bats - a lost group is noticed, and programs clean up on SIGTERM:
# kv-bench gives up with exit 102 naming the member when the group it
# drives is stopped under it; kv-bench refuses a shape other than the
# group's before any room; kv-bench copy and kv-bootstrap end promptly on
# SIGTERM and leave no pool file or socket of theirs behind.

load helpers

SHAPE="--layers 2 --pages 256 --heads 2 --head-dim 16 --aux-slots 64"

setup() { kvw_setup; }
teardown() { kvw_teardown; }

@test "kv-up --stop during a kv-bench run makes kv-bench exit 102 within seconds, naming the member" {
	kv_up --workers 2 $SHAPE --waiting-timeout 120 --bootstrap-timeout 120
	# Baseline of this machine now: a whole short kv-bench run (start,
	# rooms, exit; no memcpy measures, as below: KVW_BENCH_NO_REFERENCE),
	# which the exit after the group goes also pays, however loaded the
	# machine is.
	b0=$(date +%s%N)
	timeout 120 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 10 \
		--pages-per-room 4 --chunk-pages 2 >/dev/null
	base_ms=$((($(date +%s%N) - b0) / 1000000))
	timeout 120 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 1000000 \
		--pages-per-room 4 --chunk-pages 2 >"$RUN/bench.out" 2>&1 &
	bench=$!
	echo "$bench" >>"$RUN/bg.pids"
	# Rooms of this run are flowing before the group goes (more rooms
	# inserted than the baseline run left counted).
	inserted() {
		"$KVW_BIN/kv-stat" --run-dir "$RUN" --json 2>/dev/null |
			jq '[.tables[].counters.inserted] | add'
	}
	n0=$(inserted)
	rooms_seen() { [ "$(inserted)" -gt "$n0" ]; }
	wait_for 60 rooms_seen
	timeout 60 "$KVW_ROOT/bin/kv-up" --stop "$RUN"
	t0=$(date +%s%N)
	rc=0
	wait "$bench" || rc=$?
	t1=$(date +%s%N)
	cat "$RUN/bench.out"
	echo "kv-bench exited $rc $(((t1 - t0) / 1000000)) ms after kv-up --stop returned; a 10-room run took $base_ms ms"
	[ "$rc" -eq 102 ]
	# Within 5 s, plus what a short run takes on this machine right now.
	[ $(((t1 - t0) / 1000000)) -lt $((5000 + base_ms)) ]
	grep -Eq "member (p|d)[0-9]+ is gone" "$RUN/bench.out"
}

@test "kv-bench refuses a shape flag that differs from the group's, before any room" {
	kv_up --workers 1 $SHAPE
	run timeout 20 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 5 --heads 4
	[ "$status" -eq 100 ]
	[[ $output == *"--heads 4 differs from the group's shape"* ]]
	# The same value as the group's is fine.
	run timeout 60 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 5 --heads 2 --verify
	[ "$status" -eq 0 ]
}

@test "SIGTERM ends kv-bench copy promptly and removes its pool files" {
	timeout 120 "$KVW_BIN/kv-bench" copy --mib 32 --seconds 2 --reps 50 \
		>"$RUN/copy.out" 2>&1 &
	pid=$! # timeout's: it passes SIGTERM on and exits with kv-bench's status
	echo "$pid" >>"$RUN/bg.pids"
	wait_for 10 pgrep -P "$pid" kv-bench
	bench=$(pgrep -P "$pid" kv-bench)
	pools() { ls /dev/shm | grep -c "^kvwire\.bench-copy-$bench-"; }
	two_pools() { [ "$(pools)" -eq 2 ]; }
	wait_for 30 two_pools
	kill -TERM "$pid"
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 1 ]
	grep -q "stopped by a signal" "$RUN/copy.out"
	[ "$(pools)" -eq 0 ]
}

@test "kv-bootstrap removes its ipc socket file on a clean SIGTERM" {
	start_ready boot 30 "$KVW_BIN/kv-bootstrap" --listen "ipc://$RUN/boot.sock"
	[ -S "$RUN/boot.sock" ]
	kill -TERM "$BG_PID"
	rc=0
	wait "$BG_PID" || rc=$?
	[ "$rc" -eq 0 ]
	[ ! -e "$RUN/boot.sock" ]
}
