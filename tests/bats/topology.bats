#!/usr/bin/env bats
# topology.bats - issue 5 end to end on the real process group (kv-up):
# prefill and decode with different PP, TP, MLA and draft layers, every
# destination byte checked by kv-bench --verify (its pattern depends on
# room, layer, role, page of the room, token and model head, so a byte that
# lands in the wrong layer, stage or head slice is caught). Per-rank byte
# counts and states come from kv-stat. Shapes are tiny: each test takes
# seconds.

load helpers

# Small pages: 4 tokens x head_dim 8 x 2 bytes = 64 bytes per head.
SMALL="--page-tokens 4 --head-dim 8 --pages 64 --aux-slots 16 --aux-bytes 64"
# kv-up with one worker per sender and no heartbeat during a test (a PONG
# would make every prefill rank look "heard from" on decode).
up() { kv_up --workers 1 --heartbeat-interval 300 $SMALL "$@"; }

setup() {
	kvw_setup
}

teardown() {
	kvw_teardown
}

# bench ARGS...: 6 verified rooms of 5 pages in chunks of 2 on the group of
# $RUN; fails unless every room succeeded with no corrupt byte.
bench() {
	run timeout 60 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 6 \
		--pages-per-room 5 --chunk-pages 2 --concurrency 3 --verify \
		--seed 11 "$@"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"rooms=6 success=6 failed=0 aborted=0 stuck=0 corrupt=0 "* ]]
	# kv-bench's CLEARs reach the control processes after it exits:
	# wait for them before reading the tables.
	wait_for 60 all_cleared $(awk '/role=(prefill|decode)/ { sub("member=", "", $1); print $1 }' "$RUN/endpoints")
}

# rows MEMBER: the room rows of MEMBER's table as "state reason pages bytes"
# (kv-bench CLEARs its rooms; a Cleared room keeps its reason and counts).
rows() {
	"$KVW_BIN/kv-stat" --table "$(endpoint "$1" table)" --all |
		awk '$1 ~ /^[0-9]+$/ && NF >= 9 { print $2, $3, $7, $8 }'
}

# all_cleared MEMBER...: no room row of any MEMBER is in a state other
# than Cleared.
all_cleared() {
	local m
	for m; do
		rows "$m" | grep -qv '^Cleared ' && return 1
	done
	return 0
}

# bytes_of MEMBER: the bytes of every room row of MEMBER, one per line.
bytes_of() { rows "$1" | awk '{ print $4 }' | sort -u; }

@test "prefill PP 2 -> decode PP 1 with 2 draft layers on decode: every byte lands in its layer" {
	up --prefill-pp 2 --layers 4 --draft-layers 2 --heads 2
	bench --prefill-tp 1 --prefill-pp 2 --decode-tp 1
	# Each stage moved its own 2 layers (K and V, 5 pages of 128 bytes)
	# plus the aux slot: nobody moved the other stage's layers.
	[ "$(bytes_of p0)" = $((2 * 2 * 5 * 128 + 64)) ]
	[ "$(bytes_of p1)" = $((2 * 2 * 5 * 128 + 64)) ]
	# The decode rank holds 4 target + 2 draft layers (K, V) + AUX = 13
	# buffers and registered all 13 with both stages: pairing by layer id
	# skipped the drafts, and every room landed all 5 pages.
	grep -q ", 13 buffers" "$RUN/logs/d0.log"
	grep -q "d0.peer registered .*13 buffers" "$RUN/logs/p0.log"
	grep -q "d0.peer registered .*13 buffers" "$RUN/logs/p1.log"
	[ "$(rows d0 | awk '{ print $3 }' | sort -u)" = "5/5" ]
}

@test "uneven PP: 15 layers over prefill PP 2 (8 + 7) land byte-exact on decode PP 1" {
	up --prefill-pp 2 --layers 15 --heads 2
	bench --prefill-pp 2
	[ "$(bytes_of p0)" = $((8 * 2 * 5 * 128 + 64)) ]
	[ "$(bytes_of p1)" = $((7 * 2 * 5 * 128 + 64)) ]
}

@test "prefill PP 2 -> decode PP 2: each decode stage gets only its stage's layers" {
	up --prefill-pp 2 --decode-pp 2 --layers 5 --heads 2
	bench --prefill-pp 2 --decode-pp 2
	[ "$(bytes_of p0)" = $((3 * 2 * 5 * 128 + 64)) ]
	[ "$(bytes_of p1)" = $((2 * 2 * 5 * 128 + 64)) ]
}

@test "prefill TP 2 -> decode TP 4, MHA 8 heads: head slices land byte-exact" {
	up --prefill-tp 2 --decode-tp 4 --layers 3 --heads 8
	bench --prefill-tp 2 --decode-tp 4
	# A prefill rank (4 heads) serves 2 decode ranks with 2 heads each:
	# each rank moved 3 layers x K,V x 5 pages x 4 tokens x 4 heads x 16 B
	# (two destinations of half a slot each) plus aux to each destination.
	[ "$(bytes_of p0)" = $((3 * 2 * 5 * 4 * 4 * 16 + 2 * 64)) ]
	[ "$(bytes_of p1)" = $((3 * 2 * 5 * 4 * 4 * 16 + 2 * 64)) ]
}

@test "prefill TP 4 -> decode TP 2, MHA 8 heads: two prefill slices fill each decode slot" {
	up --prefill-tp 4 --decode-tp 2 --layers 3 --heads 8
	bench --prefill-tp 4 --decode-tp 2
	for p in p0 p1 p2 p3; do
		[ "$(bytes_of $p)" = $((3 * 2 * 5 * 4 * 2 * 16 + 64)) ]
	done
}

@test "prefill TP 2 -> decode TP 4 with 2 KV heads: replicated heads land byte-exact" {
	up --prefill-tp 2 --decode-tp 4 --layers 3 --heads 2
	bench --prefill-tp 2 --decode-tp 4
	# One head per prefill rank, replicated to 2 decode ranks each.
	[ "$(bytes_of p0)" = $((2 * (3 * 2 * 5 * 4 * 16 + 64))) ]
	[ "$(bytes_of p1)" = $((2 * (3 * 2 * 5 * 4 * 16 + 64))) ]
}

@test "prefill TP 4 -> decode TP 2 MLA: dummy ranks end without moving a byte or sending STATUS" {
	# Debug logs: the receivers log every STATUS they drop, including one
	# for a room that already ended (which bumps no counter).
	KVW_LOG=debug up --prefill-tp 4 --decode-tp 2 --layers 3 --mla
	bench --prefill-tp 4 --decode-tp 2
	# Real targets p0 (for d0) and p2 (for d1): 3 latent buffers x 5
	# pages x 4 tokens x 16 B, plus aux.
	[ "$(rows p0 | sort -u)" = "Cleared - 5/5 $((3 * 5 * 4 * 16 + 64))" ]
	[ "$(rows p2 | sort -u)" = "Cleared - 5/5 $((3 * 5 * 4 * 16 + 64))" ]
	# Dummies p1 and p3: their 6 rooms left Bootstrapping (kv-bench waits
	# for that before sending), ended with no failure reason, 0 pages and
	# 0 bytes.
	for m in p0 p1 p2 p3; do echo "$m:"; rows "$m"; done # shown on failure
	[ "$(rows p1 | wc -l)" -eq 6 ]
	[ "$(rows p1 | sort -u)" = "Cleared - 0/5 0" ]
	[ "$(rows p3 | sort -u)" = "Cleared - 0/5 0" ]
	# Decode never got a STATUS from a dummy: one from a rank that is
	# not a real target of an open room is counted as stale, and the
	# stale counters stay 0 while every room succeeded.
	run "$KVW_BIN/kv-stat" --table "$(endpoint d0 table)"
	echo "$output"
	[[ "$output" =~ stale=0 ]]
	[[ "$output" =~ p1\.peer ]]
	run "$KVW_BIN/kv-stat" --table "$(endpoint d1 table)"
	[[ "$output" =~ stale=0 ]]
	[[ "$output" =~ p3\.peer ]]
	# Nor after its room ended: a STATUS for an ended or unknown room is
	# only logged ("STATUS for a ... room: ignored"), and each of the 6
	# rooms succeeded on the one real target's STATUS.
	for d in d0 d1; do
		grep -c "Success (1 of 1 prefill ranks)" "$RUN/logs/$d.log"
		[ "$(grep -c "Success (1 of 1 prefill ranks)" "$RUN/logs/$d.log")" -eq 6 ]
		refute grep "STATUS" "$RUN/logs/$d.log"
	done
}

@test "kv-bench --role prefill|decode, TP 4 -> 2 MLA: the prefill side clears a room only once its dummy ranks ended it" {
	# The dummy p1 stopped for the decode side's whole run: decode's
	# Success of every room reaches the prefill side's kv-bench, which
	# may not CLEAR any rank of a room while p1 has not ended it (a CLEAR
	# that beat p1's transfer info left it "cleared while Bootstrapping").
	up --prefill-tp 4 --decode-tp 2 --layers 3 --mla
	port=$(free_port_base 1)
	w=(--peer "tcp://127.0.0.1:$port" --insecure --rooms 6 --pages-per-room 5
		--chunk-pages 2 --concurrency 3 --verify --seed 11)
	p1=$(cat "$RUN/pids/p1.pid")
	kill -STOP "$p1"
	STOPPED=$p1
	timeout 120 "$KVW_BIN/kv-bench" --run-dir "$RUN" --role prefill "${w[@]}" >"$RUN/p.out" 2>&1 &
	pb=$!
	echo "$pb" >>"$RUN/bg.pids"
	run timeout 120 "$KVW_BIN/kv-bench" --run-dir "$RUN" --role decode "${w[@]}"
	echo "$output"
	[[ "$output" == *"rooms=6 success=6 failed=0 aborted=0 stuck=0 corrupt=0 "* ]]
	# Every room's Success went to the prefill side long ago; with p1
	# stopped not one of them is cleared at the real targets.
	rows p0
	[ "$(rows p0 | wc -l)" -eq 6 ]
	refute grep -q '^Cleared' <(rows p0; rows p2)
	kill -CONT "$p1"
	STOPPED=
	wait_for 60 gone "$pb"
	wait "$pb"
	cat "$RUN/p.out"
	wait_for 60 all_cleared p0 p1 p2 p3 d0 d1
	for m in p0 p1 p2 p3; do echo "$m:"; rows "$m"; done # shown on failure
	[ "$(rows p0 | sort -u)" = "Cleared - 5/5 $((3 * 5 * 4 * 16 + 64))" ]
	[ "$(rows p2 | sort -u)" = "Cleared - 5/5 $((3 * 5 * 4 * 16 + 64))" ]
	[ "$(rows p1 | wc -l)" -eq 6 ]
	[ "$(rows p1 | sort -u)" = "Cleared - 0/5 0" ]
	[ "$(rows p3 | sort -u)" = "Cleared - 0/5 0" ]
}

@test "a decode rank with another page size: its rooms fail with reason bootstrap, the log names the mismatch" {
	up --layers 2 --heads 2
	start_ready rx 60 "$KVW_BIN/kv-receiver" --listen "ipc://$RUN/x.peer" \
		--engine "ipc://$RUN/x.eng" --table "$RUN/x.rooms" \
		--pool "$RUN/kvwire.x.pool" --layers 2 --heads 2 --head-dim 8 \
		--pages 64 --aux-slots 16 --page-tokens 8
	timeout 10 "$KVW_BIN/kv-ctl" recv-begin "ipc://$RUN/x.eng" 77 \
		"$(endpoint bootstrap listen)" 0 1,2,3
	failed_bootstrap() {
		"$KVW_BIN/kv-stat" --table "$RUN/x.rooms" --room 77 |
			grep -q "^77 *Failed *bootstrap"
	}
	wait_for 20 failed_bootstrap
	grep "page size mismatch: prefill 4 tokens, decode 8" "$RUN/rx.log"
	# The prefill side never saw the room.
	[ -z "$(rows p0)" ]
}

@test "kv-up refuses a decode PP that is neither 1 nor the prefill PP; kv-receiver takes --all-cp-ranks" {
	run timeout 10 "$KVW_ROOT/bin/kv-up" --run-dir "$RUN/g" --prefill-pp 2 --decode-pp 3
	[ "$status" -eq 100 ]
	[[ "$output" == *"--decode-pp must be 1 or the prefill PP"* ]]
	run "$KVW_BIN/kv-receiver" --help
	[[ "$output" == *"--all-cp-ranks"* ]]
	run "$KVW_BIN/kv-receiver" --all-cp-ranks=1 --listen x
	[ "$status" -eq 100 ]
}
