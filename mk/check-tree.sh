#!/bin/sh
# check-tree.sh - the structure rules that the compiler cannot see, run by
# `make test`. Prints one line per breach and "tree: N passed, N failed".
#  1. Layers (docs/ARCHITECTURE.md): lib/base includes only base; wire,
#     table, plan and xport include base and themselves, never each other;
#     roles include any layer below; lib/api.c anything in lib/ but cli/;
#     lib/cli anything in lib/. Nothing in lib/ includes a program's header.
#  2. Every file name that a comment or document cites (a word ending in
#     .c, .h, .md, .py, .sh, .bats or .bash) is a file of the repository
#     or a system header; shared/NAME names the project's folder beside it.
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
	lib/wire/* | lib/table/* | lib/plan/* | lib/xport/*)
		l=${1#lib/}; echo "base ${l%%/*}" ;;
	lib/roles/*) echo "base wire table plan xport roles" ;;
	lib/cli/*) echo "base wire table plan xport roles cli" ;;
	lib/*) echo "base wire table plan xport roles" ;;
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

# Names of every tracked file, then each file name cited.
names=$(mktemp)
trap 'rm -f "$names"' EXIT
{ git ls-files 2>/dev/null || find . -type f; } |
	sed 's|.*/||' | sort -u >"$names"
for f in $({ git ls-files 'lib/*' 'cmd/*' 'tests/*' 'docs/*' 'bin/*' 'mk/*' \
	'README.md' 'Makefile' 2>/dev/null; } | grep -v '^tests/fuzz/corpus/'); do
	[ -f "$f" ] || continue
	for t in $(grep -oE '\b[A-Za-z0-9_./-]+\.(c|h|md|py|sh|bats|bash)\b' "$f" | sort -u); do
		b=${t##*/}
		# The project's shared/ folder lies beside a checkout, not in it.
		case $t in shared/*) continue ;; esac
		grep -qxF "$b" "$names" && continue
		# CUDA's headers: optional, only `make cuda-decl` reads them.
		case $b in cuda.h | cuda_runtime_api.h) continue ;; esac
		# System headers: <zmq.h>, <infiniband/verbs.h>, <sys/mman.h> ...
		[ -n "$(find /usr/include -name "$b" -print -quit 2>/dev/null)" ] &&
			continue
		bad "$f cites $t, which is not in the repository"
	done
done
echo "tree: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
