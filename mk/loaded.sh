#!/bin/sh
# loaded.sh - runs a command while a CPU hog keeps every core busy, the
# guard of issue 30: no test may pass or fail with the machine's load.
# `make test-loaded` runs the unit and bats stages through it. The hog is
# `stress-ng --cpu N` (N: KVW_HOG_CPUS, default the number of cores), one
# process group that this script starts and always stops: on the
# command's end, and on SIGINT/SIGTERM/SIGHUP. Prints how loaded the
# machine was (load average before and after) and how long the command
# took. Usage: mk/loaded.sh CMD [ARG...]. Exit: the command's status, or
# 111 when the hog cannot start (stress-ng missing: mk/deps.sh installs it).
set -u
[ $# -gt 0 ] || { echo "usage: mk/loaded.sh CMD [ARG...]" >&2; exit 100; }
command -v stress-ng >/dev/null || {
	echo "loaded: fatal: stress-ng not installed (run mk/deps.sh as root)" >&2
	exit 111
}
cpus=${KVW_HOG_CPUS:-$(nproc)}
hog=""
stop_hog() {
	[ -n "$hog" ] || return 0
	kill -TERM "$hog" 2>/dev/null
	wait "$hog" 2>/dev/null
	hog=""
}
trap 'stop_hog; exit 130' INT
trap 'stop_hog; exit 143' TERM HUP
trap 'stop_hog' EXIT

# --timeout bounds the hog even if this script is killed with SIGKILL.
stress-ng --cpu "$cpus" --timeout 3h --quiet >/dev/null 2>&1 &
hog=$!
# Started once its workers run (bounded poll: 10 s).
n=0
until [ "$(pgrep -c -P "$hog")" -ge "$cpus" ]; do
	n=$((n + 1))
	if [ "$n" -gt 500 ] || ! kill -0 "$hog" 2>/dev/null; then
		echo "loaded: fatal: stress-ng --cpu $cpus did not start its workers" >&2
		exit 111
	fi
	sleep 0.02
done
echo "loaded: stress-ng --cpu $cpus (pid $hog) running; load average $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s)
rc=0
"$@" || rc=$?
echo "loaded: '$*' exited $rc after $(($(date +%s) - t0)) s under stress-ng --cpu $cpus; load average $(cut -d' ' -f1-3 /proc/loadavg)"
stop_hog
exit "$rc"
