#!/usr/bin/env bats
# The house in layers: libkvwire.so exports exactly the engine API (the list
# in tests/api.exports), and mk/check-tree.sh holds the layer, role,
# citation and docs/ARCHITECTURE.md path rules on the repository and
# refuses a tree that breaks them.

load helpers

setup() { kvw_setup; }
teardown() { kvw_teardown; }

# The repository's tracked files, as a git repository of its own under
# $RUN/t, for a test to plant a violation in.
copy_tree() {
	mkdir -p "$RUN/t"
	(cd "$KVW_ROOT" && git ls-files lib mk tests cmd docs model examples python bin bench README.md |
		xargs cp --parents -t "$RUN/t")
	(cd "$RUN/t" && git init -q && git add -A)
}

@test "libkvwire.so exports exactly the symbols listed in tests/api.exports" {
	so="$KVW_BIN/../lib/libkvwire.so"
	[ -f "$so" ] || so="$KVW_ROOT/lib/libkvwire.so"
	nm -D --defined-only "$so" | awk '{print $3}' | sort >"$RUN/exported"
	run diff -u "$KVW_ROOT/tests/api.exports" "$RUN/exported"
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	# Every exported name is declared in the public headers.
	while read -r sym; do
		grep -q "KVW_API.*\b$sym(" "$KVW_ROOT/lib/api.h" "$KVW_ROOT/lib/base/kvw.h"
	done <"$KVW_ROOT/tests/api.exports"
}

@test "the repository keeps the layer rules and cites only files it has" {
	run "$KVW_ROOT/mk/check-tree.sh" "$KVW_ROOT"
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	[[ $output == *"tree: "*" passed, 0 failed"* ]]
}

@test "check-tree refuses a sideways include, upward includes and a cited file that is missing" {
	copy_tree
	run "$RUN/t/mk/check-tree.sh" "$RUN/t"
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	# wire must not include table (sideways), plan must not include roles
	# and mem must not include xport (upward: memory sits below the
	# transports), and a comment may not cite a file that is not there.
	printf '#include "table/rtab.h"\n' >>"$RUN/t/lib/wire/wire.c"
	printf '#include "roles/sender/sender.h"\n' >>"$RUN/t/lib/plan/plan.c"
	printf '#include "xport/xport.h"\n' >>"$RUN/t/lib/mem/pool.c"
	ext=c # (spelt apart so that this file cites no missing file itself)
	printf '/* see gone_away.%s */\n' "$ext" >>"$RUN/t/lib/base/log.c"
	(cd "$RUN/t" && git add -A)
	run "$RUN/t/mk/check-tree.sh" "$RUN/t"
	[ "$status" -ne 0 ]
	[[ $output == *'lib/wire/wire.c includes "table/rtab.h": layer table is not below wire'* ]]
	[[ $output == *'lib/plan/plan.c includes "roles/sender/sender.h": layer roles is not below plan'* ]]
	[[ $output == *'lib/mem/pool.c includes "xport/xport.h": layer xport is not below mem'* ]]
	[[ $output == *"lib/base/log.c cites gone_away.$ext"* ]]
	[[ $output =~ tree:\ [0-9]+\ passed,\ 4\ failed ]]
}

@test "check-tree refuses a role that names a transport or calls a transport's own function" {
	copy_tree
	# Issue 31: a role that tests the transport by name, and one that
	# reaches around the ops table to one transport's own call.
	w=$(( $(wc -l <"$RUN/t/lib/roles/sender/worker.c") + 1 ))
	s=$(( $(wc -l <"$RUN/t/lib/roles/sender/sender_room.c") + 1 ))
	printf 'static int is_it(const char *n) { return !strcmp(n, "tcp"); }\n' \
		>>"$RUN/t/lib/roles/sender/worker.c"
	printf 'static int busy(struct xport *x) { return xport_rdma_room_busy(x, 1) > 0; }\n' \
		>>"$RUN/t/lib/roles/sender/sender_room.c"
	(cd "$RUN/t" && git add -A)
	run "$RUN/t/mk/check-tree.sh" "$RUN/t"
	[ "$status" -ne 0 ]
	[[ $output == *"lib/roles/sender/worker.c names a transport (line $w): a role asks the ops table"* ]]
	[[ $output == *"lib/roles/sender/sender_room.c names a transport (line $s): a role asks the ops table"* ]]
	[[ $output =~ tree:\ [0-9]+\ passed,\ 2\ failed ]]
}

@test "check-tree refuses a path in docs/ARCHITECTURE.md that is not in the tree" {
	copy_tree
	# Issue 31: the page's tree must be the tree. A file shown in the
	# folder it left (its name still exists, so the citation rule passes),
	# a layer-relative path and a brace pair whose second file is gone.
	printf 'The sink is `lib/xport/tcp_sink.c`, its process `roles/sink.c`,\nthe fence `lib/table/rtab_fence.{c,x}`.\n' \
		>>"$RUN/t/docs/ARCHITECTURE.md"
	(cd "$RUN/t" && git add -A)
	run "$RUN/t/mk/check-tree.sh" "$RUN/t"
	[ "$status" -ne 0 ]
	[[ $output == *"docs/ARCHITECTURE.md names lib/xport/tcp_sink.c, which does not exist"* ]]
	[[ $output == *"docs/ARCHITECTURE.md names roles/sink.c, which does not exist"* ]]
	[[ $output == *"docs/ARCHITECTURE.md names lib/table/rtab_fence.x, which does not exist"* ]]
	[[ $output =~ tree:\ [0-9]+\ passed,\ 3\ failed ]]
}

@test "check-tree refuses the CUDA runtime outside lib/mem: a transport's or role's include, and a lib/mem header that hands it on" {
	copy_tree
	# Issue 31: no transport includes a CUDA header; GPU memory is reached
	# through lib/mem's regions (mem.h). The runtime's own header included
	# by a transport, a CUDA system header in a role, a lib/mem header
	# that would pass cuda_rt.h on to whoever includes it, and a transport
	# that opens a backend's insides (the GPU record's handles) itself.
	t=$(( $(wc -l <"$RUN/t/lib/xport/tcp/xport_tcp.c") + 1 ))
	w=$(( $(wc -l <"$RUN/t/lib/roles/sender/worker.c") + 1 ))
	printf '#include "mem/cuda_rt.h"\n' >>"$RUN/t/lib/xport/tcp/xport_tcp.c"
	printf '#include <cuda_runtime_api.h>\n' >>"$RUN/t/lib/roles/sender/worker.c"
	sed -i 's|^#include "gpool.h"$|#include "cuda_rt.h"\n#include "gpool.h"|' \
		"$RUN/t/lib/mem/gpool_map.h"
	g=$(grep -n '^#include "cuda_rt.h"$' "$RUN/t/lib/mem/gpool_map.h" | cut -d: -f1)
	[ -n "$g" ]
	r=$(( $(wc -l <"$RUN/t/lib/xport/rdma/rdma_gpu.c") + 1 ))
	printf '#include "mem/gpool_map.h"\n' >>"$RUN/t/lib/xport/rdma/rdma_gpu.c"
	(cd "$RUN/t" && git add -A)
	run "$RUN/t/mk/check-tree.sh" "$RUN/t"
	[ "$status" -ne 0 ]
	[[ $output == *"lib/xport/tcp/xport_tcp.c includes the CUDA runtime (line $t): only lib/mem's .c files may"* ]]
	[[ $output == *"lib/roles/sender/worker.c includes the CUDA runtime (line $w)"* ]]
	[[ $output == *"lib/mem/gpool_map.h includes the CUDA runtime (line $g)"* ]]
	[[ $output == *"lib/xport/rdma/rdma_gpu.c includes \"mem/gpool_map.h\" (line $r): a transport or role reaches memory through regions"* ]]
	[[ $output =~ tree:\ [0-9]+\ passed,\ 4\ failed ]]
}

@test "check-tree refuses a plan or layout rule restated outside lib/plan: in a kv-up script and in the Python package" {
	copy_tree
	# Issue 31: lib/plan owns the group plan and the pool layout; kv-up
	# asks kv-plan and Python asks the library. A member's table name
	# built in a script, a control port computed there, and the heads
	# split and the draft id base restated in Python are each refused;
	# a comment that mentions them is not.
	s=$(( $(wc -l <"$RUN/t/bin/kv-up-lib.bash") + 1 ))
	printf '%s\n' 't=/dev/shm/kvwire.$runid.p$i.rooms' \
		'port=$((port_base + 1 + i))' \
		'# a comment may say heads % tp and port_base + 1' >>"$RUN/t/bin/kv-up-lib.bash"
	p=$(( $(wc -l <"$RUN/t/python/kvwire/pool.py") + 1 ))
	printf '%s\n' 'DRAFT_BASE = 1000000' \
		'HEADS = lambda s, tp: s.kv_heads // tp' >>"$RUN/t/python/kvwire/pool.py"
	(cd "$RUN/t" && git add -A)
	run "$RUN/t/mk/check-tree.sh" "$RUN/t"
	[ "$status" -ne 0 ]
	[[ $output == *"bin/kv-up-lib.bash restates a plan or layout rule (line $s $((s + 1))): lib/plan owns them"* ]]
	[[ $output == *"python/kvwire/pool.py restates a plan or layout rule (line $p $((p + 1)))"* ]]
	[[ $output =~ tree:\ [0-9]+\ passed,\ 2\ failed ]]
}
