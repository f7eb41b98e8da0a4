#!/bin/bash
# rdma.sh - the rdma transport on a real verbs device: the checks that need
# hardware (issue 19). Uses the machine's RDMA device when it has one, else
# makes a Soft-RoCE device (rdma_rxe) on the first interface with an IPv4
# address; a kernel that cannot (no CONFIG_INFINIBAND, no rdma_rxe) is said
# plainly and the script exits 77 having changed nothing.
#
#   1. kv-probe rdma says available
#   2. TP 1 -> 1: kv-bench --verify, 2000 rooms byte-exact; the decode's log
#      shows queue pairs handed out and batches landed (bytes went by RDMA)
#   3. TP 2 -> 4 with a third of the rooms aborted: all terminal, nothing
#      stuck or corrupt
#   4. the abort storm with canaries (as tests/bats/abort.bats runs it on
#      shm: slowed copies, a third aborted at random moments; every aborted
#      room releasable, no canary byte touched), one decode rank and two
#   5. kv-bench copy --transport rdma next to ib_write_bw (perftest) on the
#      same device, 64 KiB messages
#   6. GPU pools over rdma, where the machine also has a GPU (kv-probe
#      cuda): kv-bench --transport rdma --gpu-pools --verify, 500 rooms
#      byte-exact, the engines' KV on the GPU; both ends' logs say their
#      GPU pool was registered (through dmabuf or peer memory) and the
#      decode's that batches landed. No GPU: said and skipped. A device
#      that registers no GPU memory either way (Soft-RoCE cannot: its
#      memory regions are host pages) is said, with kvwire's refusal, and
#      skipped; neither counts as a failure.
#
# Usage: tests/device/rdma.sh [--preflight] [--keep]
#   --preflight  only say whether this machine can run the checks (exit 0)
#                or not (77, and why); changes nothing
#   --keep       keep the work directory (logs) under /tmp
# As root it installs what is missing (rdma-core, ibverbs-providers,
# ibverbs-utils, perftest, iproute2, kmod), loads rdma_rxe if needed and
# adds the device kvwrxe0; on exit it removes the device and unloads the
# module again if it loaded it, and stops every group it started. With $OUT
# set (the device machine's result folder) the logs go there as one
# tarball. Exit: 0 every check passed, 1 one failed, 77 this machine
# cannot, 111 setup failed (build, packages).
set -u
cd "$(dirname "$0")/../.." || exit 111
ROOT=$(pwd)
BIN=$ROOT/bin
PREFLIGHT=0 KEEP=0
for a in "$@"; do
	case $a in
	--preflight) PREFLIGHT=1 ;;
	--keep) KEEP=1 ;;
	--help | -h) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "rdma.sh: fatal: unknown option $a" >&2; exit 100 ;;
	esac
done

say() { echo "rdma.sh: $*"; }
cannot() { echo "rdma.sh: cannot run here: $*" >&2; exit 77; }
fatal() { echo "rdma.sh: fatal: $*" >&2; exit 111; }

# ---- preflight: reads only --------------------------------------------

kconfig() {
	if [ -r /proc/config.gz ]; then
		zcat /proc/config.gz 2>/dev/null
	elif [ -r "/boot/config-$(uname -r)" ]; then
		cat "/boot/config-$(uname -r)"
	fi
}

MODE="" DEV="" RXE_IF=""
preflight() {
	local cfg kv
	kv=$(uname -r)
	DEV=${KVW_RDMA_DEVICE:-}
	if [ -n "$DEV" ]; then
		[ -e "/sys/class/infiniband/$DEV" ] ||
			cannot "KVW_RDMA_DEVICE=$DEV: no such RDMA device (/sys/class/infiniband has: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' '))"
		MODE=device
		return
	fi
	DEV=$(ls /sys/class/infiniband 2>/dev/null | head -n 1)
	if [ -n "$DEV" ]; then
		MODE=device
		return
	fi
	# No device: Soft-RoCE needs the kernel's RDMA core and rdma_rxe.
	cfg=$(kconfig)
	if [ -n "$cfg" ]; then
		grep -q '^CONFIG_INFINIBAND=[ym]' <<<"$cfg" ||
			cannot "no RDMA device, and kernel $kv is built without RDMA support (CONFIG_INFINIBAND is not set), so no Soft-RoCE device can exist either"
		grep -q '^CONFIG_RDMA_RXE=[ym]' <<<"$cfg" ||
			cannot "no RDMA device, and kernel $kv is built without Soft-RoCE (CONFIG_RDMA_RXE is not set)"
	fi
	if [ ! -d /sys/module/rdma_rxe ] && ! grep -q '^CONFIG_RDMA_RXE=y' <<<"$cfg"; then
		find "/lib/modules/$kv" -name 'rdma_rxe.ko*' 2>/dev/null | grep -q . ||
			cannot "no RDMA device, and no rdma_rxe module for kernel $kv (nothing in /lib/modules/$kv)"
	fi
	[ "$(id -u)" -eq 0 ] || cannot "Soft-RoCE needs root (modprobe, rdma link add)"
	command -v ip >/dev/null || cannot "no ip command (iproute2) to find an interface for Soft-RoCE"
	RXE_IF=$(ip -o -4 addr show up scope global 2>/dev/null | awk '{print $2; exit}')
	[ -n "$RXE_IF" ] || cannot "no interface with an IPv4 address to put Soft-RoCE on"
	MODE=rxe
	DEV=kvwrxe0
}

preflight
if [ "$PREFLIGHT" = 1 ]; then
	case $MODE in
	device) say "can run here: RDMA device $DEV" ;;
	rxe) say "can run here: Soft-RoCE device $DEV on $RXE_IF (made at run time)" ;;
	esac
	exit 0
fi

# ---- from here on, everything made is undone on exit ------------------

WORK=$(mktemp -d /tmp/kvw-rdma.XXXXXX) || fatal "mktemp"
LOADED_MOD=0 ADDED_LINK=0 SRV=""
GROUPS_UP=()
cleanup() {
	local g
	for g in "${GROUPS_UP[@]}"; do
		timeout 60 "$BIN/kv-up" --stop "$g" >/dev/null 2>&1
	done
	[ -n "$SRV" ] && kill "$SRV" 2>/dev/null
	[ "$ADDED_LINK" = 1 ] && rdma link delete "$DEV" 2>/dev/null
	[ "$LOADED_MOD" = 1 ] && modprobe -r rdma_rxe 2>/dev/null
	if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
		tar czf "$OUT/rdma-logs.tgz" -C "$WORK" . 2>/dev/null
	fi
	if [ "$KEEP" = 1 ]; then
		echo "rdma.sh: logs kept in $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
	missing=()
	for p in rdma-core ibverbs-providers ibverbs-utils perftest iproute2 kmod \
		libibverbs-dev; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
			missing+=("$p")
	done
	if [ "${#missing[@]}" -gt 0 ]; then
		say "installing: ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y --no-install-recommends "${missing[@]}" >"$WORK/apt.log" 2>&1 ||
			{ apt-get update -q >>"$WORK/apt.log" 2>&1 &&
				apt-get install -y --no-install-recommends "${missing[@]}" >>"$WORK/apt.log" 2>&1; } ||
			fatal "unable to install: ${missing[*]} (see apt.log)"
	fi
fi

if [ "$MODE" = rxe ]; then
	if [ ! -d /sys/module/rdma_rxe ]; then
		modprobe rdma_rxe 2>"$WORK/modprobe.err" ||
			cannot "modprobe rdma_rxe: $(cat "$WORK/modprobe.err")"
		LOADED_MOD=1
	fi
	rdma link add "$DEV" type rxe netdev "$RXE_IF" 2>"$WORK/link.err" ||
		cannot "rdma link add $DEV type rxe netdev $RXE_IF: $(cat "$WORK/link.err")"
	ADDED_LINK=1
fi
for _ in $(seq 1 50); do
	ibv_devinfo -d "$DEV" 2>/dev/null | grep -q PORT_ACTIVE && break
	sleep 0.2 # poll interval of a bounded wait_for (50 tries), not a synchronisation
done
ibv_devinfo -d "$DEV" >"$WORK/devinfo.txt" 2>&1
grep -q PORT_ACTIVE "$WORK/devinfo.txt" || fatal "$DEV has no active port (see devinfo.txt)"
export KVW_RDMA_DEVICE=$DEV
say "device $DEV ($MODE), $(grep -m1 link_layer "$WORK/devinfo.txt" | tr -s ' \t' ' ')"

make -j"$(nproc)" all >"$WORK/make.log" 2>&1 || fatal "make failed (see make.log)"

# ---- the checks ---------------------------------------------------------

PASSED=() FAILED=() SKIPPED=()
result() { # NAME RC
	if [ "$2" -eq 0 ]; then PASSED+=("$1"); say "PASS $1"; else FAILED+=("$1"); say "FAIL $1"; fi
}
field() { sed -n "s/.* $2=\([0-9.]*\).*/\1/p; s/^$2=\([0-9.]*\).*/\1/p" <<<"$1" | head -n 1; }

# group NAME KV-UP-ARGS...: starts a group over rdma in $WORK/NAME.
group() {
	local name=$1
	shift
	GROUPS_UP+=("$WORK/$name")
	timeout 120 "$BIN/kv-up" --daemon --run-dir "$WORK/$name" --transport rdma "$@" \
		>"$WORK/$name.up" 2>&1
}

# bench NAME BENCH-ARGS...: kv-bench on group NAME, then the group stopped;
# its summary line in $LINE, exit status in $BRC.
bench() {
	local name=$1
	shift
	timeout 600 "$BIN/kv-bench" --run-dir "$WORK/$name" "$@" >"$WORK/$name.out" 2>&1
	BRC=$?
	timeout 60 "$BIN/kv-up" --stop "$WORK/$name" >/dev/null 2>&1
	LINE=$(grep '^rooms=' "$WORK/$name.out")
	say "$name: exit $BRC: $LINE"
	grep -h "rdma: stopping" "$WORK/$name"/logs/d*.log 2>/dev/null | sed 's/^/    /'
}

# landed NAME: every decode rank handed out queue pairs and saw batches land.
landed() {
	local f ok=0
	for f in "$WORK/$1"/logs/d*.log; do
		grep -Eq "rdma: stopping: [1-9][0-9]* queue pairs, [1-9][0-9]* batches landed" "$f" || ok=1
	done
	return $ok
}

"$BIN/kv-probe" rdma >"$WORK/probe.txt" 2>&1
rc=$?
say "kv-probe rdma: $(cat "$WORK/probe.txt")"
result probe $rc
[ "$rc" -eq 0 ] || { say "the transport cannot open $DEV: nothing else can run"; exit 1; }

SHAPE=(--layers 2 --pages 512 --heads 8 --head-dim 16 --aux-slots 64)
ASHAPE=(--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 --pages 1024 --aux-slots 16 --aux-bytes 16)

if group tp11 --workers 2 "${SHAPE[@]}"; then
	bench tp11 --rooms 2000 --pages-per-room 8 --chunk-pages 3 --verify
	[ "$BRC" -eq 0 ] && [ "$(field "$LINE" success)" = 2000 ] &&
		[ "$(field "$LINE" corrupt)" = 0 ] && landed tp11
	result "tp1->1 verify 2000 rooms" $?
else
	result "tp1->1 verify 2000 rooms (group did not start: $(tail -n 1 "$WORK/tp11.up"))" 1
fi

if group tp24 --workers 2 --prefill-tp 2 --decode-tp 4 "${SHAPE[@]}"; then
	bench tp24 --prefill-tp 2 --decode-tp 4 --rooms 400 --pages-per-room 8 \
		--chunk-pages 3 --verify --abort-frac 0.33
	[ "$(field "$LINE" rooms)" = 400 ] && [ "$(field "$LINE" stuck)" = 0 ] &&
		[ "$(field "$LINE" corrupt)" = 0 ] && [ "$(field "$LINE" failed)" = 0 ] &&
		[ "$(field "$LINE" aborted)" -gt 0 ] && landed tp24
	result "tp2->4 verify 400 rooms, a third aborted" $?
else
	result "tp2->4 (group did not start: $(tail -n 1 "$WORK/tp24.up"))" 1
fi

if KVW_TEST_COPY_DELAY_US=3000 group storm --workers 2 "${ASHAPE[@]}"; then
	bench storm --rooms 300 --abort-frac 0.33 --verify --concurrency 16 \
		--pages-per-room 16 --chunk-pages 4 --seed 4242 --room-timeout 60
	a=$(field "$LINE" aborted) s=$(field "$LINE" success)
	[ "$BRC" -eq 0 ] && [ "$(field "$LINE" stuck)" = 0 ] &&
		[ "$(field "$LINE" corrupt)" = 0 ] && [ "$(field "$LINE" failed)" = 0 ] &&
		[ "${a:-0}" -ge 60 ] && [ $((a + s)) -eq 300 ]
	result "abort storm with canaries, 300 rooms" $?
else
	result "abort storm (group did not start: $(tail -n 1 "$WORK/storm.up"))" 1
fi

if KVW_TEST_COPY_DELAY_US=3000 group storm2 --workers 2 --decode-ranks 2 "${ASHAPE[@]}"; then
	bench storm2 --rooms 150 --abort-frac 0.33 --verify --concurrency 8 \
		--seed 77 --room-timeout 60
	a=$(field "$LINE" aborted)
	[ "$BRC" -eq 0 ] && [ "$(field "$LINE" stuck)" = 0 ] &&
		[ "$(field "$LINE" corrupt)" = 0 ] && [ "${a:-0}" -ge 25 ]
	result "abort storm with canaries, two decode ranks" $?
else
	result "abort storm, two decode ranks (group did not start: $(tail -n 1 "$WORK/storm2.up"))" 1
fi

# kv-bench copy next to ib_write_bw, 64 KiB messages on the same device.
timeout 300 "$BIN/kv-bench" copy --transport rdma --mib 64 --reps 3 \
	>"$WORK/copy.out" 2>&1
rc=$?
sed 's/^/    /' "$WORK/copy.out"
[ "$rc" -eq 0 ] && [ "$(grep -c ' yes$' "$WORK/copy.out")" -eq 2 ]
result "kv-bench copy --transport rdma (verified)" $?
if command -v ib_write_bw >/dev/null; then
	# perftest wants the GID index on RoCE: the RoCE v2 IPv4 one, as the
	# transport's own default picks.
	gx=()
	p=/sys/class/infiniband/$DEV/ports/1
	if grep -q Ethernet "$p/link_layer" 2>/dev/null; then
		for t in "$p"/gid_attrs/types/*; do
			i=${t##*/}
			[ "$(cat "$t" 2>/dev/null)" = "RoCE v2" ] || continue
			case $(cat "$p/gids/$i") in
			0000:0000:0000:0000:0000:ffff:*) gx=(-x "$i"); break ;;
			esac
		done
	fi
	ib_write_bw -d "$DEV" "${gx[@]}" -s 65536 -D 3 -F >"$WORK/bw_server.out" 2>&1 &
	SRV=$!
	# The server is ready once it listens on perftest's port.
	for _ in $(seq 1 100); do
		ss -ltn 2>/dev/null | grep -q ':18515 ' && break
		sleep 0.1 # poll interval of a bounded wait_for (100 tries)
	done
	timeout 60 ib_write_bw -d "$DEV" "${gx[@]}" -s 65536 -D 3 -F 127.0.0.1 \
		>"$WORK/bw_client.out" 2>&1
	rc=$?
	wait "$SRV" 2>/dev/null
	SRV=""
	# The result row: bytes, iterations, peak MB/s, average MB/s, Mpps.
	bw=$(awk '$1 == 65536 && NF >= 4 {print $4}' "$WORK/bw_client.out" | tail -n 1)
	kv=$(awk '$1 == "contiguous" {print $4}' "$WORK/copy.out")
	if [ "$rc" -eq 0 ] && [ -n "$bw" ]; then
		say "ib_write_bw 64 KiB: $bw MB/s = $(echo "scale=3; $bw / 1024" | bc) GiB/s; kv-bench copy contiguous (64 KiB copies): ${kv:-?} GiB/s"
	else
		say "ib_write_bw did not report (exit $rc):"
		sed 's/^/    /' "$WORK/bw_client.out"
	fi
	result "ib_write_bw on $DEV" "$([ "$rc" -eq 0 ] && [ -n "$bw" ] && echo 0 || echo 1)"
else
	result "ib_write_bw (perftest not installed)" 1
fi

# GPU pools over rdma: the decode's GPU memory is the memory region the
# prefill writes into, the prefill's the one it reads from.
if cw=$("$BIN/kv-probe" cuda 2>&1); then
	if group gpu --workers 2 "${SHAPE[@]}"; then
		bench gpu --rooms 500 --pages-per-room 8 --chunk-pages 3 --verify \
			--gpu-pools
		refusal=$(grep -h "unable to register device memory" \
			"$WORK/gpu"/logs/*.log 2>/dev/null | head -n 1)
		if [ -n "$refusal" ] && [ "$(field "$LINE" success)" != 500 ]; then
			say "SKIP GPU pools over rdma: $DEV registers no GPU memory here:"
			say "    $refusal"
			SKIPPED+=("gpu-pools")
		else
			grep -h "registered on .* through" "$WORK/gpu"/logs/*.log |
				sort -u | sed 's/^/    /'
			[ "$BRC" -eq 0 ] && [ "$(field "$LINE" success)" = 500 ] &&
				[ "$(field "$LINE" corrupt)" = 0 ] && landed gpu &&
				grep -q "GPU pool .* registered on" "$WORK/gpu"/logs/d*.log &&
				grep -q "GPU pool .* registered on" "$WORK/gpu"/logs/p*.log
			result "GPU pools over rdma, verify 500 rooms" $?
		fi
	else
		result "GPU pools over rdma (group did not start: $(tail -n 1 "$WORK/gpu.up"))" 1
	fi
else
	say "SKIP GPU pools over rdma: $cw"
	SKIPPED+=("gpu-pools")
fi

say "passed ${#PASSED[@]}, failed ${#FAILED[@]}${FAILED[*]:+: ${FAILED[*]}}${SKIPPED[*]:+, skipped: ${SKIPPED[*]}}"
[ "${#FAILED[@]}" -eq 0 ]
