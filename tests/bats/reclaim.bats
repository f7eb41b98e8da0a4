#!/usr/bin/env bats
# reclaim.bats - issue 14: peer slots are reclaimed, with real processes. A
# real kv-sender, with a real kv-heartbeat on its table, gets 1,024
# REGISTERs from 1,024 sources (tests/peers/regfill.py), each refused, until
# its peer list and table are full. The next decode to register still gets
# in: the refused registrations are reclaimed (counted), the new decode
# takes a freed slot, and kv-heartbeat, which pinged a dead endpoint through
# that slot, now pings the new one and sees it alive. A real transfer then
# lands byte-exact (tests/peers/fake_decode.py).

load helpers

FILL="$BATS_TEST_DIRNAME/../peers/regfill.py"

setup() { sender_setup; }
teardown() { sender_teardown; }

stat_json() { "$KVW_BIN/kv-stat" --table "$TABLE" --json; }
reclaimed_is() { [ "$(stat_json | jq -r '.tables[0].security.reclaimed')" -eq "$1" ]; }
peers_in_use_is() { [ "$(stat_json | jq -r '.tables[0].peers | length')" -eq "$1" ]; }
# liveness_of ENDPOINT LIVENESS: the table's peer at ENDPOINT has it.
liveness_of() {
	[ "$(stat_json | jq -r --arg e "$1" '.tables[0].peers[] | select(.endpoint == $e) | .liveness')" = "$2" ]
}
id_of() { stat_json | jq -r --arg e "$1" '.tables[0].peers[] | select(.endpoint == $e) | .id'; }

@test "a full peer table reclaims 1,024 refused registrations; the heartbeat follows the slot to its new peer" {
	start_ready sender 120 "$KVW_BIN/kv-sender" --listen "$PEER" --engine "$ENG" \
		--table "$TABLE" --pool "$POOL" $SENDER_SHAPE
	SENDER_PID=$BG_PID
	# 50 misses (5 s): the real decode at the end (tests/peers/fake_decode.py)
	# answers no PING, so its room must end before it is found dead; with
	# 2 misses that was 0.3 s, which a busy machine need not give (issue 30).
	start_ready hb 120 "$KVW_BIN/kv-heartbeat" --table "$TABLE" \
		--interval 0.1 --max-failures 50
	# The first refused decode is watched, and found dead (no one there).
	run timeout 30 "$PY" "$FILL" fill --sender "$PEER" --count 1 --prefix "ipc://$RUN/gone"
	[ "$status" -eq 0 ]
	wait_for 20 liveness_of "ipc://$RUN/gone-0" dead
	first=$(id_of "ipc://$RUN/gone-0")
	run timeout 120 "$PY" "$FILL" fill --sender "$PEER" --count 1023 \
		--prefix "ipc://$RUN/gone" --first 1
	[ "$status" -eq 0 ]
	wait_for 30 peers_in_use_is 1024
	reclaimed_is 0

	# One more decode, answering pings: it gets in, in a freed slot.
	"$PY" "$FILL" pong "ipc://$RUN/alive-0" --epoch 0x77 >"$RUN/pong.log" 2>&1 &
	echo $! >>"$RUN/bg.pids"
	wait_for 10 grep -q ready "$RUN/pong.log"
	run timeout 30 "$PY" "$FILL" fill --sender "$PEER" --count 1 --prefix "ipc://$RUN/alive" --first 0
	[ "$status" -eq 0 ]
	wait_for 20 reclaimed_is 1024
	wait_for 20 peers_in_use_is 1
	[ "$(id_of "ipc://$RUN/alive-0")" = "$first" ]
	wait_for 20 liveness_of "ipc://$RUN/alive-0" alive
	grep -q "peer slot reclaimed (registration refused)" "$RUN/sender.log"

	# A real decode registers beside it and its room lands byte-exact.
	run timeout 30 "$PY" "$KVW_ROOT/tests/peers/fake_decode.py" transfer \
		--sender "$PEER" --engine "$ENG" --listen "ipc://$RUN/d.sock" \
		--prefill-pool "$POOL" --decode-pool "/dev/shm/kvwire.$TAG-d.pool" \
		--room 5 $SENDER_PYSHAPE
	[ "$status" -eq 0 ]
	kill -0 "$SENDER_PID"
}
