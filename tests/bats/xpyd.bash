# xpyd.bash - what the xPyD tests (xpyd.bats on one host, xpyd_netns.bats
# across four namespaces) share: kv-bench's per-pair counts, and a prefill
# instance killed while kv-bench holds still.

# pairs_carry OUT N OK P... -- D...: kv-bench's output OUT says every pair
# (prefill group P, decode group D; names under $RUN) carried N rooms and
# OK of them succeeded (OK "-": any).
pairs_carry() {
	local out=$1 n=$2 ok=$3 p d
	shift 3
	local ps=() ds=() seen=0
	for p in "$@"; do
		if [ "$p" = -- ]; then seen=1; elif [ $seen = 0 ]; then ps+=("$p"); else ds+=("$p"); fi
	done
	for p in "${ps[@]}"; do
		for d in "${ds[@]}"; do
			if [ "$ok" = - ]; then
				[[ $out =~ $RUN/$p\ -\>\ $RUN/$d\ $n\  ]]
			else
				[[ $out =~ $RUN/$p\ -\>\ $RUN/$d\ $n\ \($ok\ ok\) ]]
			fi || { echo "$p -> $d did not carry $n rooms ($ok ok)"; return 1; }
		done
	done
}

# served GROUP: the prefill rank p0 of group $RUN/GROUP has served 20 rooms.
served() {
	timeout 30 "$KVW_BIN/kv-stat" --run-dir "$RUN/$1" --json --all |
		jq -e '[.tables[] | select(.name == "p0") | .rooms[] | select(.state == "Cleared" and .reason == "none")] | length >= 20' >/dev/null
}

# kill_prefill BENCH GROUP: once GROUP's p0 has served rooms, its kv-sender
# killed -9 while kv-bench (pid BENCH) holds still, so the kill meets rooms
# in flight however fast the machine runs them; kv-up restarts it (a new
# incarnation). OLD_PID is the killed one.
kill_prefill() {
	wait_for 120 served "$2"
	kill -STOP "$1"
	OLD_PID=$(cat "$RUN/$2/pids/p0.pid")
	kill -KILL "$OLD_PID"
	kill -CONT "$1"
}

# restarted GROUP: its p0 runs under another pid than OLD_PID.
restarted() { [ -s "$RUN/$1/pids/p0.pid" ] && [ "$(cat "$RUN/$1/pids/p0.pid")" != "$OLD_PID" ]; }
