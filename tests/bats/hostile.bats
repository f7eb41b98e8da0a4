#!/usr/bin/env bats
# hostile.bats - kvwire's processes against hostile peers (issue 4, items 6
# and 7), all real processes, peers from tests/peers/flood.py:
#  - 100,000 malformed messages (random bytes, empty and 64-frame messages,
#    bad headers, valid headers with bad payloads, huge counts, valid frames
#    of types the socket does not serve) at each peer socket of a kv-up
#    group (and 10,000 at each engine socket): every one is counted, the
#    log stays bounded with suppressed counts, CPU goes back to idle, and a
#    verified kv-bench run succeeds afterwards;
#  - kv-heartbeat's DEALER flooded by a peer that answers every PING with
#    garbage: counted, bounded, the peer stays alive;
#  - out-of-range page indices fail the room (bad index) on both sides and
#    leave every canary byte of the decode pool as it was; a layout that
#    claims more than its pool is stopped by the transport (transfer);
#  - a decode pool truncated under the worker's mapping fails the room with
#    STATUS(Failed, transfer), the worker survives (no SIGBUS) and serves on;
#  - SIGTERM while peers are unreachable: every process exits 0.
# Context termination under wire_recv is proved in tests/unit/test_wire.c.

load helpers

FLOOD="$BATS_TEST_DIRNAME/../peers/flood.py"
FAKE="$BATS_TEST_DIRNAME/../peers/kvwfake.py"
SHAPE=$SENDER_SHAPE
PYSHAPE=$SENDER_PYSHAPE

setup() {
	kvw_setup
	TAG=${RUN##*/}
}

teardown() {
	kvw_teardown
	rm -f /dev/shm/kvwire."$TAG".* /dev/shm/kvwire."$TAG"-*
}

flood() { timeout 120 "$PY" "$FLOOD" flood "$@"; }

# malformed TABLE: the table's malformed counter.
malformed() { timeout 10 "$PY" "$FAKE" counter "$1" 0; }
malformed_ge() { [ "$(malformed "$1")" -ge "$2" ]; }

# cpu PID: utime + stime of a process, in clock ticks.
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# idle PID...: within 10 s there is a window of at least one second in
# which each process used under a quarter of a core: its CPU has returned to
# idle. A window in which one was still busy starts the next window.
idle() {
	local p
	IDLE_T0=$(date +%s%N)
	IDLE_BASE=()
	for p in "$@"; do IDLE_BASE+=("$(cpu "$p")"); done
	wait_for 10 idle_window "$@"
}

idle_window() {
	local p d i=0 quiet=1 hz now
	hz=$(getconf CLK_TCK)
	now=$(date +%s%N)
	[ $((now - IDLE_T0)) -ge 1000000000 ] || return 1
	for p in "$@"; do
		d=$(($(cpu "$p") - IDLE_BASE[i]))
		echo "pid $p: $d ticks in $(((now - IDLE_T0) / 1000000)) ms"
		[ "$d" -le $((hz / 4)) ] || quiet=0
		i=$((i + 1))
	done
	[ "$quiet" = 1 ] && return 0
	IDLE_T0=$now
	IDLE_BASE=()
	for p in "$@"; do IDLE_BASE+=("$(cpu "$p")"); done
	return 1
}


@test "100,000 malformed messages at each peer socket: all counted, bounded logs, idle CPU, then a verified run succeeds" {
	kv_up --workers 2 $SHAPE
	local boot p0 d0 tp td start secs
	boot=$(endpoint bootstrap listen)
	p0=$(endpoint p0 listen)
	d0=$(endpoint d0 listen)
	tp=$(endpoint p0 table)
	td=$(endpoint d0 table)
	start=$SECONDS
	flood "$p0" --target sender-peer --count 100000 --seed 1
	flood "$d0" --target receiver-peer --count 100000 --seed 2
	flood "$boot" --target boot --count 100000 --seed 3
	flood "$(endpoint p0 engine)" --target sender-engine --count 10000 --seed 4
	flood "$(endpoint d0 engine)" --target receiver-engine --count 10000 --seed 5
	wait_for 60 malformed_ge "$tp" 110000
	wait_for 60 malformed_ge "$td" 110000
	secs=$((SECONDS - start + 1))
	echo "flood took ${secs}s; malformed p0=$(malformed "$tp") d0=$(malformed "$td")"
	# Every member still there, and idle once the flood is over.
	local pids=() f
	for f in "$RUN"/pids/{bootstrap,p0,d0,hb0}.pid; do pids+=("$(cat "$f")"); done
	pids+=($(pgrep -P "$(cat "$RUN/pids/p0.pid")"))
	for p in "${pids[@]}"; do kill -0 "$p"; done
	run idle "${pids[@]}"
	echo "$output"
	[ "$status" -eq 0 ]
	# Idle, so nothing is left to count: each message counted once.
	[ "$(malformed "$tp")" -eq 110000 ]
	[ "$(malformed "$td")" -eq 110000 ]
	# Bounded logs: a few lines a second per call site, with the count of
	# what was suppressed.
	for f in "$RUN"/logs/{bootstrap,p0,d0}.log; do
		echo "$f: $(wc -l <"$f") lines"
		[ "$(wc -l <"$f")" -le $((secs * 40 + 60)) ]
		grep -q "(suppressed [0-9]*)" "$f"
	done
	run timeout 120 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 50 --verify
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"success=50 "* ]]
	[[ "$output" == *"corrupt=0 "* ]]
	# kv-bootstrap has no table: its counts are in its stop line. Each
	# message is counted once: malformed, or, where it was a well-formed
	# BOOT_REGISTER or BOOT_LOOKUP from a source over the rate limit, rate
	# limited. How many of those go over the limit depends on how fast
	# the flood ran (issue 30: an idle run counted 99,555 malformed and
	# the rest rate limited), so the verdict is on the sum.
	timeout 30 "$KVW_ROOT/bin/kv-up" --stop "$RUN" >/dev/null 2>&1
	line=$(grep ' malformed$' "$RUN/logs/bootstrap.log" | tail -1)
	n=$(sed -n 's/.* \([0-9]*\) malformed$/\1/p' <<<"$line")
	rl=$(sed -n 's/.* \([0-9]*\) rate limited, [0-9]* malformed$/\1/p' <<<"$line")
	echo "bootstrap malformed=$n rate_limited=$rl"
	[ -n "$n" ] && [ -n "$rl" ]
	[ $((n + rl)) -eq 100000 ]
}

@test "kv-heartbeat's dealer survives a peer that answers every PING with garbage: counted, bounded, peer alive" {
	TAB="$RUN/t.rooms"
	start_ready gp 60 "$PY" "$FLOOD" garbage-peer "ipc://$RUN/p0" --count 500 \
		--boot "ipc://$RUN/boot"
	start_ready rx 60 "$KVW_BIN/kv-receiver" --listen "ipc://$RUN/rx" \
		--engine "ipc://$RUN/eng" --table "$TAB" --pool "$RUN/kvwire.d0.pool" \
		--layers 2 --pages 64 --heads 2 --head-dim 16 --aux-slots 8
	timeout 10 "$PY" "$FAKE" engine "ipc://$RUN/eng" begin 1 "ipc://$RUN/boot" 0 0 1
	wait_for 10 eval '[[ "$(timeout 10 "$PY" "$FAKE" room "$TAB" 1)" == "state=WaitingForInput"* ]]'
	# Each PING gets 500 malformed replies, then the PONG: the Python
	# peer takes a while to write them, more than the 0.1 s ping timeout
	# twice running on a loaded machine (seen: the room failed, peer
	# dead). 50 misses in a row (5 s without one PONG through) make it
	# dead here: alive means the PONGs behind the garbage keep arriving.
	start_ready hb 60 "$KVW_BIN/kv-heartbeat" --table "$TAB" --interval 0.1 --max-failures 50
	HB=$BG_PID
	start=$SECONDS
	wait_for 60 malformed_ge "$TAB" 5000
	kill -0 "$HB"
	timeout 10 "$PY" "$FAKE" peers "$TAB" | grep -q "^1 alive "
	[[ "$(timeout 10 "$PY" "$FAKE" room "$TAB" 1)" == "state=WaitingForInput"* ]]
	secs=$((SECONDS - start + 1))
	echo "hb.log: $(wc -l <"$RUN/hb.log") lines over ${secs}s"
	[ "$(wc -l <"$RUN/hb.log")" -le $((secs * 30 + 20)) ]
	grep -q "(suppressed [0-9]*)" "$RUN/hb.log"
}

# start_sender: a kv-sender of this test with its own files.
start_sender() {
	TABLE=/dev/shm/kvwire.$TAG.rooms
	POOL=/dev/shm/kvwire.$TAG.pool
	PEER="ipc://$RUN/p.sock"
	ENG="ipc://$RUN/e.sock"
	start_ready sender 60 "$KVW_BIN/kv-sender" --listen "$PEER" --engine "$ENG" \
		--table "$TABLE" --pool "$POOL" $SHAPE --workers 1 "$@"
	SENDER_WRAP=$BG_PID # its `timeout`, whose status is the sender's
	SENDER=$(pgrep -P "$BG_PID")
	[ -n "$SENDER" ]
	wait_for 10 eval '[ -n "$(pgrep -P "$SENDER")" ]'
}

hostile_decode() {
	local case=$1 room=$2
	timeout 30 "$PY" "$FLOOD" decode --sender "$PEER" --engine "$ENG" \
		--listen "ipc://$RUN/$case.sock" --prefill-pool "$POOL" \
		--decode-pool "/dev/shm/kvwire.$TAG-$case.pool" --case "$case" \
		--room "$room" $PYSHAPE
}

room_reason() {
	"$KVW_BIN/kv-stat" --table "$1" --room "$2" | grep -q "$3"
}

@test "out-of-range pages fail the room (bad index) on sender and receiver; the decode pool's canary is untouched" {
	start_sender
	# XFER_INFO naming a page past the decode pool.
	run hostile_decode dst-range 70
	echo "$output"
	[ "$status" -eq 0 ]
	room_reason "$TABLE" 70 "page index out of range"
	# SEND_CHUNK naming a page past the prefill pool.
	run hostile_decode src-range 71
	echo "$output"
	[ "$status" -eq 0 ]
	room_reason "$TABLE" 71 "page index out of range"
	# A REGISTER whose layout claims twice its pool: the planner trusts the
	# layout, the transport checks the mapped file and moves nothing.
	run hostile_decode lying-layout 72
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"ok lying-layout reason 5"* ]]
	# Receiver: RECV_BEGIN with a page past its pool fails at once and no
	# prefill rank hears of the room.
	timeout 10 "$PY" "$FAKE" serve --topo 1,1 --ranks "ipc://$RUN/fp0" \
		--boot "ipc://$RUN/fboot" --events "$RUN/ev" >/dev/null 2>&1 &
	echo $! >>"$RUN/bg.pids"
	start_ready rx 60 "$KVW_BIN/kv-receiver" --listen "ipc://$RUN/rx" \
		--engine "ipc://$RUN/rxe" --table "$RUN/rx.rooms" \
		--pool "$RUN/kvwire.d0.pool" --layers 2 --pages 64 --heads 2 --head-dim 16 --aux-slots 8
	timeout 10 "$PY" "$FAKE" engine "ipc://$RUN/rxe" begin 80 "ipc://$RUN/fboot" 0 0 3,64
	wait_for 10 room_reason "$RUN/rx.rooms" 80 "page index out of range"
	timeout 10 "$PY" "$FAKE" engine "ipc://$RUN/rxe" begin 81 "ipc://$RUN/fboot" 8 0 3
	wait_for 10 room_reason "$RUN/rx.rooms" 81 "page index out of range"
	[ "$(malformed "$RUN/rx.rooms")" -ge 2 ]
	refute grep -q "XFER_INFO rank=0 room=8[01]" "$RUN/ev"
	# Both still serve: the sender moves a good room byte-exact.
	run timeout 30 "$PY" "$KVW_ROOT/tests/peers/fake_decode.py" transfer \
		--sender "$PEER" --engine "$ENG" --listen "ipc://$RUN/ok.sock" \
		--prefill-pool "$POOL" --decode-pool "/dev/shm/kvwire.$TAG-ok.pool" \
		--room 73 $PYSHAPE
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "a decode pool truncated under the worker's mapping fails the room (transfer, STATUS Failed); the worker lives and serves on" {
	start_sender
	worker=$(pgrep -P "$SENDER")
	run hostile_decode truncate 90
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"ok truncate reason 5"* ]]
	room_reason "$TABLE" 91 "transfer"
	[ "$(pgrep -P "$SENDER")" = "$worker" ]
	grep -q "shrank" "$RUN/sender.log"
	run timeout 30 "$PY" "$KVW_ROOT/tests/peers/fake_decode.py" transfer \
		--sender "$PEER" --engine "$ENG" --listen "ipc://$RUN/ok.sock" \
		--prefill-pool "$POOL" --decode-pool "/dev/shm/kvwire.$TAG-ok.pool" \
		--room 92 $PYSHAPE
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(pgrep -P "$SENDER")" = "$worker" ]
}

@test "SIGTERM while every peer is unreachable: each process exits 0" {
	# pids: whom to signal; waits: whom to wait for (our children, whose
	# status is the process's own: `timeout` passes its child's on).
	local pids=() waits=() names=() gone_peer="ipc://$RUN/nobody"
	# kv-bootstrap (nobody talks to it).
	start_ready boot 60 "$KVW_BIN/kv-bootstrap" --listen "ipc://$RUN/boot"
	pids+=("$BG_PID"); waits+=("$BG_PID"); names+=(bootstrap)
	# kv-sender still trying to register at a bootstrap that is not there.
	timeout -k 5 60 "$KVW_BIN/kv-sender" --listen "ipc://$RUN/s1" \
		--engine "ipc://$RUN/s1e" --table "/dev/shm/kvwire.$TAG-s1.rooms" \
		--pool "/dev/shm/kvwire.$TAG-s1.pool" $SHAPE --workers 2 \
		--bootstrap "$gone_peer" >"$RUN/s1.log" 2>&1 &
	pids+=("$!"); waits+=("$!"); names+=(sender-registering)
	echo "$!" >>"$RUN/bg.pids"
	# kv-receiver with one room whose bootstrap never answers and one
	# whose prefill rank has vanished; kv-heartbeat pinging that rank.
	timeout 10 "$PY" "$FAKE" serve --topo 1,1 --ranks "ipc://$RUN/fp0" \
		--boot "ipc://$RUN/fboot" >/dev/null 2>&1 &
	fake=$!
	echo "$fake" >>"$RUN/bg.pids"
	start_ready rx 60 "$KVW_BIN/kv-receiver" --listen "ipc://$RUN/rx" \
		--engine "ipc://$RUN/rxe" --table "$RUN/rx.rooms" \
		--pool "$RUN/kvwire.d0.pool" --layers 2 --pages 64 --heads 2 --head-dim 16 --aux-slots 8
	pids+=("$BG_PID"); waits+=("$BG_PID"); names+=(receiver)
	timeout 10 "$PY" "$FAKE" engine "ipc://$RUN/rxe" begin 1 "ipc://$RUN/fboot" 0 0 1
	wait_for 10 eval '[[ "$(timeout 10 "$PY" "$FAKE" room "$RUN/rx.rooms" 1)" == "state=WaitingForInput"* ]]'
	kill -TERM "$fake"
	wait_for $EXIT_WAIT gone "$fake"
	timeout 10 "$PY" "$FAKE" engine "ipc://$RUN/rxe" begin 2 "$gone_peer" 0 0 2
	start_ready hb 60 "$KVW_BIN/kv-heartbeat" --table "$RUN/rx.rooms" --interval 0.1 --max-failures 1000
	pids+=("$BG_PID"); waits+=("$BG_PID"); names+=(heartbeat)
	wait_for 10 eval 'timeout 10 "$PY" "$FAKE" peers "$RUN/rx.rooms" | grep -Eq "^1 [a-z]+ [1-9]"'
	# kv-sender with a registered decode that is gone: its STATUS has
	# nowhere to go.
	start_sender
	pids+=("$SENDER"); waits+=("$SENDER_WRAP"); names+=(sender)
	workers=$(pgrep -P "$SENDER")
	run hostile_decode dst-range 5
	[ "$status" -eq 0 ]
	# Everyone at once, then every process watched in the same rounds,
	# with bash builtins only (no fork per check): a process's exit lies
	# between the last round that saw it alive and the first that saw it
	# gone. Timing one process after another, from the one signal time,
	# added each check's own forks under load (about 450 ms a process at
	# load 12) to the later ones' times.
	local t0 i rc now alive=() seen=() left=${#pids[@]}
	t0=${EPOCHREALTIME/./}
	for p in "${pids[@]}"; do kill -TERM "$p"; done
	for i in "${!pids[@]}"; do alive[i]=$t0; done
	# One round per wait_for poll (it runs in this shell, so the arrays
	# are these); true once every process was seen gone.
	exit_round() {
		for i in "${!pids[@]}"; do
			[ -z "${seen[i]:-}" ] || continue
			now=${EPOCHREALTIME/./}
			if gone "${pids[$i]}"; then
				seen[i]=$now left=$((left - 1))
			else
				alive[i]=$now
			fi
		done
		[ "$left" -eq 0 ]
	}
	wait_for $EXIT_WAIT exit_round || true # the verdict is below, per process
	for i in "${!pids[@]}"; do
		echo "${names[$i]}: alive $(((alive[i] - t0) / 1000)) ms after the signal, gone at ${seen[i]:+$(((seen[i] - t0) / 1000)) ms}"
	done
	for i in "${!pids[@]}"; do
		[ -n "${seen[i]:-}" ] # gone within EXIT_WAIT (the times above are figures)
	done
	for w in $workers; do wait_for $EXIT_WAIT gone "$w"; done
	for i in "${!waits[@]}"; do
		rc=0
		wait "${waits[$i]}" || rc=$?
		echo "${names[$i]} exit $rc"
		[ "$rc" -eq 0 ]
	done
}
