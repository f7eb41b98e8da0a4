#!/bin/sh
# check-tree.sh - the structure rules that the compiler cannot see, run by
# `make test`. Prints one line per breach and "tree: N passed, N failed".
#  1. Layers (docs/ARCHITECTURE.md): lib/base includes only base; wire,
#     table, plan and mem include base and themselves, never each other;
#     xport includes base, mem and itself; roles include any layer below;
#     lib/api.c anything in lib/ but cli/; lib/cli anything in lib/. A
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
#     header of lib/mem includes cuda_rt.h (so none hands it on): the
#     transports copy GPU memory through gpool_map.h and gpu_queue.h.
# Usage: mk/check-tree.sh [ROOT] (default: the repository this is in).
set -u
root=${1:-$(dirname "$0")/..}
cd "$root" || exit 111
passed=0
failed=0
bad() { echo "tree: $*"; failed=$((failed + 1)); }

allowed_for() {
	case $1 in
	lib/base/*) echo "base" ;;
	lib/wire/* | lib/table/* | lib/plan/* | lib/mem/*)
		l=${1#lib/}; echo "base ${l%%/*}" ;;
	lib/xport/*) echo "base mem xport" ;;
	lib/roles/*) echo "base wire table plan mem xport roles" ;;
	lib/cli/*) echo "base wire table plan mem xport roles cli" ;;
	lib/*) echo "base wire table plan mem xport roles" ;;
	esac
}

for f in $(find lib -name '*.[ch]' | sort); do
	allow=$(allowed_for "$f")
	dir=$(dirname "$f")
	ok=1
	for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
		case $inc in
		*/*) layer=${inc%%/*} ;;
		*) # same folder, or a lib/ top-level header from lib/
			[ -f "$dir/$inc" ] && continue
			bad "$f includes \"$inc\", which is not in its folder"
			ok=0
			continue ;;
		esac
		case " $allow " in
		*" $layer "*) [ -f "lib/$inc" ] && continue
			bad "$f includes \"$inc\", which does not exist"; ok=0 ;;
		*) bad "$f includes \"$inc\": layer $layer is not below ${dir#lib/}"
			ok=0 ;;
		esac
	done
	[ "$ok" -eq 1 ] && passed=$((passed + 1))
done

# Roles reach a transport only through its ops table.
for f in $(find lib/roles -name '*.[ch]' | sort); do
	hits=$(grep -nE '"(tcp|rdma|shm|cuda)"|xport_(tcp|rdma|shm|cuda)_' "$f" |
		cut -d: -f1 | tr '\n' ' ')
	hits=${hits% }
	case $hits in *" "*) at="lines $hits" ;; *) at="line $hits" ;; esac
	if [ -n "$hits" ]; then
		bad "$f names a transport ($at): a role asks the ops table (lib/xport/xport.h), never a transport by name"
	else
		passed=$((passed + 1))
	fi
done

# The CUDA runtime is lib/mem's own.
for f in $(find lib -name '*.[ch]' | sort); do
	case $f in
	lib/mem/cuda_rt.h) continue ;;
	lib/mem/*.c) continue ;;
	lib/mem/*.h) pat='^#include "cuda_rt\.h"' ;;
	*) pat='^#include ("mem/cuda_rt\.h"|<cuda)' ;;
	esac
	hits=$(grep -nE "$pat" "$f" | cut -d: -f1 | tr '\n' ' ')
	if [ -n "$hits" ]; then
		bad "$f includes the CUDA runtime (line ${hits% }): only lib/mem's .c files may; a transport copies through mem/gpool_map.h and mem/gpu_queue.h"
	else
		passed=$((passed + 1))
	fi
done

# Names of every tracked file and of every system header, then each file
# name cited, checked against both in one pass (a process per citation
# made this check take a minute).
names=$(mktemp)
sys=$(mktemp)
cited=$(mktemp)
trap 'rm -f "$names" "$sys" "$cited"' EXIT
{ git ls-files 2>/dev/null || find . -type f; } |
	sed 's|.*/||' | sort -u >"$names"
# System headers: <zmq.h>, <infiniband/verbs.h>, <sys/mman.h> ...
find /usr/include -printf '%f\n' 2>/dev/null | sort -u >"$sys"
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

echo "tree: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
