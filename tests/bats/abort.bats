#!/usr/bin/env bats
# abort.bats - quiescent ABORT with real processes (issue 4, items 1-2):
# an abort storm under kv-bench with slowed copies (a canary over every
# released room's pages never changes; every aborted room becomes
# releasable; over tcp both tables end empty and nothing is counted
# malformed); an ABORT that arrives while the job waits at a stopped
# worker (the job is dropped, no byte lands, the ack waits for it); an ABORT
# while a job copies (the batch in flight lands BEFORE the room becomes
# releasable, the rest is dropped, nothing lands after); an ABORT after
# Success (state unchanged, still acked); two decode ranks aborting one room
# both get their ack; on tcp an aborted room is releasable while its whole
# prefill rank is stopped (the decode's own sinks are the only writers, and
# the fence says none writes it), and the batch that rank sends after it
# resumes is discarded; a late ABORT_ACK of an older incarnation of a room id
# (another abort token) never releases the later room. Copies are slowed with the test-only
# KVW_TEST_COPY_DELAY_US (read by each kv-sender worker at start); workers
# are paused with SIGSTOP to hold a job queued.

load helpers

# K0 K1 V0 V1 buffers of 1024 pages x 128 bytes (4 tokens x 2 heads x 16 B)
# back to back from offset 0, then the aux buffer.
SHAPE="--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 --pages 1024 --aux-slots 16 --aux-bytes 16"
ITEM=128
PAGES=1024

# kvw_teardown resumes what a test left SIGSTOPped ($STOPPED).
setup() {
	kvw_setup
}

teardown() {
	kvw_teardown
}

# up ARGS...: a group with debug logs and one worker per prefill rank.
up() { KVW_LOG=debug kv_up $SHAPE --workers 1 "$@"; }
ep() { endpoint "$1" "$2"; }

# is MEMBER ROOM KEY VALUE: that field of the room as kv-stat --json shows
# it (helpers.bash's field: no Python start per poll).
is() { [ "$(field "$1" "$2" "$3")" = "$4" ]; }

seqc() { seq -s, "$@"; }

# storm ARGS...: kv-bench aborts a third of its rooms at random moments
# (16 in flight, 16 pages each in chunks of 4, every byte verified); it
# exits 0 with nothing stuck, corrupt or failed. Its summary is in $line.
storm() {
	run timeout 240 "$KVW_BIN/kv-bench" --run-dir "$RUN" --abort-frac 0.33 \
		--verify --concurrency 16 --pages-per-room 16 --chunk-pages 4 \
		--room-timeout 60 "$@"
	echo "$output"
	[ "$status" -eq 0 ]
	line=$(grep '^rooms=' <<<"$output")
	[[ "$line" == *" stuck=0 "* ]]
	[[ "$line" == *" corrupt=0 "* ]]
	[[ "$line" == *" failed=0 "* ]]
}

@test "abort storm: a third of 300 rooms aborted at random moments with slowed copies; every one releasable, no canary touched" {
	export KVW_TEST_COPY_DELAY_US=3000
	kv_up $SHAPE --workers 2
	unset KVW_TEST_COPY_DELAY_US
	storm --rooms 300 --seed 4242
	aborted=$(sed -n 's/.* aborted=\([0-9]*\) .*/\1/p' <<<"$line")
	success=$(sed -n 's/.* success=\([0-9]*\) .*/\1/p' <<<"$line")
	[ "$aborted" -ge 60 ]
	[ $((aborted + success)) -eq 300 ]
}

@test "abort storm with two decode ranks on one prefill rank: every aborted room releasable, no canary touched" {
	export KVW_TEST_COPY_DELAY_US=3000
	kv_up $SHAPE --workers 2 --decode-ranks 2
	unset KVW_TEST_COPY_DELAY_US
	run timeout 240 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 150 \
		--abort-frac 0.33 --verify --concurrency 8 --seed 77 \
		--room-timeout 60
	echo "$output"
	[ "$status" -eq 0 ]
	line=$(grep '^rooms=' <<<"$output")
	[[ "$line" == *" stuck=0 "* ]]
	[[ "$line" == *" corrupt=0 "* ]]
	aborted=$(sed -n 's/.* aborted=\([0-9]*\) .*/\1/p' <<<"$line")
	[ "$aborted" -ge 25 ]
}

# live_rooms MEMBER: rooms the member's table holds that are not Cleared.
live_rooms() {
	"$KVW_BIN/kv-stat" --run-dir "$RUN" --json |
		jq -r --arg m "$1" '.tables[] | select(.name == $m) | .rooms | length'
}

@test "abort storm over tcp with slowed copies: every room ends, both tables end empty, nothing counted malformed" {
	# Issue 34: over tcp with aborts the prefill table kept Failed rooms
	# no engine would clear, each late batch of an aborted room counted
	# as malformed at the decode, and each SEND_CHUNK after a SEND_BEGIN
	# the decode's ABORT had beaten counted as malformed at the prefill.
	export KVW_TEST_COPY_DELAY_US=2000
	kv_up $SHAPE --workers 2 --transport tcp
	unset KVW_TEST_COPY_DELAY_US
	storm --rooms 400 --seed 4343
	# kv-bench's last CLEARs are on their way when it exits.
	wait_for 30 eval '[ "$(live_rooms p0)" = 0 ]'
	wait_for 30 eval '[ "$(live_rooms d0)" = 0 ]'
	"$KVW_BIN/kv-stat" --run-dir "$RUN" | grep -E '^(table|counters|security)'
	grep -h ' warn: ' "$RUN"/logs/*.log | head -n 20
	[ "$(ctr p0 malformed)" = 0 ]
	[ "$(ctr d0 malformed)" = 0 ]
	# No tamperer on the path: no batch fails its MAC, none is resent.
	# (kv-bench refilled an aborted room's source pages once the decode
	# showed it releasable, while a worker could still be sending them:
	# the sink refused that batch for its body tag now and then. It now
	# waits for the prefill's KVW_ROOM_F_SENDING to clear; issue 29.)
	[ "$(sec p0 integrity_failed)" = 0 ]
	[ "$(sec d0 integrity_failed)" = 0 ]
	[ "$(sec p0 resent)" = 0 ]
}

@test "ABORT before the worker dequeues the job: the job is dropped, no byte lands, the ack waits for the drop" {
	up
	fill p0 ab
	W=$(worker_of p0)
	[ -n "$W" ]
	kill -STOP "$W"
	STOPPED=$W
	ctl recv-begin "$(ep d0 engine)" 11 "$(ep bootstrap listen)" 0 1,2,3,4
	wait_for 10 is d0 11 state WaitingForInput
	ctl send-begin "$(ep p0 engine)" 11 4 0
	ctl send-chunk "$(ep p0 engine)" 11 --last 5,6,7,8
	wait_for 10 is p0 11 outstanding 1 # queued at the stopped worker
	ctl abort "$(ep d0 engine)" 11
	wait_for 10 is p0 11 state Failed
	is p0 11 reason aborted
	wait_for 10 is d0 11 armed true
	is d0 11 state Failed
	# The job is still owed by the stopped worker: no ack can go out.
	is p0 11 outstanding 1
	is d0 11 releasable false
	kill -CONT "$W"
	STOPPED=
	wait_for 10 is d0 11 releasable true
	is p0 11 outstanding 0
	wait_for 10 logged p0 "room 11: job dropped"
	[ "$(count d0 ab 1,2,3,4)" -eq 0 ]
}

@test "a worker killed between its room's Success and its STATUS: the decode hears Success from kv-sender, not at its deadline" {
	# The worker stops itself after it moved the room to Success and
	# before it tells the decode; the test kills it there.
	export KVW_TEST_STATUS_DELAY_US=stop KVW_WORKER_STALL=600
	up --waiting-timeout 600
	unset KVW_TEST_STATUS_DELAY_US KVW_WORKER_STALL
	W=$(worker_of p0)
	STOPPED=$W
	fill p0 cd
	ctl recv-begin "$(ep d0 engine)" 31 "$(ep bootstrap listen)" 0 5,6
	wait_for 10 is d0 31 state WaitingForInput
	ctl send-begin "$(ep p0 engine)" 31 2 0
	ctl send-chunk "$(ep p0 engine)" 31 --last 7,8
	wait_for 30 stopped "$W"
	is p0 31 state Success
	is d0 31 state WaitingForInput # nobody told it yet
	# kv-sender's look at rooms others ended has seen this one (it tells
	# the room's other destinations: none here) before the worker dies:
	# the order a loaded run once took, and the fix's first version
	# missed.
	wait_for 30 logged p0 "room 31: success ("
	kill -9 "$W"
	STOPPED=
	# Long before the decode's 600 s deadline: kv-sender saw its worker
	# die with the room's job unanswered and told every destination.
	wait_for 60 is d0 31 state Success
	logged p0 "room 31: its worker died before its JOB_DONE: the final job's destination told again"
	[ "$(count d0 cd 5,6)" -eq $((2 * 4 * ITEM)) ]
}

@test "ABORT while a job copies: its batch in flight lands before the room is releasable, the rest is dropped, nothing lands after" {
	# The worker stops itself between each batch's re-check and its
	# write, for as long as the test needs; no stall verdict meanwhile.
	export KVW_TEST_COPY_DELAY_US=stop KVW_WORKER_STALL=600
	up
	unset KVW_TEST_COPY_DELAY_US KVW_WORKER_STALL
	W=$(worker_of p0)
	STOPPED=$W # teardown lets it go on, should a step fail
	fill p0 ab
	# 150 scattered pages: 600 copies of 128 bytes and the aux, batches of 256.
	src=$(seqc 0 2 298)
	dst=$(seqc 1 2 299)
	ctl recv-begin "$(ep d0 engine)" 21 "$(ep bootstrap listen)" 0 "$dst"
	wait_for 10 is d0 21 state WaitingForInput
	ctl send-begin "$(ep p0 engine)" 21 150 0
	ctl send-chunk "$(ep p0 engine)" 21 --last "$src"
	# The worker passed its first re-check and holds batch 1.
	wait_for 30 stopped "$W"
	logged p0 "room 21: test delay before a batch, 601 copies left"
	ctl abort "$(ep d0 engine)" 21
	# The prefill has the abort before the worker goes on.
	wait_for 10 is p0 21 state Failed
	kill -CONT "$W"
	wait_for 10 is d0 21 releasable true
	# Released only after batch 1 landed; batches 2 and 3 never started.
	[ "$(count d0 ab "$dst")" -eq $((256 * ITEM)) ]
	is p0 21 outstanding 0
	logged p0 "room 21: job stopped: room ended"
	refute logged p0 "room 21: test delay before a batch, 345 copies left"
	# Canary over the released pages, then a later room through the same
	# worker (jobs run in order) to Success: the canary is untouched.
	paint d0 5a "$dst"
	ctl recv-begin "$(ep d0 engine)" 22 "$(ep bootstrap listen)" 1 600,601
	wait_for 10 is d0 22 state WaitingForInput
	ctl send-begin "$(ep p0 engine)" 22 2 1
	ctl send-chunk "$(ep p0 engine)" 22 --last 700,701
	wait_for 20 go_on_until "$W" is d0 22 state Success
	[ "$(count d0 5a "$dst")" -eq $((150 * 4 * ITEM)) ]
	[ "$(count d0 ab 600,601)" -eq $((2 * 4 * ITEM)) ]
}

@test "ABORT after Success: the prefill room stays Success and the decode still gets its ack" {
	TAG=${RUN##*/}
	TABLE=/dev/shm/kvwire.$TAG.rooms
	POOL=/dev/shm/kvwire.$TAG.pool
	start_ready sender 60 "$KVW_BIN/kv-sender" --listen "ipc://$RUN/p.sock" \
		--engine "ipc://$RUN/e.sock" --table "$TABLE" --pool "$POOL" \
		--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 \
		--pages 32 --aux-slots 4 --aux-bytes 16 --log-level debug
	run timeout 30 "$PY" "$KVW_ROOT/tests/peers/fake_decode.py" transfer \
		--sender "ipc://$RUN/p.sock" --engine "ipc://$RUN/e.sock" \
		--listen "ipc://$RUN/d.sock" --prefill-pool "$POOL" \
		--decode-pool "/dev/shm/kvwire.$TAG-d.pool" --room 61 \
		--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 \
		--pool-pages 32 --aux-slots 4 --aux-bytes 16 --abort-after
	rm -f /dev/shm/kvwire."$TAG".* /dev/shm/kvwire."$TAG"-*.pool
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"ok room 61: STATUS Success"* ]]
	[[ "$output" == *"ok room 61: ABORT_ACK (STATUS Failed reason None first)"* ]]
	grep -q "room 61: success" "$RUN/sender.log"
	refute grep -q "room 61: failed" "$RUN/sender.log"
}

@test "two decode ranks abort one room on one prefill rank: both get their ack, only after the jobs drain" {
	up --decode-ranks 2
	fill p0 ab
	W=$(worker_of p0)
	kill -STOP "$W"
	STOPPED=$W
	for d in d0 d1; do
		ctl recv-begin "$(ep $d engine)" 31 "$(ep bootstrap listen)" 0 1,2
	done
	wait_for 10 is d0 31 state WaitingForInput
	wait_for 10 is d1 31 state WaitingForInput
	ctl send-begin "$(ep p0 engine)" 31 2 0
	ctl send-chunk "$(ep p0 engine)" 31 --last 3,4
	wait_for 10 is p0 31 outstanding 2 # one job per decode rank, queued
	ctl abort "$(ep d0 engine)" 31
	ctl abort "$(ep d1 engine)" 31
	wait_for 10 is d0 31 armed true
	wait_for 10 is d1 31 armed true
	wait_for 10 is p0 31 state Failed
	# Both ABORTs are in the room's ack-target set before the drain.
	wait_for 10 logged p0 "room 31: ABORT from .*: 2 ack targets"
	is d0 31 releasable false
	is d1 31 releasable false
	kill -CONT "$W"
	STOPPED=
	wait_for 10 is d0 31 releasable true
	wait_for 10 is d1 31 releasable true
	logged p0 "room 31: abort acked to 2 targets"
}

@test "a late ABORT_ACK of an older incarnation never releases a later room of the same id; the right token does" {
	FAKE="$KVW_ROOT/tests/peers/kvwfake.py"
	BOOT="ipc://$RUN/boot"
	CTL="ipc://$RUN/ctl"
	TAB="$RUN/t.rooms"
	fk() { timeout 10 "$PY" "$FAKE" "$@"; }
	room_is() { [[ "$(fk room "$TAB" "$1")" == "$2"* ]]; }
	token_of() { sed -n "s/^ABORT rank=0 room=51 reason=1 token=\([0-9]*\)$/\1/p" "$RUN/ev" | sed -n "${1}p"; }
	stale_is() { [ "$(fk counter "$TAB" 3)" -ge "$1" ]; }
	start_ready fake 60 "$PY" "$FAKE" serve --topo 1,1 --ranks "ipc://$RUN/p0" \
		--ctl "$CTL" --events "$RUN/ev" --boot "$BOOT"
	start_ready rx 60 "$KVW_BIN/kv-receiver" --listen "ipc://$RUN/rx" \
		--engine "ipc://$RUN/eng" --table "$TAB" --pool "$RUN/kvwire.d0.pool" \
		--layers 2 --pages 64 --heads 2 --head-dim 16 --aux-slots 8 --log-level debug
	fk ctl "$CTL" hold 0
	# Incarnation 1 of room 51: aborted, never acked, cleared.
	fk engine "ipc://$RUN/eng" begin 51 "$BOOT" 0 0 1
	wait_for 10 room_is 51 "state=WaitingForInput"
	fk engine "ipc://$RUN/eng" abort 51
	wait_for 10 eval '[ -n "$(token_of 1)" ]'
	fk engine "ipc://$RUN/eng" clear 51
	wait_for 10 room_is 51 "state=Cleared"
	# Incarnation 2: aborted with a new token.
	fk engine "ipc://$RUN/eng" begin 51 "$BOOT" 0 0 2
	wait_for 10 room_is 51 "state=WaitingForInput"
	fk engine "ipc://$RUN/eng" abort 51
	wait_for 10 eval '[ -n "$(token_of 2)" ]'
	t1=$(token_of 1)
	t2=$(token_of 2)
	[ "$t1" != "$t2" ]
	wait_for 10 room_is 51 "state=Failed reason=1 flags=1"
	# The old incarnation's ack arrives late: counted stale, releases nothing.
	fk ctl "$CTL" ack 0 51 "$t1"
	wait_for 10 stale_is 1
	room_is 51 "state=Failed reason=1 flags=1"
	fk ctl "$CTL" ack 0 51 "$t2"
	wait_for 10 room_is 51 "state=Failed reason=1 flags=3"
}

@test "tcp: ABORT with the whole prefill rank stopped is releasable at once; its batch sent after it resumes never lands" {
	export KVW_TEST_COPY_DELAY_US=stop KVW_WORKER_STALL=600
	up --transport tcp
	unset KVW_TEST_COPY_DELAY_US KVW_WORKER_STALL
	W=$(worker_of p0)
	STOPPED=$W
	fill p0 ab
	src=$(seqc 0 2 298)
	dst=$(seqc 1 2 299)
	ctl recv-begin "$(ep d0 engine)" 31 "$(ep bootstrap listen)" 0 "$dst"
	wait_for 10 is d0 31 state WaitingForInput
	ctl send-begin "$(ep p0 engine)" 31 150 0
	ctl send-chunk "$(ep p0 engine)" 31 --last "$src"
	# The worker stopped itself holding batch 1 (passed its re-check).
	wait_for 30 stopped "$W"
	logged p0 "room 31: test delay before a batch, 601 copies left"
	# The control stops too: no ABORT_ACK can come back.
	STOPPED="$(cat "$RUN/pids/p0.pid") $W"
	# shellcheck disable=SC2086
	kill -STOP $STOPPED
	ctl abort "$(ep d0 engine)" 31
	wait_for 10 is d0 31 releasable true
	is d0 31 state Failed
	# The engine reuses the pages at once: a canary over them.
	paint d0 5a "$dst"
	# shellcheck disable=SC2086
	kill -CONT $STOPPED
	STOPPED=$W
	# The worker wakes and sends its first batch: the sink reads it and
	# drops it (the room is armed: a late batch, counted stale), and the
	# prefill hears of the abort.
	wait_for 20 logged d0 "room 31: data port: batch of an incarnation that is not live here discarded"
	[ "$(ctr d0 stale)" -ge 1 ]
	# A worker that re-checked before the abort reached its control
	# holds batch 2 as well: let it go on.
	wait_for 20 go_on_until "$W" is p0 31 outstanding 0
	[ "$(count d0 5a "$dst")" -eq $((150 * 4 * ITEM)) ]
	[ "$(count d0 ab "$dst")" -eq 0 ]
}
