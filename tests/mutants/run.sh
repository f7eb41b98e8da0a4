#!/bin/sh
# run.sh - `make mutants`: breaks one promise at a time and checks that a
# test notices. tests/mutants/list holds the mutations (format at its
# head). For each one this copies nothing again: one scratch copy of the
# tree (tracked and untracked-not-ignored files, plus build/default, bin/
# and lib/ archives so rebuilds stay incremental) is made once; then per
# mutant the one line is replaced, only the listed tests' targets are
# rebuilt, the listed tests run (each under `timeout`), and the file is put
# back (with a new mtime, so make rebuilds it for the next one).
# Prints "killed by TEST" or "SURVIVED" per mutant and a closing line
# "mutants: N killed, N survived"; exits non-zero if any mutant survived,
# a listed line is not in its file exactly once, or a mutant did not build.
# Usage: tests/mutants/run.sh [LIST] [NAME-GLOB] (default: every mutant).
# KVW_MUTANT_TIMEOUT: seconds per test run (default 180);
# KVW_UNIT_TEST_TIMEOUT: each unit test's own bound (default 20: the
# listed tests take seconds; a hang is a kill).
# KVW_MUTANTS_EVERY=1: every listed test must catch its mutant, not just
# the first (for checking a new record; slower).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
list=${1:-$root/tests/mutants/list}
only=${2:-*}
limit=${KVW_MUTANT_TIMEOUT:-180}
case $list in /*) ;; *) list=$PWD/$list ;; esac
cd "$root" || exit 111

scratch=$(mktemp -d /tmp/kvw-mutants.XXXXXX) || exit 111
# A mutant may crash the test process itself (a pytest killed by a
# SIGSEGV never runs its groups' teardown): whatever kv-up of the scratch
# tree still supervises is stopped after each test run and at the end, so
# no group outlives the run. kv-up stops its members and removes its files
# on SIGTERM.
stop_groups() {
	pkill -TERM -f "$tree/bin/kv-up " 2>/dev/null || return 0
	# Until every one has exited (pidwait: procps, waits on pidfds), within
	# a bound: kv-up waits for its members.
	timeout 30 pidwait -f "$tree/bin/kv-up " ||
		! pgrep -f "$tree/bin/kv-up " >/dev/null ||
		echo "mutants: a group of $tree did not stop" >&2
}
tree=$scratch/tree
trap 'stop_groups; rm -rf "$scratch"' EXIT INT TERM
mkdir -p "$tree"
git ls-files -z --cached --others --exclude-standard |
	(cd "$root" && xargs -0 cp -a --parents -t "$tree" 2>/dev/null)
# Built objects, with their times, so the first build is a no-op.
for p in build/default build/.deps-ok lib/libkvwire.a lib/libkvwire.so bin; do
	[ -e "$p" ] && cp -a --parents "$p" "$tree"
done
log=$scratch/log
# Every program: each folder of cmd/ but cmd/common (their shared code).
progs=$(for c in cmd/*; do [ "$c" = cmd/common ] || printf 'bin/%s ' "${c#cmd/}"; done)

killed=0
survived=0
broken=0

# build TARGETS...: make in the scratch tree, quiet unless it fails.
build() {
	if ! make -C "$tree" -j2 "$@" >"$log" 2>&1; then
		tail -n 20 "$log" | sed 's/^/    | /'
		return 1
	fi
}

# runtest KIND NAME [FILTER]: 0 when the test passed (the mutant lived).
runtest() {
	case $1 in
	unit)
		build "build/default/tests/$2" || return 2
		shm_before=$(mktemp)
		ls /dev/shm | grep '^kvwire\.t' | sort >"$shm_before"
		(cd "$tree" && KVW_UNIT_FILTER=${3:-} KVW_UNIT_TEST_TIMEOUT=${KVW_UNIT_TEST_TIMEOUT:-20} \
			timeout -k 5 "$limit" "build/default/tests/$2") >"$log" 2>&1
		rc=$?
		# A mutated test that failed half-way (or was stopped at its
		# bound) never reached its teardown: the unit tests' /dev/shm
		# files that appeared during it go now, so no run leaves any.
		ls /dev/shm | grep '^kvwire\.t' | sort | comm -13 "$shm_before" - |
			while read -r f; do rm -f "/dev/shm/$f"; done
		rm -f "$shm_before"
		(exit $rc)
		;;
	bats)
		build $progs build/default/tests/libfakecudart.so || return 2
		if [ -n "${3:-}" ]; then
			(cd "$tree" && KVW_BIN="$tree/bin" timeout -k 5 "$limit" \
				bats --tap -f "$3" "$2") >"$log" 2>&1
		else
			(cd "$tree" && KVW_BIN="$tree/bin" timeout -k 5 "$limit" \
				bats --tap "$2") >"$log" 2>&1
		fi
		;;
	pytest)
		# Python loads the tree's lib/libkvwire.so: rebuilt too.
		build $progs lib/libkvwire.so || return 2
		(cd "$tree/tests/python" && KVW_BIN="$tree/bin" \
			PYTHONDONTWRITEBYTECODE=1 timeout -k 5 "$limit" \
			/usr/bin/python3 -m pytest -q -p no:cacheprovider \
			-k "${3:-}" "$2") >"$log" 2>&1
		;;
	*)
		echo "mutants: unknown test kind $1"
		return 2
		;;
	esac
	rc=$?
	# A run that ran no test proves nothing: count it as a survivor.
	if [ "$rc" -eq 0 ] || ! grep -q '\(^\[ RUN      \]\|^ok \|^not ok \|^[0-9]* failed\)' "$log"; then
		return 0
	fi
	return 1
}

# mutate: applies the current record ($file, $from, $to) to the scratch
# tree; 1 when $from is not in $file exactly once.
mutate() {
	f=$tree/$file
	n=$(FROM=$from awk '{ s = $0; sub(/^[ \t]+/, "", s); if (s == ENVIRON["FROM"]) n++ } END { print n + 0 }' "$root/$file" 2>/dev/null)
	if [ "${n:-0}" -ne 1 ]; then
		echo "MISSING: $name: $file has the line ${n:-0} times: $from"
		return 1
	fi
	FROM=$from TO=$to awk '{ s = $0; sub(/^[ \t]+/, "", s)
		if (s == ENVIRON["FROM"]) { i = $0; sub(/[^ \t].*$/, "", i); print i ENVIRON["TO"] } else print }' \
		"$root/$file" >"$f"
}

# one: runs the record just read. Tests are tried in list order; the
# first that fails kills the mutant.
one() {
	case $name in $only) ;; *) return 0 ;; esac
	t0=$(date +%s)
	if ! mutate; then
		broken=$((broken + 1))
		return 0
	fi
	verdict=SURVIVED
	echo "$tests" | while IFS='	' read -r kind tname tfilt; do
		[ -n "$kind" ] || continue
		runtest "$kind" "$tname" "$tfilt"
		rc=$?
		stop_groups
		(exit $rc)
		case $? in
		1)
			why=$(grep -m1 -e '^\[  FAILED  \] [a-z]' -e '^not ok' "$log" | sed 's/^\[  FAILED  \] //')
			why="$why${why:+: }$(grep -m1 -e '^\[  ERROR   \]' -e 'did not finish' -e '^# *(in test file' -e '^# *`' "$log" | sed -e 's/^\[  ERROR   \] --- //' -e 's/^# *//')"
			echo "killed by $kind $tname${tfilt:+ [$tfilt]}${why:+: $why}"
			[ -n "${KVW_MUTANTS_EVERY:-}" ] || exit 1
			;;
		2) echo "does not build"; exit 2 ;;
		*)
			# Every listed test must catch it: one that passed is a hole.
			if [ -n "${KVW_MUTANTS_EVERY:-}" ]; then
				echo "not caught by $kind $tname${tfilt:+ [$tfilt]}"
				exit 3
			fi
			;;
		esac
	done >"$scratch/verdict"
	rc=$?
	[ -z "${KVW_MUTANTS_EVERY:-}" ] || [ "$rc" -ne 0 ] || rc=1
	case $rc in
	1) verdict=$(cat "$scratch/verdict"); killed=$((killed + 1)) ;;
	2) verdict="BROKEN: does not build"; broken=$((broken + 1)) ;;
	3) verdict="SURVIVED: $(cat "$scratch/verdict")"; survived=$((survived + 1)) ;;
	*) survived=$((survived + 1)) ;;
	esac
	cp "$root/$file" "$tree/$file" # a new mtime: rebuilt next time
	echo "mutant $name ($file): $verdict ($(($(date +%s) - t0)) s)"
	case $verdict in SURVIVED*) tail -n 15 "$log" | sed 's/^/    | /' ;; esac
}

# The list: records of "key<TAB>value" lines, a blank line ends one.
name= file= from= to= tests=
while IFS= read -r line || [ -n "$line" ]; do
	case $line in
	'#'*) continue ;;
	'')
		[ -n "$name" ] && one
		name= file= from= to= tests=
		continue
		;;
	esac
	key=${line%%	*}
	val=${line#*	}
	case $key in
	mutant) name=$val ;;
	file) file=$val ;;
	line) from=$val ;;
	to) to=$val ;;
	unit|bats|pytest) tests="$tests$key	$val
" ;;
	*) echo "mutants: $list: bad line: $line"; exit 2 ;;
	esac
done <"$list"
[ -n "$name" ] && one

[ "$broken" -eq 0 ] || echo "mutants: $broken listed lines missing or mutants that do not build"
echo "mutants: $killed killed, $survived survived"
[ "$survived" -eq 0 ] && [ "$broken" -eq 0 ]
