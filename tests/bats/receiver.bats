#!/usr/bin/env bats
# receiver.bats - kv-receiver as a real process against Python prefill
# stand-ins (tests/peers/kvwfake.py: bootstrap + prefill ranks writing into
# the decode pool over its shm descriptor) or the real kv-bootstrap: room
# lifecycle Bootstrapping -> WaitingForInput -> Success, Success only after
# every required prefill rank reported, late STATUS after CLEAR, NOT_READY
# retries, RECV_ABORT with acks, deadline expiry, malformed input, SIGTERM
# and the usage exit codes; prefill instances that come and go are
# forgotten once dead. Room states are read from the table file.

load helpers

FAKE="$BATS_TEST_DIRNAME/../peers/kvwfake.py"
SHAPE="--layers 2 --pages 64 --heads 2 --head-dim 16 --aux-slots 8"

setup() {
	kvw_setup
	BOOT="ipc://$RUN/boot"
	CTL="ipc://$RUN/ctl"
	ENG="ipc://$RUN/eng"
	TAB="$RUN/t.rooms"
}

teardown() {
	kvw_teardown
}

# start_fake TP,PP [ARGS...]: prefill ranks on ipc://$RUN/p0.. (+ ARGS).
start_fake() {
	local topo=$1 n ranks="" i
	shift
	n=$(( ${topo%,*} * ${topo#*,} ))
	for ((i = 0; i < n; i++)); do ranks="$ranks${ranks:+,}ipc://$RUN/p$i"; done
	start_ready fake 60 "$PY" "$FAKE" serve --topo "$topo" --ranks "$ranks" \
		--ctl "$CTL" --events "$RUN/ev" "$@"
	FAKE_PID=$BG_PID
}

start_rx() {
	start_ready rx 60 "$KVW_BIN/kv-receiver" --listen "ipc://$RUN/rx" \
		--engine "$ENG" --table "$TAB" --pool "$RUN/kvwire.d0.pool" \
		$SHAPE --log-level debug "$@"
	RX_PID=$BG_PID
}

eng() { timeout 10 "$PY" "$FAKE" engine "$ENG" "$@"; }
ctl() { timeout 10 "$PY" "$FAKE" ctl "$CTL" "$@"; }
room() { timeout 10 "$PY" "$FAKE" room "$TAB" "$1"; }
# room_is ROOM PREFIX: the room's "state=... reason=... flags=..." starts so.
room_is() { [[ "$(room "$1")" == "$2"* ]]; }
has_event() { grep -q -- "$1" "$RUN/ev" 2>/dev/null; }
rx_logged() { grep -q -- "$1" "$RUN/rx.log"; }
malformed_counted() { [ "$(timeout 10 "$PY" "$FAKE" counter "$TAB" 0)" -ge 1 ]; }

@test "kv-receiver --help exits 0; bad flags and a rank outside the topology exit 100" {
	run "$KVW_BIN/kv-receiver" --help
	[ "$status" -eq 0 ]
	[[ "$output" == *usage* ]]
	run "$KVW_BIN/kv-receiver" --listen x
	[ "$status" -eq 100 ]
	[[ "$output" == "kv-receiver: fatal:"* ]]
	run "$KVW_BIN/kv-receiver" --listen ipc://$RUN/rx --engine $ENG --table $TAB \
		--pool $RUN/kvwire.d0.pool --layers zero
	[ "$status" -eq 100 ]
	run timeout 10 "$KVW_BIN/kv-receiver" --listen ipc://$RUN/rx --engine $ENG \
		--table $TAB --pool $RUN/kvwire.d0.pool $SHAPE --topo 1,1 --rank 1,0
	[ "$status" -eq 100 ]
}

@test "a room goes Bootstrapping -> WaitingForInput -> Success, pages land in the pool" {
	start_rx
	# No bootstrap yet: the lookup cannot be answered, the room waits.
	eng begin 7 "$BOOT" 1 0 3,4,5
	wait_for 10 room_is 7 "state=Bootstrapping"
	# The receiver is not blocked on the bootstrap: it still takes rooms.
	eng begin 8 "$BOOT" 1 0 6
	wait_for 10 room_is 8 "state=Bootstrapping"
	start_fake 1,1 --boot "$BOOT"
	wait_for 10 room_is 7 "state=WaitingForInput"
	wait_for 10 room_is 8 "state=WaitingForInput"
	has_event "REGISTER rank=0 ep=ipc://$RUN/rx transport=shm pool=$RUN/kvwire.d0.pool"
	has_event "XFER_INFO rank=0 room=7 dummy=0 req=1 pages=3,4,5"
	[ "$(grep -c '^REGISTER' "$RUN/ev")" -eq 1 ]   # once per peer epoch
	ctl status 0 7 success
	wait_for 10 room_is 7 "state=Success"
	room_is 8 "state=WaitingForInput"
	# The fake wrote through the descriptor's path: the bytes are there.
	local off byte
	off=$(sed -n 's/^WROTE rank=0 room=7 off=\([0-9]*\) .*/\1/p' "$RUN/ev" | head -n1)
	byte=$(sed -n 's/^WROTE rank=0 room=7 .* byte=\(..\)$/\1/p' "$RUN/ev" | head -n1)
	[ -n "$off" ]
	run timeout 10 "$PY" "$FAKE" pool "$RUN/kvwire.d0.pool" "$off" 16
	[ "$output" = "$(printf "$byte%.0s" $(seq 16))" ]
	# A clean stop with peers, a bootstrap and rooms held (sanitizers
	# report leaks through the exit status).
	kill -TERM "$RX_PID"
	wait_for $EXIT_WAIT gone "$RX_PID"
	rc=0
	wait "$RX_PID" || rc=$?
	[ "$rc" -eq 0 ]
}

@test "Success needs STATUS from 2 of 2 required prefill ranks, counted once each" {
	start_fake 2,1 --boot "$BOOT"
	start_rx
	eng begin 11 "$BOOT" 0 0 1,2
	wait_for 10 room_is 11 "state=WaitingForInput"
	has_event "XFER_INFO rank=0 room=11 dummy=0 req=1 pages=1,2"
	has_event "XFER_INFO rank=1 room=11 dummy=0 req=1 pages=1,2"
	ctl status 0 11 success
	wait_for 10 rx_logged "room 11: Success from rank 0 (1 of 2)"
	room_is 11 "state=WaitingForInput"
	# The same rank again is not a second report.
	ctl status 0 11 success
	wait_for 10 rx_logged "room 11: Success from rank 0 again: counted once"
	room_is 11 "state=WaitingForInput"
	ctl status 1 11 success
	wait_for 10 room_is 11 "state=Success"
	refute rx_logged "room 11: Success from rank 0 (2 of 2)"
}

@test "a STATUS(Failed) from one prefill rank fails the room with its reason" {
	start_fake 2,1 --boot "$BOOT"
	start_rx
	eng begin 12 "$BOOT" 0 0 1
	wait_for 10 room_is 12 "state=WaitingForInput"
	ctl status 1 12 failed 5
	wait_for 10 room_is 12 "state=Failed reason=5"
	ctl status 0 12 success
	wait_for 10 rx_logged "room 12: STATUS for a Failed room: ignored"
	room_is 12 "state=Failed reason=5"
}

@test "a late STATUS for a cleared room changes nothing" {
	start_fake 1,1 --boot "$BOOT"
	start_rx
	eng begin 9 "$BOOT" 0 0 1,2
	wait_for 10 room_is 9 "state=WaitingForInput"
	eng clear 9
	wait_for 10 room_is 9 "state=Cleared"
	ctl status 0 9 success
	wait_for 10 rx_logged "room 9: STATUS for a unknown room: ignored"
	room_is 9 "state=Cleared"
	# The id can be used again; the new incarnation runs normally.
	eng begin 9 "$BOOT" 0 0 5
	wait_for 10 room_is 9 "state=WaitingForInput"
	ctl status 0 9 success
	wait_for 10 room_is 9 "state=Success"
}

# token ROOM N: the incarnation token of the N-th XFER_INFO rank 0 got for ROOM.
token() { grep "^XFER_INFO rank=0 room=$1 " "$RUN/ev" | sed -n "$2p" | sed 's/.* token=//'; }
xfer_infos() { [ "$(grep -c "^XFER_INFO rank=0 room=$1 " "$RUN/ev")" -ge "$2" ]; }

@test "a STATUS of the previous incarnation of a room id never changes the next one" {
	start_fake 1,1 --boot "$BOOT"
	start_rx
	eng begin 9 "$BOOT" 0 0 1,2
	wait_for 10 room_is 9 "state=WaitingForInput"
	old=$(token 9 1)
	[ -n "$old" ]
	eng clear 9
	wait_for 10 room_is 9 "state=Cleared"
	eng begin 9 "$BOOT" 0 0 5
	wait_for 10 xfer_infos 9 2
	wait_for 10 room_is 9 "state=WaitingForInput"
	new=$(token 9 2)
	[ -n "$new" ] && [ "$new" != "$old" ]
	# The worker's late STATUS(Success) of the first incarnation, then a
	# restarted control's STATUS(Failed) for it: both dropped as stale.
	ctl status 0 9 success 0 "$old"
	wait_for 10 rx_logged "room 9: STATUS(Success) from rank 0 of another incarnation: dropped"
	ctl status 0 9 failed 5 "$old"
	wait_for 10 rx_logged "room 9: STATUS(Failed) from rank 0 of another incarnation: dropped"
	room_is 9 "state=WaitingForInput"
	ctl status 0 9 success 0 "$new"
	wait_for 10 room_is 9 "state=Success"
}

@test "NOT_READY from the bootstrap is retried with backoff until it answers" {
	start_fake 1,1 --boot "$BOOT" --not-ready 3
	start_rx
	eng begin 5 "$BOOT" 0 0 1
	wait_for 10 room_is 5 "state=WaitingForInput"
	[ "$(grep -c '^LOOKUP want=4294967295' "$RUN/ev")" -ge 4 ]
	[ "$(grep -c 'not ready: retry in' "$RUN/rx.log")" -ge 3 ]
}

@test "RECV_ABORT fails and arms the room, ABORTs every target, acks make it releasable" {
	start_fake 2,1 --boot "$BOOT"
	start_rx
	eng begin 21 "$BOOT" 0 0 1
	wait_for 10 room_is 21 "state=WaitingForInput"
	eng abort 21
	wait_for 10 room_is 21 "state=Failed reason=1"
	wait_for 10 has_event "ABORT rank=0 room=21 reason=1"
	wait_for 10 has_event "ABORT rank=1 room=21 reason=1"
	# flags 3 = ARMED | RELEASABLE once both ranks acked.
	wait_for 10 room_is 21 "state=Failed reason=1 flags=3"
}

@test "a room whose deadline passes fails with timeout and aborts its targets" {
	start_fake 1,1 --boot "$BOOT"
	start_rx --waiting-timeout 0.5
	eng begin 31 "$BOOT" 0 0 1
	wait_for 10 room_is 31 "state=Failed reason=2"
	wait_for 10 has_event "ABORT rank=0 room=31 reason=2"
	wait_for 10 room_is 31 "state=Failed reason=2 flags=3"
}

@test "a MLA fan-in sends dummy XFER_INFO and needs only the real rank's STATUS" {
	start_fake 2,1 --boot "$BOOT" --mla
	start_rx
	eng begin 41 "$BOOT" 0 0 4
	wait_for 10 room_is 41 "state=WaitingForInput"
	has_event "XFER_INFO rank=0 room=41 dummy=0 req=1 pages=4"
	has_event "XFER_INFO rank=1 room=41 dummy=1 req=1 pages=-"
	ctl status 0 41 success
	wait_for 10 room_is 41 "state=Success"
}

@test "a malformed engine frame is counted and the receiver keeps serving" {
	start_fake 1,1 --boot "$BOOT" --auto
	start_rx
	eng raw 0
	wait_for 10 malformed_counted
	eng begin 51 "$BOOT" 0 0 1
	wait_for 10 room_is 51 "state=Success"
}

@test "with the real kv-bootstrap a room reaches Success" {
	[ -x "$KVW_BIN/kv-bootstrap" ] || skip "kv-bootstrap not built"
	start_ready boot 60 "$KVW_BIN/kv-bootstrap" --listen "$BOOT"
	start_fake 2,1 --register-at "$BOOT" --auto
	start_rx
	eng begin 61 "$BOOT" 0 0 1,2,3
	wait_for 10 room_is 61 "state=Success"
}

@test "SIGTERM stops kv-receiver with exit 0 while a lookup is pending" {
	start_rx
	eng begin 71 "ipc://$RUN/nobody" 0 0 1
	wait_for 10 room_is 71 "state=Bootstrapping"
	kill -TERM "$RX_PID"
	wait_for $EXIT_WAIT gone "$RX_PID"
	rc=0
	wait "$RX_PID" || rc=$?
	[ "$rc" -eq 0 ]
}

@test "real kv-bootstrap, kv-sender and kv-receiver move pages end to end; kv-heartbeat sees the sender" {
	[ -x "$KVW_BIN/kv-bootstrap" ] && [ -x "$KVW_BIN/kv-sender" ] ||
		skip "kv-bootstrap or kv-sender not built"
	start_ready boot 60 "$KVW_BIN/kv-bootstrap" --listen "$BOOT"
	start_ready tx 60 "$KVW_BIN/kv-sender" --listen "ipc://$RUN/tx" \
		--engine "ipc://$RUN/txe" --bootstrap "$BOOT" --table "$RUN/tx.rooms" \
		--pool "$RUN/kvwire.p0.pool" --workers 2 $SHAPE
	start_rx
	# Every source byte 0xab; the decode pool starts zeroed.
	"$PY" -c 'import mmap,sys
f=open(sys.argv[1],"r+b"); m=mmap.mmap(f.fileno(),0); m[:]=b"\xab"*len(m)' \
		"$RUN/kvwire.p0.pool"
	eng begin 7 "$BOOT" 1 0 3,4,5
	wait_for 10 room_is 7 "state=WaitingForInput"
	timeout 10 "$PY" "$FAKE" engine "ipc://$RUN/txe" send-begin 7 3 1
	timeout 10 "$PY" "$FAKE" engine "ipc://$RUN/txe" send-chunk 7 1 10,11,12
	wait_for 10 room_is 7 "state=Success"
	# The whole decode pool, byte for byte: this shape has 4 buffers (K and
	# V of 2 layers) of 64 pages of 1024 bytes (16 tokens x 2 heads x 16
	# dims x 2 bytes), then the aux slots. Pages 3..5 of every buffer and
	# aux slot 1 hold 0xab; every other byte is still 0.
	run timeout 10 "$PY" - "$RUN/kvwire.d0.pool" <<-'EOF'
		import sys
		pool = open(sys.argv[1], "rb").read()
		page, npages, nbuf = 1024, 64, 4
		aux_off = nbuf * npages * page
		aux = (len(pool) - aux_off) // 8
		want = bytearray(len(pool))
		for b in range(nbuf):
		    o = (b * npages + 3) * page
		    want[o:o + 3 * page] = b"\xab" * (3 * page)
		want[aux_off + aux:aux_off + 2 * aux] = b"\xab" * aux
		bad = [i for i in range(len(pool)) if pool[i] != want[i]]
		print("pool %d bytes, aux slot %d bytes, %d differ%s" % (len(pool),
		      aux, len(bad), " from %d" % bad[0] if bad else ""))
		sys.exit(1 if bad else 0)
	EOF
	echo "$output"
	[ "$status" -eq 0 ]
	start_ready hb 60 "$KVW_BIN/kv-heartbeat" --table "$TAB" --interval 0.1
	wait_for 10 eval 'timeout 10 "$PY" "$FAKE" peers "$TAB" | grep -q "^1 alive 0 [1-9]"'
}

# fds PID: how many files the process has open.
fds() { ls "/proc/$1/fd" | wc -l; }
# rss PID: its resident anonymous memory in KiB (heap and stacks: where a
# leak grows; the shared table's pages count as they are first touched).
rss() { awk '/^RssAnon:/ { print $2 }' "/proc/$1/status"; }

# live_peers: the receiver's table peers that are not retired.
live_peers() { timeout 10 "$PY" "$FAKE" peers "$TAB" | grep -c . || true; }

@test "prefill instances come and go one after another: each dead one is forgotten (socket, table slot, bootstrap), the decode's and heartbeat's fds and memory come back" {
	# Issue 34: a decode kept a DEALER, a table slot and a bootstrap
	# DEALER for every prefill instance it ever talked to, and
	# kv-heartbeat kept pinging them all.
	local n=${KVW_CHURN:-5} i pid first_rx first_hb mem_rx mem_hb
	# Bounds of their own: 60 s (start_rx) is too short for KVW_CHURN=50.
	start_ready rx 900 "$KVW_BIN/kv-receiver" --listen "ipc://$RUN/rx" \
		--engine "$ENG" --table "$TAB" --pool "$RUN/kvwire.d0.pool" \
		$SHAPE --log-level debug --forget-after 0.5
	# start_ready's pid is its `timeout`: the member is its child.
	RX_PID=$(pgrep -P "$BG_PID")
	[ -n "$RX_PID" ] && grep -q kv-receiver "/proc/$RX_PID/cmdline"
	# 30 misses (3 s): each instance's room must not fail on a false
	# death of its Python stand-in, which on a busy machine can answer
	# a ping 0.3 s late (heartbeat.bats's restart test did, issue 30).
	start_ready hb 900 "$KVW_BIN/kv-heartbeat" --table "$TAB" \
		--interval 0.1 --max-failures 30
	HB_PID=$(pgrep -P "$BG_PID")
	[ -n "$HB_PID" ] && grep -q kv-heartbeat "/proc/$HB_PID/cmdline"
	for ((i = 1; i <= n; i++)); do
		start_ready "fake$i" 120 "$PY" "$FAKE" serve --topo 1,1 \
			--ranks "ipc://$RUN/pf$i" --boot "ipc://$RUN/boot$i" --auto \
			--ctl "ipc://$RUN/ctl$i" --events "$RUN/ev$i"
		pid=$BG_PID
		eng begin $((100 + i)) "ipc://$RUN/boot$i" 1 0 3,4
		wait_for 20 room_is $((100 + i)) "state=Success"
		eng clear $((100 + i))
		kill -TERM "$pid"
		wait_for 20 gone "$pid"
		wait_for 30 rx_logged "prefill peer ipc://$RUN/pf$i forgotten"
		# Not before --forget-after (0.5 s) as the receiver counts it.
		grep "prefill peer ipc://$RUN/pf$i forgotten" "$RUN/rx.log" |
			sed -n 's/.* dead for \([0-9.]*\) s.*/\1/p' |
			awk '{ exit !($1 >= 0.5) }'
		wait_for 30 rx_logged "bootstrap ipc://$RUN/boot$i forgotten"
		# kv-heartbeat lets go of the retired slot's socket at its
		# next round.
		wait_for 30 eval '[ "$(live_peers)" = 0 ]'
		if [ "$i" = 1 ]; then
			first_rx=$(fds "$RX_PID")
			first_hb=$(fds "$HB_PID")
			mem_rx=$(rss "$RX_PID")
			mem_hb=$(rss "$HB_PID")
		fi
	done
	wait_for 30 eval '[ "$(fds "$HB_PID")" -le "$first_hb" ]'
	echo "receiver fds: after the first instance $first_rx, after $n: $(fds "$RX_PID")"
	echo "heartbeat fds: after the first instance $first_hb, after $n: $(fds "$HB_PID")"
	echo "receiver RssAnon KiB: after the first instance $mem_rx, after $n: $(rss "$RX_PID")"
	echo "heartbeat RssAnon KiB: after the first instance $mem_hb, after $n: $(rss "$HB_PID")"
	[ "$(fds "$RX_PID")" -le "$first_rx" ]
	# Memory back too, within a small constant (the allocator's own
	# slack), whatever the number of instances that came and went.
	[ "$(rss "$RX_PID")" -le $((mem_rx + 1024)) ]
	[ "$(rss "$HB_PID")" -le $((mem_hb + 1024)) ]
	[ "$(timeout 10 "$PY" "$FAKE" counter "$TAB" 0)" = 0 ] # malformed
}
