#!/usr/bin/env bats
# make install / make uninstall into a temporary DESTDIR: every part lands
# (programs, library, <kvwire/api.h>, kvwire.pc, man pages, systemd units,
# the Python package), a small C engine builds with `pkg-config --cflags
# --libs kvwire` and opens a live member's engine connection, the Python
# package imports and finds the installed library, and uninstall leaves
# no file behind.

load helpers

setup() {
	kvw_setup
	DEST="$RUN/dest"
	PREFIX=/opt/kvw
	mkdir -p "$DEST"
}
teardown() { kvw_teardown; }

@test "make install into DESTDIR: every part lands, a pkg-config engine opens a live member, the Python package knows the library path; make uninstall leaves no file" {
	command -v pkg-config >/dev/null || skip "pkg-config not installed"
	run make -s -C "$KVW_ROOT" install DESTDIR="$DEST" PREFIX="$PREFIX"
	[ "$status" -eq 0 ]
	for f in bin/kv-sender bin/kv-stat bin/kv-up lib/libkvwire.so \
		lib/libkvwire.a include/kvwire/api.h include/kvwire/base/kvw.h \
		lib/pkgconfig/kvwire.pc share/man/man1/kv-stat.1 share/man/man1/kv-up.1 \
		lib/systemd/system/kvwire-prefill@.service lib/systemd/system/kvwire.target \
		lib/python3/dist-packages/kvwire/_lib.py; do
		[ -f "$DEST$PREFIX/$f" ] || { echo "missing $f" >&2; false; }
	done
	# The installed headers declare only what the library exports (its
	# exported set is tests/api.exports): no internal helper is promised.
	declared=$(cc -E -P -I"$DEST$PREFIX/include" -x c "$DEST$PREFIX/include/kvwire/api.h" |
		grep -oE '\bkvw_[a-z0-9_]+ *\(' | tr -d ' (' | sort -u)
	exported=$(nm -D --defined-only "$DEST$PREFIX/lib/libkvwire.so" |
		awk '{ print $3 }' | grep '^kvw_' | sort -u)
	echo "declared, not exported: $(comm -23 <(echo "$declared") <(echo "$exported") | tr '\n' ' ')"
	[ -n "$declared" ]
	[ -z "$(comm -23 <(echo "$declared") <(echo "$exported"))" ]
	# Units name the installed programs.
	grep -qx "ExecStart=$PREFIX/bin/kv-sender \$KVW_ARGS" "$DEST$PREFIX/lib/systemd/system/kvwire-prefill@.service"
	# pkg-config answers for the staged prefix; the engine builds with it.
	export PKG_CONFIG_PATH="$DEST$PREFIX/lib/pkgconfig"
	export PKG_CONFIG_SYSROOT_DIR="$DEST"
	flags=$(pkg-config --cflags --libs kvwire)
	[[ $flags == *"-I$DEST$PREFIX/include"* ]]
	[[ $flags == *"-L$DEST$PREFIX/lib"*"-lkvwire"* ]]
	cc -std=c17 -Wall -Werror -o "$RUN/engine" "$KVW_ROOT/tests/install/engine.c" $flags
	run env LD_LIBRARY_PATH="$DEST$PREFIX/lib" "$RUN/engine"
	[ "$status" -eq 0 ]
	[ "$output" = Success ]
	kv_up --workers 1 --layers 8 --page-tokens 1 --heads 1 --head-dim 64 --pages 64 --aux-slots 8
	run env LD_LIBRARY_PATH="$DEST$PREFIX/lib" "$RUN/engine" \
		"$(endpoint p0 engine)" "$(endpoint p0 table)" "$(endpoint p0 pool)"
	[ "$status" -eq 0 ]
	[[ $output == pool_bytes=[1-9]* ]]
	py=py # the module make install writes (spelt apart: not in the tree)
	grep -qx "LIBPATH = \"$PREFIX/lib/libkvwire.so\"" \
		"$DEST$PREFIX/lib/python3/dist-packages/kvwire/_libpath.$py"
	run make -s -C "$KVW_ROOT" uninstall DESTDIR="$DEST" PREFIX="$PREFIX"
	[ "$status" -eq 0 ]
	run find "$DEST" -not -type d
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "make install without DESTDIR: the installed Python package finds the installed library" {
	live="$RUN/live"
	run make -s -C "$KVW_ROOT" install PREFIX="$live"
	[ "$status" -eq 0 ]
	run env -u KVW_LIB PYTHONDONTWRITEBYTECODE=1 \
		PYTHONPATH="$live/lib/python3/dist-packages" $PY -c "
import kvwire, kvwire._lib as l
print(l._path(), l.state_str(4))"
	[ "$status" -eq 0 ]
	[ "$output" = "$live/lib/libkvwire.so Success" ]
	run make -s -C "$KVW_ROOT" uninstall PREFIX="$live"
	[ "$status" -eq 0 ]
	run find "$live" -not -type d
	[ -z "$output" ]
}

@test "pip install ./python into a fresh venv, offline: kvwire imports from the venv, finds an installed library through the loader, the adapter tests pass from outside the tree, and SGLang loads its plugin entry point" {
	$PY -c 'import venv, setuptools' 2>/dev/null || skip "python3-venv or python3-setuptools not installed"
	# pip builds in the source folder: a copy keeps the checkout clean.
	cp -r "$KVW_ROOT/python" "$RUN/src"
	$PY -m venv --system-site-packages "$RUN/venv"
	run "$RUN/venv/bin/pip" install -q --no-index --no-build-isolation "$RUN/src"
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	cd "$RUN" # outside the tree from here on
	run env -u PYTHONPATH PYTHONDONTWRITEBYTECODE=1 KVW_LIB="$KVW_ROOT/lib/libkvwire.so" \
		"$RUN/venv/bin/python" -c 'import kvwire, os; print(os.path.dirname(kvwire.__file__))'
	[ "$status" -eq 0 ]
	[[ $output == "$RUN/venv/lib/python3"*"/site-packages/kvwire" ]]
	# No KVW_LIB, and pip's copy holds no library path of make install's:
	# the dynamic loader finds the library `make install` placed
	# (LD_LIBRARY_PATH for a prefix of the test's own; ldconfig's cache
	# for /usr/local).
	live="$RUN/live"
	run make -s -C "$KVW_ROOT" install PREFIX="$live"
	[ "$status" -eq 0 ]
	run env -u KVW_LIB -u PYTHONPATH PYTHONDONTWRITEBYTECODE=1 LD_LIBRARY_PATH="$live/lib" \
		"$RUN/venv/bin/python" -c 'import kvwire._lib as l; print(l._path(), l.state_str(4))'
	[ "$status" -eq 0 ]
	[ "$output" = "libkvwire.so Success" ]
	# Without the library anywhere it says how to get it.
	run env -u KVW_LIB -u PYTHONPATH PYTHONDONTWRITEBYTECODE=1 \
		"$RUN/venv/bin/python" -c 'import kvwire'
	[ "$status" -ne 0 ]
	[[ $output == *"kvwire: cannot load libkvwire.so (run \`make\`, \`make install\` (then ldconfig), or set KVW_LIB)"* ]]
	# The adapter tests, run against the installed package: with
	# KVW_PY_INSTALLED their conftest leaves the tree's python/ off the path.
	run env -u PYTHONPATH KVW_PY_INSTALLED=1 PYTHONDONTWRITEBYTECODE=1 \
		LD_LIBRARY_PATH="$live/lib" "$RUN/venv/bin/python" -c \
		"import sys; sys.path.insert(0, '$KVW_ROOT/tests/python'); import conftest, kvwire; print(kvwire.__file__)"
	[ "$status" -eq 0 ]
	[[ $output == "$RUN/venv/lib/python3"*"/site-packages/kvwire/__init__.py" ]]
	# Every adapter test passes there, none skipped: as many as the tree's
	# own run collects (a fixed count went stale when tests were added).
	adapters=(test_adapters.py test_sglang_plugin.py test_vllm_connector.py
		test_sglang_harness.py)
	want=$(cd "$KVW_ROOT/tests/python" && PYTHONDONTWRITEBYTECODE=1 \
		/usr/bin/python3 -m pytest -q --collect-only -p no:cacheprovider \
		"${adapters[@]}" | sed -n 's/^\([0-9][0-9]*\) tests* collected.*/\1/p')
	[ "${want:-0}" -ge 18 ]
	run env -u KVW_LIB -u PYTHONPATH KVW_PY_INSTALLED=1 PYTHONDONTWRITEBYTECODE=1 \
		LD_LIBRARY_PATH="$live/lib" "$RUN/venv/bin/python" -m pytest -q \
		-p no:cacheprovider "${adapters[@]/#/$KVW_ROOT/tests/python/}"
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	last=$(echo "$output" | tail -n 1)
	echo "$last (collected in the tree: $want)"
	[[ $last == "$want passed"* ]]
	# The SGLang plugin is the installed package's entry point.
	run env -u KVW_LIB -u PYTHONPATH LD_LIBRARY_PATH="$live/lib" \
		"$RUN/venv/bin/python" -c 'from importlib.metadata import entry_points as e; print([x.value for x in e(group="sglang.srt.plugins")])'
	[ "$status" -eq 0 ]
	[ "$output" = "['kvwire.adapters.sglang_plugin:register']" ]
	run make -s -C "$KVW_ROOT" uninstall PREFIX="$live"
	[ "$status" -eq 0 ]
}
