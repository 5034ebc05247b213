#!/bin/sh
# test-etcd.sh DIR CLIENT_URL PEER_URL runs one real etcd server process
# for the examples and tests of the library's own module (main_test.go in
# the root and in recipes/), whose go.mod must not require etcd's server:
# the binary is $ETCD_BIN if set, else etcd v3.7.3 built from the Go module
# proxy outside any module graph by build-etcd.sh and cached (a few minutes
# the first time; later runs reuse it). The server listens on loopback
# URLs the caller picked, keeps its data and log in DIR, and runs until
# this script's standard input closes (the test binary exits, also when it
# crashes), then is stopped.
set -eu
dir=$1 client=$2 peer=$3
bin=${ETCD_BIN:-}
if [ -z "$bin" ]; then
	if ! bin=$(sh "$(dirname "$0")/build-etcd.sh" v3.7.3); then
		echo "test-etcd.sh: could not build etcd v3.7.3 from the Go module proxy (above); set ETCD_BIN to an etcd server binary (3.4 or newer) instead" >&2
		exit 1
	fi
fi
if [ ! -x "$bin" ]; then
	echo "test-etcd.sh: ETCD_BIN=$bin is not an executable etcd server" >&2
	exit 1
fi
"$bin" --name test --data-dir "$dir/data" \
	--listen-client-urls "$client" --advertise-client-urls "$client" \
	--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
	--initial-cluster "test=$peer" --unsafe-no-fsync >"$dir/etcd.log" 2>&1 &
pid=$!
echo "started"
read -r _ || true
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
