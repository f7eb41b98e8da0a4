#!/usr/bin/env bats
# wrongkeys.bats - wrong keys are loud (issue 29, item 5): a decode side
# started with keys other than the prefill side's is refused by kv-up at
# start (exit 100, the message saying the keys differ, with a fingerprint)
# instead of saying "group up" while its rooms hang to their deadline; the
# prefill side's bootstrap logs which peer failed and its keys'
# fingerprint; kv-stat shows each member's group-key fingerprint. Two
# ways keys differ: another group's keys altogether (the CURVE handshake
# fails before ZAP), and the same server key with another client key (ZAP
# refuses it: both client-key fingerprints are logged). On e31ad33 the
# decode side's kv-up exited 0 and no log line on either side mentioned
# keys. Loopback only; deadlines are bounds, not goals.

load helpers

setup() {
	kvw_setup
	for k in a b; do "$KVW_BIN/kv-keygen" "$RUN/$k" >/dev/null; done
	# c: a's server key pair, b's client key pair.
	mkdir -m 700 "$RUN/c"
	awk 'NR == FNR { if ($1 ~ /^client-/) b[$1] = $0; next }
	     { print ($1 in b) ? b[$1] : $0 }' "$RUN/b/group.keys" "$RUN/a/group.keys" \
		>"$RUN/c/group.keys.tmp"
	chmod 600 "$RUN/c/group.keys.tmp"
	mv "$RUN/c/group.keys.tmp" "$RUN/c/group.keys"
	# Control ports PORT, PORT + 1 (prefill) and PORT + 100, + 101
	# (decode), outside the ephemeral range: a base drawn by binding port
	# 0 came from it, and an outgoing connection of a test running beside
	# this one once held PORT + 1 (p0 exited 111 at start).
	PORT=$(free_port_base 110)
	timeout 60 "$KVW_ROOT/bin/kv-up" --daemon --run-dir "$RUN/p" --role prefill \
		--transport tcp --port-base "$PORT" --keys "$RUN/a" --workers 1
}

teardown() {
	[ -d "$RUN/d/pids" ] && timeout 30 "$KVW_ROOT/bin/kv-up" --stop "$RUN/d" >/dev/null 2>&1
	[ -d "$RUN/p/pids" ] && timeout 30 "$KVW_ROOT/bin/kv-up" --stop "$RUN/p" >/dev/null 2>&1
	kvw_teardown
}

decode_up() {
	run timeout 60 "$KVW_ROOT/bin/kv-up" --daemon --run-dir "$RUN/d" --role decode \
		--transport tcp --port-base $((PORT + 100)) \
		--bootstrap "tcp://127.0.0.1:$PORT" --keys "$1"
	echo "$output"
}

# fp MEMBER-RUN-DIR: the keys fingerprint kv-stat shows for its first table.
fp() {
	"$KVW_BIN/kv-stat" --run-dir "$1" | sed -n 's/^security:.* keys=\([0-9a-f]*\).*/\1/p' | head -n 1
}

# boot_logged TEXT: the prefill side's bootstrap logged TEXT.
boot_logged() { grep -qF -- "$1" "$RUN/p/logs/bootstrap.log"; }

@test "another group's keys: kv-up --role decode exits 100 naming the keys; the bootstrap logs the failed handshake" {
	pa=$(fp "$RUN/p")
	[[ $pa =~ ^[0-9a-f]{16}$ ]]
	decode_up "$RUN/b"
	[ "$status" -eq 100 ]
	[[ $output == *"hold different keys"* ]]
	[[ $output == *"fingerprint "* ]]
	[[ $output != *"$pa"* ]] # the decode side's own fingerprint, not a's
	[ ! -e "$RUN/d/pids" ]   # nothing started
	wait_for 10 boot_logged "auth: CURVE handshake on tcp://127.0.0.1:$PORT failed"
	boot_logged "this group's keys have fingerprint $pa"
}

@test "the same server key, another client key: ZAP refuses it and both sides name both client-key fingerprints" {
	decode_up "$RUN/c"
	[ "$status" -eq 100 ]
	[[ $output == *"refused by the peer (ZAP 400): our client key "* ]]
	ours=$(echo "$output" | sed -n 's/.*our client key \([0-9a-f]\{16\}\) .*/\1/p')
	[ -n "$ours" ]
	wait_for 10 boot_logged "auth: CURVE handshake from 127.0.0.1 refused: its client key $ours is not this group's ("
	! boot_logged "its client key $ours is not this group's ($ours"
}

@test "the group's keys: the decode side comes up and both sides show the same fingerprint" {
	decode_up "$RUN/a"
	[ "$status" -eq 0 ]
	[ "$(fp "$RUN/d")" = "$(fp "$RUN/p")" ]
	run "$KVW_BIN/kv-stat" --run-dir "$RUN/d" --json
	[[ $output == *"\"keys\":\"$(fp "$RUN/p")\""* ]]
}

@test "no prefill side at --bootstrap: kv-up --role decode exits 100 and says so" {
	run env KVW_HANDSHAKE_TIMEOUT=2 timeout 60 "$KVW_ROOT/bin/kv-up" --daemon \
		--run-dir "$RUN/e" --role decode --transport tcp --port-base $((PORT + 200)) \
		--bootstrap "tcp://127.0.0.1:$((PORT + 300))" --keys "$RUN/a"
	echo "$output"
	[ "$status" -eq 100 ]
	[[ $output == *"no handshake with the prefill side's bootstrap"*"start the prefill side first"* ]]
}
