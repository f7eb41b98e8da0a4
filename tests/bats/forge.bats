#!/usr/bin/env bats
# forge.bats - issue 14 with real processes only (a kv-up group, kv-bench,
# kv-stat, kv-ctl) against hostile peers from tests/peers/ (intruder.py,
# flood.py) that hold whatever the socket asks of them: on ipc the run
# directory's access, over tcp:// the group's own keys (a member gone bad,
# or a misconfigured one: CURVE lets it in, so only the authorisation
# rules stand between it and the group). The floods' tcp:// groups keep
# the shm data path (kv-up --advertise): the control sockets are what
# they aim at.
#  - A forged BOOT_REGISTER for the live prefill rank (its own epoch, which
#    a lookup tells anyone, with another endpoint; or a new epoch while the
#    rank still pings) is refused by the real kv-bootstrap, warned about
#    and counted (its stop line); the rank's entry stays: a real decode
#    looking it up gets the real endpoint, and a verified kv-bench run,
#    whose decodes resolve the rank only now, succeeds. On ipc and over
#    tcp:// with the group's keys.
#  - 10,000 fake REGISTERs from one source at the real kv-sender while a
#    verified kv-bench run goes on: every one counted (rate_limited or
#    unauthorised), at most 8 peer-table entries for the source, the real
#    decodes keep theirs, and a decode restarted after the flood registers
#    again: rooms succeed during and after. On ipc and over tcp:// with
#    the group's keys.
#  - A flood from one source at a real kv-receiver's peer socket (PINGs,
#    STATUS Success and Failed and ABORT_ACKs naming the running rooms and
#    their real prefill rank with made-up tokens and a made-up epoch, and
#    malformed messages) for the whole of a verified kv-bench run: every
#    room succeeds (and in a run after it), the PINGs over their bucket are counted rate_limited,
#    the garbage malformed, the forged reports stale, and the prefill peer
#    is not taken for restarted. On ipc and over tcp:// with the group's
#    keys.

load helpers

SHAPE="--layers 2 --pages 64 --heads 2 --head-dim 16 --aux-slots 8"
INTRUDER="$BATS_TEST_DIRNAME/../peers/intruder.py"
FLOOD="$BATS_TEST_DIRNAME/../peers/flood.py"

setup() { kvw_setup; }
teardown() { kvw_teardown; }

# lookup KEY: a value of kv-ctl's lookup of prefill rank (0,0,0,0) at the
# bootstrap ($KEYS: the group's keys, for tcp://).
lookup() {
	timeout 10 "$KVW_BIN/kv-ctl" ${KEYS:+--keys "$KEYS"} lookup \
		"$(endpoint bootstrap listen)" --coord 0,0,0,0 | sed -n "s/^$1=//p"
}

# forge EPOCH ENDPOINT: intruder.py's BOOT_REGISTER for rank (0,0,0,0)
# with the live rank's model and layers (so only the live-rank rule can
# refuse it), as a member when $KEYS is set; `run`s it.
forge() {
	local model layers
	model="$(lookup page_tokens),$(lookup dtype),$(lookup total_kv_heads),$(lookup rank_kv_heads),$(lookup head_bytes),$(($(lookup model_flags)))"
	layers="$(lookup layer_first),$(lookup layer_count)"
	run timeout 30 "$PY" "$INTRUDER" forge "$(endpoint bootstrap listen)" \
		"$1" "$2" "$model" "$layers" ${KEYS:+"$KEYS/group.keys"}
	echo "$output"
}

# forged_boot_register_is_refused: the body of the two forgery tests.
forged_boot_register_is_refused() {
	local p0 epoch
	p0=$(endpoint p0 listen)
	[ "$(lookup endpoint)" = "$p0" ]
	# The live rank's own epoch, another endpoint: REFUSED (status 3).
	forge live "ipc://$RUN/evil.peer"
	[ "$status" -eq 0 ]
	[[ $output == *"status=3 text=rank tp=0 pp=0 cp=0 dp=0 registered $p0 under this epoch"* ]]
	epoch=${output#epoch=}
	epoch=${epoch%% *}
	# A new epoch while the rank lives (pings): NOT_READY (status 1).
	forge 0x5eed5eed "ipc://$RUN/evil.peer"
	[ "$status" -eq 0 ]
	[[ $output == *"status=1 text=rank tp=0 pp=0 cp=0 dp=0 is live under epoch $epoch"* ]]
	logged bootstrap "unauthorised: BOOT_REGISTER for a live rank refused"
	# The entry stayed: a real lookup names the real rank, whose epoch
	# the next forger reads unchanged.
	[ "$(lookup endpoint)" = "$p0" ]
	forge live "ipc://$RUN/evil2.peer"
	[ "$status" -eq 0 ]
	[[ $output == "epoch=$epoch status=3 "* ]]
	# The decodes resolve the rank only now (their first room): the real
	# endpoint, every byte verified.
	run timeout 120 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 200 --verify
	echo "$output"
	[ "$status" -eq 0 ]
	clean 200
	[ "$(summary success)" = 200 ]
	# kv-bootstrap has no table: its count is in its stop line.
	timeout 30 "$KVW_ROOT/bin/kv-up" --stop "$RUN" >/dev/null 2>&1
	grep "stopping:" "$RUN/logs/bootstrap.log"
	grep -q "stopping: 1 of 1 ranks registered, 3 unauthorised, 0 rate limited" "$RUN/logs/bootstrap.log"
}

@test "a forged BOOT_REGISTER for a live rank (ipc): refused, warned, counted; the rank stays and a verified run succeeds" {
	kv_up --workers 1 $SHAPE
	forged_boot_register_is_refused
}

@test "a forged BOOT_REGISTER for a live rank from a member with the group's keys (tcp://, CURVE): refused, the rank stays" {
	kv_up --transport tcp --advertise 127.0.0.1 --port-base 26700 --workers 1 $SHAPE
	KEYS=$RUN/keys
	# Without the group's client key nothing answers at all ...
	run timeout 30 "$PY" "$INTRUDER" boot "$(endpoint bootstrap listen)" "$KEYS/group.keys"
	[ "$status" -eq 0 ]
	# ... with it, CURVE lets the forger in and authorisation refuses it.
	forged_boot_register_is_refused
}

# peers MEMBER: the endpoints in the member's peer table, one a line.
peers() {
	"$KVW_BIN/kv-stat" --run-dir "$RUN" --json |
		jq -r --arg m "$1" '.tables[] | select(.name == $m) | .peers[].endpoint'
}

# started MEMBER: the member's table has rooms (kv-bench is running).
started() { [ "$(ctr "$1" inserted)" -gt 0 ]; }

# counted MEMBER N: rate_limited + unauthorised is N.
counted() { [ $(($(sec "$1" rate_limited) + $(sec "$1" unauthorised))) -eq "$2" ]; }

# bench_bg ARGS...: a verified kv-bench run in the background ($BENCH),
# its output in $RUN/bench.out.
bench_bg() {
	timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN" --verify "$@" \
		>"$RUN/bench.out" 2>&1 &
	BENCH=$!
	echo "$BENCH" >>"$RUN/bg.pids"
}

# bench_done N: the background run ended with N rooms, every one a success.
bench_done() {
	local st=0
	wait "$BENCH" || st=$?
	output=$(cat "$RUN/bench.out")
	echo "$output"
	[ "$st" -eq 0 ]
	clean "$1"
	[ "$(summary success)" = "$1" ]
}

# register_flood: 10,000 fake REGISTERs from one source at p0 ($KEYS: as
# a member holding the group's keys) during a verified run, then a decode
# restarted after the flood; the group is up.
register_flood() {
	local n_real d1
	bench_bg --rooms 3000
	wait_for 30 started p0
	run timeout 120 "$PY" "$FLOOD" registers "$(endpoint p0 listen)" \
		--count 10000 --dir "$RUN" ${KEYS:+--keys "$KEYS/group.keys"}
	echo "$output"
	[ "$status" -eq 0 ]
	# The flood is over while rooms still run.
	kill -0 "$BENCH"
	wait_for 30 counted p0 10000
	echo "p0: rate_limited=$(sec p0 rate_limited) unauthorised=$(sec p0 unauthorised) reclaimed=$(sec p0 reclaimed)"
	# Past the bucket (64, then 20/s) each names a pool not its own.
	[ "$(sec p0 rate_limited)" -ge 9000 ]
	grep -q "rate limited: REGISTER" "$RUN/logs/p0.log"
	peers p0
	[ "$(peers p0 | grep -c "^ipc://$RUN/fake-")" -le 8 ]
	n_real=$(peers p0 | grep -cx -e "$(endpoint d0 listen)" -e "$(endpoint d1 listen)")
	[ "$n_real" -eq 2 ]
	bench_done 3000
	# A decode that starts after the flood registers again and is served.
	d1=$(cat "$RUN/pids/d1.pid")
	kill -TERM "$d1"
	wait_for 30 restarted d1 "$d1"
	run timeout 120 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 300 --verify
	echo "$output"
	[ "$status" -eq 0 ]
	clean 300
	[ "$(summary success)" = 300 ]
	[ "$(peers p0 | grep -c "^ipc://$RUN/fake-")" -le 8 ]
}

@test "10,000 fake REGISTERs from one source at a real kv-sender during a verified run: counted, at most 8 entries, the real decodes keep theirs, rooms succeed during and after" {
	kv_up --workers 2 --decode-ranks 2 $SHAPE
	register_flood
}

@test "the same 10,000 REGISTERs from a member with the group's keys (tcp://, CURVE)" {
	kv_up --advertise 127.0.0.1 --port-base 26900 --workers 2 --decode-ranks 2 $SHAPE
	KEYS=$RUN/keys
	register_flood
}

# p0_epoch_at MEMBER: the epoch the member's peer table holds for p0.
p0_epoch_at() {
	"$KVW_BIN/kv-stat" --run-dir "$RUN" --json |
		jq -r --arg m "$1" --arg ep "$(endpoint p0 listen)" \
			'.tables[] | select(.name == $m) | .peers[] | select(.endpoint == $ep) | .epoch'
}

# receiver_flood: messages from one source at d0 ($KEYS: as a member
# holding the group's keys) from before a verified run of 4,000 rooms
# starts until after it ends, then a verified run after the flood.
receiver_flood() {
	local seed=$RANDOM rx epoch fl
	rx=$(cat "$RUN/pids/d0.pid")
	# A first run: d0 knows p0 (and its epoch) from here on.
	run timeout 120 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 50 --verify
	[ "$status" -eq 0 ]
	epoch=$(p0_epoch_at d0)
	[ -n "$epoch" ]
	# PING, STATUS(Success), STATUS(Failed), ABORT_ACK (for the next
	# run's room ids, from rank 0) and a malformed message, in turn,
	# until stopped.
	timeout 300 "$PY" "$FLOOD" peer-flood "$(endpoint d0 listen)" \
		--count 100000000 --bench-rooms "$seed,4000" \
		${KEYS:+--keys "$KEYS/group.keys"} >"$RUN/flood.out" 2>&1 &
	fl=$!
	echo "$fl" >>"$RUN/bg.pids"
	wait_for 30 eval '[ "$(ctr d0 malformed)" -gt 0 ]'
	run timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 4000 \
		--seed "$seed" --verify
	echo "$output"
	# The flood went on for the whole run.
	kill -0 "$fl"
	kill -TERM "$fl"
	wait_for 10 gone "$fl"
	[ "$status" -eq 0 ]
	clean 4000
	[ "$(summary success)" = 4000 ]
	echo "d0: rate_limited=$(sec d0 rate_limited) malformed=$(ctr d0 malformed) stale=$(ctr d0 stale) refused=$(ctr d0 refused)"
	# PINGs over 1,000 a second: dropped before any PONG, counted, warned.
	[ "$(sec d0 rate_limited)" -ge 1 ]
	grep -q "rate limited: PING from a source over 1000/s" "$RUN/logs/d0.log"
	# Forged reports reached rooms in flight (stale: another token) and
	# changed none: the prefill peer was not taken for restarted.
	[ "$(ctr d0 stale)" -ge 1 ]
	[ "$(p0_epoch_at d0)" = "$epoch" ]
	refute grep -q "restarted" "$RUN/logs/d0.log"
	[ "$(cat "$RUN/pids/d0.pid")" = "$rx" ]
	kill -0 "$rx"
	# And after the flood.
	run timeout 120 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 300 --verify
	echo "$output"
	[ "$status" -eq 0 ]
	clean 300
}

@test "a flood of PINGs, forged STATUS/ABORT_ACKs and garbage from one source at a real kv-receiver during a verified run: every room succeeds, the flood is counted" {
	kv_up --workers 1 $SHAPE
	receiver_flood
}

@test "the same flood from a member with the group's keys (tcp://, CURVE)" {
	kv_up --advertise 127.0.0.1 --port-base 27100 --workers 1 $SHAPE
	KEYS=$RUN/keys
	receiver_flood
}
