#!/usr/bin/env bats
# xpyd_netns.bats - xPyD across hosts (issue 34's Must-show): two prefill
# and two decode instances, each kv-up group on a host of its own, played
# by four network namespaces this file creates and removes, joined by a
# bridge in a fifth (addresses 10.203.0.0/24, used only inside them). The
# groups share the keys and one --cluster; each decode names both prefill
# bootstraps; control and data go over tcp with the keys. One kv-bench, in
# the first decode's namespace, drives all four groups through the ipc
# sockets of their run directories (files, not network) and routes rooms
# over the four pairs: every network connection has both ends inside the
# namespaces.
#   - 2,000 verified rooms with 10 % aborts over all four pairs: none
#     failed, stuck or corrupt, every pair carried its share;
#   - a prefill instance killed -9 mid-run: only rooms it sends fail,
#     every room of the other prefill instance succeeds, and its next
#     incarnation (kv-up restarts it) serves both decodes.

load helpers
load xpyd

SHAPE="--layers 2 --heads 2 --head-dim 16 --page-tokens 4 --pages 128 --aux-slots 32"

setup() {
	kvw_setup
	[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
	CL=c${RUN##*.}
	SW=kvws$$
	ip netns add "$SW" 2>/dev/null || skip "ip netns does not work here"
	HOSTS=()
	ip netns exec "$SW" ip link add br0 type bridge
	ip netns exec "$SW" ip link set br0 up
	local i
	for i in 1 2 3 4; do
		local ns=kvwh$i$$
		ip netns add "$ns"
		HOSTS+=("$ns")
		ip link add "kvh$i$$" netns "$ns" type veth peer name "kvs$i$$" netns "$SW"
		ip netns exec "$SW" ip link set "kvs$i$$" master br0 up
		ip netns exec "$ns" ip link set lo up
		ip netns exec "$ns" ip addr add "10.203.0.$i/24" dev "kvh$i$$"
		ip netns exec "$ns" ip link set "kvh$i$$" up
	done
	wait_for 10 links_up
	"$KVW_BIN/kv-keygen" "$RUN/keys" >/dev/null
}

teardown() {
	local i
	if [ -n "${SW:-}" ]; then
		for i in 1 2 3 4; do
			[ -d "$RUN/g$i/pids" ] && on "$i" timeout 30 \
				"$KVW_ROOT/bin/kv-up" --stop "$RUN/g$i" >/dev/null 2>&1
			ip netns del "kvwh$i$$" 2>/dev/null
		done
		ip netns del "$SW" 2>/dev/null
	fi
	kvw_teardown
}

# on I CMD...: CMD on host I (1, 2: prefill; 3, 4: decode).
on() { local i=$1; shift; ip netns exec "kvwh$i$$" "$@"; }

links_up() {
	local i
	for i in 1 2 3 4; do
		on "$i" ip -br link show "kvh$i$$" | grep -q ' UP ' || return 1
	done
	# The bridge forwards once it has a port up (no STP: at once); the
	# decode sides' kv-up checks a handshake with each bootstrap first.
	ip netns exec "$SW" ip -br link show br0 | grep -q ' UP '
}

# up I ROLE ARGS...: group g$I on host I, over tcp with the keys.
up() {
	local i=$1 role=$2
	shift 2
	on "$i" timeout 60 "$KVW_ROOT/bin/kv-up" --daemon --run-dir "$RUN/g$i" \
		--role "$role" --cluster "$CL" --advertise "10.203.0.$i" \
		--transport tcp --keys "$RUN/keys" --workers 2 "$@" $SHAPE || {
		tail -n 20 "$RUN/g$i"/logs/*.log "$RUN/g$i/kv-up.log" >&2 2>/dev/null
		return 1
	}
}

# two_by_two: both prefill instances, then both decodes naming both.
two_by_two() {
	local boots="--bootstrap tcp://10.203.0.1:17000 --bootstrap tcp://10.203.0.2:17000"
	up 1 prefill
	up 2 prefill
	up 3 decode $boots
	up 4 decode $boots
}

# summary FIELD: FIELD=N of kv-bench's summary line in $RUN/out.
summary() { grep -o "\b$1=[0-9]*" "$RUN/out" | head -n 1 | cut -d= -f2; }

@test "2x2 across four hosts over tcp: 2,000 verified rooms with 10 % aborts over all four pairs, none failed, stuck or corrupt" {
	two_by_two
	run on 3 timeout 600 "$KVW_BIN/kv-bench" --run-dir "$RUN/g3" \
		--peers "$RUN/g4,$RUN/g1,$RUN/g2" --rooms 2000 --concurrency 16 \
		--verify --abort-frac 0.1 --no-reference
	echo "$output"
	[ "$status" -eq 0 ]
	echo "$output" >"$RUN/out"
	[ "$(summary rooms)" = 2000 ]
	[ "$(summary failed)" = 0 ] && [ "$(summary stuck)" = 0 ] && [ "$(summary corrupt)" = 0 ]
	# Round robin: 500 rooms a pair (the aborted ones among them).
	pairs_carry "$output" 500 - g1 g2 -- g3 g4
}

@test "2x2 across four hosts: a prefill instance killed -9 mid-run fails only rooms it sends; its next incarnation serves both decodes" {
	two_by_two
	# One page a room: the pages of a failed room stay out of use for
	# the run, and the pools must outlast a few of them.
	on 3 "$KVW_BIN/kv-bench" --run-dir "$RUN/g3" --peers "$RUN/g4,$RUN/g1,$RUN/g2" \
		--rooms 4000 --pages-per-room 1 --chunk-pages 1 --concurrency 8 \
		--verify --room-timeout 60 --no-reference >"$RUN/out" 2>&1 &
	bench=$!
	echo "$bench" >>"$RUN/bg.pids"
	kill_prefill "$bench" g2
	rc=0
	wait "$bench" || rc=$?
	cat "$RUN/out"
	[ "$rc" -eq 0 ] || [ "$rc" -eq 1 ]
	[ "$(summary rooms)" = 4000 ] && [ "$(summary corrupt)" = 0 ] && [ "$(summary stuck)" = 0 ]
	[ "$(summary failed)" -gt 0 ] # the kill met rooms of g2's prefill
	pairs_carry "$(cat "$RUN/out")" 1000 1000 g1 -- g3 g4
	wait_for 60 restarted g2
	run on 3 timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN/g3" --peers "$RUN/g4,$RUN/g1,$RUN/g2" \
		--rooms 40 --concurrency 4 --verify --no-reference
	echo "$output"
	[ "$status" -eq 0 ]
	pairs_carry "$output" 10 10 g1 g2 -- g3 g4
}
