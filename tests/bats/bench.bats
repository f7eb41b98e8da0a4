#!/usr/bin/env bats
# kv-bench's modes run and print their figures beside the machine's limits
# (copy: memcpy; rooms: ZMQ ping-pong; demo: memcpy) and the machine line;
# --role runs one kv-bench per side of a loopback group over their link.
# Smoke tests only: no figure is compared with anything, so the suite does
# not depend on how fast or loaded the machine is.

load helpers

setup() { kvw_setup; }
teardown() {
	# The --netns case: namespaces a failed kv-bench left are removed.
	if [ -n "${NETNS_CASE:-}" ]; then
		for ns in $(ip netns list 2>/dev/null | awk '/^kvwbench/ { print $1 }'); do
			ip netns del "$ns"
		done
	fi
	kvw_teardown
}

TINY=(--layers 8 --page-tokens 1 --heads 1 --head-dim 64 --pages 256 --aux-slots 64)

@test "kv-bench copy: both patterns, the machine line, verified" {
	run timeout 60 kv-bench copy --mib 4 --seconds 0.01 --reps 1
	[ "$status" -eq 0 ]
	[[ $output == *"machine: cores="*"os_page="*"kv_page_bytes=4096"*"cpu="* ]]
	[[ $output == *"shm_GiB/s"*"memcpy_bef"*"memcpy_aft"*"ratio"* ]]
	echo "$output" | grep -Eq '^contiguous +65536 +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ yes$'
	echo "$output" | grep -Eq '^scattered +4096 +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ yes$'
	[[ $output != *" NO"* ]]
}

@test "kv-bench copy --json: one document with both limits and the ratio" {
	run timeout 60 kv-bench copy --json --mib 4 --seconds 0.01 --reps 1 \
		--pattern scattered --page-bytes 8192
	[ "$status" -eq 0 ]
	echo "$output" | $PY -c '
import json, sys
d = json.load(sys.stdin)
assert d["mode"] == "copy" and d["machine"]["cores"] >= 1, d
assert d["machine"]["kv_page_bytes"] == 8192, d
(r,) = d["results"]
assert r["pattern"] == "scattered" and r["copy_bytes"] == 8192, r
assert r["verified"] is True, r
for k in ("xport_gib_per_s", "memcpy_before", "memcpy_after", "ratio"):
    assert r[k] > 0, (k, r)
'
}

@test "kv-bench copy: a bad pattern is a usage error (100)" {
	run kv-bench copy --pattern diagonal
	[ "$status" -eq 100 ]
	[[ $output == *"kv-bench: fatal: bad --pattern"* ]]
}

@test "kv-bench rooms: rate and latency beside the ping-pong" {
	kv_up --workers 2 "${TINY[@]}"
	run timeout 120 kv-bench rooms --run-dir "$RUN" --rooms 60 \
		--concurrency 8 --latency-rooms 10 --rtt 50 --warmup 20 --hops
	[ "$status" -eq 0 ]
	[[ $output == *"machine: cores="* ]]
	[[ $output == *"rooms/s (concurrency 8)"* ]]
	[[ $output == *"room latency p50 us"*"room latency p99 us"*"room latency max us"* ]]
	[[ $output == *"ping-pong: before "*"after "* ]]
	[[ $output == *"rate run: rooms=60 success=60 "*"latency run: rooms=10 success=10 "*"warm-up: rooms=20 success=20"* ]]
	# --hops: the latency run's rooms split into the critical path's
	# hops, in order, and their total.
	[[ $output == *"hops (p50 / p99 us over "*" of 10 rooms"* ]]
	for h in recv-begin receiver xfer-info dispatch worker status seen total; do
		grep -Eq "^  $h +[0-9.]+ +[0-9.]+$" <<<"$output"
	done
	run kv-bench rooms --run-dir "$RUN" --hops --json
	[ "$status" -eq 100 ]
	[[ $output == *"--hops prints lines: not with --json"* ]]
}

@test "kv-bench rooms --json and demo over the same group; demo --no-reference leaves the limit out" {
	kv_up --workers 2 "${TINY[@]}"
	run timeout 120 kv-bench rooms --json --run-dir "$RUN" --rooms 40 \
		--latency-rooms 5 --rtt 20 --warmup 10
	[ "$status" -eq 0 ]
	echo "$output" | $PY -c '
import json, sys
d = json.load(sys.stdin)
assert d["mode"] == "rooms" and d["machine"]["kv_page_bytes"] == 128, d
assert d["rate_success"] == 40 and d["lat_success"] == 5, d
for k in ("rooms_per_s", "rtt_per_s", "rtt_us", "rate_ratio", "p50_us",
          "p99_us", "max_us", "p50_ratio", "p99_ratio"):
    assert d[k] > 0, (k, d)
'
	run env -u KVW_BENCH_NO_REFERENCE timeout 120 kv-bench demo \
		--run-dir "$RUN" --rooms 6 --pages-per-room 2 --chunk-pages 1 \
		--verify
	[ "$status" -eq 0 ]
	[[ $output == *"machine: cores="* ]]
	[[ $output == *"rooms=6 success=6 failed=0"*"gib_per_s="* ]]
	[[ $output == *"demo GiB/s"*"1-core memcpy"* ]]
	# Issue 35: the all-core limit beside it, one thread per core (the
	# cores of the machine line).
	[[ $output =~ machine:\ cores=([0-9]+) ]]
	cores=${BASH_REMATCH[1]}
	[[ $output == *"demo GiB/s vs all cores"*"(limit: all-core memcpy GiB/s, $cores threads, before "* ]]
	# ...and the stricter one: the streaming copy the shm transport makes.
	[[ $output =~ demo\ GiB/s\ vs\ all\ cores,\ streaming\ +[0-9.]+\ +[0-9]*[1-9][0-9]*\.[0-9]+\ +[0-9.]+\ +\(limit:\ all-core\ streaming-store\ copy\ GiB/s,\ $cores\ threads ]]
	# --no-reference: the same rooms, the limit left out, said so.
	run env -u KVW_BENCH_NO_REFERENCE timeout 120 kv-bench demo \
		--run-dir "$RUN" --rooms 6 --pages-per-room 2 --chunk-pages 1 \
		--verify --no-reference --json
	[ "$status" -eq 0 ]
	echo "$output" | $PY -c '
import json, sys
d = json.load(sys.stdin)
assert d["success"] == 6 and d["gib_per_s"] > 0, d
for k in ("memcpy_gib_per_s", "memcpy_before", "memcpy_after", "ratio",
          "memcpy_all_gib_per_s", "memcpy_all_threads", "ratio_all",
          "streaming_all_gib_per_s", "ratio_streaming_all"):
    assert d[k] is None, (k, d)
'
}

@test "kv-bench demo --spawn --transport tcp: a raw loopback tcp stream beside the memcpy limits, before and after" {
	run env -u KVW_BENCH_NO_REFERENCE timeout 180 kv-bench demo --spawn \
		--transport tcp --rooms 6 --pages-per-room 2 --chunk-pages 1 --verify
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output == *"rooms=6 success=6 failed=0"* ]]
	[[ $output =~ demo\ GiB/s\ vs\ a\ tcp\ stream\ +[0-9.]+\ +[0-9.]+\ +[0-9.]+\ +\(limit:\ raw\ loopback\ tcp\ stream\ GiB/s,\ before\ [0-9.]+\ after\ [0-9.]+\) ]]
	# The decode's tcp sink is followed as a process of its own.
	[[ $output =~ cpu\ sinks\ \(1\)\ +[0-9.]+\ s ]]
	# Over shm there is no stream to compare with.
	run env -u KVW_BENCH_NO_REFERENCE timeout 180 kv-bench demo --spawn \
		--rooms 6 --pages-per-room 2 --chunk-pages 1 --json
	[ "$status" -eq 0 ]
	echo "$output" | $PY -c '
import json, sys
d = json.load(sys.stdin)
assert d["stream_gib_per_s"] is None and d["ratio_all"] > 0, d
assert d["streaming_all_gib_per_s"] > 0 and d["ratio_streaming_all"] > 0, d
'
}

@test "kv-bench demo: the CPU seconds of every kind of group process over the run (issue 35), per GiB moved" {
	# 3 GiB on shm: the four workers copy all of it, so their CPU cannot
	# round to nothing; what the others use is only checked for form.
	run env KVW_BENCH_NO_REFERENCE=1 timeout 300 kv-bench demo --spawn \
		--no-fill --rooms 64 --pages-per-room 24 --chunk-pages 5 \
		--concurrency 8 --json
	echo "$output"
	[ "$status" -eq 0 ]
	echo "$output" | $PY -c '
import json, sys
d = json.load(sys.stdin)
assert d["success"] == 64, d
c, gib = d["cpu"], d["bytes"] / 2**30
procs = {"kv-sender": 1, "workers": 4, "kv-receiver": 1, "sinks": 0,
         "kv-bootstrap": 1, "kv-heartbeat": 2, "kv-bench": 1}
for k, n in procs.items():
    assert c[k]["procs"] == n and c[k]["s"] >= 0, (k, c)
    assert abs(c[k]["s_per_gib"] - c[k]["s"] / gib) < 1e-3, (k, c)
assert c["workers"]["s"] > 0, c
assert abs(c["all"]["s"] - sum(c[k]["s"] for k in procs)) < 0.01, c
'
	run env KVW_BENCH_NO_REFERENCE=1 timeout 300 kv-bench demo --spawn \
		--no-fill --rooms 4 --pages-per-room 2 --chunk-pages 1
	[ "$status" -eq 0 ]
	[[ $output =~ cpu\ workers\ \(4\)\ +[0-9.]+\ s\ +[0-9.]+\ s/GiB ]]
	[[ $output == *"cpu all"*"s/GiB"* ]]
}

@test "kv-bench demo --netns: the group split over two namespaces it makes (prefill in one, decode in the other), the stream from one to the other; both removed after" {
	[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
	ip netns add "kvwprobe$$" 2>/dev/null || skip "ip netns does not work here"
	ip netns del "kvwprobe$$"
	NETNS_CASE=1
	run env -u KVW_BENCH_NO_REFERENCE timeout 300 kv-bench demo --spawn \
		--transport tcp --netns --rooms 6 --pages-per-room 2 \
		--chunk-pages 1 --verify
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output == *"rooms=6 success=6 failed=0"* ]]
	[[ $output == *"corrupt=0"* ]]
	[[ $output =~ demo\ GiB/s\ vs\ a\ tcp\ stream\ +[0-9.]+\ +([0-9.]+)\ +[0-9.]+\ +\(limit:\ raw\ A-to-B\ \(namespaces\)\ tcp\ stream\ GiB/s ]]
	# The stream ran: a limit above zero.
	awk -v x="${BASH_REMATCH[1]}" 'BEGIN { exit !(x > 0) }'
	# Nothing of it is left: its namespaces are gone.
	[ -z "$(ip netns list | grep '^kvwbench')" ]
	# --netns is a demo with its own tcp group.
	run kv-bench demo --netns --rooms 1
	[ "$status" -eq 100 ]
	[[ $output == *"--netns starts its own group"* ]]
	run kv-bench demo --spawn --netns --rooms 1
	[ "$status" -eq 100 ]
	[[ $output == *"with --transport tcp"* ]]
	run kv-bench rooms --spawn --netns
	[ "$status" -eq 100 ]
}

# pool_zero MEMBER: the member's pool file holds only zero bytes.
pool_zero() {
	local pool
	pool=$(sed -n "s/^member=$1 .* pool=\([^ ]*\).*/\1/p" "$RUN/endpoints")
	[ -n "$pool" ] && cmp -s -n "$(stat -c %s "$pool")" "$pool" /dev/zero
}

@test "kv-bench demo --no-fill: the prefill engines leave their pages unwritten (both pools stay zero); without it they write them; not with --verify" {
	kv_up "${TINY[@]}"
	run timeout 120 kv-bench --run-dir "$RUN" --no-fill --no-reference \
		--rooms 8 --pages-per-room 2 --chunk-pages 1
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output == *"rooms=8 success=8 failed=0"* ]]
	pool_zero p0
	pool_zero d0
	run timeout 120 kv-bench --run-dir "$RUN" --no-reference --rooms 8 \
		--pages-per-room 2 --chunk-pages 1
	[ "$status" -eq 0 ]
	refute pool_zero p0
	refute pool_zero d0
	run kv-bench --run-dir "$RUN" --no-fill --verify --rooms 1
	[ "$status" -eq 100 ]
	[[ $output == *"nothing to --verify"* ]]
}

@test "kv-bench rooms --spawn: starts its own tiny-room group" {
	run timeout 180 kv-bench rooms --spawn --up-arg --workers --up-arg 2 \
		--rooms 30 --concurrency 4 --latency-rooms 5 --rtt 20 --warmup 10
	[ "$status" -eq 0 ]
	[[ $output == *"rooms: 64 layers, 1 page(s) per room"* ]]
	[[ $output == *"rate run: rooms=30 success=30 "* ]]
}

@test "kv-bench --engine-memory: the engines' own allocations registered in place, TP 2 -> 1 on shm and 1 -> 1 on tcp, every byte checked" {
	# The pattern is written and checked through kvw_pool_base, which
	# shows the engines' allocations once registered; the workers and
	# the sink reach them only by laying them over their pool mappings
	# (the pool's own pages under them are given back, so a copy that
	# missed them reads or leaves zeros: corrupt).
	run timeout 180 kv-bench --spawn --engine-memory --verify --rooms 24 \
		--prefill-tp 2 --decode-tp 1
	[ "$status" -eq 0 ]
	[[ $output == *"rooms=24 success=24 failed=0 aborted=0 stuck=0 corrupt=0 "* ]]
	run timeout 180 kv-bench --spawn --transport tcp --engine-memory \
		--verify --rooms 24
	[ "$status" -eq 0 ]
	[[ $output == *"rooms=24 success=24 failed=0 aborted=0 stuck=0 corrupt=0 "* ]]
}

@test "kv-bench rooms --spawn --auth-cost: a group with keys, then one with --insecure, and the ratio" {
	# Its two groups' control ports from a free block (kv-bench's own
	# 27400 and 27500 collide with a parallel file or another checkout):
	# B.., then B+100.., each with ranks at +512.
	pb=$(free_port_base 700)
	run timeout 300 kv-bench rooms --spawn --auth-cost --port-base "$pb" \
		--up-arg --workers --up-arg 1 --rooms 30 --concurrency 4 --latency-rooms 5 --rtt 20 --warmup 10
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output == *"auth cost: group with keys (CURVE)"* ]]
	[[ $output == *"auth cost: group with --insecure"* ]]
	[ "$(grep -c "rate run: rooms=30 success=30 " <<<"$output")" -eq 2 ]
	[[ $output =~ "auth cost: rooms/s with keys "[0-9.]+", with --insecure "[0-9.]+", ratio "[0-9.]+ ]]
	# Without --spawn there is no group of its own to vary: usage.
	run kv-bench rooms --auth-cost --run-dir "$RUN"
	[ "$status" -eq 100 ]
	# --port-base is its groups' ports: one held by a listener here
	# stops the first group from starting. SO_REUSEADDR: the first run's
	# group closed its connections to that port a moment ago, and one
	# left in TIME_WAIT refuses a plain bind ("Address already in use",
	# seen once with three bats jobs); a live listener still refuses it.
	"$PY" -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
print("listening", flush=True); time.sleep(120)' "$pb" >"$RUN/hold.out" &
	echo "$!" >>"$RUN/bg.pids"
	wait_for 10 grep -q listening "$RUN/hold.out"
	run env TMPDIR="$RUN" timeout 120 kv-bench rooms --spawn --auth-cost \
		--port-base "$pb" --up-arg --workers --up-arg 1 \
		--rooms 30 --concurrency 4 --latency-rooms 5 --rtt 20 --warmup 10
	echo "$output"
	[ "$status" -ne 0 ]
	# The group that failed keeps its logs under $TMPDIR (the test's
	# own directory), not in /tmp.
	[[ $output == *"(logs kept in $RUN/kvw-bench."* ]]
	# (the --insecure group at the base + 100 still runs)
	[ "$(grep -c "rate run: rooms=30 success=30 " <<<"$output")" -eq 1 ]
	# Without --auth-cost, --port-base is a usage error.
	run kv-bench rooms --spawn --port-base "$pb"
	[ "$status" -eq 100 ]
}

@test "kv-bench tcp --auth both: each case without and with the data key, verified, and the ratio" {
	run timeout 120 kv-bench tcp --auth both --mib 4 --seconds 0.02 --reps 1
	[ "$status" -eq 0 ]
	for c in 4KiB-scattered 64KiB 1MiB; do
		grep -q "^$c+auth .* yes$" <<<"$output"
		grep -Eq "^$c +auth/insecure tcp GiB/s ratio [0-9.]+$" <<<"$output"
	done
	run kv-bench tcp --auth maybe
	[ "$status" -eq 100 ]
}

@test "kv-bench: --latency-rooms outside rooms mode is a usage error" {
	run kv-bench copy --latency-rooms 3
	[ "$status" -eq 100 ]
	run kv-bench --spawn --rtt 5
	[ "$status" -eq 100 ]
}

# free_port: a loopback port nothing listens on (a moment ago).
free_port() {
	$PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# role_pair PREFILL_ARGS -- DECODE_ARGS: kv-bench --role prefill in the
# background (output in $RUN/p.out, exit status in $PRC) and --role
# decode in the foreground (run), over one loopback link.
role_pair() {
	local pa=() port
	while [ "$1" != -- ]; do pa+=("$1"); shift; done
	shift
	port=$(free_port)
	timeout 120 kv-bench --run-dir "$RUN" --role prefill \
		--peer "tcp://127.0.0.1:$port" --insecure "${pa[@]}" >"$RUN/p.out" 2>&1 &
	local pb=$!
	echo "$pb" >>"$RUN/bg.pids"
	run timeout 120 kv-bench --run-dir "$RUN" --role decode \
		--peer "tcp://127.0.0.1:$port" --insecure "$@"
	PRC=0
	wait "$pb" || PRC=$?
	echo "$output"
	cat "$RUN/p.out"
}

@test "kv-bench --role prefill|decode: one per side over a loopback link, byte-exact, both print the decode side's count" {
	kv_up --workers 2 "${TINY[@]}"
	w=(--rooms 50 --pages-per-room 4 --chunk-pages 3 --verify)
	role_pair "${w[@]}" -- "${w[@]}"
	[ "$status" -eq 0 ]
	[ "$PRC" -eq 0 ]
	[[ $output == *"rooms=50 success=50 failed=0 aborted=0 stuck=0 corrupt=0"* ]]
	grep -q "^rooms=50 success=50 failed=0 aborted=0 stuck=0 corrupt=0" "$RUN/p.out"
}

@test "kv-bench --role: two sides with another workload refuse each other; --role needs --peer and no --abort-frac" {
	kv_up --workers 2 "${TINY[@]}"
	role_pair --rooms 50 --verify -- --rooms 51 --verify
	[ "$status" -ne 0 ]
	[ "$PRC" -ne 0 ]
	[[ $output == *"runs another workload"* ]]
	grep -q "runs another workload" "$RUN/p.out"
	run kv-bench --run-dir "$RUN" --role decode
	[ "$status" -eq 100 ]
	run kv-bench --run-dir "$RUN" --role decode --peer tcp://127.0.0.1:1 --abort-frac 0.5
	[ "$status" -eq 100 ]
}

@test "kv-bench --role: the prefill side stopped by SIGTERM tells the decode side, which stops at once" {
	kv_up --workers 2 "${TINY[@]}"
	port=$(free_port)
	w=(--peer "tcp://127.0.0.1:$port" --insecure --rooms 10000000 --verify)
	timeout 120 kv-bench --run-dir "$RUN" --role prefill "${w[@]}" >"$RUN/p.out" 2>&1 &
	pb=$!
	timeout 120 kv-bench --run-dir "$RUN" --role decode "${w[@]}" >"$RUN/d.out" 2>&1 &
	db=$!
	echo "$pb $db" >>"$RUN/bg.pids"
	link_up() { ss -Htn state established "( sport = :$port )" | grep -q .; }
	wait_for 30 link_up
	kill -TERM "$pb"
	# The verdict is what the decode side says, not how soon: told, it
	# ends with the prefill side's reason; never told, it would end after
	# 30 s of silence saying so. (A 15 s bound here failed once on a
	# machine running a clang build beside the loaded suite.)
	wait_for 60 gone "$db"
	# The prefill side tells the decode side before it writes its own
	# last line: its output is whole only once it is gone too.
	wait_for 60 gone "$pb"
	cat "$RUN/p.out" "$RUN/d.out"
	grep -q "kv-bench ended: .*stopped by a signal" "$RUN/d.out"
	refute grep -q "has been silent" "$RUN/d.out"
	grep -q "stopped by a signal" "$RUN/p.out"
}

@test "kv-bench --role prefill: a SEND_BEGIN right behind the hello PING is begun, not dropped" {
	# The decode side sends its first SEND_BEGIN as soon as the PONG
	# reaches it; a prefill side that read one message past the hello
	# dropped it, and that room stayed stuck to its deadline (seen once
	# in netns.bats: 1 of 2,000 rooms stuck). kvwfake.py plays the
	# decode side and sends both at once. First it learns the prefill
	# side's workload digest (the PONG carries it; a wrong one ends that
	# run), then it sends the right one and SEND_BEGIN of room 777.
	kv_up --workers 2 "${TINY[@]}"
	port=$(free_port)
	w=(--run-dir "$RUN" --role prefill --peer "tcp://127.0.0.1:$port" --insecure --rooms 5)
	FAKE=("$PY" "$BATS_TEST_DIRNAME/../peers/kvwfake.py" benchlink "tcp://127.0.0.1:$port")
	timeout 60 kv-bench "${w[@]}" >"$RUN/p1.out" 2>&1 &
	echo "$!" >>"$RUN/bg.pids"
	digest=$(timeout 60 "${FAKE[@]}" 0 777 16 | sed -n 's/^digest=//p')
	[ -n "$digest" ]
	wait_for 30 gone "$(tail -n 1 "$RUN/bg.pids")"
	grep -q "runs another workload" "$RUN/p1.out"
	timeout 60 kv-bench "${w[@]}" >"$RUN/p2.out" 2>&1 &
	echo "$!" >>"$RUN/bg.pids"
	timeout 60 "${FAKE[@]}" "$digest" 777 16 >"$RUN/fake.out" &
	echo "$!" >>"$RUN/bg.pids"
	begun() { "$KVW_BIN/kv-stat" --run-dir "$RUN" --room 777 >/dev/null; }
	wait_for 30 begun
	"$KVW_BIN/kv-stat" --run-dir "$RUN" --room 777
}

@test "kv-bench --record appends each figure's ratio with the commit; kv-bench history prints them and draws them" {
	# Issue 35 item 4: a regression is seen at a glance.
	export KVW_BENCH_HISTORY="$RUN/history.csv"
	cd "$KVW_ROOT"
	want=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
	for i in 1 2; do
		run timeout 120 kv-bench copy --record --reps 1
		[ "$status" -eq 0 ]
	done
	run cat "$KVW_BENCH_HISTORY"
	echo "$output"
	[ "${lines[0]}" = "utc,commit,mode,figure,value,limit,ratio" ]
	[ "${#lines[@]}" -eq 5 ] # the header once, two figures a run
	[[ ${lines[1]} =~ ^[0-9-]+T[0-9:]+Z,$want,copy,shm-contiguous,[0-9.e+-]+,[0-9.e+-]+,[0-9.e+-]+$ ]]
	[[ ${lines[4]} =~ ,$want,copy,shm-scattered, ]]
	run kv-bench history
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output =~ copy\ shm-contiguous\ +2\ +[0-9.]+\ \($want\) ]]
	[[ $output =~ copy\ shm-scattered\ +2\  ]]
	if command -v gnuplot >/dev/null; then
		run kv-bench history "$KVW_BENCH_HISTORY" --plot "$RUN/h.png"
		[ "$status" -eq 0 ]
		[ -s "$RUN/h.png" ]
	fi
	# A ratio is better higher, a latency percentile lower: either way a
	# worse last run shows below 1.
	printf '%s\n' "utc,commit,mode,figure,value,limit,ratio" \
		"t,a1,rooms,rate,200,100,2.0" "t,a2,rooms,rate,300,100,3.0" \
		"t,a3,rooms,rate,150,100,1.5" "t,a1,rooms,p50,200,100,2.0" \
		"t,a2,rooms,p50,300,100,3.0" "not a record" >"$RUN/made.csv"
	run kv-bench history "$RUN/made.csv"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output =~ rooms\ rate\ +3\ +2\.000\ \(a1\)\ +1\.500\ \(a3\)\ +3\.000\ +0\.50 ]]
	[[ $output =~ rooms\ p50\ +2\ +2\.000\ \(a1\)\ +3\.000\ \(a2\)\ +2\.000\ +0\.67 ]]
	[[ $output == *"(1 lines that are not a record skipped)"* ]]
	run kv-bench history "$RUN/none.csv"
	[ "$status" -eq 100 ]
	[[ $output == *"history: $RUN/none.csv: No such file or directory"* ]]
}
