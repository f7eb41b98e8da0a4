#!/usr/bin/env bats
# tamper.bats - issue 29: a keyless relay on the tcp data path between two
# hosts. Two network namespaces (as in netns.bats): the prefill side
# (kv-up --role prefill) in A, the decode side in B, one kv-bench in B
# driving both through the run directories' ipc sockets (as netns.bats's
# fault cases), so the only network path is the data port's, A to B.
# tests/peers/tamper.py listens in B and forwards to the decode's data
# port; an nft rule in B (prerouting: only what arrives from A) redirects
# A's connections to the data port to it, so every batch crosses the relay
# and the relay's own connection to the sink (B to B, no prerouting)
# reaches the real port. Each case has the relay tamper with every Nth
# batch in one way, and wants: every room terminal, corrupt=0 (kv-bench
# --verify), the relay really tampered (its state file), the tampering
# counted (kv-stat: integrity_failed, redials, resent) and warned of, and
# rooms that did not succeed failed with reason `integrity`. A control
# case (the relay changing nothing) wants every room to succeed and
# nothing counted. At e31ad33 (tcp v3, an unkeyed hash over the payload
# only) every tampering case ended with corrupt > 0 (the commit that
# added this file has the figures).

load helpers

SHAPE="--layers 2 --pages 512 --heads 8 --head-dim 16 --aux-slots 64"
TAMPER=("$PY" "$BATS_TEST_DIRNAME/../peers/tamper.py")

setup() {
	kvw_setup
	[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
	NSA=kvta$$ NSB=kvtb$$ VA=kta$$ VB=ktb$$
	ip netns add "$NSA" 2>/dev/null || skip "ip netns does not work here"
	ip netns add "$NSB"
	ip link add "$VA" netns "$NSA" type veth peer name "$VB" netns "$NSB"
	nsA ip link set lo up
	nsB ip link set lo up
	nsA ip addr add 10.202.0.1/30 dev "$VA"
	nsB ip addr add 10.202.0.2/30 dev "$VB"
	nsA ip link set "$VA" up
	nsB ip link set "$VB" up
	wait_for 10 link_up
	mkdir -p "$RUN/p" "$RUN/d"
}

teardown() {
	if [ -n "${NSA:-}" ]; then
		[ -d "$RUN/p/pids" ] && nsA timeout 30 "$KVW_ROOT/bin/kv-up" --stop "$RUN/p" >/dev/null 2>&1
		[ -d "$RUN/d/pids" ] && nsB timeout 30 "$KVW_ROOT/bin/kv-up" --stop "$RUN/d" >/dev/null 2>&1
		[ -f "$RUN/relay.log" ] && tail -n 20 "$RUN/relay.log" >&2
		ip netns del "$NSA" 2>/dev/null
		ip netns del "$NSB" 2>/dev/null
	fi
	kvw_teardown
}

nsA() { ip netns exec "$NSA" "$@"; }
nsB() { ip netns exec "$NSB" "$@"; }
link_up() {
	nsA ip -br link show "$VA" | grep -q ' UP ' &&
		nsB ip -br link show "$VB" | grep -q ' UP '
}

# split ARGS...: the prefill side in A, the decode side in B, both with the
# group's keys and ARGS, and $RUN/endpoints listing both for kv-bench.
split() {
	"$KVW_BIN/kv-keygen" "$RUN/keys" >/dev/null
	# Not about failure detection: the calm heartbeat (helpers.bash).
	nsA timeout 60 "$KVW_ROOT/bin/kv-up" --daemon --run-dir "$RUN/p" \
		--role prefill --advertise 10.202.0.1 --transport tcp \
		$KVW_CALM_HB --keys "$RUN/keys" "$@" || {
		tail -n 20 "$RUN"/p/logs/*.log >&2; return 1; }
	nsB timeout 60 "$KVW_ROOT/bin/kv-up" --daemon --run-dir "$RUN/d" \
		--role decode --advertise 10.202.0.2 --transport tcp \
		--bootstrap tcp://10.202.0.1:17000 $KVW_CALM_HB --keys "$RUN/keys" \
		"$@" || {
		tail -n 20 "$RUN"/d/logs/*.log >&2; return 1; }
	{
		grep -v '^shape=' "$RUN/p/endpoints"
		grep -v -e '^member=bootstrap' -e '^shape=' "$RUN/d/endpoints"
		grep '^shape=' "$RUN/p/endpoints"
	} >"$RUN/endpoints"
}

# relay MODE ARGS...: tamper.py in B between A and the decode's data port,
# tampering as MODE says (ARGS: more of its flags), and the nft rule that
# puts it on the path. No connection from A to the data port may exist
# yet (one made before the rule would pass it by).
relay() {
	DP=$(grep -o 'data port 10.202.0.2:[0-9]*' "$RUN/d/logs/d0.log" | head -n 1 | cut -d' ' -f3)
	[ -n "$DP" ]
	[ -z "$(nsA ss -Htn state established dst "$DP")" ]
	start_ready relay 600 ip netns exec "$NSB" "${TAMPER[@]}" \
		--listen 10.202.0.2:0 --to "$DP" --mode "$@" \
		--state "$RUN/tamper.state" --port-file "$RUN/tamper.port"
	nsB nft add table ip kvwtamper
	nsB nft add chain ip kvwtamper pre '{ type nat hook prerouting priority -100 ; }' ||
		skip "nft nat does not work here"
	nsB nft add rule ip kvwtamper pre ip saddr 10.202.0.1 tcp dport "${DP##*:}" \
		redirect to :"$(cat "$RUN/tamper.port")"
}

# relayed KEY: a value of the relay's state line (tampered= batches= ...).
relayed() { tr ' ' '\n' <"$RUN/tamper.state" | sed -n "s/^$1=//p"; }

bench() {
	run nsB timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN" "$@"
	echo "$output"
}

# sec SIDE NAME: a security counter (kv-stat's .security) summed over
# SIDE's (p or d) tables; a counter kv-stat does not show counts 0.
sec() {
	timeout 10 "$KVW_BIN/kv-stat" --run-dir "$RUN/$1" --json |
		jq --arg k "$2" '[.tables[].security[$k] // 0] | add // 0'
}

# failed_by SIDE REASON: SIDE's rooms failed with REASON (kv-stat --prom),
# or with any other reason when REASON is "!integrity".
failed_by() {
	timeout 10 "$KVW_BIN/kv-stat" --run-dir "$RUN/$1" --prom |
		awk -v r="$2" '/^kvwire_failed_rooms_total\{/ {
			n = $0; sub(/.*reason="/, "", n); sub(/".*/, "", n)
			if (r == "!integrity" ? n != "integrity" : n == r) s += $NF
		} END { print s + 0 }'
}

# counters: what both sides counted, for the test's output.
counters() {
	for side in p d; do
		echo "$side: $(timeout 10 "$KVW_BIN/kv-stat" --run-dir "$RUN/$side" --json |
			jq -c '[.tables[] | {name, security}]')"
		timeout 10 "$KVW_BIN/kv-stat" --run-dir "$RUN/$side" --prom |
			grep '^kvwire_failed_rooms_total' | grep -v ' 0$' || true
	done
}

# tampered_case MODE ROOMS ARGS...: a group, the relay in MODE (ARGS: its
# flags), ROOMS verified rooms through it, and the checks every case
# shares: every room terminal and intact, the relay tampered, each
# connection it tampered on caught (integrity_failed) and warned of, the
# batches resent on a new connection, and the rooms that did not succeed
# failed with reason `integrity`.
tampered_case() {
	local mode=$1 rooms=$2 warned
	shift 2
	split --workers 2 $SHAPE
	relay "$mode" "$@"
	bench --rooms "$rooms" --pages-per-room 8 --chunk-pages 3 --verify
	cat "$RUN/tamper.state"
	counters
	# Every batch crossed the relay, framed as the relay expected, and it
	# did tamper.
	[ "$(relayed conns)" -ge 1 ]
	[ "$(relayed batches)" -ge "$rooms" ]
	[ "$(relayed hash_bad)" = 0 ]
	[ "$(relayed bad_frames)" = 0 ]
	[ "$(relayed tampered)" -ge 1 ]
	clean "$rooms"
	[ "$(($(summary success) + $(summary failed)))" = "$rooms" ]
	[ "$(($(sec p integrity_failed) + $(sec d integrity_failed)))" -ge "$(relayed tampered_conns)" ]
	# ... and warned of, naming the other end (the sink sees the relay's
	# address, the prefill side the decode's: both 10.202.0.2), besides
	# the redial's own warning.
	warned=$(grep -h ' warn: .*10\.202\.0\.2:' "$RUN"/p/logs/*.log "$RUN"/d/logs/*.log |
		grep -v 're-dialled' || true)
	echo "$warned" | head -n 3
	[ -n "$warned" ]
	[ "$(sec p redials)" -ge 1 ]
	[ "$(sec p resent)" -ge 1 ]
	[ "$(failed_by d integrity)" = "$(summary failed)" ]
	[ "$(failed_by d '!integrity')" = 0 ]
}

@test "tamper: a relay that changes nothing: every room succeeds, nothing counted" {
	split --workers 2 $SHAPE
	relay none
	bench --rooms 1000 --pages-per-room 8 --chunk-pages 3 --verify
	cat "$RUN/tamper.state"
	counters
	[ "$status" -eq 0 ]
	clean 1000
	[ "$(summary success)" = 1000 ]
	[ "$(relayed batches)" -ge 1000 ]
	[ "$(relayed hash_bad)" = 0 ]
	[ "$(relayed bad_frames)" = 0 ]
	[ "$(($(sec p integrity_failed) + $(sec d integrity_failed)))" = 0 ]
}

@test "tamper: payload rewritten and the unkeyed hash recomputed: caught, corrupt=0" {
	tampered_case payload 2000 --every 50
}

@test "tamper: one bit flipped in a copy list: caught, corrupt=0" {
	tampered_case copybit 2000 --every 50
}

@test "tamper: two copies' destinations swapped: caught, corrupt=0" {
	tampered_case swap 2000 --every 50
}

@test "tamper: an earlier batch replayed later under a live room's id: caught, corrupt=0" {
	tampered_case replay 2000 --every 50 --lag 300 --retarget
}

@test "tamper: a copy count rewritten to 2^32-1: refused on its header before any allocation, caught, corrupt=0" {
	# The count sizes the copy list the sink reads before the head tag
	# that covers it: the sink must refuse it by its cap, as tampering,
	# not try to allocate 64 GiB for it (which fails as "out of memory",
	# a BAD answer and a room failed for another reason).
	tampered_case count 2000 --every 50
	grep -h 'copy count over the cap' "$RUN"/d/logs/*.log | head -n 1
	[ -n "$(grep -h 'copy count over the cap' "$RUN"/d/logs/*.log)" ]
	[ -z "$(grep -h 'out of memory for a copy list' "$RUN"/d/logs/*.log)" ]
}

@test "tamper: one batch dropped (its ACK forged): caught, corrupt=0" {
	tampered_case drop 2000 --every 500 --max 1
}

@test "tamper: every batch rewritten on the first 10 connections: the first batch's room fails with reason integrity, the others succeed, corrupt=0" {
	# A batch fails its room once it failed integrity on 3 connections
	# (the sink's INTEGRITY ACK reaches the client: it closes with a FIN
	# behind it, reading and dropping the rest) or went unanswered on 8
	# (a cut, whatever its cause), so on 10 tampered connections the
	# first batch cannot get through either way; its failure is
	# integrity (tampered_case checks every failed room's reason).
	tampered_case payload 1000 --every 1 --first-conns 10
	[ "$(relayed tampered_conns)" = 10 ]
	[ "$(summary failed)" -ge 1 ]
}
