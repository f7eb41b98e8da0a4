#!/usr/bin/env bats
# kv-bench for a person at a terminal: the one-line progress bar is drawn
# under a pseudo-terminal (`script`) and absent when stderr is not one;
# --plot draws a PNG with gnuplot; --metrics-cost prices the tables'
# measures (rooms/s with and without, same run) and leaves them on.

load helpers

setup() { kvw_setup; }
teardown() { kvw_teardown; }

TINY=(--layers 8 --page-tokens 1 --heads 1 --head-dim 64 --pages 256 --aux-slots 64)

# is_png FILE: a PNG signature and a size between 2 KiB and 2 MiB.
is_png() {
	local size
	[ "$(head -c 8 "$1" | xxd -p)" = 89504e470d0a1a0a ]
	size=$(stat -c %s "$1")
	[ "$size" -gt 2048 ] && [ "$size" -lt $((2 << 20)) ]
}

@test "kv-bench: the progress bar on a pseudo-terminal, none when stderr is a file" {
	command -v script >/dev/null || skip "script (bsdutils) not installed"
	kv_up --workers 1 "${TINY[@]}"
	base="--run-dir $RUN --concurrency 1 --latency-rooms 5 --rtt 10 --warmup 1"
	run timeout 120 kv-bench rooms $base --rooms 300 2>"$RUN/err"
	[ "$status" -eq 0 ]
	[[ $output == *"rate run: rooms=300 success=300"* ]]
	[ ! -s "$RUN/err" ]
	[[ $output != *'GiB/s ok='* ]]
	# The bar is drawn from the first 100 ms callback on: enough rooms
	# one at a time for about 2 s at the rate this run just measured
	# (not a fixed count, which a faster machine finishes first).
	secs=$(echo "$output" | sed -n 's/.*rate run: .* seconds=\([0-9.]*\);.*/\1/p')
	[ -n "$secs" ]
	n=$(echo "r = 300 * 2 / ($secs + 0.001); if (r < 300) r = 300; scale = 0; r / 1" | bc)
	echo "baseline: 300 rooms in ${secs}s; the bar's run: $n rooms"
	run timeout 300 script -qec "'$KVW_BIN/kv-bench' rooms $base --rooms $n" /dev/null
	[ "$status" -eq 0 ]
	[[ $output == *$'\r['*'] '*"/$n "*' GiB/s ok='*'failed=0'* ]]
	[[ $output == *"rate run: rooms=$n success=$n"* ]]
}

@test "kv-bench --plot: rooms and demo draw a PNG of sane size into a temporary directory" {
	command -v gnuplot >/dev/null || skip "gnuplot (Debian gnuplot-nox) not installed"
	kv_up --workers 1 "${TINY[@]}"
	run timeout 120 kv-bench rooms --run-dir "$RUN" --rooms 200 --concurrency 4 \
		--latency-rooms 50 --rtt 10 --warmup 5 --plot "$RUN/rooms.png"
	[ "$status" -eq 0 ]
	is_png "$RUN/rooms.png"
	run timeout 120 kv-bench demo --run-dir "$RUN" --rooms 40 --pages-per-room 1 \
		--chunk-pages 1 --plot "$RUN/demo.png"
	[ "$status" -eq 0 ]
	is_png "$RUN/demo.png"
	refute ls "$TMPDIR"/kvbplot.* /tmp/kvbplot.* 2>/dev/null
	run kv-bench copy --plot "$RUN/x.png"
	[ "$status" -eq 100 ]
}

@test "kv-bench rooms --metrics-cost: rooms/s with and without the measures; they stay on" {
	kv_up --workers 1 "${TINY[@]}"
	run timeout 120 kv-bench rooms --run-dir "$RUN" --rooms 50 --concurrency 4 \
		--latency-rooms 5 --rtt 10 --warmup 5 --metrics-cost 2
	[ "$status" -eq 0 ]
	echo "$output" | grep -Eq '^metrics cost: 2 passes of 50 rooms each way, alternating: with measures [0-9.]+ rooms/s \(100/100 ok\), without [0-9.]+ rooms/s \(100/100 ok\), cost -?[0-9.]+%$'
	kv-stat --prom --run-dir "$RUN" | grep -qx 'kvwire_metrics_enabled{table="p0"} 1'
	# Only the measured passes count by state: 5 + 50 + 5 + 2 x 50 (on)
	# rooms; every room inserted counts (a plain counter): + 2 x 50 (off).
	kv-stat --prom --run-dir "$RUN" | grep -qx 'kvwire_rooms_entered_total{table="p0",state="success"} 160'
	kv-stat --prom --run-dir "$RUN" | grep -qx 'kvwire_rooms_inserted_total{table="p0"} 260'
	run kv-bench rooms --run-dir "$RUN" --json --metrics-cost 1
	[ "$status" -eq 100 ]
}
