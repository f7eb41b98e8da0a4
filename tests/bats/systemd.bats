#!/usr/bin/env bats
# systemd: the unit templates of contrib/systemd pass `systemd-analyze
# verify` (with the paths `make install` fills in, and the man pages they
# cite on the man path), their hardening scores OK offline, and the
# control programs announce readiness with sd_notify (READY=1 and MAINPID
# on $NOTIFY_SOCKET, caught here by a Python datagram socket) next to
# --ready-fd.

load helpers

setup() { kvw_setup; }
teardown() { kvw_teardown; }

# units DIR: the unit templates with bin/ of this tree and /etc filled in.
units() {
	local f
	mkdir -p "$1"
	for f in "$KVW_ROOT"/contrib/systemd/*.in; do
		sed -e "s|@BINDIR@|$KVW_BIN|g" -e "s|@SYSCONFDIR@|/etc|g" "$f" \
			>"$1/$(basename "${f%.in}")"
	done
	cp "$KVW_ROOT"/contrib/systemd/*.target "$1/"
}

@test "systemd-analyze verify: every unit template is clean" {
	command -v systemd-analyze >/dev/null || skip "systemd-analyze not installed"
	units "$RUN/units"
	make -s -C "$KVW_ROOT" man
	cd "$RUN/units"
	ls kvwire-prefill@.service kvwire-decode@.service kvwire-bootstrap@.service \
		kvwire-heartbeat@.service kvwire.target
	run env MANPATH="$KVW_ROOT/build/man" systemd-analyze verify ./*
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	# The check bites: a unit naming a missing program fails it.
	sed 's|^ExecStart=[^ ]*|ExecStart=/nonexistent/kv-sender|' kvwire-prefill@.service >bad@.service
	run env MANPATH="$KVW_ROOT/build/man" systemd-analyze verify ./bad@.service
	[ "$status" -ne 0 ]
	[[ $output == *"/nonexistent/kv-sender"* ]]
}

@test "the member units are Type=notify, restart on failure and are hardened (offline exposure below 5)" {
	command -v systemd-analyze >/dev/null || skip "systemd-analyze not installed"
	units "$RUN/units"
	for u in prefill decode bootstrap heartbeat; do
		f="$RUN/units/kvwire-$u@.service"
		grep -qx 'Type=notify' "$f"
		grep -qx 'Restart=on-failure' "$f"
		grep -qx 'RestartPreventExitStatus=100 77' "$f"
		grep -qx 'NoNewPrivileges=yes' "$f"
		run systemd-analyze security --offline=true --threshold=50 "$f"
		[ "$status" -eq 0 ] || { echo "$output" | tail -n 3 >&2; false; }
		[[ $output == *"Overall exposure level"*" OK"* ]] || [[ $output == *" LOW"* ]]
	done
}

# notify_listen PATH N: a datagram socket at PATH that appends each of the
# first N messages it gets (bounded: 30 s in all) to PATH.msg, one per
# line with newlines as spaces.
notify_listen() {
	$PY -c '
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
open(sys.argv[1] + ".ready", "w").close()
end = time.monotonic() + 30
for _ in range(int(sys.argv[2])):
    s.settimeout(max(0.1, end - time.monotonic()))
    m = s.recv(4096).decode().replace("\n", " ")
    with open(sys.argv[1] + ".msg", "a") as f:
        f.write(m + "\n")' "$1" "$2" &
	echo $! >>"$RUN/bg.pids"
	wait_for 10 test -e "$1.ready"
}

# lines FILE: how many lines FILE has (0 when it is missing).
lines() { cat "$1" 2>/dev/null | wc -l; }

@test "sd_notify: kv-bootstrap sends READY=1 with its own pid to \$NOTIFY_SOCKET" {
	notify_listen "$RUN/notify.sock" 1
	NOTIFY_SOCKET="$RUN/notify.sock" timeout 30 kv-bootstrap --listen "ipc://$RUN/b.sock" &
	pid=$!
	echo $pid >>"$RUN/bg.pids"
	wait_for 20 test -s "$RUN/notify.sock.msg"
	# MAINPID is kv-bootstrap itself, the child of `timeout`.
	grep -qx "READY=1 MAINPID=$(pgrep -P "$pid")" "$RUN/notify.sock.msg"
}

@test "sd_notify: every member of a group (bootstrap, sender, receiver, heartbeats) announces READY=1" {
	notify_listen "$RUN/notify.sock" 5
	NOTIFY_SOCKET="$RUN/notify.sock" kv_up --workers 2 --layers 8 --page-tokens 1 \
		--heads 1 --head-dim 64 --pages 64 --aux-slots 8
	wait_for 20 test "$(lines "$RUN/notify.sock.msg")" -eq 5
	for m in bootstrap p0 d0 hb0 hbp0; do
		grep -qx "READY=1 MAINPID=$(cat "$RUN/pids/$m.pid")" "$RUN/notify.sock.msg" ||
			{ echo "no READY from $m" >&2; cat "$RUN/notify.sock.msg" >&2; false; }
	done
}
