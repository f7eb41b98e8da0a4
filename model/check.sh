#!/bin/sh
# check.sh - runs spin on the room protocol model (model/kvwire.pml): every
# property on the real model, and every mutation (a model broken on purpose)
# against the property that must catch it. A property passes when spin finds
# no error; a mutation passes when spin finds its counterexample, whose
# trail is written, trimmed, to OUT/trails/NAME.txt and checked against the
# fixture model/trails/NAME.txt (same kind of violation, not same bytes).
# Prints one line per check and ends with "model: N passed, N failed".
#
# Usage: model/check.sh OUT      OUT holds tables.pml (make model builds it)
# Env:   MODEL_ONLY="real tcp"   run only these configurations
#        MODEL_TRAILS=update     copy the fresh trails over the fixtures
#        MODEL_JOBS=2            configurations built and run at once
# Exit 0 when every check passed, 1 when one failed, 111 on a setup error.
set -u
here=$(cd "$(dirname "$0")" && pwd)

# name | spin defines | property | expected: holds or fails. The longest
# first, so that two at a time finish together.
checks() {
	cat <<'EOF'
tcp|-DTCP|quiescence|holds
tcp|-DTCP|success_complete|holds
tcp|-DTCP|batch_incarnation|holds
real||terminal|holds
real||quiescence|holds
real||absorbing|holds
real||no_resurrect|holds
real||abort_acked|holds
real||success_complete|holds
ack_early|-DMUT_ACK_EARLY|quiescence|fails
sink_no_wait|-DTCP -DMUT_SINK_NO_WAIT|quiescence|fails
batch_no_inc|-DTCP -DMUT_BATCH_NO_INC|batch_incarnation|fails
success_store|-DMUT_SUCCESS_STORE|absorbing|fails
status_no_token|-DMUT_STATUS_NO_TOKEN|no_resurrect|fails
status_no_token|-DMUT_STATUS_NO_TOKEN|success_complete|fails
status_early|-DMUT_STATUS_EARLY|success_complete|fails
meta_late|-DMUT_META_LATE|success_complete|fails
hit_no_job|-DMUT_HIT_NO_JOB|success_complete|fails
no_release_deadline|-DMUT_NO_RELEASE_DEADLINE|abort_acked|fails
no_decode_deadline|-DMUT_NO_DECODE_DEADLINE|terminal|fails
EOF
}

# Liveness properties need acceptance cycles under weak fairness.
pan_flags() {
	case $1 in
	terminal | abort_acked) echo "-a -f" ;;
	*) echo "" ;;
	esac
}

# spin -t -p -g, trimmed to what a reader needs (docs/MODEL.md, "Reading
# a trail"): one line per step (step, process, line of kvwire.pml, what
# it did), with long table guards, else and skip left out and room states
# named; then the violation and the globals at the end.
trim_trail() {
	awk '
	function named(s) {
		while (match(s, /(dst|pst) = [0-5]\]?/)) {
			v = substr(s, RSTART, RLENGTH); n = v; sub(/.* = /, "", n)
			sub(/\]/, "", n)
			s = substr(s, 1, RSTART - 1) "@" v "@" substr(s, RSTART + RLENGTH)
			sub("@" v "@", v, s); sub(v, v " (" st[n + 0] ")", s)
			break
		}
		return s
	}
	BEGIN { split("FAILED BOOTSTRAPPING WAITING TRANSFERRING SUCCESS CLEARED", a, " ")
		for (i = 1; i <= 6; i++) st[i - 1] = a[i] }
	/START OF CYCLE|assertion violated|trail ends|acceptance cycle/ { print; next }
	/^#processes/ { tail = 1; print "globals at the end:"; next }
	tail && /^\t\t[a-z][a-z_0-9]*(\[[0-9]\])? = / { sub(/^\t\t/, "\t"); print named($0); next }
	tail { next }
	/^ *[0-9]+:[ \t]+proc +[0-9]+ \(/ {
		if ($0 ~ /\[else\]$|\[\(1\)\]$|\[break\]$|\[\(\(\(\(/ || $0 ~ /<valid end state>/) next
		line = $0; sub(/^ */, "", line)
		stp = line; sub(/:.*/, "", stp)
		who = line; sub(/^[^(]*\(/, "", who); sub(/\).*/, "", who)
		src = line; sub(/.*kvwire\.pml:/, "", src); sub(/ .*/, "", src)
		what = line; sub(/^[^[]*\[/, "[", what)
		printf "%4s %-13s line %-4s %s\n", stp, who, src, named(what)
	}' | cut -c1-120
}

# The real model's search is big, a mutation's counterexample near: cc
# optimises only the first; the hash table is sized to match.
# Breadth-first search where every check is a safety property: its
# counterexample is a shortest one, the easiest trail to read.
cc_flags() {
	case $1 in
	real | tcp) echo "-O1" ;;
	no_release_deadline | no_decode_deadline) echo "-O0" ;;
	*) echo "-O0 -DBFS" ;;
	esac
}
hash_bits() {
	case $1 in
	real | tcp) echo "-w22" ;;
	*) echo "-w18" ;;
	esac
}

# One configuration: build its pan once, run each of its checks. Writes
# "ok|FAIL name property verdict states seconds" lines to OUT/NAME.result.
run_config() {
	name=$1
	out=$2
	dir=$out/$name
	defs=$(checks | awk -F'|' -v n="$name" '$1 == n { print $2; exit }')
	rm -rf "$dir" && mkdir -p "$dir/trails" || return 111
	cp "$here/kvwire.pml" "$out/tables.pml" "$dir/" || return 111
	res=$out/$name.result
	: >"$res"
	# shellcheck disable=SC2086,SC2046 # lists of flags
	if ! (cd "$dir" && spin $defs -a kvwire.pml >spin.log 2>&1 &&
		cc $(cc_flags "$name") -w -DNFAIR=3 -o pan pan.c >>spin.log 2>&1); then
		echo "FAIL|$name|build|spin or cc failed: see $dir/spin.log|-|-" >>"$res"
		return 0
	fi
	checks | awk -F'|' -v n="$name" '$1 == n { print $3 "|" $4 }' |
		while IFS='|' read -r prop want; do
			log=$dir/$prop.pan
			rm -f "$dir/kvwire.pml.trail"
			# A hang guard, not a speed bound: a tcp check took 47 s under
			# stress-ng --cpu 2 here (11 s idle), and a slower machine must
			# get a verdict, not a timeout.
			# shellcheck disable=SC2046 # pan_flags is a list of flags
			(cd "$dir" && timeout 600 ./pan $(pan_flags "$prop") -N "$prop" \
				-m20000 $(hash_bits "$name") >"$log" 2>&1)
			errs=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$log")
			states=$(awk '/states, stored/ { print $1 }' "$log")
			secs=$(sed -n 's/^pan: elapsed time \([0-9.e+-]*\) seconds.*/\1/p' "$log")
			verdict="holds"
			[ "${errs:-x}" = 0 ] || verdict="fails"
			[ -n "$errs" ] || verdict="no result: see $log"
			if [ "$verdict" != "$want" ]; then
				[ -s "$dir/kvwire.pml.trail" ] &&
					write_trail "$dir" "$name" "$prop" "$defs" &&
					verdict="$verdict (trail: $dir/trails/$name.$prop.txt)"
				echo "FAIL|$name|$prop|$verdict, wanted: $want|${states:--}|${secs:--}" >>"$res"
				continue
			fi
			if [ "$want" = fails ]; then
				why=$(check_trail "$dir" "$name" "$prop" "$defs")
				if [ -n "$why" ]; then
					echo "FAIL|$name|$prop|$why|$states|$secs" >>"$res"
					continue
				fi
			fi
			echo "ok|$name|$prop|$verdict|$states|$secs" >>"$res"
		done
}

# The global each safety property watches ([] !ghost).
ghost() {
	sed -n "s/^ltl $1 { \[\] !\([a-z]*\) }$/\1/p" "$here/kvwire.pml"
}

# Replays the trail pan left in DIR into DIR/trails/NAME.PROP.txt.
write_trail() {
	dir=$1 name=$2 prop=$3 defs=$4
	{
		echo "# $name model ($defs) against property $prop:"
		echo "# spin -t -p -g, trimmed by model/check.sh; lines are model/kvwire.pml's"
		# shellcheck disable=SC2086
		(cd "$dir" && spin $defs -t -p -g kvwire.pml 2>&1) | trim_trail
	} >"$dir/trails/$name.$prop.txt"
}

# Replays the trail of a mutation; prints why it is not acceptable, or
# nothing. The fixture must exist and show the same kind of violation.
check_trail() {
	dir=$1 name=$2 prop=$3 defs=$4
	t=$dir/trails/$name.$prop.txt
	fix=$here/trails/$name.$prop.txt
	[ -s "$dir/kvwire.pml.trail" ] || { echo "no trail written"; return; }
	write_trail "$dir" "$name" "$prop" "$defs"
	# A safety property is broken when its ghost is set at the end, a
	# liveness one by a cycle that never gets there.
	case $prop in
	terminal | abort_acked) kind="START OF CYCLE" ;;
	*) kind="$(ghost "$prop") = 1" ;;
	esac
	grep -q "$kind" "$t" || { echo "trail replay shows no violation"; return; }
	[ "${MODEL_TRAILS:-}" = update ] && cp "$t" "$fix"
	[ -f "$fix" ] || { echo "no fixture $fix (MODEL_TRAILS=update)"; return; }
	grep -q "$kind" "$fix" || echo "fixture $fix shows another violation"
}

if [ "${1:-}" = --config ]; then
	run_config "$2" "$3"
	exit $?
fi

out=${1:?usage: model/check.sh OUT}
[ -f "$out/tables.pml" ] || { echo "model: fatal: no $out/tables.pml" >&2; exit 111; }
command -v spin >/dev/null || { echo "model: fatal: spin not installed" >&2; exit 111; }
out=$(cd "$out" && pwd)
configs=$(checks | cut -d'|' -f1 | uniq)
[ -n "${MODEL_ONLY:-}" ] && configs=$MODEL_ONLY
# shellcheck disable=SC2086 # one configuration a line
printf '%s\n' $configs | xargs -P "${MODEL_JOBS:-2}" -I{} "$0" --config {} "$out" ||
	exit 111
passed=0
failed=0
for c in $configs; do
	while IFS='|' read -r v name prop verdict states secs; do
		printf 'model: %-4s %-20s %-17s %s (%s states, %s s)\n' "$v" "$name" \
			"$prop" "$verdict" "$states" "$secs"
		if [ "$v" = ok ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
	done <"$out/$c.result"
done
echo "model: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
