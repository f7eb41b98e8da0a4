#!/usr/bin/env bats
# Transports chosen at run time: kv-probe reports what this machine can use.
# This machine (and CI) has no RDMA device and no GPU driver.

load helpers

@test "kv-probe: shm is available" {
	run kv-probe shm
	[ "$status" -eq 0 ]
	[[ $output == *"shm: available"* ]]
}

@test "kv-probe: rdma without a device says not available and exits 77" {
	run kv-probe rdma
	if [ "$status" -eq 0 ]; then
		skip "this machine has a usable RDMA device"
	fi
	[ "$status" -eq 77 ]
	[[ $output == *"rdma: not available"* ]]
}

@test "kv-probe: cuda without a driver says not available and exits 77" {
	run kv-probe cuda
	if [ "$status" -eq 0 ]; then
		skip "this machine has a usable GPU"
	fi
	[ "$status" -eq 77 ]
	[[ $output == *"cuda: not available"* ]]
}

@test "kv-probe: an unknown transport is a usage error (100)" {
	run kv-probe nope
	[ "$status" -eq 100 ]
}

@test "kv-probe: --help exits 0 and names the transports" {
	run kv-probe --help
	[ "$status" -eq 0 ]
	[[ $output == *shm* ]]
}
