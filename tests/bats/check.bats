#!/usr/bin/env bats
# check.bats - members refuse a bad setup before they make anything:
# `--check` decides what a start would refuse and makes nothing, and a real
# start that is refused (exit 100, or 77 for a transport this machine
# lacks) leaves no table or pool behind and does not loop.

load helpers

setup() {
	kvw_setup
	TAG=chk-$$-$BATS_TEST_NUMBER
	TAB=/dev/shm/kvwire.$TAG.rooms
	POOL=/dev/shm/kvwire.$TAG.pool
	EPS=(--listen "ipc://$RUN/m.peer" --engine "ipc://$RUN/m.eng" --table "$TAB")
}
teardown() {
	rm -f "$TAB" "$POOL"
	kvw_teardown
}

# nothing_made: no file of this test in /dev/shm, no socket in $RUN.
nothing_made() {
	[ -z "$(ls /dev/shm | grep -F "$TAG")" ] || { ls -l /dev/shm | grep -F "$TAG"; return 1; }
	[ ! -e "$RUN/m.peer" ] && [ ! -e "$RUN/m.eng" ]
}

@test "--check of a good setup exits 0, prints the pool size, and makes nothing" {
	run kv-sender --check "${EPS[@]}" --pool "$POOL" --layers 2 --pages 8
	[ "$status" -eq 0 ]
	[[ $output =~ ^pool_bytes=[1-9][0-9]*$ ]]
	run kv-receiver --check "${EPS[@]}" --pool "$POOL" --layers 2 --pages 8
	[ "$status" -eq 0 ]
	[[ $output =~ ^pool_bytes=[1-9][0-9]*$ ]]
	run kv-heartbeat --check --table "$TAB" --interval 0.5
	[ "$status" -eq 0 ]
	run kv-bootstrap --check --listen "ipc://$RUN/b.sock"
	[ "$status" -eq 0 ]
	[ ! -e "$RUN/b.sock" ]
	nothing_made
}

@test "--check refuses bad setups with exit 100 and the reason, and makes nothing" {
	run kv-receiver --check "${EPS[@]}" --pool "$POOL" --heads 7 --topo 2,1
	[ "$status" -eq 100 ]
	[[ $output == *"7 kv heads do not split over tp 2"* ]]
	run kv-sender --check "${EPS[@]}" --pool "$RUN/notapool.bin"
	[ "$status" -eq 100 ]
	[[ $output == *"kvwire.<name>.pool"* ]]
	long="ipc://$RUN/$(printf 'x%.0s' $(seq 120))"
	run kv-receiver --check --listen "$long" --engine "ipc://$RUN/m.eng" \
		--table "$TAB" --pool "$POOL"
	[ "$status" -eq 100 ]
	[[ $output == *"1..107 allowed"* ]]
	run kv-bootstrap --check --listen "$long"
	[ "$status" -eq 100 ]
	[[ $output == *"1..107 allowed"* ]]
	run kv-heartbeat --check --table "$TAB" --interval 0
	[ "$status" -eq 100 ]
	run kv-sender --check "${EPS[@]}" --pool "$POOL" --workers 100000
	[ "$status" -eq 100 ]
	nothing_made
}

@test "a transport this machine lacks: --check and a real start exit 77 at once, nothing left" {
	run kv-sender --check "${EPS[@]}" --pool "$POOL" --transport rdma
	[ "$status" -eq 77 ]
	[[ $output == *"rdma: not available"* ]]
	# A real start ends at once (no worker restarted every second).
	run timeout 10 kv-sender "${EPS[@]}" --pool "$POOL" --transport cuda
	[ "$status" -eq 77 ]
	[[ $output == *"not available"* ]]
	run timeout 10 kv-receiver "${EPS[@]}" --pool "$POOL" --transport rdma
	[ "$status" -eq 77 ]
	[[ $output == *"rdma: not available"* ]]
	nothing_made
}

@test "a start refused after it made its table and pool removes both" {
	# The peer endpoint is taken: kv-receiver makes its table and pool,
	# then cannot bind, and must remove both.
	mkdir "$RUN/m.peer.d"
	run timeout 10 kv-receiver --listen "ipc://$RUN/m.peer.d" \
		--engine "ipc://$RUN/m.eng" --table "$TAB" --pool "$POOL" \
		--layers 2 --pages 8
	[ "$status" -eq 111 ]
	[ ! -e "$TAB" ] && [ ! -e "$POOL" ]
	run timeout 10 kv-sender --listen "ipc://$RUN/m.peer.d" \
		--engine "ipc://$RUN/m.eng" --table "$TAB" --pool "$POOL" \
		--layers 2 --pages 8 --workers 1
	[ "$status" -eq 111 ]
	[ ! -e "$TAB" ] && [ ! -e "$POOL" ]
}
