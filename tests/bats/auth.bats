#!/usr/bin/env bats
# auth.bats - a group whose control sockets are on tcp:// (kv-up
# --advertise) runs fail-closed: kv-up makes the group's keys in DIR/keys
# (0700 / 0600) and every member's tcp:// socket is CURVE with them. A
# client with the keys (kv-ctl --keys) is answered; one without keys,
# with another group's keys, or with no policy at all gets nothing (the
# last is refused before it dials). A member without keys or --insecure
# refuses to bind tcp://; --insecure runs, and says so in every log and
# in kv-stat (issue 14), which also shows each member's refused
# handshakes.

load helpers

SHAPE="--layers 2 --pages 256 --heads 8 --head-dim 16"

setup() { kvw_setup; }
teardown() { kvw_teardown; }

boot_ep() { endpoint bootstrap listen; }

# auth_failed_at_least MEMBER N: MEMBER's table counts N or more refused
# handshakes (kv-stat --json's security.auth_failed).
auth_failed_at_least() {
	local n
	n=$("$KVW_BIN/kv-stat" --run-dir "$RUN" --json |
		jq -r ".tables[] | select(.name == \"$1\") | .security.auth_failed")
	[ -n "$n" ] && [ "$n" -ge "$2" ]
}

@test "a tcp:// group makes its keys and answers only clients that hold them" {
	kv_up --transport tcp --advertise 127.0.0.1 --port-base 26100 --workers 1 $SHAPE
	[ "$(stat -c %a "$RUN/keys")" = 700 ]
	[ "$(stat -c %a "$RUN/keys/group.keys")" = 600 ]
	[ "$(boot_ep)" = tcp://127.0.0.1:26100 ]
	# The group's own keys: answered.
	run timeout 10 "$KVW_BIN/kv-ctl" --keys "$RUN/keys" ping "$(boot_ep)"
	[ "$status" -eq 0 ]
	# Another group's keys: CURVE refuses the handshake, nothing answers.
	"$KVW_BIN/kv-keygen" "$RUN/other" >/dev/null
	run timeout 10 "$KVW_BIN/kv-ctl" --keys "$RUN/other" --timeout 1 ping "$(boot_ep)"
	[ "$status" -eq 99 ]
	# No authentication at all: nothing answers either.
	run timeout 10 "$KVW_BIN/kv-ctl" --insecure --timeout 1 ping "$(boot_ep)"
	[ "$status" -eq 99 ]
	# No policy: refused before anything is dialled.
	run env -u KVW_KEYS timeout 10 "$KVW_BIN/kv-ctl" --timeout 1 ping "$(boot_ep)"
	[ "$status" -eq 100 ]
	[[ $output == *"needs the group's keys (--keys DIR) or --insecure"* ]]
	# The group itself works through CURVE end to end.
	run timeout 120 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 100 --verify
	[ "$status" -eq 0 ]
	# A member's refused handshakes are counted where kv-stat shows them;
	# it runs authenticated, and says that too.
	run timeout 10 "$KVW_BIN/kv-ctl" --keys "$RUN/other" --timeout 1 ping "$(endpoint p0 listen)"
	[ "$status" -eq 99 ]
	wait_for 10 auth_failed_at_least p0 1
	"$KVW_BIN/kv-stat" --run-dir "$RUN" --prom | grep -qx 'kvwire_insecure{table="p0"} 0'
	refute sh -c "'$KVW_BIN/kv-stat' --run-dir '$RUN' | grep -q INSECURE"
}

@test "a member asked to bind tcp:// without keys or --insecure refuses to start" {
	run timeout 10 "$KVW_BIN/kv-bootstrap" --listen tcp://127.0.0.1:26200
	[ "$status" -eq 100 ]
	[[ $output == *"needs the group's keys (--keys DIR) or --insecure"* ]]
	run timeout 10 "$KVW_BIN/kv-bootstrap" --listen tcp://127.0.0.1:26200 --keys /nonexistent
	[ "$status" -eq 100 ]
	[[ $output == *"--keys"* ]]
}

@test "--insecure runs and says so in every member's log" {
	kv_up --transport tcp --advertise 127.0.0.1 --port-base 26300 --workers 1 --insecure $SHAPE
	[ ! -e "$RUN/keys" ]
	run timeout 10 "$KVW_BIN/kv-ctl" --insecure ping "$(boot_ep)"
	[ "$status" -eq 0 ]
	for m in bootstrap p0 d0; do
		grep -q "INSECURE: binding tcp://127.0.0.1:" "$RUN/logs/$m.log"
	done
	# ... and in kv-stat: text, JSON and the Prometheus gauge.
	run "$KVW_BIN/kv-stat" --run-dir "$RUN"
	[ "$status" -eq 0 ]
	[ "$(grep -c '^security:.* INSECURE' <<<"$output")" -eq 2 ]
	[ "$("$KVW_BIN/kv-stat" --run-dir "$RUN" --json | jq -r '.tables[] | select(.name == "p0") | .insecure')" = true ]
	"$KVW_BIN/kv-stat" --run-dir "$RUN" --prom | grep -qx 'kvwire_insecure{table="d0"} 1'
}

# stranger_keys DIR: a key file that holds the group's own server keys
# (so the CURVE handshake reaches the member's ZAP handler) but a client
# key pair of another group: only the ZAP check of the client key stands
# between it and the member (issue 36).
stranger_keys() {
	"$KVW_BIN/kv-keygen" "$RUN/other" >/dev/null
	mkdir -m 700 "$1"
	{
		grep -v -e '^client-' -e '^data ' "$RUN/keys/group.keys"
		grep -e '^client-' -e '^data ' "$RUN/other/group.keys"
	} >"$1/group.keys"
	chmod 600 "$1/group.keys"
}

@test "a client with the group's server key but another client key is refused by every member's ZAP check and counted" {
	kv_up --transport tcp --advertise 127.0.0.1 --port-base 26400 --workers 1 $SHAPE
	stranger_keys "$RUN/stranger"
	# The keys load (the file is well formed) ...
	run timeout 10 "$KVW_BIN/kv-ctl" --keys "$RUN/keys" ping "$(boot_ep)"
	[ "$status" -eq 0 ]
	# ... yet no member answers them: the bootstrap, a prefill, a decode.
	for m in bootstrap p0 d0; do
		if [ "$m" = bootstrap ]; then ep=$(boot_ep); else ep=$(endpoint "$m" listen); fi
		run timeout 10 "$KVW_BIN/kv-ctl" --keys "$RUN/stranger" --timeout 1 ping "$ep"
		[ "$status" -eq 99 ]
	done
	wait_for 10 auth_failed_at_least p0 1
	wait_for 10 auth_failed_at_least d0 1
	# The group's own key still gets in, and rooms still move.
	run timeout 120 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 20 --verify
	[ "$status" -eq 0 ]
}
