#!/usr/bin/env bats
# The measures in the room tables, as operators read them: after a known
# kv-bench run, `kv-stat --prom` counts equal the run's summary (rooms by
# state, bytes), the histograms count every room, promtool accepts the
# text, `kv-stat --serve` answers the same over HTTP, aborted rooms are
# counted by reason with their drain times, and the counters do not go
# back when members restart (kill -9 of the sender, of a worker).

load helpers

setup() { kvw_setup; }
teardown() { kvw_teardown; }

TINY=(--layers 8 --page-tokens 1 --heads 1 --head-dim 64 --pages 256 --aux-slots 64)

# metric NAME LABELS: the value of one sample of `kv-stat --prom`.
metric() {
	kv-stat --prom --run-dir "$RUN" |
		awk -v k="$1{$2}" '$1 == k { print $2; found = 1 } END { exit !found }'
}

# bench ROOMS: a kv-bench rooms run of ROOMS + 5 latency rooms + 5 warm-up
# rooms, all of which must succeed; prints the payload bytes per room.
bench() {
	local out
	out=$(timeout 120 kv-bench rooms --run-dir "$RUN" --rooms "$1" \
		--concurrency 4 --latency-rooms 5 --rtt 20 --warmup 5)
	[[ $out == *"rate run: rooms=$1 success=$1 failed=0"*"latency run: rooms=5 success=5 failed=0"*"warm-up: rooms=5 success=5"* ]] || {
		echo "$out" >&2
		return 1
	}
	echo "$out" | sed -n 's/.* \([0-9][0-9]*\) payload bytes per room.*/\1/p'
}

@test "kv-stat --prom after a known run: rooms, bytes and histogram counts equal the run; promtool passes" {
	command -v promtool >/dev/null || skip "promtool (Debian prometheus) not installed"
	kv_up --workers 2 "${TINY[@]}"
	per_room=$(bench 30)
	[ -n "$per_room" ]
	total=40
	for t in p0 d0; do
		[ "$(metric kvwire_rooms_entered_total "table=\"$t\",state=\"success\"")" = $total ]
		[ "$(metric kvwire_rooms_entered_total "table=\"$t\",state=\"cleared\"")" = $total ]
		[ "$(metric kvwire_rooms_entered_total "table=\"$t\",state=\"failed\"")" = 0 ]
		[ "$(metric kvwire_rooms_inserted_total "table=\"$t\"")" = $total ]
		for st in bootstrapping waiting transferring; do
			[ "$(metric kvwire_rooms "table=\"$t\",state=\"$st\"")" = 0 ]
		done
		[ "$(metric kvwire_transfer_latency_seconds_count "table=\"$t\"")" = $total ]
		[ "$(metric kvwire_transfer_latency_seconds_bucket "table=\"$t\",le=\"+Inf\"")" = $total ]
		[ "$(metric kvwire_bootstrap_latency_seconds_count "table=\"$t\"")" = $total ]
	done
	[ "$(metric kvwire_transferred_bytes_total 'table="p0"')" = $((total * per_room)) ]
	[ "$(metric kvwire_peers 'table="d0",liveness="alive"')" = 1 ]
	kv-stat --prom --run-dir "$RUN" >"$RUN/metrics.txt"
	run promtool check metrics <"$RUN/metrics.txt"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "aborted rooms: failures counted by reason, one abort drain per aborted room, every room counted once" {
	kv_up --workers 2 "${TINY[@]}"
	run timeout 120 kv-bench demo --run-dir "$RUN" --rooms 60 --pages-per-room 2 \
		--chunk-pages 1 --abort-frac 0.5 --seed 7
	[ "$status" -eq 0 ]
	aborted=$(echo "$output" | sed -n 's/.* aborted=\([0-9]*\) .*/\1/p')
	[ "$aborted" -ge 1 ]
	ok=$(metric kvwire_rooms_entered_total 'table="d0",state="success"')
	failed=$(metric kvwire_rooms_entered_total 'table="d0",state="failed"')
	by_abort=$(metric kvwire_failed_rooms_total 'table="d0",reason="aborted"')
	[ $((ok + failed)) -eq 60 ]
	[ "$by_abort" -eq "$failed" ]
	[ "$by_abort" -ge 1 ] && [ "$by_abort" -le "$aborted" ]
	[ "$(metric kvwire_failed_rooms_total 'table="d0",reason="timeout"')" = 0 ]
	# Each room failed by its abort became releasable once: one drain.
	[ "$(metric kvwire_abort_drain_seconds_count 'table="d0"')" = "$by_abort" ]
	[ "$(metric kvwire_abort_drain_seconds_bucket 'table="d0",le="+Inf"')" = "$by_abort" ]
	[ "$(metric kvwire_transfer_latency_seconds_count 'table="d0"')" = "$ok" ]
}

@test "kv-stat --serve: GET /metrics over HTTP equals --prom, on loopback; other paths 404" {
	command -v curl >/dev/null || skip "curl not installed"
	kv_up --workers 1 "${TINY[@]}"
	bench 10 >/dev/null
	timeout 60 kv-stat --serve 0 --run-dir "$RUN" >"$RUN/serve.out" 2>&1 &
	echo $! >>"$RUN/bg.pids"
	wait_for 10 grep -q '^kv-stat: serving http://127.0.0.1:[0-9]*/metrics$' "$RUN/serve.out"
	url=$(sed -n 's/^kv-stat: serving //p' "$RUN/serve.out")
	curl -sf "$url" >"$RUN/http.txt"
	kv-stat --prom --run-dir "$RUN" >"$RUN/prom.txt"
	diff "$RUN/prom.txt" "$RUN/http.txt"
	grep -q '^kvwire_rooms_entered_total{table="p0",state="success"} 20$' "$RUN/http.txt"
	[ "$(curl -s -o /dev/null -w '%{http_code}' "${url%/metrics}/other")" = 404 ]
}

# d0_knows_p0: decode's peer table holds the epoch p0's table records as
# its owner's (the restarted sender answered a heartbeat).
d0_knows_p0() {
	local j e
	j=$(kv-stat --run-dir "$RUN" --json)
	e=$(jq -r '.tables[] | select(.name == "p0") | .owner_epoch' <<<"$j")
	jq -e --arg e "$e" '.tables[] | select(.name == "d0") | .peers[] | select(.epoch == $e)' <<<"$j" >/dev/null
}

@test "counters do not go back across a kill -9 of a worker and of the sender" {
	kv_up --workers 2 --heartbeat-interval 0.2 "${TINY[@]}"
	bench 10 >/dev/null
	[ "$(metric kvwire_rooms_entered_total 'table="p0",state="success"')" = 20 ]
	[ "$(metric kvwire_worker_restarts_total 'table="p0"')" = 0 ]
	p0=$(cat "$RUN/pids/p0.pid")
	w=$(pgrep -P "$p0" | head -n 1)
	[ -n "$w" ]
	kill -KILL "$w"
	wait_for 30 sh -c "[ \"\$('$KVW_BIN/kv-stat' --prom --run-dir '$RUN' | awk '\$1 == \"kvwire_worker_restarts_total{table=\\\"p0\\\"}\" { print \$2 }')\" = 1 ]"
	kill -KILL "$p0"
	wait_for 30 sh -c "p=\$(cat '$RUN/pids/p0.pid'); [ \"\$p\" != $p0 ] && kill -0 \$p"
	wait_for 30 sh -c "'$KVW_BIN/kv-stat' --prom --run-dir '$RUN' | grep -qx 'kvwire_owner_restarts_total{table=\"p0\"} 1'"
	[ "$(metric kvwire_rooms_entered_total 'table="p0",state="success"')" = 20 ]
	wait_for 30 d0_knows_p0
	bench 10 >/dev/null
	[ "$(metric kvwire_rooms_entered_total 'table="p0",state="success"')" = 40 ]
	[ "$(metric kvwire_rooms_inserted_total 'table="p0"')" = 40 ]
	[ "$(metric kvwire_worker_restarts_total 'table="p0"')" -ge 1 ]
}

@test "kv-stat --watch: refreshes COUNT times with rooms, rates and peers; bad flags are usage errors" {
	kv_up --workers 1 "${TINY[@]}"
	bench 4 >/dev/null
	run timeout 20 kv-stat --watch 0.05 --count 2 --run-dir "$RUN"
	[ "$status" -eq 0 ]
	[ "$(grep -c '^kv-stat --watch: 2 tables' <<<"$output")" = 2 ]
	grep -Eq '^p0 +boot +0 .*clear +14 .*ok/s.*peers alive' <<<"$output"
	run kv-stat --watch 0.05 --prom --run-dir "$RUN"
	[ "$status" -eq 100 ]
	run kv-stat --count 2 --run-dir "$RUN"
	[ "$status" -eq 100 ]
	run kv-stat --serve nohost:1 --run-dir "$RUN"
	[ "$status" -eq 100 ]
}
