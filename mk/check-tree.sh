#!/bin/sh
# check-tree.sh - the structure rules that the compiler cannot see, run by
# `make test`. Prints one line per breach and "tree: N passed, N failed".
#  1. Layers (docs/ARCHITECTURE.md): lib/base includes only base; wire,
#     table, plan and mem include base and themselves, never each other;
#     xport includes base, mem and itself; roles include any layer below;
#     lib/api.c anything in lib/. A
#     layer's subfolders (lib/xport/tcp/) are part of it. Nothing in lib/
#     includes a program's header.
#  2. No role names a transport (issue 31): no file under lib/roles holds
#     a transport's name as a string literal ("tcp", "rdma", "shm",
#     "cuda") or uses an xport_tcp_, xport_rdma_, xport_shm_ or
#     xport_cuda_ name; a role asks the ops table (lib/xport/xport.h).
#  3. Every file name that a comment or document cites (a word ending in
#     .c, .h, .md, .py, .sh, .bats or .bash) is a file of the repository
#     or a system header; shared/NAME names the project's folder beside it.
#  4. Every path docs/ARCHITECTURE.md names (lib/..., cmd/..., tests/...,
#     or a layer's path such as xport/tcp/ or roles/sender/worker.c,
#     "xhash.{c,h}" standing for both files) exists, as it is or under lib/:
#     rule 3 checks a file's name only, so a page that still shows a file
#     in the folder it left would pass it (issue 31: the tree drawn there
#     must be the tree).
#  5. The CUDA runtime stays in lib/mem (issue 31): no file under lib/
#     outside lib/mem includes mem/cuda_rt.h or a <cuda...> header, and no
#     header of lib/mem includes cuda_rt.h (so none hands it on). And a
#     transport or a role reaches memory only through regions: of lib/mem
#     it includes mem.h (regions and their backends), pool.h (pool files)
#     and gpu_queue.h (a device copy queue), never a header that knows a
#     backend's insides (gpool.h's record, gpool_map.h's handles).
#  6. The group plan and the pool layout have one owner, lib/plan (issue
#     31: group.c, shape.c, layout.c, runinfo.c): no script of bin/ and
#     no module of python/kvwire restates them. A line there that is not
#     a comment may not do the layout's arithmetic (`heads % tp`,
#     `layers // pp`, `divmod(`), name the draft layers' id base
#     (1000000), build a member's /dev/shm file name (`kvwire.$...`,
#     `kvwire.%s`) or a control port (`port_base +`): kv-up asks kv-plan,
#     Python asks the library (kvw_group_read, kvw_pool_layout).
# Usage: mk/check-tree.sh [ROOT] (default: the repository this is in).
set -u
root=${1:-$(dirname "$0")/..}
cd "$root" || exit 111
passed=0
failed=0
bad() { echo "tree: $*"; failed=$((failed + 1)); }

# Rules 1, 2 and 5 read each C file of lib/ once, all in one awk (a
# shell loop with a few processes per file took 4 s of CPU a run, and
# tree.bats runs this six times).
libfiles=$(mktemp)
trap 'rm -f "$libfiles"' EXIT
find lib -type f | sort >"$libfiles"
lib_rules=$(find lib -name '*.[ch]' | sort | tr '\n' '\0' |
	xargs -0 -r awk -v known="$libfiles" '
	function allowed_for(f,    l) {
		if (f ~ /^lib\/base\//) return "base"
		if (f ~ /^lib\/(wire|table|plan|mem)\//) {
			l = substr(f, 5); sub(/\/.*/, "", l); return "base " l
		}
		if (f ~ /^lib\/xport\//) return "base mem xport"
		if (f ~ /^lib\/roles\//) return "base wire table plan mem xport roles"
		return "base wire table plan mem xport roles"
	}
	function bad(rule, msg) { out[rule] = out[rule] "tree: " msg "\n"; failed++ }
	function finish(    at) {
		if (cur == "") return
		if (inc_ok) passed++
		if (cur ~ /^lib\/roles\//) {
			if (role_hits != "") {
				at = (role_hits ~ / /) ? "lines " role_hits : "line " role_hits
				bad(2, cur " names a transport (" at "): a role asks the ops table (lib/xport/xport.h), never a transport by name")
			} else passed++
		}
		if (cuda_pat != "") {
			if (cuda_hits != "")
				bad(5, cur " includes the CUDA runtime (line " cuda_hits "): only lib/mem\047s .c files may; a transport reaches GPU memory through mem/mem.h")
			else passed++
		}
	}
	BEGIN { while ((getline n < known) > 0) exists[n] = 1 }
	FNR == 1 {
		finish()
		cur = FILENAME; dir = cur; sub(/\/[^\/]*$/, "", dir)
		allow = " " allowed_for(cur) " "
		inc_ok = 1; role_hits = ""; cuda_hits = ""
		if (cur == "lib/mem/cuda_rt.h" || cur ~ /^lib\/mem\/.*\.c$/) cuda_pat = ""
		else if (cur ~ /^lib\/mem\/.*\.h$/) cuda_pat = "^#include \"cuda_rt\\.h\""
		else cuda_pat = "^#include (\"mem/cuda_rt\\.h\"|<cuda)"
	}
	/^#include "[^"]*"/ {
		inc = $0; sub(/^#include "/, "", inc); sub(/".*/, "", inc)
		# (mem/cuda_rt.h: the CUDA check below.)
		if (cur ~ /^lib\/(xport|roles)\// && inc ~ /^mem\// &&
		    inc !~ /^mem\/(mem|pool|gpu_queue|cuda_rt)\.h$/)
			bad(5, cur " includes \"" inc "\" (line " FNR "): a transport or role reaches memory through regions (mem/mem.h), never a backend\047s insides")
		else if (cur ~ /^lib\/(xport|roles)\// && inc ~ /^mem\//)
			passed++
		if (inc !~ /\//) {
			# same folder, or a lib/ top-level header from lib/
			if (!((dir "/" inc) in exists)) {
				bad(1, cur " includes \"" inc "\", which is not in its folder"); inc_ok = 0
			}
		} else {
			layer = inc; sub(/\/.*/, "", layer)
			if (index(allow, " " layer " ")) {
				if (!(("lib/" inc) in exists)) {
					bad(1, cur " includes \"" inc "\", which does not exist"); inc_ok = 0
				}
			} else {
				d = dir; sub(/^lib\//, "", d)
				bad(1, cur " includes \"" inc "\": layer " layer " is not below " d); inc_ok = 0
			}
		}
	}
	cur ~ /^lib\/roles\// && /"(tcp|rdma|shm|cuda)"|xport_(tcp|rdma|shm|cuda)_/ {
		role_hits = role_hits (role_hits == "" ? "" : " ") FNR
	}
	cuda_pat != "" && $0 ~ cuda_pat {
		cuda_hits = cuda_hits (cuda_hits == "" ? "" : " ") FNR
	}
	END {
		finish()
		printf "%s%s%s", out[1], out[2], out[5]
		print passed + 0, failed + 0
	}')
counts=${lib_rules##*
}
lib_rules=${lib_rules%"$counts"}
printf '%s' "$lib_rules"
passed=$((passed + ${counts% *}))
failed=$((failed + ${counts#* }))

# Names of every tracked file and of every system header, then each file
# name cited, checked against both in one pass (a process per citation
# made this check take a minute).
names=$(mktemp)
sys=$(mktemp)
cited=$(mktemp)
trap 'rm -f "$libfiles" "$names" "$sys" "$cited"' EXIT
{ git ls-files 2>/dev/null || find . -type f; } |
	sed 's|.*/||' | sort -u >"$names"
# System headers: <zmq.h>, <infiniband/verbs.h>, <sys/mman.h> ..., and
# the compiler's own (<emmintrin.h>, <stdatomic.h>).
find /usr/include "$(cc -print-file-name=include 2>/dev/null)" \
	-printf '%f\n' 2>/dev/null | sort -u >"$sys"
{ git ls-files 'lib/*' 'cmd/*' 'tests/*' 'docs/*' 'bin/*' 'mk/*' \
	'README.md' 'Makefile' 2>/dev/null; } | grep -v '^tests/fuzz/corpus/' |
	while read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done |
	tr '\n' '\0' | xargs -0 -r grep -oHE \
		'\b[A-Za-z0-9_./-]+\.(c|h|md|py|sh|bats|bash)\b' /dev/null |
	sort -u >"$cited"
missing=$(awk -v names="$names" -v sys="$sys" '
	BEGIN {
		while ((getline n < names) > 0) known[n] = 1
		while ((getline n < sys) > 0) known[n] = 1
		# CUDA headers: optional, only `make cuda-decl` reads them.
		known["cuda.h"] = known["cuda_runtime_api.h"] = 1
	}
	{
		i = index($0, ":"); f = substr($0, 1, i - 1); t = substr($0, i + 1)
		# The shared/ folder of the project lies beside a checkout.
		if (t ~ /^shared\//) next
		b = t; sub(/.*\//, "", b)
		if (!(b in known))
			print f " cites " t ", which is not in the repository"
	}' "$cited")
if [ -n "$missing" ]; then
	while IFS= read -r line; do bad "$line"; done <<EOF_MISSING
$missing
EOF_MISSING
fi
# Paths in docs/ARCHITECTURE.md: with their folders, not just names.
arch=docs/ARCHITECTURE.md
if [ -f "$arch" ]; then
	for p in $(grep -oE '(^|[^A-Za-z0-9_./$-])((lib|cmd|tests|docs|bin|mk|python|model|examples|bench)/|(base|wire|table|plan|mem|xport|roles|cli)/)[A-Za-z0-9_./{},-]*' "$arch" |
		sed -E 's/^[^A-Za-z]//; s/[.,]+$//' | sort -u); do
		case $p in
		*'{'*) # A.{c,h}: each alternative
			pre=${p%%\{*}; rest=${p#*\{}; post=${rest#*\}}
			paths=$(printf '%s\n' "${rest%%\}*}" | tr ',' '\n' |
				sed "s|^|$pre|; s|\$|$post|") ;;
		*) paths=$p ;;
		esac
		for q in $paths; do
			if [ -e "$q" ] || [ -e "lib/$q" ]; then
				passed=$((passed + 1))
			else
				bad "$arch names $q, which does not exist (a tree drawn there must be the tree)"
			fi
		done
	done
fi

# Rule 6: layout and plan rules only in lib/plan.
plan_pat='(%|//) *\(?(tp|heads|kv_heads|layers|pp)\b|\b(tp|heads|kv_heads|layers|pp)[])}]* *(%|//) *(\(|[A-Za-z_]{2,}|[0-9])|divmod\(|1000000|kvwire\.(\$|%s|\{)|port_base *\+'
for f in $({ git ls-files bin python/kvwire 2>/dev/null ||
	find bin python/kvwire -type f; } | grep -E '^(bin/[^/]+|python/kvwire/.*\.py)$'); do
	[ -f "$f" ] && grep -Iq . "$f" || continue # scripts, not built programs
	hits=$(grep -nE "$plan_pat" "$f" | grep -vE '^[0-9]+:[[:space:]]*#' | cut -d: -f1 | tr '\n' ' ')
	if [ -n "$hits" ]; then
		bad "$f restates a plan or layout rule (line ${hits% }): lib/plan owns them; ask kv-plan (scripts) or kvw_group_read and kvw_pool_layout (lib/api.h)"
	else
		passed=$((passed + 1))
	fi
done

echo "tree: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
