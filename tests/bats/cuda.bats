#!/usr/bin/env bats
# cuda.bats - the GPU transport on a machine without a GPU (CI): kv-probe
# and every program given --transport cuda say why it is not available and
# exit 77, making nothing; the hand-made runtime declarations build with
# and without the CUDA headers (make cuda-decl). Then the whole cuda path
# over the CPU stand-in runtime (tests/fakecuda/, KVW_CUDART): engines
# register "GPU" pools, workers open them from other processes and copy,
# byte-exact, and an abort storm leaves every canary intact. The stand-in
# proves the plumbing, not the GPU: tests/device/run.sh is the GPU check.

load helpers

FAKE=$KVW_ROOT/build/default/tests/libfakecudart.so
SHAPE="--layers 2 --pages 256 --page-tokens 4 --heads 2 --head-dim 16 --aux-slots 32 --aux-bytes 16"

setup() {
	kvw_setup
	TAG=cu-$$-$BATS_TEST_NUMBER
	TAB=/dev/shm/kvwire.$TAG.rooms
	POOL=/dev/shm/kvwire.$TAG.pool
	EPS=(--listen "ipc://$RUN/m.peer" --engine "ipc://$RUN/m.eng" --table "$TAB")
}
teardown() {
	rm -f "$TAB" "$POOL"
	kvw_teardown
}

nothing_made() {
	[ -z "$(ls /dev/shm | grep -F "$TAG")" ] || { ls -l /dev/shm | grep -F "$TAG"; return 1; }
	[ ! -e "$RUN/m.peer" ] && [ ! -e "$RUN/m.eng" ]
}

# A runtime's libcudart without a driver, where the machine has one.
real_cudart() {
	ls /usr/local/cuda/lib*/libcudart.so* 2>/dev/null | head -n 1
}

need_fake() {
	[ -f "$FAKE" ] || skip "no $FAKE (make bats builds it)"
}

@test "kv-probe cuda without the runtime library: not available, why, exit 77" {
	KVW_CUDART=/nonexistent/libcudart.so run kv-probe cuda
	[ "$status" -eq 77 ]
	[ "$output" = "cuda: not available: libcudart not found at KVW_CUDART=/nonexistent/libcudart.so" ]
}

@test "kv-probe cuda with the runtime but no driver: not available, the runtime's reason, exit 77" {
	lib=$(real_cudart)
	[ -n "$lib" ] || skip "no libcudart under /usr/local/cuda"
	KVW_CUDART=$lib run kv-probe cuda
	if [ "$status" -eq 0 ]; then
		skip "this machine has a usable GPU"
	fi
	[ "$status" -eq 77 ]
	[[ $output == "cuda: not available: cudaGetDeviceCount failed (error "* ]]
}

@test "--transport cuda without a GPU: kv-sender, kv-receiver, kv-up and kv-bench exit 77 with the probe's text, nothing made" {
	export KVW_CUDART=/nonexistent/libcudart.so
	want="cuda: not available: libcudart not found"
	run kv-sender --check "${EPS[@]}" --pool "$POOL" --transport cuda
	[ "$status" -eq 77 ]
	[[ $output == *"$want"* ]]
	run timeout 10 kv-sender "${EPS[@]}" --pool "$POOL" --transport cuda
	[ "$status" -eq 77 ]
	[[ $output == *"$want"* ]]
	run timeout 10 kv-receiver "${EPS[@]}" --pool "$POOL" --transport cuda
	[ "$status" -eq 77 ]
	[[ $output == *"$want"* ]]
	run timeout 30 "$KVW_ROOT/bin/kv-up" --run-dir "$RUN/g" --transport cuda
	[ "$status" -eq 77 ]
	[[ $output == *"$want"* ]]
	[ ! -e "$RUN/g/endpoints" ]
	run timeout 30 kv-bench --spawn --transport cuda --verify
	[ "$status" -eq 77 ]
	[[ $output == *"$want"* ]]
	run timeout 30 kv-bench copy --transport cuda --mib 1
	[ "$status" -eq 77 ]
	[[ $output == *"$want"* ]]
	[ -z "$(ls /dev/shm | grep -F "bench-copy-")" ]
	nothing_made
}

@test "make cuda-decl: the runtime declarations build without the CUDA headers, and match them where they exist" {
	run make -s -C "$KVW_ROOT" cuda-decl CUDA_HOME=/nonexistent
	[ "$status" -eq 0 ]
	[[ $output == *"no CUDA headers under /nonexistent: cuda files build without them"* ]]
	[ -f /usr/local/cuda/include/cuda_runtime_api.h ] || skip "no CUDA headers here"
	run make -s -C "$KVW_ROOT" cuda-decl CUDA_HOME=/usr/local/cuda
	[ "$status" -eq 0 ]
	[[ $output == *"declarations match /usr/local/cuda/include/cuda_runtime_api.h"* ]]
}

@test "stand-in runtime: kv-bench --transport cuda --verify moves every room byte-exact between GPU pools" {
	need_fake
	export KVW_CUDART=$FAKE
	run timeout 120 kv-bench --spawn --transport cuda $SHAPE --up-arg --workers --up-arg 2 \
		--rooms 60 --pages-per-room 8 --concurrency 8 --verify --seed 5
	echo "$output"
	[ "$status" -eq 0 ]
	line=$(grep '^rooms=' <<<"$output")
	[[ $line == "rooms=60 success=60 failed=0 "* ]]
	[[ $line == *" corrupt=0 "* ]]
}

@test "stand-in runtime: abort storm over cuda, every aborted room releasable, no canary on GPU memory touched" {
	need_fake
	export KVW_CUDART=$FAKE KVW_TEST_COPY_DELAY_US=2000
	kv_up $SHAPE --workers 2 --transport cuda
	unset KVW_TEST_COPY_DELAY_US
	run timeout 120 kv-bench --run-dir "$RUN" --transport cuda --rooms 80 \
		--pages-per-room 8 --abort-frac 0.33 --verify --concurrency 8 \
		--seed 77 --room-timeout 60
	echo "$output"
	[ "$status" -eq 0 ]
	line=$(grep '^rooms=' <<<"$output")
	[[ $line == *" stuck=0 "* ]]
	[[ $line == *" corrupt=0 "* ]]
	aborted=$(sed -n 's/.* aborted=\([0-9]*\) .*/\1/p' <<<"$line")
	[ "$aborted" -ge 10 ]
}

@test "stand-in runtime: kv-bench copy --transport cuda measures both patterns against cudaMemcpy D2D and verifies" {
	need_fake
	export KVW_CUDART=$FAKE
	run timeout 60 kv-bench copy --transport cuda --mib 2 --reps 1 --seconds 0.01 --json
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(jq -r .limit <<<"$output")" = "cudaMemcpy D2D" ]
	[ "$(jq '[.results[] | select(.verified == true and .ratio > 0)] | length' <<<"$output")" -eq 2 ]
	[ -z "$(ls /dev/shm | grep -F "bench-copy-")" ]
}
