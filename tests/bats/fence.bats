#!/usr/bin/env bats
# fence.bats - the decode may release a room without the prefill (issue
# 36): over tcp, kv-receiver marks an aborted room releasable as soon as
# none of its sinks is writing it (the fence, table/rtab_fence.h), without
# waiting for the prefill's ABORT_ACK. Real processes under kv-up whose
# sink stops itself (SIGSTOP: KVW_TEST_SINK_DELAY_US=stop, TEST ONLY,
# lib/base/proc.h) between each batch's room check and its write, after
# saying so in its log. An abort storm: four rooms queued at once; as each
# one's batch sits in that window (the sink seen stopped, so the window
# lasts as long as the test needs, whatever the load; a 2 s sleep there
# was once missed by a test on a busy machine), the room is aborted and,
# the moment it is releasable, its pages painted with a canary; then the
# sink goes on (SIGCONT). The
# fence must keep every struck room from being releasable while the
# stopped sink still holds its batch, so no canary byte ever changes; and
# the receiver's log must show it waited on the sink for each room.
# (kv-bench --abort-frac over slowed sinks was tried first: its aborts
# rarely land in the window, so it proved nothing either way.)

load helpers

# K0 K1 V0 V1 buffers of 64 pages x 128 bytes (count and paint in
# helpers.bash read PAGES and ITEM).
SHAPE="--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 --pages 64 --aux-slots 16 --aux-bytes 16"
ITEM=128
PAGES=64

setup() { kvw_setup; }
teardown() { kvw_teardown; }

field_is() { [ "$(field "$1" "$2" "$3")" = "$4" ]; }

# dst I / src I: room 100+I's 2 pages in d0 and in p0.
dst() { echo "$((2 * $1 + 1)),$((2 * $1 + 2))"; }
src() { echo "$((2 * $1 + 41)),$((2 * $1 + 42))"; }

# struck_or_released ROOM: the receiver has decided on ROOM's abort:
# releasable at once, or waiting for a sink.
struck_or_released() {
	logged d0 "room $1: releasable" || logged d0 "room $1: a sink is writing it"
}

# strike I: the sink stopped itself holding room 100+I's batch: abort the
# room, paint its pages the moment it is releasable (while the sink is
# stopped, if the receiver says so then), let the sink go on.
strike() {
	local r=$((100 + $1)) painted=
	wait_for 30 stopped "$SINK"
	logged d0 "room $r: test delay before a batch"
	ctl abort "$(endpoint d0 engine)" "$r"
	wait_for 30 struck_or_released "$r"
	if field_is d0 "$r" releasable true; then
		paint d0 5a "$(dst "$1")"
		painted=1
	fi
	kill -CONT "$SINK"
	wait_for 30 field_is d0 "$r" releasable true
	[ -n "$painted" ] || paint d0 5a "$(dst "$1")"
}

@test "tcp, an abort storm on a slowed sink: no room is releasable while the sink holds its batch, no canary changes" {
	KVW_TEST_SINK_DELAY_US=stop kv_up_held --transport tcp $SHAPE
	wait_for 20 logged d0 "sink\[0\] info: serving"
	SINK=$(pgrep -f -- "--sink-id 0 .*$(endpoint d0 table)")
	STOPPED=$SINK # teardown lets it go on, should a step fail
	fill p0 ab
	fill d0 cd
	for i in 0 1 2 3; do
		ctl recv-begin "$(endpoint d0 engine)" $((100 + i)) "$(endpoint bootstrap listen)" "$i" "$(dst "$i")"
		wait_for 20 state_is d0 $((100 + i)) WaitingForInput
		ctl send-begin "$(endpoint p0 engine)" $((100 + i)) 2 "$i"
	done
	for i in 0 1 2 3; do
		ctl send-chunk "$(endpoint p0 engine)" $((100 + i)) --last "$(src "$i")"
	done
	for i in 0 1 2 3; do strike "$i"; done
	# A later room through the same sink, to Success: every batch of
	# the storm is behind it.
	ctl recv-begin "$(endpoint d0 engine)" 120 "$(endpoint bootstrap listen)" 9 30,31
	wait_for 20 state_is d0 120 WaitingForInput
	ctl send-begin "$(endpoint p0 engine)" 120 2 9
	ctl send-chunk "$(endpoint p0 engine)" 120 --last 32,33
	wait_for 60 go_on_until "$SINK" state_is d0 120 Success
	echo "canary bytes left: $(count d0 5a "$(seq -s, 1 8)") of $((8 * 4 * ITEM))"
	[ "$(count d0 5a "$(seq -s, 1 8)")" -eq $((8 * 4 * ITEM)) ]
	[ "$(count d0 ab 30,31)" -eq $((2 * 4 * ITEM)) ]
	# Every struck room waited on the sink: the race was run each time.
	for i in 0 1 2 3; do
		logged d0 "room $((100 + i)): a sink is writing it: releasable once it stops"
	done
}
