#!/bin/sh
# setup.sh installs the servers the comparison runs against, beyond the Go
# module graph: Debian's redis-server (7.0 on bookworm) and zookeeper (3.8).
# It does nothing when both are already there.
#
# Usage: sh compare/setup.sh   (as root, or with sudo available)
#        sh compare/setup.sh --check   (installs nothing; succeeds when both
#                                       are there: test.sh runs the
#                                       comparison's smoke test only then)
#
# The harness finds redis-server on PATH or at /usr/bin/redis-server, and
# ZooKeeper's jars under /usr/share/java (Debian's layout); it starts its
# own server processes on 127.0.0.1 and never uses the packages' services.
set -eu

found() {
	command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || return 1
	[ -f /usr/share/java/zookeeper.jar ] || return 1
	command -v java >/dev/null 2>&1 || return 1
	return 0
}

if found; then
	echo "compare/setup.sh: redis-server and zookeeper are installed"
	exit 0
fi
if [ "${1:-}" = --check ]; then
	echo "compare/setup.sh: redis-server or zookeeper (and java) missing"
	exit 1
fi

SUDO=
if [ "$(id -u)" != 0 ]; then
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
# The packages' post-install scripts may try to start their services; there
# is no init system in CI containers, and the harness starts its own servers.
$SUDO apt-get install -y --no-install-recommends redis-server zookeeper
found || {
	echo "compare/setup.sh: packages installed but redis-server or zookeeper.jar not found" >&2
	exit 1
}
echo "compare/setup.sh: installed redis-server and zookeeper"
