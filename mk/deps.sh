#!/bin/sh
# deps.sh - make sure the Debian packages kvwire builds and tests with are
# installed. As root it installs what is missing; otherwise it prints the
# exact command and fails. Exit 0 when everything is present.
set -u
pkgs="libzmq3-dev libbsd-dev libibverbs-dev libcmocka-dev pkg-config bats \
bats-support bats-assert bats-file clang python3-zmq libclang-rt-14-dev \
jq bc procps xxd libxxhash-dev libsodium-dev libssl-dev spin python3-numpy python3-pytest \
iproute2 nftables libmicrohttpd-dev libsystemd-dev mandoc prometheus \
gnuplot-nox curl bsdutils inotify-tools stress-ng parallel bash-builtins"

missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0

cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" -ne 0 ]; then
	echo "kvwire: missing Debian packages:$missing" >&2
	echo "kvwire: run as root: $cmd" >&2
	exit 1
fi
echo "kvwire: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet: update once and retry.
$cmd >/dev/null || { apt-get update -q >/dev/null && $cmd >/dev/null; } || {
	echo "kvwire: fatal: unable to install:$missing" >&2
	exit 1
}
