#!/usr/bin/env bats
# tcp.bats - the tcp transport on one host (loopback), real processes:
# kv-up --transport tcp starts a sink per decode rank that serves a data
# port; kv-bench --verify checks every byte of thousands of rooms (TP 1->1,
# TP 2->4 with a third of the rooms aborted and canary pages watched); a
# sink killed mid-run is restarted, the workers re-dial and resend what it
# had not acked, and every room succeeds; and hostile
# bytes at the data port (a wrong secret, garbage, 1,000 connections that
# never say hello) are refused, counted, and change nothing while the group
# keeps serving.

load helpers

SHAPE="--layers 2 --pages 512 --heads 8 --head-dim 16 --aux-slots 64"

setup() { kvw_setup; }
teardown() { kvw_teardown; }

bench() {
	run timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN" "$@"
	echo "$output"
}

# port_of MEMBER: the data port its sink serves (from its log).
port_of() {
	sed -n 's/.*data port 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$RUN/logs/$1.log" | tail -1
}

@test "tcp, TP 1 -> 1: kv-bench --verify moves 2000 rooms byte-exact through the sink" {
	kv_up --transport tcp --workers 2 $SHAPE
	bench --rooms 2000 --pages-per-room 8 --chunk-pages 3 --verify
	[ "$status" -eq 0 ]
	clean 2000
	[ "$(summary success)" = 2000 ]
	# The bytes went through the data port, not shared memory: the
	# sink says how many batches it wrote when it stops.
	timeout 60 "$KVW_ROOT/bin/kv-up" --stop "$RUN"
	grep -Eq "sink\[0\] info: stopping: [1-9][0-9]* connections, [1-9][0-9]* batches" "$RUN/logs/d0.log"
}

@test "tcp, TP 2 -> 4 with a third of the rooms aborted: every room terminal, no canary touched" {
	kv_up --transport tcp --workers 2 --prefill-tp 2 --decode-tp 4 $SHAPE
	bench --prefill-tp 2 --decode-tp 4 --rooms 400 --pages-per-room 8 \
		--chunk-pages 3 --verify --abort-frac 0.33
	clean 400
	[ "$(summary failed)" = 0 ]
	[ "$(summary aborted)" -gt 0 ]
}

@test "tcp: a sink killed with -9 mid-run is restarted and the unacked batches resent; every room succeeds" {
	kv_up --transport tcp --workers 2 $SHAPE --waiting-timeout 60 --bootstrap-timeout 60
	wait_for 20 grep -q "sink\[0\] info: serving" "$RUN/logs/d0.log"
	sink=$(pgrep -f -- "--sink-id 0 .*$(endpoint d0 table)")
	timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 600 \
		--pages-per-room 8 --chunk-pages 2 --verify >"$RUN/bench.out" 2>&1 &
	b=$!
	echo "$b" >>"$RUN/bg.pids"
	wait_for 30 grep -q "started (pid" "$RUN/logs/d0.log"
	kill -9 "$sink"
	wait_for 20 grep -q "sink 0 (pid $sink) killed by signal 9; restarting" "$RUN/logs/d0.log"
	rc=0
	wait "$b" || rc=$?
	output=$(cat "$RUN/bench.out")
	echo "$output"
	clean 600
	# The workers re-dialled and resent what the dead sink had not
	# acked: not one room was lost to the crash.
	[ "$(summary success)" = 600 ]
	bench --rooms 50 --pages-per-room 8 --verify
	[ "$status" -eq 0 ]
	clean 50
}

@test "tcp: a wrong secret and garbage at the data port are refused and counted; the group keeps serving" {
	kv_up --transport tcp --workers 1 $SHAPE
	wait_for 20 test -n "$(port_of d0)"
	port=$(port_of d0)
	before=$("$KVW_BIN/kv-stat" --run-dir "$RUN" --json | jq '[.tables[] | select(.name == "d0") | .counters.malformed] | add')
	"$PY" - "$port" <<'PYEOF'
import socket, struct, sys
port = int(sys.argv[1])
# A hello that does not answer the challenge: refused with a status, then
# closed.
s = socket.create_connection(("127.0.0.1", port))
ch = s.recv(24, socket.MSG_WAITALL)
assert len(ch) == 24 and struct.unpack("<I", ch[:4])[0] == 0x4354564B, ch
# v4: magic, version, flags, nonce_c 16, fingerprint 8, mac 32 (docs/TCP-V4.md)
s.sendall(struct.pack("<IHH", 0x4854564B, 4, 0) + b"\x00" * 56)
w = s.recv(48, socket.MSG_WAITALL)
assert len(w) == 48 and struct.unpack("<II", w[:8])[1] == 4, w
assert s.recv(1) == b""
s.close()
# Garbage: closed without a byte written.
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"\xa5" * 4096)
s.settimeout(5)
data = b""
while True:
    try:
        d = s.recv(100)
    except ConnectionResetError:  # closed with our garbage unread
        break
    if not d:
        break
    data += d
assert len(data) <= 24 + 48, data  # the challenge, maybe a refusal
s.close()
PYEOF
	wait_for 10 grep -q "data port handshake refused" "$RUN/logs/d0.log"
	after=$("$KVW_BIN/kv-stat" --run-dir "$RUN" --json | jq '[.tables[] | select(.name == "d0") | .counters.malformed] | add')
	[ "$((after - before))" -eq 2 ]
	bench --rooms 100 --pages-per-room 8 --verify
	[ "$status" -eq 0 ]
	clean 100
}

@test "tcp: 1,000 connections at once from one source that never say hello are closed (handshake slots), counted, while rooms keep moving" {
	kv_up --transport tcp --workers 1 $SHAPE
	wait_for 20 test -n "$(port_of d0)"
	port=$(port_of d0)
	before=$("$KVW_BIN/kv-stat" --run-dir "$RUN" --json | jq '[.tables[] | select(.name == "d0") | .counters.malformed] | add')
	# Held open in the background until the sink closes every one.
	"$PY" - "$port" >"$RUN/flood.out" 2>&1 <<'PYEOF' &
import socket, sys, select
port = int(sys.argv[1])
# From another loopback address than the workers': past 64 still in the
# handshake the sink closes the oldest, the rest wait out the handshake
# time (2 s).
socks = [socket.create_connection(("127.0.0.1", port),
                                  source_address=("127.0.0.2", 0))
         for _ in range(1000)]
print("open", len(socks), flush=True)
closed = 0
for s in socks:
    s.settimeout(30)
    try:
        while s.recv(64):  # the sink's challenge, then its close
            pass
        closed += 1
    except ConnectionResetError:
        closed += 1
print("closed", closed, flush=True)
PYEOF
	echo "$!" >>"$RUN/bg.pids"
	wait_for 20 grep -q "^open 1000" "$RUN/flood.out"
	bench --rooms 100 --pages-per-room 8 --verify
	[ "$status" -eq 0 ]
	clean 100
	wait_for 40 grep -q "^closed 1000" "$RUN/flood.out"
	grep -q "handshake slots full" "$RUN/logs/d0.log"
	after=$("$KVW_BIN/kv-stat" --run-dir "$RUN" --json | jq '[.tables[] | select(.name == "d0") | .counters.malformed] | add')
	[ "$((after - before))" -ge 1000 ]
}
