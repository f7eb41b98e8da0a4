# kv-up-lib.bash - the parts of bin/kv-up that decide what is the group's:
# the identity of a process (so a reused or forged pid is never signalled),
# the registry entry that finds a supervisor whose run directory is gone,
# the manifest of everything the group created, and the checks run before
# anything is created. Sourced by bin/kv-up; not a program.

# ---- bash's loadable builtins ----------------------------------------------
# A start and a stop of a group ran about 90 short programs (rm, mkdir,
# mkfifo, readlink, ...), each a fork of this shell and an exec; make test
# starts about 180 groups, and on a 2-core machine its time is CPU. Where
# Debian's bash-builtins is installed, these run inside the shell instead
# (the same options as kv-up uses them: rm -f, mkdir -p -m, mkfifo -m).
# The realpath builtin has no -m, so it stays disabled (`realpath` is the
# program) and only proc_exe turns it on for its one call. Without the
# package, the programs run as before.
kvw_loadables=/usr/lib/bash
for b in rm mkdir mkfifo; do
	[ -f "$kvw_loadables/$b" ] && enable -f "$kvw_loadables/$b" "$b" 2>/dev/null
done
kvw_realpath=0
[ -f "$kvw_loadables/realpath" ] &&
	enable -f "$kvw_loadables/realpath" realpath 2>/dev/null &&
	enable -n realpath && kvw_realpath=1
unset b

# ---- one line from a notification fifo -------------------------------------
# A member (and the --daemon child) writes one line, READY or FAILED ...,
# in one write(2). bash 5.2's `read -t` checks its timer once more after
# the newline: a read that took the whole "READY\n" can still report a
# timeout, with "READY" in its variable and the newline gone (seen under
# stress-ng --cpu 4: the --daemon parent then waited its whole timeout for
# a READY it had read). So a timed-out read's text is kept, and it is the
# whole line when nothing more waits in the fifo (one write: what was
# read of it and an empty fifo mean all of it was read). The reads keep
# every byte (IFS=): a line read in two parts that split at a space lost
# it ("FAILED 100kv-receiver: ...", taken for no code: exit 111, not 100,
# seen under stress-ng --cpu 2).

# await_line FD PID SECS: waits for a line on FD (a fifo this shell holds
# both ends of) while PID lives, for at most SECS and while $stopping is 0.
# Sets `line`. Returns 0 with a line, 1 if PID is gone (after a last look
# at FD: it may have written and exited between two reads), 2 on timeout
# or stop.
await_line() {
	local fd=$1 who=$2 end=$((SECONDS + $3)) gone=0 part
	line=""
	while :; do
		if IFS= read -r -t 0.1 -u "$fd" part; then
			line=$line$part
			return 0
		fi
		line=$line$part
		[ -n "$line" ] && ! read -t 0 -u "$fd" && return 0
		[ "$gone" = 1 ] && return 1
		if [ "${stopping:-0}" = 1 ] || [ "$SECONDS" -ge "$end" ]; then
			return 2
		fi
		kill -0 "$who" 2>/dev/null || gone=1
	done
}

# ---- process identity ------------------------------------------------------
# A pid alone names whatever process holds it now. A member is the pid plus
# its start time (field 22 of /proc/PID/stat, fixed for the life of a
# process) plus its executable: all three must match before a signal.

# Each check here runs often (every member, every poll of a stop): none
# forks in the usual case. A fork and exec costs 5 to 10 ms of CPU on a
# small VM, and the test suite's sys time was mostly that (issue 30).

# proc_start PID: sets got_start to the start time of PID (returns 1 if
# it has none). Field 2 (comm) may hold spaces and ')': fields are counted from
# after its last ')'.
proc_start() {
	local s
	got_start=""
	{ read -r s <"/proc/$1/stat"; } 2>/dev/null || return 1
	s=${s##*) }
	# shellcheck disable=SC2086 # split the fields on purpose
	set -- $s
	got_start=${20:-}
	[ -n "$got_start" ]
}

# proc_exe PID: sets got_exe to the path of PID's executable ("" when it
# cannot be read). With the realpath builtin no fork: realpath(3) of the
# /proc link is the executable's path, as readlink gives it, except for a
# program deleted since it started, where readlink is asked instead.
proc_exe() {
	local r=()
	got_exe=""
	if [ "$kvw_realpath" = 1 ]; then
		enable realpath
		realpath -q -a r "/proc/$1/exe" 2>/dev/null
		enable -n realpath
		[ -n "${r[0]:-}" ] && [ -e "${r[0]}" ] && { got_exe=${r[0]}; return 0; }
	fi
	got_exe=$(readlink "/proc/$1/exe" 2>/dev/null)
}

# is_same PID START [EXE]: PID still runs as the process recorded. EXE is
# empty only for a child that is not READY yet (it may not have exec'd); an
# unreaped child's pid cannot be reused, so its start time suffices. A
# zombie has no exe: it never matches, which is right (nothing to signal).
# A program replaced on disk while it runs (an upgrade: a new file under
# the old name) reads "EXE (deleted)": still the process recorded; only
# then is the link read (the usual check compares the files themselves).
is_same() {
	[ -n "$1" ] && [ -n "$2" ] || return 1
	proc_start "$1" && [ "$got_start" = "$2" ] || return 1
	[ -z "${3:-}" ] && return 0
	[ "/proc/$1/exe" -ef "$3" ] && return 0
	proc_exe "$1"
	[ "$got_exe" = "$3 (deleted)" ]
}

# wait_gone PID START EXE TRIES: polls (50 ms) until PID is no longer the
# recorded process; returns 1 if it still is after TRIES polls. A process's
# exit has no fd to wait on from here.
wait_gone() {
	local tries=$4
	while is_same "$1" "$2" "$3" && [ "$tries" -gt 0 ]; do
		sleep 0.05
		tries=$((tries - 1))
	done
	! is_same "$1" "$2" "$3"
}

# stop_proc LABEL PID START EXE: SIGTERM, 5 s, then SIGKILL; only while
# PID is the recorded process (else it is gone already: nothing to do).
stop_proc() {
	is_same "$2" "$3" "$4" || return 0
	kill -TERM "$2" 2>/dev/null
	wait_gone "$2" "$3" "$4" 100 && return 0
	say "$1: no exit after SIGTERM, killing"
	is_same "$2" "$3" "$4" && kill -KILL "$2" 2>/dev/null
	wait_gone "$2" "$3" "$4" 40
}

# ---- registry ----------------------------------------------------------------
# One file per running supervisor, outside the run directory (which may be
# deleted under it), keyed by the run directory's absolute path:
#   line 1: PID START EXE of the supervisor; line 2: the run directory.

regdir=${XDG_RUNTIME_DIR:-/tmp}/kvwire-$EUID

# reg_path ABSDIR: sets reg_file to the registry file of ABSDIR (kept for
# the next call with the same folder: md5sum is a fork).
reg_last="" reg_file=""
reg_path() {
	[ "$1" = "$reg_last" ] && [ -n "$reg_file" ] && return 0
	reg_file="$regdir/$(printf '%s' "$1" | md5sum | cut -c1-16).sup"
	reg_last=$1
}

# reg_dir_ok: the registry folder exists, is ours, a real folder, 0700.
reg_dir_ok() {
	mkdir -p -m 700 "$regdir" 2>/dev/null
	[ -d "$regdir" ] && [ ! -L "$regdir" ] && [ -O "$regdir" ] &&
		chmod 700 "$regdir"
}

# reg_live ABSDIR: prints "PID START EXE" of the live supervisor of ABSDIR;
# returns 1 (and removes a stale entry) if there is none.
reg_live() {
	local f s_pid s_start s_exe
	reg_path "$1"
	f=$reg_file
	[ -f "$f" ] || return 1
	read -r s_pid s_start s_exe <"$f"
	if is_same "$s_pid" "$s_start" "$s_exe"; then
		echo "$s_pid $s_start $s_exe"
		return 0
	fi
	rm -f "$f"
	return 1
}

# ---- manifest ----------------------------------------------------------------
# What the group created, in memory (owned[]: "file PATH", "dir PATH" or
# "mount PATH" (kv-up --huge-pages' tmpfs), in creation order) and in
# DIR/manifest for `--stop` after a kill -9 of the supervisor. An entry is
# written before the thing is created, so a crash in between leaks nothing;
# removing an absent entry is harmless.

owned=()

# own KIND PATH: records that the group creates PATH.
own() {
	owned+=("$1 $2")
	echo "$1 $2" >>"$dir/manifest" 2>/dev/null
}

# own_proc NAME PID START EXE: records a member's identity in the manifest
# (the supervisor keeps it in memory too).
own_proc() { echo "proc $1 $2 $3 $4" >>"$dir/manifest" 2>/dev/null; }

# remove_owned: removes what owned[] lists, files first, then mounts
# (lazily: an engine that still maps a pool keeps its memory until it lets
# go), then folders (rmdir: only if empty, so nothing the group did not
# make goes with them).
remove_owned() {
	local i e files=() mounts=() dirs=()
	for ((i = ${#owned[@]} - 1; i >= 0; i--)); do
		e=${owned[i]}
		case ${e%% *} in
		file) files+=("${e#* }") ;;
		mount) mounts+=("${e#* }") ;;
		dir) dirs+=("${e#* }") ;;
		esac
	done
	# A pool's engine allocations (<pool>.m<16 hex digits>, lib/mem/
	# hostmem.h) go with it: an engine that died left them.
	local f g
	for f in "${files[@]}"; do
		case $f in
		*/kvwire.*.pool)
			for g in "$f".m[0-9a-f]*; do
				[ -e "$g" ] && files+=("$g")
			done ;;
		esac
	done
	[ ${#files[@]} -eq 0 ] || rm -f -- "${files[@]}"
	for f in "${mounts[@]}"; do
		mountpoint -q -- "$f" && umount -l -- "$f"
	done
	[ ${#dirs[@]} -eq 0 ] || rmdir -- "${dirs[@]}" 2>/dev/null
	owned=()
}

# manifest_path_ok ABSDIR KIND PATH: an entry names something kv-up makes:
# a file under the run directory or a /dev/shm/kvwire.* file, never a
# path that climbs out with "..". Guards --stop against a forged manifest.
manifest_path_ok() {
	case $3 in
	*/../* | */..) return 1 ;;
	"$1"/*) return 0 ;;
	/dev/shm/kvwire.*/*) return 1 ;;
	/dev/shm/kvwire.*) [ "$2" = file ] ;;
	*) return 1 ;;
	esac
}

# stop_from_manifest ABSDIR [keep-lock]: for a group whose supervisor is
# gone (kill -9): stops the members the manifest records (each only if it
# is still the process recorded: latest record per member) and removes
# what it lists, then the manifest and (unless keep-lock: a new supervisor
# holds it) the lock.
stop_from_manifest() {
	local d=$1 kind a b c e
	local -A mp ms me
	local -a names=()
	[ -f "$d/manifest" ] || return 0
	owned=()
	while read -r kind a b c e; do
		case $kind in
		proc) [ -n "${mp[$a]:-}" ] || names=("$a" "${names[@]}")
			mp[$a]=$b ms[$a]=$c me[$a]=$e ;;
		file | dir) manifest_path_ok "$d" "$kind" "$a" &&
			owned+=("$kind $a") ;;
		mount) case $a in # only the run directory's own pools/
			"$d"/pools) owned+=("$kind $a") ;;
			esac ;;
		esac
	done <"$d/manifest"
	for a in "${names[@]}"; do
		is_same "${mp[$a]}" "${ms[$a]}" "${me[$a]}" &&
			kill -TERM "${mp[$a]}" 2>/dev/null
	done
	for a in "${names[@]}"; do
		stop_proc "$a" "${mp[$a]}" "${ms[$a]}" "${me[$a]}"
	done
	remove_owned
	rm -f -- "$d/manifest"
	[ "${2:-}" = keep-lock ] || rm -f -- "$d/kv-up.lock"
}

# ---- checks before anything is created -----------------------------------

# is_num V: a plain decimal number (no sign, no exponent).
is_num() { [[ $1 =~ ^([0-9]+(\.[0-9]*)?|\.[0-9]+)$ ]]; }

# num_ge V MIN: V >= MIN, both decimal numbers.
num_ge() { awk -v x="$1" -v m="$2" 'BEGIN { exit !(x + 0 >= m + 0) }'; }


# check_member NAME: runs member NAME once with --check and the flags it
# will start with. On failure sets fail_rc (its exit code) and fail_line
# (its fatal line) and returns 1; adds its pool_bytes= to need_bytes.
check_member() {
	local out rc l b=0
	out=$(eval "timeout 20 ${cmd[$1]} ${checkauth:-} --check" 2>&1 </dev/null)
	rc=$?
	if [ "$rc" -ne 0 ]; then
		fail_rc=$rc
		[ "$rc" -eq 124 ] && fail_rc=99
		fail_line=$(printf '%s\n' "$out" | grep ': fatal: ' | tail -n 1)
		[ -n "$fail_line" ] || fail_line="$prog: fatal: $1: --check exited $rc: $(printf '%s' "$out" | tail -n 1)"
		return 1
	fi
	while IFS= read -r l; do
		[[ $l =~ ^pool_bytes=([0-9]+)$ ]] && b=${BASH_REMATCH[1]}
	done <<<"$out"
	need_bytes=$((need_bytes + b))
}
