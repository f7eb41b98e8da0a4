#!/usr/bin/env bash
# tests/device/run.sh - the GPU checks of the cuda transport, one script,
# meant to finish well under 8 minutes on one GPU (sized for that, not yet
# timed on one: every step runs under a timeout, so a hang fails its step
# instead of the whole budget). It builds, runs the CUDA unit tests, then
# on the real runtime:
#   1. kv-bench --spawn --transport cuda --verify: prefill and decode engines
#      (KV on the GPU, registered with kvw_register_gpu_pool) and the group's
#      worker processes opening their IPC handles; every byte checked. With
#      two GPUs, again with the decode engines on GPU 1 (peer to peer).
#      Then GPU pools over loopback tcp (kv-bench --gpu-pools): pages staged
#      through the pinned host pools at both ends (lib/mem/mem_cuda.c).
#   2. the abort storm over cuda: aborted rooms releasable, the canaries
#      written into GPU memory after release never change.
#   3. kv-bench copy --transport cuda: the transport against cudaMemcpy
#      device-to-device of the same pages in the same run; the ratios must
#      be >= 0.9 (contiguous 64 KiB runs) and >= 0.6 (scattered pages).
# Without a GPU (no runtime, no driver, no device) it says why and exits 77,
# leaving nothing behind. Exit 0 all passed, 1 a check failed.
# Usage: tests/device/run.sh   (from anywhere; KVW_CUDART=path overrides the
# runtime library it finds)
set -u
cd "$(dirname "$0")/../.." || exit 111
start=$SECONDS
RUN=""
cleanup() {
	[ -n "$RUN" ] && [ -d "$RUN/pids" ] && timeout 30 bin/kv-up --stop "$RUN" >/dev/null 2>&1
	[ -n "$RUN" ] && rm -rf "$RUN"
}
trap cleanup EXIT
step() { printf '== %s (%ds)\n' "$*" $((SECONDS - start)); }
fail=0
check() { # check NAME CONDITION-RESULT(0/1)
	if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1"; fail=1; fi
}

# The runtime: on the loader's path, else a CUDA toolkit or a wheel's copy.
if [ -z "${KVW_CUDART:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcudart\.so'; then
	for f in /usr/local/cuda/lib64/libcudart.so* /usr/local/cuda/lib/libcudart.so* \
		/usr/lib/x86_64-linux-gnu/libcudart.so* \
		$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)/nvidia/cuda_runtime/lib/libcudart.so*; do
		[ -f "$f" ] && { export KVW_CUDART=$f; break; }
	done
fi

step "build"
timeout 180 make -j"$(nproc)" all >/tmp/kvw-device-build.log 2>&1 || { tail -30 /tmp/kvw-device-build.log; echo "FAIL build"; exit 1; }
why=$(bin/kv-probe cuda)
if [ $? -ne 0 ]; then
	echo "device checks skipped: $why"
	exit 77
fi
echo "$why (KVW_CUDART=${KVW_CUDART:-loader path})"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$ngpu" -ge 1 ] || ngpu=1
echo "gpus: $ngpu"; nvidia-smi -L 2>/dev/null

step "CUDA unit tests (argument checks, records, the transport over the CPU stand-in)"
make -j"$(nproc)" build/default/tests/test_gpool build/default/tests/test_xport_cuda \
	build/default/tests/test_mem >/dev/null 2>&1
out=$(./tests/unit/run.sh build/default/tests/test_gpool build/default/tests/test_xport_cuda \
	build/default/tests/test_mem 2>&1)
echo "$out" | tail -1
check "unit tests" $?
make -s cuda-decl 2>&1 | tail -1

# 8 layers of 32 KiB pages, 512 pages: 256 MiB per pool (host and GPU).
SHAPE=(--layers 8 --pages 512 --page-tokens 16 --heads 8 --head-dim 128 --dtype-bytes 2 --aux-slots 64)
MIB=128
# KVW_DEVICE_SMALL=1: tiny sizes, to try this script's own logic on a CPU
# with the stand-in runtime (KVW_CUDART=build/default/tests/libfakecudart.so).
if [ "${KVW_DEVICE_SMALL:-0}" = 1 ]; then
	SHAPE=(--layers 2 --pages 512 --page-tokens 4 --heads 2 --head-dim 16 --aux-slots 64)
	MIB=4
fi
bench_line() { grep '^rooms=' <<<"$1"; }
verify_run() { # verify_run NAME ARGS...: byte-exact run, every room Success
	local name=$1 out line
	shift
	out=$(timeout 100 bin/kv-bench --spawn --verify "${SHAPE[@]}" \
		--rooms 300 --pages-per-room 32 --concurrency 16 --seed 11 "$@" 2>&1)
	line=$(bench_line "$out")
	echo "$line"
	[[ $line == "rooms=300 success=300 failed=0 "* && $line == *" corrupt=0 "* ]]
	check "$name" $?
	[ -n "$line" ] || echo "$out" | tail -20
}

step "kv-bench --transport cuda --verify, one GPU"
verify_run "byte-exact, one GPU" --transport cuda
if [ "$ngpu" -ge 2 ]; then
	step "kv-bench --transport cuda --verify, prefill on GPU 0, decode on GPU 1"
	verify_run "byte-exact, two GPUs" --transport cuda --decode-gpu 1
fi

step "kv-bench --transport tcp --gpu-pools --verify: GPU pools over loopback tcp, staged through the pinned host pools"
verify_run "byte-exact, GPU pools over tcp" --transport tcp --gpu-pools

step "abort storm over cuda, canaries in GPU memory"
RUN=$(mktemp -d /tmp/kvwdev.XXXXXX)
if KVW_TEST_COPY_DELAY_US=2000 timeout 60 bin/kv-up --daemon --run-dir "$RUN" \
	"${SHAPE[@]}" --workers 2 --decode-tp 2 --transport cuda >/dev/null 2>&1; then
	out=$(timeout 100 bin/kv-bench --run-dir "$RUN" --transport cuda --rooms 200 \
		--pages-per-room 16 --abort-frac 0.33 --verify --concurrency 8 \
		--seed 77 --room-timeout 60 2>&1)
	line=$(bench_line "$out")
	echo "$line"
	aborted=$(sed -n 's/.* aborted=\([0-9]*\) .*/\1/p' <<<"$line")
	[[ $line == *" stuck=0 "* && $line == *" corrupt=0 "* ]] && [ "${aborted:-0}" -ge 20 ]
	check "abort storm, canaries intact" $?
else
	check "abort storm (kv-up did not start)" 1
fi
cleanup
RUN=""

step "kv-bench copy --transport cuda against cudaMemcpy D2D"
out=$(timeout 90 bin/kv-bench copy --transport cuda --mib "$MIB" --reps 5 --seconds 0.2 --json 2>&1)
echo "$out"
ratio() { jq -r --arg p "$1" '.results[] | select(.pattern == $p) | .ratio' <<<"$out" 2>/dev/null; }
verified=$(jq '[.results[] | select(.verified == true)] | length' <<<"$out" 2>/dev/null)
cr=$(ratio contiguous)
sr=$(ratio scattered)
echo "ratio to cudaMemcpy D2D: contiguous ${cr:-none} (>= 0.9), scattered ${sr:-none} (>= 0.6)"
[ "${verified:-0}" -eq 2 ]
check "copy verified" $?
awk -v r="${cr:-0}" 'BEGIN { exit !(r >= 0.9) }'
check "contiguous 64 KiB runs >= 0.9 x cudaMemcpy D2D" $?
awk -v r="${sr:-0}" 'BEGIN { exit !(r >= 0.6) }'
check "scattered pages >= 0.6 x cudaMemcpy D2D" $?

step "done"
exit $fail
