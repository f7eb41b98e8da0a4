#!/usr/bin/env bats
# sender.bats - kv-sender as a real process against tests/peers/fake_decode.py
# (which plays the decode rank and the prefill engine): one room's pages land
# byte-exact in the decode pool with STATUS(Success) and Success in the table;
# an out-of-pool destination page fails the room (bad index, found by the
# planner before that chunk's job is sent); a room that never gets its destination times out; registration at a
# real kv-bootstrap; a worker killed with a job on it fails exactly that room
# (worker died), is restarted, and the next room succeeds; SIGTERM -> exit 0
# with the workers gone; ABORT -> STATUS Failed + ABORT_ACK; frames
# from an unregistered decode only count as malformed; an ABORT reaching a
# restarted kv-sender from a decode that did not register again is acked at
# once on its own socket (issue 12, item 3); usage exit codes;
# (issue 14) a second registered decode's ABORT of a room it is not a
# destination of is acked and changes nothing, counted as unauthorised; a
# REGISTER naming the prefill's own pool or another decode's is refused,
# counted, and its room fails cleanly; in a group kv-up named, one naming
# another group's pool is refused the same way.

load helpers

SHAPE=$SENDER_SHAPE
PYSHAPE=$SENDER_PYSHAPE

setup() { sender_setup; }
teardown() { sender_teardown; }

# start_sender ARGS...: kv-sender with this test's endpoints and files.
start_sender() {
	start_ready sender 60 "$KVW_BIN/kv-sender" --listen "$PEER" --engine "$ENG" \
		--table "$TABLE" --pool "$POOL" $SHAPE --log-level debug "$@"
	SENDER=$(pgrep -P "$BG_PID")
	[ -n "$SENDER" ]
}

# fake ROOM NAME ARGS...: one fake_decode transfer with its own pool/socket
# (a --decode-pool in ARGS names another: the last one given counts).
fake() {
	local room=$1 name=$2
	shift 2
	timeout 30 "$PY" "$KVW_ROOT/tests/peers/fake_decode.py" transfer \
		--sender "$PEER" --engine "$ENG" --listen "ipc://$RUN/$name.sock" \
		--prefill-pool "$POOL" --decode-pool "/dev/shm/kvwire.$TAG-$name.pool" \
		--room "$room" $PYSHAPE "$@"
}

# room_state ROOM STATE: the table shows the room in STATE.
room_state() {
	"$KVW_BIN/kv-stat" --table "$TABLE" --room "$1" | grep -q "^$1 *$2 "
}

workers_of() {
	pgrep -P "$1" | sort
}

nworkers_is() {
	[ "$(pgrep -P "$1" | wc -l)" -eq "$2" ]
}

@test "kv-sender --help exits 0 and names its flags" {
	run "$KVW_BIN/kv-sender" --help
	[ "$status" -eq 0 ]
	[[ "$output" == *--listen* ]]
	[[ "$output" == *--worker-id* ]]
}

@test "kv-sender with an unknown flag or missing --listen exits 100 with a fatal line" {
	run "$KVW_BIN/kv-sender" --bogus
	[ "$status" -eq 100 ]
	[[ "$output" == *"kv-sender: fatal:"* ]]
	run "$KVW_BIN/kv-sender" --engine "$ENG" --table "$TABLE" --pool "$POOL"
	[ "$status" -eq 100 ]
	run "$KVW_BIN/kv-sender" --listen "$PEER" --engine "$ENG" --table "$TABLE" --pool "$POOL" --workers 0
	[ "$status" -eq 100 ]
}

@test "one room's pages land byte-exact in the decode pool, STATUS Success, table Success" {
	start_sender --workers 2
	run fake 42 d1 --npages 9 --chunks 3
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"STATUS Success"* ]]
	room_state 42 Success
	run "$KVW_BIN/kv-stat" --table "$TABLE" --room 42
	[[ "$output" == *" 9/9 "* ]]
}

@test "a destination page outside the decode pool fails the room with bad index" {
	start_sender --workers 1
	run fake 7 d1 --expect failed --reason 6 --bad-index
	echo "$output"
	[ "$status" -eq 0 ]
	room_state 7 Failed
	# The sender lives on and serves the next room.
	run fake 8 d2
	[ "$status" -eq 0 ]
}

@test "a room whose destination never registers fails on its deadline" {
	start_sender --workers 1 --bootstrap-timeout 0.3
	timeout 10 "$KVW_BIN/kv-ctl" send-begin "$ENG" 99 4 0
	wait_for 10 room_state 99 Failed
	"$KVW_BIN/kv-stat" --table "$TABLE" --room 99 | grep -q timeout
}

@test "kv-sender registers at kv-bootstrap, which then answers its endpoint" {
	start_ready boot 60 "$KVW_BIN/kv-bootstrap" --listen "ipc://$RUN/boot.sock"
	start_sender --workers 1 --bootstrap "ipc://$RUN/boot.sock"
	run timeout 10 "$KVW_BIN/kv-ctl" lookup "ipc://$RUN/boot.sock" --coord 0,0,0,0 --page-tokens 4
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"endpoint=$PEER"* ]]
}

@test "a worker killed with a job on it fails that room, is restarted, and the next room succeeds" {
	start_sender --workers 1
	wait_for 10 nworkers_is "$SENDER" 1
	old=$(workers_of "$SENDER")
	# Hold the worker so the job is certainly on it when it dies.
	kill -STOP "$old"
	fake 50 d1 --expect failed --reason 8 >"$RUN/fake50.out" 2>&1 &
	fpid=$!
	wait_for 10 room_state 50 Transferring
	kill -KILL "$old"
	wait "$fpid"
	cat "$RUN/fake50.out"
	grep -q "STATUS Failed reason 8" "$RUN/fake50.out"
	room_state 50 Failed
	# A new worker (another pid) takes over; the sender itself survived.
	wait_for 10 nworkers_is "$SENDER" 1
	[ "$(workers_of "$SENDER")" != "$old" ]
	kill -0 "$SENDER"
	run fake 51 d2
	echo "$output"
	[ "$status" -eq 0 ]
	room_state 51 Success
}

@test "a hung worker (no answer for --worker-stall) is killed and replaced, its room fails within seconds, the next room succeeds" {
	start_sender --workers 1 --worker-stall 1 --bootstrap-timeout 120
	wait_for 10 nworkers_is "$SENDER" 1
	old=$(workers_of "$SENDER")
	kill -STOP "$old"
	start=$SECONDS
	# The decode would wait 120 s for its deadline; the stall bound ends it.
	fake 56 d1 --expect failed --reason 8 --timeout 20 >"$RUN/fake56.out" 2>&1
	cat "$RUN/fake56.out"
	grep -q "STATUS Failed reason 8" "$RUN/fake56.out"
	[ $((SECONDS - start)) -le 8 ]
	room_state 56 Failed
	grep -Eq "worker 0 \(pid $old\): [0-9]+ jobs queued and none answered for [0-9]+ ms: killed" "$RUN/sender.log"
	wait_for 10 nworkers_is "$SENDER" 1
	[ "$(workers_of "$SENDER")" != "$old" ]
	run fake 57 d2
	echo "$output"
	[ "$status" -eq 0 ]
	room_state 57 Success
}

@test "a destination whose XFER_INFO comes after its room failed hears STATUS(Failed) with its token at once" {
	start_sender --bootstrap-timeout 0.5
	ctl send-begin "$ENG" 58 8 0
	wait_for 10 room_state 58 Failed
	# Its decode shows up late: it must not wait for its own deadline.
	start=$SECONDS
	run fake 58 d1 --expect failed --reason 2 --timeout 5
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"ok room 58: STATUS Failed reason 2"* ]]
	[ $((SECONDS - start)) -le 4 ]
}

@test "SIGTERM stops kv-sender with exit 0 and its workers with it" {
	start_sender --workers 3
	wait_for 10 nworkers_is "$SENDER" 3
	ws=$(workers_of "$SENDER")
	start=$(date +%s%N)
	kill -TERM "$SENDER"
	wait_for $EXIT_WAIT gone "$SENDER"
	echo "kv-sender gone $((($(date +%s%N) - start) / 1000000)) ms after SIGTERM"
	wait "$BG_PID" || rc=$?
	[ "${rc:-0}" -eq 0 ]
	for w in $ws; do
		wait_for $EXIT_WAIT gone "$w"
	done
}

@test "ABORT from decode fails the room and is acked, with STATUS Failed aborted before the ack" {
	start_sender --workers 1
	run fake 60 d1 --abort
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"ABORT_ACK (STATUS Failed reason 1 first)"* ]]
	room_state 60 Failed
	"$KVW_BIN/kv-stat" --table "$TABLE" --room 60 | grep -q aborted
}

@test "frames from an unregistered decode are counted as malformed and change nothing" {
	start_sender --workers 1
	# XFER_INFO (type 7) for room 5 from a decode that never sent REGISTER.
	hdr=4b56573101070000000000000000000005000000000000000100000000000000
	timeout 10 "$KVW_BIN/kv-ctl" raw "$PEER" "$hdr" 000000000100000000010000000000000000000000 00000000
	wait_for 10 sh -c "'$KVW_BIN/kv-stat' --table '$TABLE' | grep -q 'malformed=1'"
	grep -q "XFER_INFO from a decode that did not REGISTER" "$RUN/sender.log"
	run "$KVW_BIN/kv-stat" --table "$TABLE" --room 5
	[ "$status" -eq 1 ]
	kill -0 "$SENDER"
}

@test "an ABORT reaching a restarted kv-sender from a decode that has not registered again is acked at once on its own socket" {
	start_sender --workers 1
	# The decode registers, opens room 62 (no chunk: nothing in flight)
	# and waits; the test restarts kv-sender under it.
	timeout 30 "$PY" "$KVW_ROOT/tests/peers/fake_decode.py" transfer \
		--sender "$PEER" --engine "$ENG" --listen "ipc://$RUN/d1.sock" \
		--prefill-pool "$POOL" --decode-pool "/dev/shm/kvwire.$TAG-d1.pool" \
		--room 62 $PYSHAPE --abort-after-file "$RUN/go" --timeout 20 \
		>"$RUN/d1.out" 2>&1 &
	D=$!
	echo "$D" >>"$RUN/bg.pids"
	wait_for 10 grep -q "registered room 62" "$RUN/d1.out"
	wait_for 10 room_state 62 WaitingForInput
	old=$SENDER
	kill -KILL "$old"
	wait_for $EXIT_WAIT gone "$old"
	start_sender --workers 1
	[ "$SENDER" != "$old" ]
	# The new incarnation failed the old one's room when it took the
	# table over, and it never saw this decode's REGISTER.
	room_state 62 Failed
	touch "$RUN/go"
	wait "$D"
	cat "$RUN/d1.out"
	grep -q "ok room 62: ABORT_ACK on the DEALER" "$RUN/d1.out"
	grep -q "room 62: ABORT from an unregistered decode (rank 0): nothing of it in flight here, acked" "$RUN/sender.log"
	# Within a second, not on a release deadline.
	secs=$(sed -n 's/.*ABORT_ACK on the DEALER after \([0-9.]*\)s.*/\1/p' "$RUN/d1.out")
	awk -v s="$secs" 'BEGIN { exit !(s < 1.0) }'
}

# unauthorised: the table's count of refused, authenticated requests.
unauthorised() {
	"$KVW_BIN/kv-stat" --table "$TABLE" --json | jq -r '.tables[0].security.unauthorised'
}

@test "issue 14: an ABORT from a registered decode that is not a destination of the room is acked and changes nothing; the destination's own ABORT still fails it" {
	start_sender --workers 1
	# Decode a: registered, the room's destination, Waiting until "go".
	timeout 30 "$PY" "$KVW_ROOT/tests/peers/fake_decode.py" transfer \
		--sender "$PEER" --engine "$ENG" --listen "ipc://$RUN/a.sock" \
		--prefill-pool "$POOL" --decode-pool "/dev/shm/kvwire.$TAG-a.pool" \
		--room 41 $PYSHAPE --abort --abort-wait "$RUN/go" >"$RUN/a.out" 2>&1 &
	A=$!
	echo "$A" >>"$RUN/bg.pids"
	wait_for 10 room_state 41 WaitingForInput
	# Decode b: registered too (its own pool), not a destination of 41.
	run timeout 30 "$PY" "$KVW_ROOT/tests/peers/fake_decode.py" abort-other \
		--sender "$PEER" --listen "ipc://$RUN/b.sock" \
		--decode-pool "/dev/shm/kvwire.$TAG-b.pool" --room 41 $PYSHAPE
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output == *"ok room 41: ABORT_ACK (STATUS Failed reason None first)"* ]]
	room_state 41 WaitingForInput
	[ "$(unauthorised)" = 1 ]
	grep -q "unauthorised: ABORT of room 41 from decode ipc://$RUN/b.sock" "$RUN/sender.log"
	# The destination's own ABORT: the room fails (aborted) and is acked.
	touch "$RUN/go"
	wait "$A"
	cat "$RUN/a.out"
	grep -q "ok room 41: ABORT_ACK" "$RUN/a.out"
	wait_for 10 room_state 41 Failed
	[ "$(unauthorised)" = 1 ]
}

@test "issue 14: a REGISTER naming the prefill's own pool or another decode's is refused, counted, and its room fails cleanly (refused, not a layout mismatch)" {
	start_sender --workers 1
	# The prefill's own pool: refused; the room fails at its first chunk.
	fake 51 own --desc-path "$POOL" --expect failed --reason 14
	[ "$(unauthorised)" = 1 ]
	grep -q "unauthorised: decode ipc://$RUN/own.sock: REGISTER names a pool it does not own: pool $POOL is this prefill rank's own" "$RUN/sender.log"
	room_state 51 Failed
	# Decode a registers its own pool; decode b naming a's is refused.
	fake 52 a
	fake 53 b --desc-path "/dev/shm/kvwire.$TAG-a.pool" --expect failed --reason 14
	[ "$(unauthorised)" = 2 ]
	# The real decode is still served.
	fake 54 a2
	[ "$(unauthorised)" = 2 ]
}


@test "issue 14: in a group kv-up named, a REGISTER naming another group's pool is refused, counted, and its room fails; the group's own decode is served" {
	# kv-up's names: this rank's pool is kvwire.G.p0.pool, its decode's
	# kvwire.G.d0.pool; group G-x's decode pool is another group's.
	POOL=/dev/shm/kvwire.$TAG.p0.pool
	start_sender --workers 1
	fake 61 x --decode-pool "/dev/shm/kvwire.${TAG}-x.d0.pool" --expect failed --reason 14
	[ "$(unauthorised)" = 1 ]
	grep -q "REGISTER names a pool it does not own: pool /dev/shm/kvwire.${TAG}-x.d0.pool is not this group's pool of the decode at rank 0,0 (/dev/shm/kvwire.$TAG.d0.pool)" "$RUN/sender.log"
	room_state 61 Failed
	fake 62 d --decode-pool "/dev/shm/kvwire.$TAG.d0.pool"
	[ "$(unauthorised)" = 1 ]
	room_state 62 Success
}
