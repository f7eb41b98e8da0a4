#!/usr/bin/env bats
# owner.bats - one owner per room table: a second kv-sender or kv-receiver
# started on a live member's table is refused before it changes anything;
# the owner's room, its counters and its epoch stay as they were.

load helpers

SHAPE="--layers 2 --pages 64 --heads 2 --head-dim 16 --aux-slots 64"

setup() { kvw_setup; }
teardown() { kvw_teardown; }

# snap MEMBER ROOM: the owner epoch, the counters and the room's state and
# reason in MEMBER's table, one line.
snap() {
	"$KVW_BIN/kv-stat" --run-dir "$RUN" --json --all |
		jq -c --arg m "$1" --arg r "$2" '.tables[] | select(.name == $m) |
			[.owner_epoch, .counters, (.rooms[] | select(.room == $r) | [.state, .reason])]'
}

@test "a second kv-sender and a second kv-receiver on live tables are refused and change nothing" {
	kv_up --workers 1 $SHAPE
	ctl send-begin "$(endpoint p0 engine)" 7 2 1
	ctl recv-begin "$(endpoint d0 engine)" 8 "ipc://$RUN/nobody.sock" 1 1,2
	state_in() { [ -n "$(snap "$1" "$2" | jq -r '.[2][0] // empty')" ]; }
	wait_for 20 state_in p0 7
	wait_for 20 state_in d0 8
	p_before=$(snap p0 7)
	d_before=$(snap d0 8)
	run timeout 20 "$KVW_BIN/kv-sender" --listen "ipc://$RUN/x.peer" \
		--engine "ipc://$RUN/x.eng" --table "$(endpoint p0 table)" \
		--pool "$RUN/kvwire.x.pool" --workers 1 $SHAPE
	[ "$status" -eq 111 ]
	[[ $output == *"owned by a live process"* ]]
	run timeout 20 "$KVW_BIN/kv-receiver" --listen "ipc://$RUN/y.peer" \
		--engine "ipc://$RUN/y.eng" --table "$(endpoint d0 table)" \
		--pool "$RUN/kvwire.y.pool" $SHAPE
	[ "$status" -eq 111 ]
	[[ $output == *"owned by a live process"* ]]
	[ "$(snap p0 7)" = "$p_before" ]
	[ "$(snap d0 8)" = "$d_before" ]
	# Neither refused process left a pool or a socket.
	[ ! -e "$RUN/kvwire.x.pool" ] && [ ! -e "$RUN/kvwire.y.pool" ]
	[ ! -e "$RUN/x.peer" ] && [ ! -e "$RUN/y.peer" ]
}
