#!/usr/bin/env bats
# lifecycle.bats - how the group's processes start and stop, as real
# processes: `kv-up --stop` leaves no process, socket file or shm file
# behind; every member exits on SIGTERM, also while a peer or
# bootstrap it talks to is unreachable; and every process creates its state
# before it binds, so a frame queued by a peer that connected before the
# process even started is answered (PING -> PONG) or taken (an engine
# SEND_BEGIN), never crashed on. A storm of a handled signal (SIGCHLD, no
# SA_RESTART) at kv-sender, its worker and kv-receiver during a run: every
# room succeeds, nobody exits (issue 12, item 9: EINTR is no dead socket).

load helpers

SHAPE="--layers 2 --pages 64 --heads 2 --head-dim 16 --aux-slots 64"
E2E="$BATS_TEST_DIRNAME/../peers/e2e.py"

setup() {
	kvw_setup
}

teardown() {
	kvw_teardown
}

# term_gone NAME PID: SIGTERM, then the process must be gone (EXIT_WAIT);
# the time it took is printed, not judged.
term_gone() {
	local t0 ms
	t0=$(date +%s%N)
	kill -TERM "$2"
	wait_for $EXIT_WAIT gone "$2"
	ms=$((($(date +%s%N) - t0) / 1000000))
	echo "$1 (pid $2) exited ${ms} ms after SIGTERM"
}

# early NAME EP ARGS...: e2e.py early in the background (output in
# $RUN/NAME.early); returns once its frame is queued. Sets $EARLY.
early() {
	local name=$1
	shift
	timeout 30 "$PY" "$E2E" early "$@" >"$RUN/$name.early" 2>&1 &
	EARLY=$!
	echo "$EARLY" >>"$RUN/bg.pids"
	wait_for 20 grep -q '^sent' "$RUN/$name.early"
}

@test "kv-up --stop leaves no process, socket file or shm file of the group behind" {
	kv_up --workers 2 $SHAPE
	run timeout 60 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 4 --verify
	[ "$status" -eq 0 ]
	pids=$(cat "$RUN"/pids/*.pid)
	pids="$pids $(pgrep -P "$(cat "$RUN/pids/p0.pid")")"
	[ "$(echo $pids | wc -w)" -ge 7 ] # kv-up, 4 members, 2 workers
	shm=$(tr ' ' '\n' <"$RUN/endpoints" | sed -n 's/^\(table\|pool\)=//p' | sort -u)
	prefix=$(echo "$shm" | head -n 1 | sed 's/\.[^.]*\.[^.]*$//')
	for f in $shm; do [ -e "$f" ]; done
	[ -n "$(find "$RUN" -type s)" ]
	run timeout 60 "$KVW_ROOT/bin/kv-up" --stop "$RUN"
	[ "$status" -eq 0 ]
	for p in $pids; do
		wait_for $EXIT_WAIT gone "$p"
	done
	run find "$RUN" -type s
	echo "sockets left: $output"
	[ -z "$output" ]
	for f in $shm; do [ ! -e "$f" ]; done
	left=$(ls -d "$prefix".* 2>/dev/null || true)
	echo "shm left: $left"
	[ -z "$left" ]
	[ ! -e "$RUN/pids/kv-up.pid" ]
}

@test "every member exits on SIGTERM, also with an unreachable bootstrap or peer" {
	kv_up --workers 2 --heartbeat-interval 0.2 $SHAPE
	run timeout 60 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 4 --verify
	[ "$status" -eq 0 ]
	# No supervisor: nothing restarts what is stopped below.
	sup=$(cat "$RUN/pids/kv-up.pid")
	kill -KILL "$sup"
	wait_for 10 gone "$sup"
	p0=$(cat "$RUN/pids/p0.pid") d0=$(cat "$RUN/pids/d0.pid")
	hb=$(cat "$RUN/pids/hb0.pid") boot=$(cat "$RUN/pids/bootstrap.pid")
	workers=$(pgrep -P "$p0")
	[ -n "$workers" ]
	peng=$(endpoint p0 engine) deng=$(endpoint d0 engine)
	# d0: one room whose bootstrap does not exist (lookups keep failing)
	# and one whose XFER_INFO reached p0.
	ctl recv-begin "$deng" 5 "ipc://$RUN/nowhere.sock" 0 1,2
	wait_for 20 state_is d0 5 Bootstrapping
	ctl recv-begin "$deng" 7 "$(endpoint bootstrap listen)" 1 3,4
	wait_for 20 state_is p0 7 WaitingForInput
	term_gone kv-receiver "$d0"
	# p0 now finishes room 7 and owes its STATUS to a decode that is gone.
	ctl send-begin "$peng" 7 2 1
	ctl send-chunk "$peng" 7 --last 3,4
	wait_for 20 state_is p0 7 Success Failed
	term_gone kv-sender "$p0"
	for w in $workers; do
		wait_for $EXIT_WAIT gone "$w"
	done
	# hb0 pings p0, which is gone.
	term_gone kv-heartbeat "$hb"
	term_gone kv-bootstrap "$boot"
}

@test "a PING queued before kv-bootstrap binds is answered, and it lives on" {
	early ping "ipc://$RUN/boot.sock" PING --want PONG
	start_ready boot 60 "$KVW_BIN/kv-bootstrap" --listen "ipc://$RUN/boot.sock"
	wait "$EARLY"
	grep -q '^got PONG' "$RUN/ping.early"
	kill -0 "$BG_PID"
	ctl ping "ipc://$RUN/boot.sock"
}

@test "a PING queued before kv-receiver binds is answered, and it lives on" {
	early ping "ipc://$RUN/rx.sock" PING --want PONG
	start_ready rx 60 "$KVW_BIN/kv-receiver" --listen "ipc://$RUN/rx.sock" \
		--engine "ipc://$RUN/rx.eng" --table "$RUN/rx.rooms" \
		--pool "$RUN/kvwire.rx.pool" $SHAPE
	wait "$EARLY"
	grep -q '^got PONG' "$RUN/ping.early"
	kill -0 "$BG_PID"
	ctl ping "ipc://$RUN/rx.sock"
}

@test "a PING and an engine SEND_BEGIN queued before kv-sender binds are both taken" {
	early ping "ipc://$RUN/tx.sock" PING --want PONG
	ping_pid=$EARLY
	# SEND_BEGIN room 31: 4 pages, aux slot 0.
	early begin "ipc://$RUN/tx.eng" SEND_BEGIN 31 0400000000000000
	begin_pid=$EARLY
	start_ready tx 60 "$KVW_BIN/kv-sender" --listen "ipc://$RUN/tx.sock" \
		--engine "ipc://$RUN/tx.eng" --table "$RUN/tx.rooms" \
		--pool "$RUN/kvwire.tx.pool" --workers 1 $SHAPE
	wait "$ping_pid"
	grep -q '^got PONG' "$RUN/ping.early"
	wait "$begin_pid"
	wait_for 20 sh -c "'$KVW_BIN/kv-stat' --table '$RUN/tx.rooms' --json --room 31 | jq -e '.tables[0].rooms[0].state == \"Bootstrapping\" and .tables[0].rooms[0].pages_expected == 4' >/dev/null"
	kill -0 "$BG_PID"
	ctl ping "ipc://$RUN/tx.sock"
}

# counter_is MEMBER NAME N: a counter of MEMBER's table.
counter_is() {
	[ "$("$KVW_BIN/kv-stat" --run-dir "$RUN" --json --all |
		jq -r --arg m "$1" --arg c "$2" '.tables[] | select(.name == $m) | .counters[$c]')" = "$3" ]
}

@test "a storm of SIGCHLD (handled, no SA_RESTART: calls in progress get EINTR) at kv-sender, its worker and kv-receiver: every room succeeds, nobody exits or restarts" {
	kv_up $SHAPE --workers 1
	P=$(cat "$RUN/pids/p0.pid")
	W=$(worker_of p0)
	D=$(cat "$RUN/pids/d0.pid")
	[ -n "$W" ]
	"$PY" "$BATS_TEST_DIRNAME/../peers/sigstorm.py" CHLD 2000 "$P" "$W" "$D" \
		>"$RUN/storm.out" 2>&1 &
	S=$!
	echo "$S" >>"$RUN/bg.pids"
	wait_for 30 grep -q '^storming' "$RUN/storm.out" # its SIGTERM handler is in
	run timeout 120 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 300 \
		--pages-per-room 4 --chunk-pages 2 --concurrency 8 --verify
	echo "$output"
	kill -TERM "$S"
	wait "$S"
	cat "$RUN/storm.out"
	[ "$status" -eq 0 ]
	[ "$(summary rooms)" = 300 ]
	[ "$(summary success)" = 300 ]
	clean 300
	# Every signal reached a live process: none of the three exited.
	grep -q "gone=0" "$RUN/storm.out"
	sent=$(sed -n 's/^sent=\([0-9]*\).*/\1/p' "$RUN/storm.out")
	[ "$sent" -ge 300 ]
	[ "$(cat "$RUN/pids/p0.pid")" = "$P" ] && [ "$(worker_of p0)" = "$W" ]
	[ "$(cat "$RUN/pids/d0.pid")" = "$D" ]
	counter_is p0 worker_restarts 0
	counter_is p0 owner_restarts 0
	counter_is d0 owner_restarts 0
	counter_is p0 malformed 0
	counter_is d0 malformed 0
}

@test "gone: a process that exited and that its parent has not reaped yet (a zombie) is gone; a running one is not" {
	# The parent forks a child that exits at once and never reaps it: the
	# child stays a zombie, which kill -0 still finds, until the parent
	# ends. wait_for's polls fork nothing (sleep is a builtin), so a zombie
	# of this very shell can outlive any wait that asks only kill -0.
	mkfifo "$RUN/hold"
	"$PY" -c 'import os, sys
pid = os.fork()
if pid == 0:
    os._exit(0)
print(pid, flush=True)
open(sys.argv[1]).read()' "$RUN/hold" >"$RUN/zombie.pid" &
	local parent=$! z
	echo "$parent" >>"$RUN/bg.pids"
	wait_for 10 test -s "$RUN/zombie.pid"
	z=$(cat "$RUN/zombie.pid")
	wait_for 10 gone "$z"
	kill -0 "$z" # still in the process table, as a zombie
	refute gone "$parent"
	echo >"$RUN/hold"
	wait "$parent"
}
