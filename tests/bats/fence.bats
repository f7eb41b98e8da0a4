#!/usr/bin/env bats
# fence.bats - the decode may release a room without the prefill (issue
# 36): over tcp, kv-receiver marks an aborted room releasable as soon as
# none of its sinks is writing it (the fence, table/rtab_fence.h), without
# waiting for the prefill's ABORT_ACK. Real processes under kv-up, whose
# sinks wait KVW_TEST_SINK_DELAY_US (TEST ONLY, lib/base/proc.h) between a
# batch's room check and its write:
#  - one room struck while its batch sits in that window (2 s): the
#    canary painted the moment it is releasable survives the sink's
#    write and a later room (deterministic: the sink's log says when it
#    is in the window);
#  - an abort storm (kv-bench aborting half of 40 rooms at random moments,
#    a canary over each aborted room's pages the moment it is releasable,
#    checked before reuse and at the end) with 0.3 s in the window: no
#    canary changes, and the receiver waited on the fence (its debug log
#    says so), so the race was run, not missed.

load helpers

SHAPE="--layers 2 --pages 512 --heads 8 --head-dim 16 --aux-slots 64"
# K0 K1 V0 V1 buffers of 64 pages x 128 bytes, for the one-room test
# (count and paint in helpers.bash read PAGES and ITEM).
SMALL="--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 --pages 64 --aux-slots 4 --aux-bytes 16"
ITEM=128
PAGES=64

setup() { kvw_setup; }
teardown() { kvw_teardown; }

field_is() { [ "$(field "$1" "$2" "$3")" = "$4" ]; }

@test "tcp, a sink holding a batch past its room check: the aborted room is releasable only after the write, the canary survives" {
	KVW_TEST_SINK_DELAY_US=2000000 kv_up_held --transport tcp $SMALL
	fill p0 ab
	fill d0 cd
	ctl recv-begin "$(endpoint d0 engine)" 91 "$(endpoint bootstrap listen)" 0 1,2,3,4
	wait_for 20 state_is d0 91 WaitingForInput
	ctl send-begin "$(endpoint p0 engine)" 91 4 1
	ctl send-chunk "$(endpoint p0 engine)" 91 --last 5,6,7,8
	# The sink checked room 91 (live) and now waits before writing it.
	wait_for 20 logged d0 "room 91: test delay before a batch"
	ctl abort "$(endpoint d0 engine)" 91
	wait_for 20 field_is d0 91 releasable true
	paint d0 5a 1,2,3,4
	# A later room through the same sink, to Success: the sink is past
	# room 91's batch (it serves its connections one batch at a time).
	ctl recv-begin "$(endpoint d0 engine)" 92 "$(endpoint bootstrap listen)" 1 10,11
	wait_for 20 state_is d0 92 WaitingForInput
	ctl send-begin "$(endpoint p0 engine)" 92 2 2
	ctl send-chunk "$(endpoint p0 engine)" 92 --last 12,13
	wait_for 30 state_is d0 92 Success
	echo "canary bytes left: $(count d0 5a 1,2,3,4) of $((4 * 4 * ITEM))"
	[ "$(count d0 5a 1,2,3,4)" -eq $((4 * 4 * ITEM)) ]
	[ "$(count d0 ab 10,11)" -eq $((2 * 4 * ITEM)) ]
}

@test "tcp, slowed sinks, an abort storm: no byte lands after a room is releasable (canaries intact), the fence was waited on" {
	KVW_TEST_SINK_DELAY_US=300000 kv_up_held --transport tcp $SHAPE
	grep -q "test-only delay KVW_TEST_SINK_DELAY_US: 300000 us" "$RUN/logs/d0.log"
	run timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 40 \
		--pages-per-room 8 --chunk-pages 4 --verify --abort-frac 0.5 \
		--room-timeout 120
	echo "$output"
	clean 40
	[ "$(summary failed)" = 0 ]
	[ "$(summary aborted)" -gt 0 ]
	grep -q "a sink is writing it: releasable once it stops" "$RUN/logs/d0.log"
}
