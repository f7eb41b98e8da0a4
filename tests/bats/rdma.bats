#!/usr/bin/env bats
# rdma.bats - the rdma transport from the command line. On a machine
# without an RDMA device (this one, and CI): every program asked for it
# refuses at once with exit 77 and the probe's "rdma: not available: <why>"
# (kv-bench copy, kv-bench --spawn through kv-up), having made nothing;
# --rdma-device and --rdma-gid-index are taken by the members and a bad
# index is a usage error; the device script's preflight says plainly why
# the kernel cannot, and changes nothing. Where `kv-probe rdma` succeeds,
# the same file moves rooms over RDMA byte-exact (TP 1 -> 1 and, with a
# third aborted, TP 2 -> 4) and kv-bench copy verifies, and where it also
# has a GPU, moves rooms between GPU pools (--gpu-pools: registered device
# memory, skipped with kvwire's refusal where the device registers none);
# tests/device/rdma.sh is the fuller device run (abort storm, ib_write_bw).

load helpers

SHAPE="--layers 2 --pages 512 --heads 8 --head-dim 16 --aux-slots 64"

setup() {
	kvw_setup
	TAG=rdma-$$-$BATS_TEST_NUMBER
	POOL=/dev/shm/kvwire.$TAG.pool
	EPS=(--listen "ipc://$RUN/m.peer" --engine "ipc://$RUN/m.eng"
		--table "/dev/shm/kvwire.$TAG.rooms")
}
teardown() {
	rm -f "/dev/shm/kvwire.$TAG.rooms" "$POOL"
	kvw_teardown
}

has_rdma() { "$KVW_BIN/kv-probe" rdma >/dev/null 2>&1; }
need_no_device() { ! has_rdma || skip "this machine has a usable RDMA device"; }
need_device() { has_rdma || skip "no usable RDMA device here (kv-probe rdma)"; }

@test "rdma without a device: kv-bench copy exits 77 with the probe's reason and makes no pool" {
	need_no_device
	run_copy 20 --transport rdma --mib 1
	echo "$output"
	[ "$status" -eq 77 ]
	[[ $output == *"kv-bench: fatal: copy: rdma: not available: "* ]]
	[ -z "$(copy_pools)" ]
}

@test "rdma without a device: kv-bench --spawn exits 77 with kv-up's reason, no run directory left" {
	need_no_device
	before=$(ls -d /tmp/kvw-bench.* 2>/dev/null | wc -l)
	run timeout 60 kv-bench --spawn --up-arg --transport --up-arg rdma --rooms 2 $SHAPE
	echo "$output"
	[ "$status" -eq 77 ]
	[[ $output == *"transport 'rdma' is not available here: rdma: not available: "* ]]
	[ "$(ls -d /tmp/kvw-bench.* 2>/dev/null | wc -l)" -eq "$before" ]
}

@test "rdma flags: members take --rdma-device and --rdma-gid-index (77 here, not 100); a bad index is 100" {
	run kv-receiver --check "${EPS[@]}" --pool "$POOL" --transport rdma \
		--rdma-device mlx5_0 --rdma-gid-index 3
	echo "$output"
	if has_rdma; then
		# A device named mlx5_0 may exist; either way not a usage error.
		[ "$status" -ne 100 ]
	else
		[ "$status" -eq 77 ]
		[[ $output == *"rdma: not available: "* ]]
	fi
	run kv-sender --check "${EPS[@]}" --pool "$POOL" --transport rdma \
		--rdma-gid-index 70000
	[ "$status" -eq 100 ]
	[[ $output == *"bad --rdma-gid-index: 70000"* ]]
	run kv-receiver --check "${EPS[@]}" --pool "$POOL" --rdma-device ""
	[ "$status" -eq 100 ]
	[ -z "$(ls /dev/shm | grep -F "$TAG")" ]
}

@test "tests/device/rdma.sh --preflight: 77 with the kernel's reason where it cannot, nothing changed" {
	before_mods=$(ls /sys/module 2>/dev/null | wc -l)
	before_tmp=$(ls -d /tmp/kvw-rdma.* 2>/dev/null | wc -l)
	run timeout 30 "$KVW_ROOT/tests/device/rdma.sh" --preflight
	echo "$output"
	if [ "$status" -eq 0 ]; then
		[[ $output == *"can run here"* ]]
		skip "this machine can run the device checks"
	fi
	[ "$status" -eq 77 ]
	[[ $output == *"rdma.sh: cannot run here: "* ]]
	[ "$(ls /sys/module 2>/dev/null | wc -l)" -eq "$before_mods" ]
	[ "$(ls -d /tmp/kvw-rdma.* 2>/dev/null | wc -l)" -eq "$before_tmp" ]
	# Without --preflight it stops at the same point, also changing nothing.
	run timeout 30 "$KVW_ROOT/tests/device/rdma.sh"
	[ "$status" -eq 77 ]
	[ "$(ls -d /tmp/kvw-rdma.* 2>/dev/null | wc -l)" -eq "$before_tmp" ]
}

@test "rdma device: TP 1 -> 1, kv-bench --verify moves 500 rooms byte-exact by RDMA WRITE" {
	need_device
	kv_up --transport rdma --workers 2 $SHAPE
	run timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 500 \
		--pages-per-room 8 --chunk-pages 3 --verify
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(summary success)" = 500 ]
	timeout 60 "$KVW_ROOT/bin/kv-up" --stop "$RUN"
	grep -Eq "rdma: stopping: [1-9][0-9]* queue pairs, [1-9][0-9]* batches landed" "$RUN/logs/d0.log"
}

@test "rdma device: TP 2 -> 4 with a third of the rooms aborted: every room terminal, none corrupt" {
	need_device
	kv_up --transport rdma --workers 2 --prefill-tp 2 --decode-tp 4 $SHAPE
	run timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN" --prefill-tp 2 \
		--decode-tp 4 --rooms 200 --pages-per-room 8 --chunk-pages 3 \
		--verify --abort-frac 0.33
	echo "$output"
	[ "$(summary rooms)" = 200 ]
	[ "$(summary stuck)" = 0 ]
	[ "$(summary corrupt)" = 0 ]
	[ "$(summary failed)" = 0 ]
}

@test "rdma device and a GPU: kv-bench --gpu-pools --verify moves 300 rooms from GPU memory to GPU memory by RDMA WRITE" {
	need_device
	run "$KVW_BIN/kv-probe" cuda
	[ "$status" -eq 0 ] || skip "no GPU here: $output"
	kv_up --transport rdma --workers 2 $SHAPE
	run timeout 300 "$KVW_BIN/kv-bench" --run-dir "$RUN" --rooms 300 \
		--pages-per-room 8 --chunk-pages 3 --verify --gpu-pools
	echo "$output"
	# Soft-RoCE's regions are host pages: it registers no GPU memory.
	if [ "$(summary success)" != 300 ] &&
		grep -q "unable to register device memory" "$RUN"/logs/*.log; then
		skip "$(grep -h -m1 "unable to register device memory" "$RUN"/logs/*.log)"
	fi
	[ "$status" -eq 0 ]
	[ "$(summary success)" = 300 ]
	[ "$(summary corrupt)" = 0 ]
	grep -q "GPU pool .* registered on" "$RUN/logs/d0.log"
	grep -q "GPU pool .* registered on" "$RUN/logs/p0.log"
}

@test "rdma device: kv-bench copy --transport rdma verifies both patterns" {
	need_device
	run timeout 120 kv-bench copy --transport rdma --mib 16 --reps 1
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c ' yes$' <<<"$output")" -eq 2 ]
}
