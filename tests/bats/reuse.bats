#!/usr/bin/env bats
# reuse.bats - room-id reuse races on a real group (issue 12, item 6): a
# STATUS or XFER_INFO of a previous incarnation of a room id never changes
# the next one, on a normal rank and on an MLA dummy rank. Incarnation 1 of
# room 5 runs to Success and is cleared everywhere; incarnation 2 reuses the
# id with its job held at p0's SIGSTOPped worker; then tests/peers/late.py
# plays the late frames of incarnation 1 in the real members' names (their
# src rank and epoch, the old incarnation's token from d0's debug log): a
# worker's late STATUS(Success), a restarted control's STATUS(Failed), the
# decode's XFER_INFO. Incarnation 2 must then reach Success on its own
# token with its bytes where it said, and incarnation 1's released pages
# (a canary) stay untouched. On the MLA group the dummy rank's XFER_INFO of
# incarnation 2 beats its SEND_BEGIN and must open the room, not be taken
# for a late one. Deadlines are 120 s: nothing here may end on one.

load helpers

# K0 K1 V0 V1 buffers of 64 pages x 128 bytes (4 tokens x 2 heads x 16 B).
SHAPE="--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 --pages 64 --aux-slots 4 --aux-bytes 16"
ITEM=128
PAGES=64
LATE="$BATS_TEST_DIRNAME/../peers/late.py"

# kvw_teardown resumes what a test left SIGSTOPped ($STOPPED).
setup() {
	kvw_setup
}

teardown() {
	kvw_teardown
}

up() { kv_up_held --heartbeat-interval 300 "$@"; }

field_is() { [ "$(field "$1" "$2" "$3")" = "$4" ]; }
# token N RANK: the token d0's N-th XFER_INFO of room 5 to prefill rank
# RANK carried (each target of an incarnation has its own).
token() {
	sed -n "s/.*room 5: XFER_INFO to prefill rank $2: token \([0-9]*\)\$/\1/p" \
		"$RUN/logs/d0.log" | sed -n "$1p"
}

# epoch_of MEMBER PEER: the epoch (hex) MEMBER's peer table has for PEER.
epoch_of() {
	"$KVW_BIN/kv-stat" --run-dir "$RUN" --json --all |
		jq -r --arg m "$1" --arg e "$(endpoint "$2" listen)" \
			'.tables[] | select(.name == $m) | .peers[] | select(.endpoint == $e) | .epoch'
}

# stale_is MEMBER N: MEMBER's stale counter.
stale_is() {
	[ "$("$KVW_BIN/kv-stat" --run-dir "$RUN" --json --all |
		jq -r --arg m "$1" '.tables[] | select(.name == $m) | .counters.stale')" = "$2" ]
}

# send PREFILL... : SEND_BEGIN and the last chunk (pages $SRC, aux $AUX)
# of room 5 at each PREFILL member.
send() {
	local p
	for p; do
		ctl send-begin "$(endpoint "$p" engine)" 5 2 "$AUX"
		ctl send-chunk "$(endpoint "$p" engine)" 5 --last "$SRC"
	done
}

# first PREFILL...: incarnation 1 of room 5 (d0 pages 1,2) to Success on
# every side, then cleared everywhere; its pages are painted 5a (released:
# the canary). Sets OLD (the token it sent p0).
first() {
	fill p0 ab
	fill d0 cd
	ctl recv-begin "$(endpoint d0 engine)" 5 "$(endpoint bootstrap listen)" 0 1,2
	wait_for 10 state_is d0 5 WaitingForInput
	SRC=3,4 AUX=0 send "$@"
	wait_for 10 state_is d0 5 Success
	local m
	for m in "$@" d0; do
		wait_for 10 state_is "$m" 5 Success
		ctl clear "$(endpoint "$m" engine)" 5
		wait_for 10 state_is "$m" 5 Cleared
	done
	OLD=$(token 1 0)
	[ -n "$OLD" ]
	paint d0 5a 1,2
}

# second PREFILL...: incarnation 2 of room 5 (d0 pages 10,11): the
# decode's XFER_INFO goes first and opens the room at every PREFILL (also
# a dummy one) before its SEND_BEGIN; its job is then held at p0's
# SIGSTOPped worker. Sets NEW (its token) and W.
second() {
	W=$(worker_of p0)
	kill -STOP "$W"
	STOPPED=$W
	ctl recv-begin "$(endpoint d0 engine)" 5 "$(endpoint bootstrap listen)" 1 10,11
	wait_for 10 state_is d0 5 WaitingForInput
	local p
	for p; do
		wait_for 10 state_is "$p" 5 WaitingForInput
	done
	NEW=$(token 2 0)
	[ -n "$NEW" ] && [ "$NEW" != "$OLD" ]
	SRC=12,13 AUX=1 send "$@"
	wait_for 10 field_is p0 5 outstanding 1
}

# late_status SRC MEMBER: incarnation 1's STATUS(Success) (a worker's) and
# STATUS(Failed) (a restarted control's) in MEMBER's name (src rank SRC,
# its epoch, the token incarnation 1 sent it) reach d0, which drops both;
# room 5 is still waiting.
late_status() {
	local e t
	e=$(epoch_of d0 "$2")
	t=$(token 1 "$1")
	[ -n "$e" ] && [ -n "$t" ]
	"$PY" "$LATE" status "$(endpoint d0 listen)" "$1" "$e" 5 success 0 "$t"
	"$PY" "$LATE" status "$(endpoint d0 listen)" "$1" "$e" 5 failed 5 "$t"
}

# finish: p0's worker runs again; incarnation 2 succeeds on its own token
# with its bytes on its pages, and incarnation 1's canary is untouched.
finish() {
	state_is d0 5 WaitingForInput Transferring
	kill -CONT "$W"
	STOPPED=
	wait_for 10 state_is d0 5 Success
	state_is p0 5 Success
	[ "$(count d0 ab 10,11)" -eq $((2 * ${NBUF:-4} * ITEM)) ]
	[ "$(count d0 5a 1,2)" -eq $((2 * ${NBUF:-4} * ITEM)) ]
}

@test "room id reuse: a late STATUS or XFER_INFO of the previous incarnation never changes the next one" {
	up $SHAPE
	first p0
	second p0
	late_status 0 p0
	wait_for 10 logged d0 "room 5: STATUS(Success) from rank 0 of another incarnation: dropped"
	wait_for 10 logged d0 "room 5: STATUS(Failed) from rank 0 of another incarnation: dropped"
	stale_is d0 2
	# The decode's XFER_INFO of incarnation 1 (pages 1,2, its token)
	# while incarnation 2's job is in flight: it changes nothing.
	"$PY" "$LATE" xfer-info "$(endpoint p0 listen)" 0 "$(epoch_of p0 d0)" 5 "$OLD" 0 1,2
	wait_for 10 logged p0 "room 5: XFER_INFO after the transfer started; ignored"
	finish
}

@test "room id reuse on an MLA dummy rank: its XFER_INFO that beats SEND_BEGIN opens the room; late frames of the old incarnation change nothing" {
	# Prefill TP 2 -> decode TP 1, MLA: p0 is the real target of d0,
	# p1 a dummy (its XFER_INFO carries no pages and sets no table peer).
	up --layers 2 --page-tokens 4 --head-dim 8 --dtype-bytes 2 --pages 64 \
		--aux-slots 4 --aux-bytes 16 --prefill-tp 2 --decode-tp 1 --mla
	# The MLA layout: one latent buffer per layer, pages of 4 x 8 x 2 B.
	NBUF=2
	ITEM=64
	first p0 p1
	field_is p1 5 peer 0
	field_is p1 5 bytes 0
	second p0 p1
	# p1's room was opened by the dummy XFER_INFO (before SEND_BEGIN)
	# and ends at once, with no byte and no STATUS.
	wait_for 10 state_is p1 5 Success
	field_is p1 5 bytes 0
	late_status 0 p0
	late_status 1 p1
	wait_for 10 logged d0 "room 5: STATUS(Failed) from rank 0 of another incarnation: dropped"
	# A dummy rank is no STATUS target: counted stale, changes nothing.
	wait_for 10 logged d0 "room 5: STATUS from rank 1, not a target"
	wait_for 10 stale_is d0 4
	# The dummy XFER_INFO of incarnation 1, late at p1, whose ended
	# incarnation 2 had d0's XFER_INFO under another token: taken for a
	# later incarnation's (one decode's frames keep their order) and held
	# until 2 is cleared; incarnation 2 is not changed by it.
	"$PY" "$LATE" xfer-info "$(endpoint p1 listen)" 0 "$(epoch_of p1 d0)" 5 "$(token 1 1)" 0 dummy
	wait_for 10 logged p1 "room 5: XFER_INFO (token $(token 1 1)) for the id's next incarnation: held until this one is cleared"
	state_is p1 5 Success
	field_is p1 5 bytes 0
	finish
}
