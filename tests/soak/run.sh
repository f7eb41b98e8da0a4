#!/bin/bash
# run.sh - `make soak` (issue 34): a tcp group on loopback driven for
# KVW_SOAK_SECS (default 600) by kv-bench runs with 20 % aborts, every byte
# verified. Not part of `make test`: it is a duration, not a verdict on
# speed. It wants, and says so in its last line:
#   - every room of every run terminal and intact (stuck=0, corrupt=0);
#   - the tables holding no room nobody will clear once the last run has
#     ended and the reclaim bound (the room deadlines, set to 30 s here)
#     has passed;
#   - memory and file descriptors flat: each member's RSS at the end within
#     KVW_SOAK_RSS_KIB (default 4096) of its value after the warm-up (the
#     first minute, a quarter of a shorter soak), and its fd count within
#     8 of it.
# One line of figures per run (rooms, outcomes, and each member's RSS and
# fds), so a slow growth shows before it fails. Exit 0 when all holds, 1
# when not, 111 when the group cannot start.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${KVW_BIN:-$root/bin}
# The bats tests' helpers: wait_for (the one bounded poll) and
# free_port_base (a block of ports outside the ephemeral range).
BATS_TEST_DIRNAME=$root/tests/bats
# shellcheck source=../bats/helpers.bash
. "$root/tests/bats/helpers.bash"
secs=${KVW_SOAK_SECS:-600}
rss_slack=${KVW_SOAK_RSS_KIB:-4096}
run=$(mktemp -d /tmp/kvwsoak.XXXXXX)
shape=(--layers 2 --pages 512 --heads 8 --head-dim 16 --aux-slots 64)

stop() {
	timeout 60 "$root/bin/kv-up" --stop "$run" >/dev/null 2>&1
	rm -rf "$run"
}
trap stop EXIT
trap 'exit 130' INT TERM

# A block of free control ports (kv-up --port-base: bootstrap, sender).
base=$(free_port_base 10) || exit 111
timeout 60 "$root/bin/kv-up" --daemon --run-dir "$run" --transport tcp \
	--advertise 127.0.0.1 --port-base "$base" --workers 2 \
	--bootstrap-timeout 30 --waiting-timeout 30 "${shape[@]}" >/dev/null || {
	echo "soak: kv-up could not start the group" >&2
	tail -n 20 "$run"/logs/*.log >&2 2>/dev/null
	exit 111
}

members=()
for f in "$run"/pids/*.pid; do
	m=$(basename "$f" .pid)
	[ "$m" = kv-up ] || members+=("$m")
done

# usage MEMBER: "RSS_KIB FDS" of the member's process now.
usage() {
	local pid
	pid=$(cat "$run/pids/$1.pid")
	echo "$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status") $(ls "/proc/$pid/fd" | wc -l)"
}

# field LINE KEY: KEY=value of kv-bench's summary line.
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

declare -A rss0 fds0
ok=1 n=0 total=0 t_end=$((SECONDS + secs)) warm=$((SECONDS + (secs < 240 ? secs / 4 : 60)))
echo "soak: ${secs} s of tcp rooms with 20 % aborts in $run (members: ${members[*]})"
while [ "$SECONDS" -lt "$t_end" ]; do
	n=$((n + 1))
	out=$(KVW_BENCH_NO_REFERENCE=1 timeout 600 "$bin/kv-bench" --run-dir "$run" \
		--rooms 2000 --pages-per-room 8 --chunk-pages 3 --concurrency 16 \
		--abort-frac 0.2 --verify 2>&1)
	sum=$(grep '^rooms=' <<<"$out")
	[ -n "$sum" ] || { echo "soak: run $n: kv-bench gave no summary:"; echo "$out"; ok=0; break; }
	total=$((total + $(field "$sum" rooms)))
	line="soak: run $n at $SECONDS s: $(cut -d' ' -f1-7 <<<"$sum")"
	for m in "${members[@]}"; do
		read -r rss fds < <(usage "$m")
		# The baseline: the first run ending after the warm-up (the
		# heartbeats connect, the sinks' pools fault in, the allocator
		# settles).
		[ -n "${rss0[$m]:-}" ] || [ "$SECONDS" -lt "$warm" ] ||
			{ rss0[$m]=$rss; fds0[$m]=$fds; }
		line+=" $m=${rss}k/${fds}fd"
	done
	echo "$line"
	if [ "$(field "$sum" stuck)" != 0 ] || [ "$(field "$sum" corrupt)" != 0 ]; then
		echo "soak: run $n: a room stuck or corrupt"
		grep -v '^rooms=' <<<"$out" | head -n 20
		ok=0
	fi
done

# What the tables still hold, once the deadlines (30 s) and the sweep that
# reclaims never-begun rooms have had their time: nothing but Cleared.
tables_empty() {
	live=$("$bin/kv-stat" --run-dir "$run" --json |
		jq -r '[.tables[] | "\(.name)=\(.rooms | length)"] | join(" ")')
	! grep -qE '=[1-9]' <<<"$live"
}
wait_for 90 tables_empty
echo "soak: after the last run: rooms not cleared: $live; reclaimed, integrity_failed, resent: $("$bin/kv-stat" --run-dir "$run" --json |
	jq -r '[.tables[] | "\(.name) \(.counters.rooms_reclaimed) \(.security.integrity_failed) \(.security.resent)"] | join(", ")')"
grep -qE '=[1-9]' <<<"$live" && { echo "soak: rooms nobody will clear remain"; ok=0; }
for m in "${members[@]}"; do
	read -r rss fds < <(usage "$m")
	if [ $((rss - rss0[$m])) -gt "$rss_slack" ] || [ $((fds - fds0[$m])) -gt 8 ] ||
		[ $((fds0[$m] - fds)) -gt 8 ]; then
		echo "soak: $m grew: RSS ${rss0[$m]} -> $rss KiB, fds ${fds0[$m]} -> $fds"
		ok=0
	fi
done
if [ "$ok" = 1 ]; then
	echo "soak: passed: $n runs, $total rooms in $SECONDS s, every room terminal and intact, tables empty, memory and fds flat"
	exit 0
fi
echo "soak: failed after $n runs, $total rooms"
exit 1
