#!/usr/bin/env bats
# pages.bats - page lists that cannot describe one transfer are refused
# with a named reason, on real processes (kv-up group, kv-ctl playing the
# engines, kv-stat --json to read both tables): a RECV_BEGIN naming one
# destination page twice fails at the decode before any prefill rank hears
# of it, and a decode that gave more (or fewer) pages than the prefill
# sends fails on both sides instead of reporting Success for pages that
# never arrived. A good room before and after shows the group still works.

load helpers

SHAPE="--layers 2 --pages 64 --heads 2 --head-dim 16 --aux-slots 64"

setup() { kvw_setup; }
teardown() { kvw_teardown; }

up() {
	kv_up --workers 2 $SHAPE "$@"
	PENG=$(endpoint p0 engine)
	DENG=$(endpoint d0 engine)
	BOOT=$(endpoint bootstrap listen)
}

# good_room ROOM: a room whose lists agree succeeds on both sides.
good_room() {
	ctl recv-begin "$DENG" "$1" "$BOOT" 1 20,21,22
	ctl send-begin "$PENG" "$1" 3 1
	ctl send-chunk "$PENG" "$1" --last 20,21,22
	wait_for 20 state_is d0 "$1" Success
	wait_for 20 state_is p0 "$1" Success
}

@test "RECV_BEGIN naming a destination page twice fails the room (page lists differ) and no prefill rank hears of it" {
	up
	good_room 10
	ctl recv-begin "$DENG" 11 "$BOOT" 1 5,1,1,7
	wait_for 20 state_is d0 11 Failed
	[ "$(field d0 11 reason)" = "page lists differ" ]
	grep -q "destination page 1 given twice" "$RUN/logs/d0.log"
	# The prefill side never got an XFER_INFO for it: the room is not in
	# its table (a later good room proves the prefill side was reachable).
	good_room 12
	[ -z "$(field p0 11 state)" ]
}

@test "decode pages 3 for prefill pages 2 (and 2 for 3): the room fails on both sides, never Success" {
	up
	good_room 20
	ctl recv-begin "$DENG" 21 "$BOOT" 1 30,31,32
	ctl send-begin "$PENG" 21 2 1
	ctl send-chunk "$PENG" 21 --last 40,41
	wait_for 20 state_is p0 21 Failed
	wait_for 20 state_is d0 21 Failed
	[ "$(field p0 21 reason)" = "page lists differ" ]
	[ "$(field d0 21 reason)" = "page lists differ" ]
	grep -q "gave 3 destination pages for 2 source pages" "$RUN/logs/p0.log"
	ctl recv-begin "$DENG" 22 "$BOOT" 1 30,31
	ctl send-begin "$PENG" 22 3 1
	ctl send-chunk "$PENG" 22 --last 40,41,42
	wait_for 20 state_is p0 22 Failed
	wait_for 20 state_is d0 22 Failed
	[ "$(field p0 22 reason)" = "page lists differ" ]
	good_room 23
}
