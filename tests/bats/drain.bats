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

load helpers

# K0 K1 V0 V1 buffers of 64 pages x 128 bytes (4 tokens x 2 heads x 16 B).
SHAPE="--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 --pages 64 --aux-slots 4 --aux-bytes 16"
ITEM=128
PAGES=64
BOUND=8 # seconds: "within seconds" of the failure being observable

setup() {
	kvw_setup
	STOPPED=
}

teardown() {
	[ -n "$STOPPED" ] && kill -CONT $STOPPED 2>/dev/null
	kvw_teardown
}

up() {
	KVW_LOG=debug KVW_BOOTSTRAP_TIMEOUT=120 KVW_WAITING_TIMEOUT=120 \
		kv_up $SHAPE --workers 1 "$@"
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
# new_worker MEMBER OLD: MEMBER runs a worker whose pid is not OLD.
new_worker() { local w; w=$(worker_of "$1"); [ -n "$w" ] && [ "$w" != "$2" ]; }

# hold_worker: SIGSTOP p0's (new) worker, for canary_holds.
hold_worker() {
	wait_for 10 new_worker p0 "$1"
	W=$(worker_of p0)
	kill -STOP "$W"
	STOPPED=$W
}

# released ROOM: decode room ROOM is Failed, armed and releasable; the
# engine's abort changes nothing of that; none of its pages got a byte.
released() {
	wait_for "$BOUND" field_is d0 "$1" releasable true
	field_is d0 "$1" state Failed
	field_is d0 "$1" armed true
	ctl abort "$(endpoint d0 engine)" "$1"
	wait_for "$BOUND" field_is d0 "$1" releasable true
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
	wait_for "$BOUND" state_is p0 11 Failed
	field_is p0 11 reason "worker died"
	wait_for "$BOUND" state_is d0 11 Failed
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
	up --heartbeat-interval 0.2 --max-failures 2
	inflight 41
	D=$(cat "$RUN/pids/d0.pid")
	kill -STOP "$D"
	STOPPED="$W $D"
	wait_for 20 state_is p0 41 Failed
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
	wait_for "$BOUND" state_is p0 51 Failed
	field_is p0 51 reason "worker died"
	grep -q "none answered for" "$RUN/logs/p0.log"
	wait_for "$BOUND" state_is d0 51 Failed
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
	wait_for "$BOUND" state_is p0 61 Failed
	field_is p0 61 reason "transfer error"
	wait_for "$BOUND" state_is d0 61 Failed
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

p0_logged() { grep -q -- "$1" "$RUN/logs/p0.log"; }

@test "decode restart with slowed copies: nothing of the inherited room lands after it is releasable" {
	SHAPE="--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 --pages 1024 --aux-slots 16 --aux-bytes 16"
	PAGES=1024
	export KVW_TEST_COPY_DELAY_US=1500000
	up
	unset KVW_TEST_COPY_DELAY_US
	fill p0 ab
	fill d0 cd
	# 150 scattered pages: 600 copies of 128 bytes and the aux, batches of 256.
	src=$(seq -s, 0 2 298)
	dst=$(seq -s, 1 2 299)
	ctl recv-begin "$(endpoint d0 engine)" 81 "$(endpoint bootstrap listen)" 0 "$dst"
	wait_for 10 state_is d0 81 WaitingForInput
	ctl send-begin "$(endpoint p0 engine)" 81 150 0
	ctl send-chunk "$(endpoint p0 engine)" 81 --last "$src"
	wait_for 10 p0_logged "room 81: test delay before a batch, 601 copies left"
	old=$(cat "$RUN/pids/d0.pid")
	kill -KILL "$old"
	wait_for 20 restarted d0 "$old"
	start=$SECONDS
	ctl abort "$(endpoint d0 engine)" 81
	wait_for "$BOUND" field_is d0 81 releasable true
	[ $((SECONDS - start)) -le "$BOUND" ]
	field_is p0 81 outstanding 0
	p0_logged "room 81: job stopped: room ended"
	# What landed before the release is whole batches (0 or the first).
	landed=$(count d0 ab "$dst")
	[ "$landed" -eq 0 ] || [ "$landed" -eq $((256 * ITEM)) ]
	# Canary over the released pages, then a later room through the same
	# worker (jobs run in order) to Success: the canary is untouched.
	paint d0 5a "$dst"
	ctl recv-begin "$(endpoint d0 engine)" 82 "$(endpoint bootstrap listen)" 1 600,601
	wait_for 20 state_is d0 82 WaitingForInput
	ctl send-begin "$(endpoint p0 engine)" 82 2 1
	ctl send-chunk "$(endpoint p0 engine)" 82 --last 700,701
	wait_for 20 state_is d0 82 Success
	[ "$(count d0 5a "$dst")" -eq $((150 * 4 * ITEM)) ]
	[ "$(count d0 ab 600,601)" -eq $((2 * 4 * ITEM)) ]
}
