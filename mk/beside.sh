#!/bin/sh
# beside.sh - runs commands at the same time and prints their output one
# after another, in the order given, each whole: `make test` runs its unit,
# model and Python stages this way (issue 30: the unit tests mostly wait
# on their processes and pytest on its groups, so one after another they
# left a core idle for most of a minute). Each command's output goes to a
# file of its own until all have ended; a signal stops them all.
# Usage: mk/beside.sh 'CMD1' 'CMD2' ...  (each a sh command line).
# Exit: 0 when every command exited 0, else the first failing one's status.
set -u
[ $# -gt 0 ] || { echo "usage: mk/beside.sh 'CMD' ['CMD'...]" >&2; exit 100; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/kvw-beside.XXXXXX") || exit 111
pids=""
stop() {
	# shellcheck disable=SC2086 # a list of pids
	[ -z "$pids" ] || kill -TERM $pids 2>/dev/null
	rm -rf "$dir"
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM HUP
i=0
for cmd in "$@"; do
	i=$((i + 1))
	sh -c "$cmd" </dev/null >"$dir/$i.out" 2>&1 &
	pids="$pids $!"
done
echo "beside: $# stages at once; each one's output follows whole when all have ended"
rc=0
i=0
for p in $pids; do
	i=$((i + 1))
	wait "$p"
	s=$?
	[ "$rc" -ne 0 ] || rc=$s
	eval "cmd=\${$i}"
	[ "$s" -eq 0 ] || echo "beside: '$cmd' exited $s" >>"$dir/$i.out"
done
pids=""
i=0
for cmd in "$@"; do
	i=$((i + 1))
	cat "$dir/$i.out"
done
rm -rf "$dir"
exit "$rc"
