#!/usr/bin/env bats
# The room protocol's tables have one source, lib/table/rtab_states.def: on
# a copy of the repository, changing one line of it changes the C table and
# the Promela tables generated for the model, and the model check
# (model/check.sh, which `make model` runs) finds the bug it makes.

load helpers

setup() { kvw_setup; }
teardown() { kvw_teardown; }

# Prints rtab_legal(Failed, Success) and rtab_legal(Failed, Cleared) of the
# C table compiled from the copy in $1.
c_table() {
	cat >"$RUN/probe.src" <<'C'
#include <stdio.h>
#include "table/rtab.h"
int main(void)
{
	printf("%d %d\n", rtab_legal(KVW_FAILED, KVW_SUCCESS),
	       rtab_legal(KVW_FAILED, KVW_CLEARED));
	return 0;
}
C
	cc -std=c17 -I"$1/lib" -D_GNU_SOURCE -o "$RUN/probe" -x c "$RUN/probe.src" \
		"$1/lib/table/rtab_rules.c" && "$RUN/probe"
}

@test "one changed line of rtab_states.def changes the C table and the model, and spin finds the bug" {
	command -v spin >/dev/null || skip "spin is not installed"
	t=$RUN/t
	mkdir -p "$t"
	(cd "$KVW_ROOT" && git ls-files lib model mk Makefile | xargs cp --parents -t "$t")
	make -s -C "$t" build/model/tables.pml >/dev/null
	cp "$t/build/model/tables.pml" "$RUN/before.pml"
	[ "$(c_table "$t")" = "0 1" ]

	# Failed may now go to Success instead of to the Cleared tombstone.
	sed -i 's/^RTAB_LEGAL(FAILED, CLEARED)$/RTAB_LEGAL(FAILED, SUCCESS)/' \
		"$t/lib/table/rtab_states.def"
	run diff "$KVW_ROOT/lib/table/rtab_states.def" "$t/lib/table/rtab_states.def"
	[ "$(printf '%s\n' "$output" | grep -c '^[<>]')" -eq 2 ]

	make -s -C "$t" build/model/tables.pml >/dev/null
	[ "$(c_table "$t")" = "1 0" ]
	run diff "$RUN/before.pml" "$t/build/model/tables.pml"
	[[ $output == *'> 	((f) == FAILED && (t) == SUCCESS) ||'* ]]
	[[ $output == *'< 	((f) == FAILED && (t) == CLEARED) ||'* ]]

	MODEL_ONLY=real run "$t/model/check.sh" "$t/build/model"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ $output == *"model: FAIL real"*"absorbing"*"fails (trail: "*"), wanted: holds"* ]]
	[[ $output =~ model:\ [0-9]+\ passed,\ [1-9][0-9]*\ failed ]]
	[ -s "$t/build/model/real/trails/real.absorbing.txt" ]
}

@test "every mutation that model/check.sh runs has its trail fixture" {
	n=0
	while IFS='|' read -r name _ prop want; do
		[ "$want" = fails ] || continue
		f="$KVW_ROOT/model/trails/$name.$prop.txt"
		[ -s "$f" ] || { echo "missing $f"; false; }
		grep -q "^# $name model " "$f"
		n=$((n + 1))
	done < <(sed -n '/^checks() {/,/^}/p' "$KVW_ROOT/model/check.sh" | grep '|')
	[ "$n" -ge 7 ]
}
