#!/usr/bin/env bats
# drain.bats - every failure reaches every side of a room within seconds,
# with a drain point, whoever saw it first (issue 12; the rule and its table
# are in docs/ARCHITECTURE.md, "Failure semantics"). Real groups under kv-up
# with 120 s deadlines, so nothing here may end on a deadline: one room is
# held in flight (its job queued at a SIGSTOPped worker, its source pages
# painted), then a failure source strikes (worker kill, decode restart,
# prefill restart, the prefill heartbeat declaring a stopped decode dead),
# and both sides must reach a terminal state and the decode's room
# "releasable" (also after the engine's abort) within seconds, with no byte
# of the room landed before or after, checked on canary pages. Also a worker
# that hangs (--worker-stall), one whose transport fails (the decode pool
# it must map is gone), and a bootstrap restart (no room affected).
# Then each source again with a copy in flight (KVW_TEST_COPY_DELAY_US=stop:
# the worker stops itself between a batch's re-check and its write, and
# the test lets it go on), striking there: the canary is painted the
# moment the room is releasable and must survive the worker and a later
# room.

load helpers

# K0 K1 V0 V1 buffers of 64 pages x 128 bytes (4 tokens x 2 heads x 16 B).
SHAPE="--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 --pages 64 --aux-slots 4 --aux-bytes 16"
ITEM=128
PAGES=64
# seconds: "within seconds" of the failure being observable, as this test
# sees it through about a dozen kv-stat | jq and pool reads, each a process
# start that a loaded machine slows: up() adds 12 times one such read,
# timed right after the group started (issue 30).
BOUND=8

# kvw_teardown resumes what a test left SIGSTOPped ($STOPPED).
setup() {
	kvw_setup
}

teardown() {
	kvw_teardown
}

up() {
	local t0 ms
	kv_up_held $SHAPE "$@"
	t0=$(date +%s%N)
	field d0 0 state >/dev/null
	ms=$((($(date +%s%N) - t0) / 1000000))
	BOUND=$((8 + (12 * ms + 999) / 1000))
	echo "one kv-stat read: $ms ms; BOUND $BOUND s"
}

# inflight ROOM: decode room ROOM waits for pages 1-4 of d0, prefill pages
# 5-8 of p0 (painted ab, the decode pool is cd) are queued as one job at
# p0's stopped worker. Sets W (the worker's pid).
inflight() {
	fill p0 ab
	fill d0 cd
	W=$(worker_of p0)
	[ -n "$W" ]
	kill -STOP "$W"
	STOPPED=$W
	ctl recv-begin "$(endpoint d0 engine)" "$1" "$(endpoint bootstrap listen)" 0 1,2,3,4
	wait_for 10 state_is d0 "$1" WaitingForInput
	ctl send-begin "$(endpoint p0 engine)" "$1" 4 0
	ctl send-chunk "$(endpoint p0 engine)" "$1" --last 5,6,7,8
	wait_for 10 field_is p0 "$1" outstanding 1
}

field_is() { [ "$(field "$1" "$2" "$3")" = "$4" ]; }
# failed_both ROOM REASON: the prefill fails ROOM with REASON and the
# decode hears of it (Failed), each within seconds.
failed_both() {
	wait_for "$BOUND" state_is p0 "$1" Failed
	field_is p0 "$1" reason "$2"
	wait_for "$BOUND" state_is d0 "$1" Failed
}
# new_worker MEMBER OLD: MEMBER runs a worker whose pid is not OLD.
new_worker() { local w; w=$(worker_of "$1"); [ -n "$w" ] && [ "$w" != "$2" ]; }

# hold_worker: SIGSTOP p0's (new) worker, for canary_holds.
hold_worker() {
	wait_for 10 new_worker p0 "$1"
	W=$(worker_of p0)
	kill -STOP "$W"
	STOPPED=$W
}

# drained ROOM: decode room ROOM is Failed, armed and releasable; the
# engine's abort changes nothing of that.
drained() {
	wait_for "$BOUND" field_is d0 "$1" releasable true
	field_is d0 "$1" state Failed
	field_is d0 "$1" armed true
	ctl abort "$(endpoint d0 engine)" "$1"
	wait_for "$BOUND" field_is d0 "$1" releasable true
}

# released ROOM: drained, and none of the room's pages got a byte.
released() {
	drained "$1"
	[ "$(count d0 ab 1,2,3,4)" -eq 0 ]
}

# canary_holds ROOM: paint the released pages 5a, run the stopped worker
# (what it still had of the room must not land) and a later room through
# it to Success: the canary is untouched.
canary_holds() {
	paint d0 5a 1,2,3,4
	kill -CONT $STOPPED 2>/dev/null
	STOPPED=
	local next=$(($1 + 1))
	ctl recv-begin "$(endpoint d0 engine)" "$next" "$(endpoint bootstrap listen)" 1 20,21
	wait_for 20 state_is d0 "$next" WaitingForInput
	ctl send-begin "$(endpoint p0 engine)" "$next" 2 1
	ctl send-chunk "$(endpoint p0 engine)" "$next" --last 30,31
	wait_for 20 state_is d0 "$next" Success
	[ "$(count d0 5a 1,2,3,4)" -eq $((4 * 4 * ITEM)) ]
	[ "$(count d0 ab 20,21)" -eq $((2 * 4 * ITEM)) ]
}

@test "worker killed with a job on it: STATUS(Failed) reaches the decode, which aborts; releasable within seconds, no byte lands" {
	up
	inflight 11
	start=$SECONDS
	kill -KILL "$W"
	STOPPED=
	failed_both 11 "worker died"
	released 11
	[ $((SECONDS - start)) -le "$BOUND" ]
	hold_worker "$W"
	canary_holds 11
}

@test "decode restart: the engine's abort of a room inherited from the old kv-receiver reaches releasable once the prefill drained it" {
	up
	inflight 21
	old=$(cat "$RUN/pids/d0.pid")
	kill -KILL "$old"
	wait_for 20 restarted d0 "$old"
	# The new receiver took the table over: the room failed with it.
	wait_for "$BOUND" state_is d0 21 Failed
	field_is d0 21 releasable false
	start=$SECONDS
	ctl abort "$(endpoint d0 engine)" 21
	wait_for "$BOUND" field_is d0 21 armed true
	wait_for "$BOUND" state_is p0 21 Failed
	# The job is still owed by the stopped worker: no ack yet.
	field_is d0 21 releasable false
	kill -CONT "$W"
	STOPPED=
	wait_for "$BOUND" field_is d0 21 releasable true
	[ $((SECONDS - start)) -le "$BOUND" ]
	field_is p0 21 outstanding 0
	[ "$(count d0 ab 1,2,3,4)" -eq 0 ]
	hold_worker none
	canary_holds 21
}

@test "prefill restart: the decode fails and aborts the room, the restarted rank counts as acked; releasable within seconds" {
	up --heartbeat-interval 0.2 --max-failures 2
	inflight 31
	old=$(cat "$RUN/pids/p0.pid")
	start=$SECONDS
	kill -KILL "$old" "$W"
	STOPPED=
	wait_for 20 restarted p0 "$old"
	wait_for "$BOUND" state_is d0 31 Failed
	released 31
	# The bootstrap cache forgot the old incarnation (the next room
	# resolves the rank again).
	grep -q "forgetting prefill rank" "$RUN/logs/d0.log"
	[ $((SECONDS - start)) -le $((BOUND + 5)) ]
	hold_worker "$W"
	canary_holds 31
}

@test "the prefill heartbeat declares a stopped decode dead: on resume the decode gets STATUS(Failed), aborts, and is releasable within seconds" {
	# 25 misses (5 s): a stopped decode is dead, a decode that a loaded
	# machine slows for half a second is not. With 2 (0.4 s) the room
	# never showed its job outstanding under stress-ng, likely failed
	# (peer dead) before the decode was stopped.
	up --heartbeat-interval 0.2 --max-failures 25
	inflight 41
	D=$(cat "$RUN/pids/d0.pid")
	kill -STOP "$D"
	STOPPED="$W $D"
	wait_for 60 state_is p0 41 Failed
	field_is p0 41 reason "peer dead"
	start=$SECONDS
	kill -CONT "$D"
	STOPPED=$W
	wait_for "$BOUND" state_is d0 41 Failed
	wait_for "$BOUND" field_is d0 41 armed true
	# Armed, but the prefill still owes the stopped worker's job.
	field_is d0 41 releasable false
	kill -CONT "$W"
	STOPPED=
	released 41
	[ $((SECONDS - start)) -le "$BOUND" ]
	hold_worker none
	canary_holds 41
}

@test "worker hang: replaced after KVW_WORKER_STALL, its room fails on both sides and is releasable within seconds" {
	KVW_WORKER_STALL=1 up
	inflight 51
	start=$SECONDS
	failed_both 51 "worker died"
	grep -q "none answered for" "$RUN/logs/p0.log"
	released 51
	[ $((SECONDS - start)) -le $((BOUND + 1)) ]
	STOPPED=
	hold_worker "$W"
	canary_holds 51
}

@test "worker transport error: the worker fails the room, the decode hears STATUS(Failed) and aborts; releasable within seconds" {
	up
	inflight 61
	# The decode pool the worker maps on its first job to d0 is gone.
	pool=$(endpoint d0 pool)
	mv "$pool" "$pool.away"
	start=$SECONDS
	kill -CONT "$W"
	STOPPED=
	failed_both 61 "transfer error"
	wait_for "$BOUND" field_is d0 61 releasable true
	field_is d0 61 armed true
	[ $((SECONDS - start)) -le "$BOUND" ]
	mv "$pool.away" "$pool"
	[ "$(count d0 ab 1,2,3,4)" -eq 0 ]
	hold_worker none
	canary_holds 61
}

@test "bootstrap restart: a room in flight is not affected and ends in Success on both sides; a later room succeeds" {
	up
	inflight 71
	old=$(cat "$RUN/pids/bootstrap.pid")
	kill -KILL "$old"
	wait_for 20 restarted bootstrap "$old"
	kill -CONT "$W"
	STOPPED=
	wait_for "$BOUND" state_is d0 71 Success
	state_is p0 71 Success
	[ "$(count d0 ab 1,2,3,4)" -eq $((4 * 4 * ITEM)) ]
	hold_worker none
	canary_holds 71
}

p0_logged() { logged p0 "$1"; }

# Copies in flight: 1024-page pools, and before every batch of
# WORKER_BATCH (256) copies, between its room re-check and its write, the
# worker waits DELAY_US (the worker's TEST ONLY KVW_TEST_COPY_DELAY_US;
# restarted members inherit it from kv-up), so a failure can strike a copy
# in flight. DELAY_US is "stop": the worker stops itself there (SIGSTOP)
# and the test, having seen it stopped, strikes and lets it go on, so the
# window is as long as the test needs (a 1.5 s sleep there was a window a
# busy test could miss, and then more batches landed). A batch that passed
# its re-check still writes once let go on: "releasable" before that write
# is what the canary would catch. The workers get no stall verdict while
# stopped (KVW_WORKER_STALL 600 s unless a test sets it).
DELAY_US=stop
SRC=$(seq -s, 0 2 298)
DST=$(seq -s, 1 2 299)
slow_up() {
	SHAPE="--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 --pages 1024 --aux-slots 16 --aux-bytes 16"
	PAGES=1024
	KVW_WORKER_STALL=${KVW_WORKER_STALL:-600} \
		KVW_TEST_COPY_DELAY_US=$DELAY_US up "$@"
}

# slow_room ROOM: 150 scattered pages of p0 (ab) into $DST of d0 (cd): one
# job of 600 copies and the aux, in batches of 256, 256 and 89; returns
# once the worker waits before its first batch (stopped there, with
# DELAY_US=stop). Sets W (the worker's pid) and STOPPED.
slow_room() {
	fill p0 ab
	fill d0 cd
	W=$(worker_of p0)
	ctl recv-begin "$(endpoint d0 engine)" "$1" "$(endpoint bootstrap listen)" 0 "$DST"
	wait_for 10 state_is d0 "$1" WaitingForInput
	ctl send-begin "$(endpoint p0 engine)" "$1" 150 0
	ctl send-chunk "$(endpoint p0 engine)" "$1" --last "$SRC"
	STOPPED=$W # teardown lets it go on, should a step fail
	if [ "$DELAY_US" = stop ]; then
		wait_for 30 stopped "$W"
		p0_logged "room $1: test delay before a batch, 601 copies left"
	else
		wait_for 10 p0_logged "room $1: test delay before a batch, 601 copies left"
	fi
}

# go_on ROOM MEMBER...: each MEMBER's room ROOM is Failed (the failure
# reached the prefill rank), then its worker, stopped holding a batch that
# passed its re-check, goes on: that batch lands, the next re-check ends
# the job.
go_on() {
	local r=$1 m
	shift
	for m; do
		wait_for "$BOUND" state_is "$m" "$r" Failed
		kill -CONT "$(worker_of "$m")"
	done
}

# canary_at_release ROOM: the moment decode room ROOM is releasable, what
# landed of it goes to LANDED and its pages are painted 5a (the canary);
# slow_canary checks the canary later.
canary_at_release() {
	wait_for "$BOUND" field_is d0 "$1" releasable true
	LANDED=$(count d0 ab "$DST")
	paint d0 5a "$DST"
}

# slow_released ROOM LIMIT: the decode fails ROOM, which is releasable
# (canary_at_release) and drained, within LIMIT seconds of $start.
slow_released() {
	wait_for "$BOUND" state_is d0 "$1" Failed
	canary_at_release "$1"
	drained "$1"
	[ $((SECONDS - start)) -le "$2" ]
}

# landed_batches N...: what had landed of the slowed room at its release
# is N whole batches (one of the given counts of 256 copies of $ITEM bytes).
landed_batches() {
	local n
	echo "landed: $LANDED bytes" # shown on failure
	for n in "$@"; do
		[ "$LANDED" -eq $((n * 256 * ITEM)) ] && return 0
	done
	return 1
}

# slow_canary ROOM [WORKER]: a later room through p0's worker (a new one,
# or the old one WORKER, still the one, whose jobs run in order, so it is
# past the old room) to Success (the worker let go on at each batch): the
# canary on the slowed room's pages is untouched.
slow_canary() {
	local next=$(($1 + 1)) w
	w=$(worker_of p0)
	[ -z "${2:-}" ] || [ "$w" = "$2" ]
	STOPPED=$w
	ctl recv-begin "$(endpoint d0 engine)" "$next" "$(endpoint bootstrap listen)" 1 600,601
	wait_for 20 state_is d0 "$next" WaitingForInput
	ctl send-begin "$(endpoint p0 engine)" "$next" 2 1
	ctl send-chunk "$(endpoint p0 engine)" "$next" --last 700,701
	wait_for 20 go_on_until "$w" state_is d0 "$next" Success
	[ "$(count d0 5a "$DST")" -eq $((150 * 4 * ITEM)) ]
	[ "$(count d0 ab 600,601)" -eq $((2 * 4 * ITEM)) ]
}

@test "decode restart with slowed copies: nothing of the inherited room lands after it is releasable" {
	slow_up
	slow_room 81
	old=$(cat "$RUN/pids/d0.pid")
	kill -KILL "$old"
	wait_for 20 restarted d0 "$old"
	start=$SECONDS
	ctl abort "$(endpoint d0 engine)" 81
	go_on 81 p0
	canary_at_release 81
	[ $((SECONDS - start)) -le "$BOUND" ]
	field_is p0 81 outstanding 0
	p0_logged "room 81: job stopped: room ended"
	# What landed before the release is the batch in flight, whole.
	landed_batches 1
	slow_canary 81
}

@test "decode restart with two prefill ranks (TP 2 -> 1) and slowed copies: the inherited room is aborted at both, nothing lands after it is releasable" {
	slow_up --prefill-tp 2
	fill p0 ab
	fill p1 ab
	fill d0 cd
	# 30 pages from each rank (its head of each token slot): 480 copies
	# each, two slowed batches.
	src=$(seq -s, 0 2 58)
	dst=$(seq -s, 1 2 59)
	ctl recv-begin "$(endpoint d0 engine)" 121 "$(endpoint bootstrap listen)" 0 "$dst"
	wait_for 10 state_is d0 121 WaitingForInput
	for p in p0 p1; do
		ctl send-begin "$(endpoint $p engine)" 121 30 0
		ctl send-chunk "$(endpoint $p engine)" 121 --last "$src"
		wait_for 30 stopped "$(worker_of $p)"
		logged $p "room 121: test delay before a batch"
		STOPPED="${STOPPED:-} $(worker_of $p)"
	done
	old=$(cat "$RUN/pids/d0.pid")
	kill -KILL "$old"
	wait_for 20 restarted d0 "$old"
	start=$SECONDS
	ctl abort "$(endpoint d0 engine)" 121
	go_on 121 p0 p1
	wait_for "$BOUND" field_is d0 121 releasable true
	[ $((SECONDS - start)) -le "$BOUND" ]
	paint d0 5a "$dst"
	wait_for 20 field_is p0 121 outstanding 0
	wait_for 20 field_is p1 121 outstanding 0
	[ "$(count d0 5a "$dst")" -eq $((30 * 4 * ITEM)) ]
	# The table named one rank; the other was aborted too, and acked
	# only once its batch in flight was written.
	logged d0 "room 121: inherited from a previous incarnation: aborting at its prefill rank .* and 1 other known rank"
}

@test "worker killed mid-copy with slowed copies: both sides terminal, releasable within seconds, nothing lands after" {
	slow_up
	slow_room 91
	start=$SECONDS
	kill -KILL "$W"
	failed_both 91 "worker died"
	slow_released 91 "$BOUND"
	landed_batches 0
	wait_for 10 new_worker p0 "$W"
	slow_canary 91
}

@test "worker hang with slowed copies: a worker slower than --worker-stall is replaced, its room terminal and releasable within seconds" {
	# The job needs 3 delays (4.5 s) with no answer; the stall bound is
	# 2.5 s; the later room's one batch (1.5 s) stays under it. A sleep,
	# not a stop: nothing is struck inside the window here, and a worker
	# stopped at the later room's batch would get the verdict too.
	DELAY_US=1500000
	KVW_WORKER_STALL=2.5 slow_up
	slow_room 101
	start=$SECONDS
	failed_both 101 "worker died"
	grep -q "none answered for" "$RUN/logs/p0.log"
	slow_released 101 "$BOUND"
	wait_for 10 gone "$W"
	# Killed in its second delay (about 2.5 s in): the first batch, or
	# the second when the worker got its job late.
	landed_batches 1 2
	wait_for 10 new_worker p0 "$W"
	slow_canary 101
}

@test "worker transport error mid-copy with slowed copies: the room fails at its second batch, releasable within seconds, nothing lands after" {
	slow_up
	slow_room 111
	pool=$(endpoint d0 pool)
	size=$(stat -c %s "$pool")
	# Batch 1 lands; the worker stops again holding batch 2.
	kill -CONT "$W"
	wait_for 30 p0_logged "room 111: test delay before a batch, 345 copies left"
	wait_for 30 stopped "$W"
	# The decode pool shrinks by one byte (its unused tail) under the
	# worker's second batch: the per-batch check fails the transfer.
	truncate -s $((size - 1)) "$pool"
	start=$SECONDS
	kill -CONT "$W"
	failed_both 111 "transfer error"
	slow_released 111 "$BOUND"
	truncate -s "$size" "$pool"
	grep -q "shrank to $((size - 1)) bytes" "$RUN/logs/p0.log"
	landed_batches 1
	# The same worker (it maps the pool afresh) carries the later room.
	slow_canary 111 "$W"
}

@test "the prefill heartbeat declares a stopped decode dead mid-copy with slowed copies: releasable only after the batch in flight, nothing lands after" {
	# 25 misses (5 s), as in the test without slowed copies: a stopped
	# decode is dead, a live prefill that a loaded machine slows is not.
	# With 2 (0.4 s) the decode's heartbeat once declared p0 dead under
	# stress-ng while slow_canary's room was in flight (peer dead).
	slow_up --heartbeat-interval 0.2 --max-failures 25
	slow_room 121
	D=$(cat "$RUN/pids/d0.pid")
	kill -STOP "$D"
	STOPPED="$D $W"
	wait_for 20 state_is p0 121 Failed
	field_is p0 121 reason "peer dead"
	start=$SECONDS
	kill -CONT "$D"
	STOPPED=$W
	go_on 121 p0
	slow_released 121 "$BOUND"
	field_is p0 121 outstanding 0
	p0_logged "room 121: job stopped: room ended"
	# The batch that passed its re-check before the verdict landed; no
	# other did (3 batches would have been the whole room).
	landed_batches 1
	slow_canary 121 "$W"
}

@test "prefill restart mid-copy with slowed copies: its worker dies with it, the decode is releasable within seconds, nothing lands after" {
	# The restart shows as a new epoch on the next PONG (0.2 s); 25
	# misses keep a loaded machine from declaring the live prefill dead
	# under slow_canary's room.
	slow_up --heartbeat-interval 0.2 --max-failures 25
	slow_room 131
	old=$(cat "$RUN/pids/p0.pid")
	start=$SECONDS
	kill -KILL "$old"
	# PR_SET_PDEATHSIG: no worker of the dead control keeps copying.
	wait_for $EXIT_WAIT gone "$W"
	wait_for 20 restarted p0 "$old"
	slow_released 131 $((BOUND + 5))
	landed_batches 0
	wait_for 10 new_worker p0 "$W"
	slow_canary 131
}

@test "bootstrap restart mid-copy with slowed copies: the room succeeds and nothing lands outside its pages, nor after it" {
	slow_up
	slow_room 141
	old=$(cat "$RUN/pids/bootstrap.pid")
	kill -KILL "$old"
	wait_for 20 restarted bootstrap "$old"
	# The worker let go on at each of its three batches.
	wait_for 20 go_on_until "$W" state_is d0 141 Success
	state_is p0 141 Success
	[ "$(count d0 ab "$DST")" -eq $((150 * 4 * ITEM)) ]
	# Every other page of the decode pool is still cd.
	others=$(seq 0 1023 | grep -vxF -f <(tr , '\n' <<<"$DST") | paste -sd,)
	[ "$(count d0 cd "$others")" -eq $(((1024 - 150) * 4 * ITEM)) ]
	paint d0 5a "$DST"
	slow_canary 141
	[ "$(count d0 cd "$(seq -s, 0 2 598)")" -eq $((300 * 4 * ITEM)) ]
}
