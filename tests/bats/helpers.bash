# helpers.bash - shared setup for kvwire's bats tests. Each test gets its own
# short run directory (ipc paths must stay under 107 bytes), binaries come
# from $KVW_BIN (default: the repo's bin/), every process runs under
# `timeout`, and waiting is always a bounded poll of a real condition.

KVW_ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
export KVW_BIN=${KVW_BIN:-$KVW_ROOT/bin}
export PATH=$KVW_BIN:$KVW_ROOT/bin:$PATH
# Debian's python3 carries pyzmq; a pyenv python3 on PATH does not.
PY=/usr/bin/python3

# sleep (wait_for's poll interval), rm, mkdir and mkfifo as bash's loadable
# builtins (Debian's bash-builtins, mk/deps.sh): the suite's time is CPU,
# and each of these was a fork of this shell and an exec, thousands of
# them per make test (bats's own rm and mkdir in this process included).
# Where the package is missing, the programs run as before.
for b in sleep rm mkdir mkfifo; do
	[ -f "/usr/lib/bash/$b" ] && enable -f "/usr/lib/bash/$b" "$b" 2>/dev/null
done
unset b

# Heartbeat flags for groups of tests that are not about failure
# detection: 1 s pings, 30 misses before a peer is dead (kv-up takes the
# last of a repeated flag, so put these before a test's own). Under a CPU
# hog and two other bats files, members were seen to answer a PING 6 to
# 15 s late (their logs: "PONG to PING 2 came after PING 3 was counted
# missed"), and the default (5 s, 2 misses) then declared a live peer dead
# and failed its rooms, in runs that assert every room succeeds (issue
# 30). The detection tests keep their own short heartbeats.
KVW_CALM_HB="--heartbeat-interval 1 --max-failures 30"

# Makes $RUN, a fresh run directory for this test.
kvw_setup() {
	RUN=$(mktemp -d /tmp/kvwt.XXXXXX)
	export RUN
}

# Resumes what the test left SIGSTOPped ($STOPPED: pids), stops any group
# in $RUN, kills stray test processes and removes $RUN.
kvw_teardown() {
	# shellcheck disable=SC2086 # one pid or several
	[ -n "${STOPPED:-}" ] && kill -CONT $STOPPED 2>/dev/null
	[ -n "${RUN:-}" ] || return 0
	[ -d "$RUN/pids" ] && timeout 30 "$KVW_ROOT/bin/kv-up" --stop "$RUN" >/dev/null 2>&1
	if [ -f "$RUN/bg.pids" ]; then
		while read -r p; do kill -TERM "$p" 2>/dev/null; done <"$RUN/bg.pids"
		while read -r p; do wait_for 5 gone "$p" || kill -KILL "$p" 2>/dev/null; done <"$RUN/bg.pids"
	fi
	# A failed test shows the end of every member's log before the run
	# directory goes (bats prints it with the failure): a failure seen
	# once under load can be read afterwards.
	if [ -z "${BATS_TEST_COMPLETED:-}" ]; then
		local f
		for f in "$RUN"/logs/*.log "$RUN"/*/logs/*.log; do
			[ -f "$f" ] || continue
			echo "--- ${f#"$RUN"/} (last 15 lines)"
			tail -n 15 "$f"
		done
	fi
	rm -rf "$RUN"
}

# The small layout of the tests that run one kv-sender against Python
# decodes: kv-sender's flags, and the same for tests/peers/*.py.
SENDER_SHAPE="--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 --pages 32 --aux-slots 4 --aux-bytes 16"
SENDER_PYSHAPE="--layers 2 --page-tokens 4 --heads 2 --head-dim 8 --dtype-bytes 2 --pool-pages 32 --aux-slots 4 --aux-bytes 16"

# sender_setup: kvw_setup, plus the files and endpoints of one kv-sender
# ($TAG, $TABLE, $POOL, $PEER, $ENG); sender_teardown removes them.
sender_setup() {
	kvw_setup
	TAG=${RUN##*/}
	TABLE=/dev/shm/kvwire.$TAG.rooms
	POOL=/dev/shm/kvwire.$TAG.pool
	PEER="ipc://$RUN/p.sock"
	ENG="ipc://$RUN/e.sock"
}

sender_teardown() {
	kvw_teardown
	rm -f /dev/shm/kvwire."$TAG".* /dev/shm/kvwire."$TAG"-*
}

# gone PID: the process has exited. A child that exited and that its parent
# has not reaped yet is a zombie, and kill -0 still finds it: this shell
# reaps its own background children only when a SIGCHLD is taken or it next
# forks, and with sleep a builtin (above) a wait_for loop may never fork, so
# a zombie counts as gone. Builtins only: a wait_for poll forks nothing.
gone() {
	local stat
	kill -0 "$1" 2>/dev/null || return 0
	read -r stat <"/proc/$1/stat" 2>/dev/null || return 0
	stat=${stat##*) }
	[ "${stat%% *}" = Z ]
}

# refute CMD...: fails (and says what) when CMD succeeds. bats stops a
# test only on a failing command, and `! CMD` never fails one (bash's
# errexit ignores it) unless it is the test's last line: write `refute CMD`
# (mk/check-tests.sh refuses `! CMD` in a test body).
refute() {
	if "$@"; then
		echo "refute: this succeeded: $*" >&2
		return 1
	fi
	return 0
}

# kv-bench's demo mode measures one core's memcpy before and after its
# rooms, about a second of CPU each run; only bench.bats's figures need
# it, and 150 runs of it were a fifth of the suite's CPU (issue 30: make
# test's time). bench.bats asks for it back where it checks the limit.
export KVW_BENCH_NO_REFERENCE=1

# EXIT_WAIT: how long a test lets a process take to be gone after SIGTERM
# (or after its parent died). One that stops on the signal is gone in
# milliseconds; one that does not is waiting for what never comes (a peer
# that never answers, ZMQ's default infinite linger, a lookup retried for
# --waiting-timeout's 300 s) and is never gone. So the verdict is "gone
# within a generous deadline", not "within 2 s", which a loaded machine
# missed (issue 30); how long it took is printed as a figure.
EXIT_WAIT=30

# wait_for SECONDS CMD...: runs CMD until it succeeds, at most SECONDS.
# Returns 1 (and says what it waited for) on timeout. The poll interval
# grows from 10 ms to 200 ms: most checks fork a kv-stat or a Python peer,
# and polling a long wait every 20 ms spent a core on those forks that the
# processes under test then lacked (a make test's sys time was 45 % of
# its CPU). A test never waits for a passing state: what it waits for
# stays true once reached.
wait_for() {
	local limit=$1 start=$SECONDS nap=0.01 t0=$EPOCHREALTIME
	shift
	until "$@"; do
		if [ $((SECONDS - start)) -ge "$limit" ]; then
			echo "wait_for: gave up after ${limit}s: $*" >&2
			wait_note "$t0" "$limit" "gave up" "$*"
			return 1
		fi
		sleep "$nap" # poll interval of a bounded wait_for, not a synchronisation
		case $nap in
		0.01) nap=0.02 ;;
		0.02) nap=0.05 ;;
		0.05) nap=0.1 ;;
		*) nap=0.2 ;;
		esac
	done
	wait_note "$t0" "$limit" ok "$*"
}

# wait_note T0 LIMIT VERDICT WHAT: with KVW_WAIT_LOG=FILE, a wait that took
# a third of its limit or more appends "ms limit_s verdict file: test: what"
# to FILE, so a loaded run shows which bounded waits come near their limit
# (issue 30: the next flake) before one gives up. Costs nothing without it.
wait_note() {
	[ -n "${KVW_WAIT_LOG:-}" ] || return 0
	local ms=$(((${EPOCHREALTIME/./} - ${1/./}) / 1000))
	[ "$ms" -ge $(($2 * 1000 / 3)) ] || return 0
	echo "$ms $2 $3 ${BATS_TEST_FILENAME##*/}: ${BATS_TEST_DESCRIPTION:-?}: $4" >>"$KVW_WAIT_LOG"
}

# start_ready NAME TIMEOUT CMD...: starts CMD in the background under
# `timeout TIMEOUT` with --ready-fd 3 and waits (bounded) for its READY
# line. Sets $BG_PID; logs go to $RUN/NAME.log.
start_ready() {
	local name=$1 limit=$2 fifo="$RUN/$1.ready" rfd line
	shift 2
	mkfifo "$fifo"
	exec {rfd}<>"$fifo"
	timeout -k 5 "$limit" "$@" --ready-fd 3 3>"$fifo" {rfd}>&- \
		</dev/null >>"$RUN/$name.log" 2>&1 &
	BG_PID=$!
	echo "$BG_PID" >>"$RUN/bg.pids"
	if ! read -r -t 20 -u "$rfd" line || [ "$line" != READY ]; then
		exec {rfd}>&-
		echo "start_ready: $name not ready; log:" >&2
		cat "$RUN/$name.log" >&2
		return 1
	fi
	exec {rfd}>&-
	rm -f "$fifo"
}

# free_port_base SPAN: a base B such that nothing listens on loopback
# ports B..B+SPAN-1 now, for a kv-up --port-base (bootstrap B, ranks
# B+1.., B+512..): drawn at random below the ephemeral range (no port-0
# socket of a parallel test lands there) and away from kv-up's default
# 17000, kv-bench's 27400 and the fixed bases of other tests (26100..27199),
# so that parallel bats files and other checkouts do not share one.
free_port_base() {
	local span=$1 b tries
	for ((tries = 0; tries < 200; tries++)); do
		b=$((10000 + RANDOM % 21000))
		[ $((b + span)) -le 16900 ] || [ "$b" -ge 18200 ] || continue
		[ $((b + span)) -le 26000 ] || [ "$b" -ge 28200 ] || continue
		[ $((b + span)) -le 32768 ] || continue
		ss -Hltn | awk -v lo="$b" -v hi=$((b + span)) '
			{ n = split($4, a, ":"); p = a[n] + 0 }
			p >= lo && p < hi { found = 1 }
			END { exit !found }' && continue
		echo "$b"
		return 0
	done
	echo "free_port_base: no free block of $span ports" >&2
	return 1
}

# kv_up ARGS...: starts a group in $RUN (daemon mode) or fails the test.
kv_up() {
	timeout 60 "$KVW_ROOT/bin/kv-up" --daemon --run-dir "$RUN" "$@" || {
		echo "kv-up failed; logs:" >&2
		tail -n 30 "$RUN"/logs/*.log "$RUN/kv-up.log" >&2 2>/dev/null
		return 1
	}
}

# kv_up_held ARGS...: kv_up with debug logs, one worker per prefill rank
# and 120 s bootstrap and waiting deadlines, for tests that hold a room and
# in which nothing may end on a deadline.
kv_up_held() {
	KVW_LOG=debug KVW_BOOTSTRAP_TIMEOUT=120 KVW_WAITING_TIMEOUT=120 \
		kv_up --workers 1 "$@"
}

# endpoint MEMBER KEY: a value from $RUN/endpoints.
# Read by bash itself, not an awk per call (tests call it in their polls
# and before most kv-ctl calls); like the awk it replaces, it succeeds when
# nothing matches.
endpoint() {
	local -a f
	local w
	[ -r "$RUN/endpoints" ] || { echo "endpoint: no $RUN/endpoints" >&2; return 2; }
	while read -r -a f; do
		[ "${f[0]:-}" = "member=$1" ] || continue
		for w in "${f[@]:1}"; do
			[ "${w#"$2"=}" != "$w" ] && printf '%s\n' "${w#"$2"=}"
		done
	done <"$RUN/endpoints"
	return 0
}

# ctl ARGS...: kv-ctl playing an engine (bounded). kv-ctl waits for a
# connected peer, by default 2 s: on a loaded machine its own start and
# the connection can take longer, so one generous deadline (issue 30).
ctl() { timeout 60 "$KVW_BIN/kv-ctl" --timeout 30 "$@"; }

# field MEMBER ROOM KEY: one field of the room in MEMBER's table (kv-stat
# --json --room, Cleared included); empty when the table has no such room,
# "null" when the room has no such key (what jq -r '.tables[] | select(.name
# == M) | .rooms[] | select(.room == R) | .[K]' prints). (--room, not --all:
# wait_for polls this, and after a few thousand rooms --all printed them
# all.) Read with bash's own matching, not jq: this is the suite's most
# polled read, and a jq start costs more CPU than the kv-stat it reads
# (cmd/kv-stat/render.c writes one line: each table opens with
# {"name":..., a room is one flat object, strings have no bare quote).
field() {
	local j t r
	# kv-stat exits 1 when no table has the room: that is the empty answer.
	j=$("$KVW_BIN/kv-stat" --run-dir "$RUN" --json --room "$2") || :
	t=${j#*\{\"name\":\""$1"\",}
	[ "$t" != "$j" ] || return 0
	t=${t%%\{\"name\":\"*}
	r=${t#*\"rooms\":\[*\{}
	[ "$r" != "$t" ] && [[ $r == \"room\":\""$2"\",* ]] || return 0
	r=",${r%%\}*},"
	if [[ $r =~ ,\""$3"\":(\"([^\"]*)\"|([^,]*)), ]]; then
		printf '%s\n' "${BASH_REMATCH[2]}${BASH_REMATCH[3]}"
	else
		echo null
	fi
}

# state_is MEMBER ROOM STATE...: the room is in one of the STATEs.
state_is() {
	local m=$1 r=$2 s
	shift 2
	s=$(field "$m" "$r" state)
	for want in "$@"; do
		[ "$s" = "$want" ] && return 0
	done
	return 1
}

# restarted MEMBER OLDPID: kv-up runs a new MEMBER process.
restarted() {
	local p
	p=$(cat "$RUN/pids/$1.pid" 2>/dev/null)
	[ -n "$p" ] && [ "$p" != "$2" ] && kill -0 "$p" 2>/dev/null
}

# sec MEMBER KIND: the member's security counter (kv-stat --json).
sec() {
	"$KVW_BIN/kv-stat" --run-dir "$RUN" --json |
		jq -r --arg m "$1" --arg k "$2" '.tables[] | select(.name == $m) | .security[$k]'
}

# ctr MEMBER NAME: one of the member's table counters (kv-stat --json).
ctr() {
	"$KVW_BIN/kv-stat" --run-dir "$RUN" --json |
		jq -r --arg m "$1" --arg k "$2" '.tables[] | select(.name == $m) | .counters[$k]'
}

# logged MEMBER TEXT: the member's log has TEXT.
logged() { grep -q -- "$2" "$RUN/logs/$1.log"; }

# worker_of MEMBER: the pids of a kv-up prefill member's worker processes.
worker_of() { pgrep -P "$(cat "$RUN/pids/$1.pid")"; }

# stopped PID: the process is stopped (state T in /proc/PID/stat, read
# past the command name, which may hold spaces). A member started with a
# TEST ONLY delay of "stop" (lib/base/proc.h) stops itself at its test
# point: a test waits for this, acts, and sends SIGCONT.
stopped() {
	local s
	read -r s <"/proc/$1/stat" || return 1
	s=${s##*) }
	[ "${s%% *}" = T ]
}

# go_on_until PID CMD...: CMD holds; PID, should it have stopped itself
# at its test point on the way (a later room's batch), is let go on first.
go_on_until() {
	local p=$1
	shift
	! stopped "$p" || kill -CONT "$p"
	"$@"
}

# Pool bytes of a kv-up member, for canary checks. count and paint look at
# pages of the $NBUF (default 4: K0 K1 V0 V1) buffers laid back to back
# from offset 0, each of $PAGES pages of $ITEM bytes (set in the test file).
# fill MEMBER BYTE: every byte of the member's pool set to BYTE (hex).
fill() {
	"$PY" -c 'import mmap, sys
f = open(sys.argv[1], "r+b"); m = mmap.mmap(f.fileno(), 0)
m[:] = bytes([int(sys.argv[2], 16)]) * len(m)' "$(endpoint "$1" pool)" "$2"
}

# count MEMBER BYTE PAGES: bytes equal to BYTE (hex) in those pages (a, b,
# ...) of the buffers of the member's pool.
count() {
	"$PY" -c 'import sys
d = open(sys.argv[1], "rb").read(); b = int(sys.argv[2], 16)
P, I = int(sys.argv[4]), int(sys.argv[5])
print(sum(d[k * P * I + g * I:k * P * I + (g + 1) * I].count(b)
          for k in range(int(sys.argv[6])) for g in map(int, sys.argv[3].split(","))))' \
		"$(endpoint "$1" pool)" "$2" "$3" "$PAGES" "$ITEM" "${NBUF:-4}"
}

# paint MEMBER BYTE PAGES: sets those pages of the buffers to BYTE.
paint() {
	"$PY" -c 'import mmap, sys
f = open(sys.argv[1], "r+b"); m = mmap.mmap(f.fileno(), 0)
P, I = int(sys.argv[4]), int(sys.argv[5])
for k in range(int(sys.argv[6])):
    for g in map(int, sys.argv[3].split(",")):
        o = k * P * I + g * I
        m[o:o + I] = bytes([int(sys.argv[2], 16)]) * I' \
		"$(endpoint "$1" pool)" "$2" "$3" "$PAGES" "$ITEM" "${NBUF:-4}"
}

# run_copy SECS ARGS...: `run timeout SECS kv-bench copy ARGS...`, with
# kv-bench's own pid (the one in its pool names) kept in $RUN/copy.pid.
run_copy() {
	local secs=$1
	shift
	run timeout "$secs" sh -c 'echo $$ >"$0" && exec kv-bench copy "$@"' \
		"$RUN/copy.pid" "$@"
}

# copy_pools: the /dev/shm pool files of run_copy's kv-bench (only its
# own: bats files running beside this one may have theirs).
copy_pools() {
	local pid
	pid=$(cat "$RUN/copy.pid")
	[ -n "$pid" ] || return 1
	ls /dev/shm | grep -F "kvwire.bench-copy-$pid-" || true
}

# summary KEY: a value of kv-bench's summary line (rooms= success= ...) in
# $output (after `run kv-bench ...`).
summary() {
	echo "$output" | grep '^rooms=' | tr ' ' '\n' | sed -n "s/^$1=//p"
}

# clean N: that summary says N rooms, nothing stuck, nothing corrupt.
clean() {
	[ "$(summary rooms)" = "$1" ]
	[ "$(summary stuck)" = 0 ]
	[ "$(summary corrupt)" = 0 ]
}
