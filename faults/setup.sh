#!/bin/sh
# setup.sh installs what the fault tests need beyond the Go module graph:
# Debian's etcd-server package (etcd 3.4), the old-server compatibility
# target of TestOldServer. It does nothing when the binary is already there.
#
# Usage: sh faults/setup.sh   (as root, or with sudo available)
#
# The tests find the binary at $FAULTS_OLD_ETCD, else /usr/bin/etcd, else
# etcd on PATH; TestOldServer fails, never skips, when it is missing.
set -eu

# found succeeds when the binary the tests will pick is an etcd 3.4.
found() {
	for b in "${FAULTS_OLD_ETCD:-}" /usr/bin/etcd "$(command -v etcd 2>/dev/null || true)"; do
		if [ -n "$b" ] && [ -x "$b" ]; then
			v=$("$b" --version 2>/dev/null | head -n 1)
			case "$v" in
			*"Version: 3.4"*)
				echo "faults/setup.sh: old etcd server: $b ($v)"
				return 0
				;;
			esac
			echo "faults/setup.sh: $b is not etcd 3.4 ($v)" >&2
			return 1
		fi
	done
	return 1
}

if found; then
	exit 0
fi

SUDO=
if [ "$(id -u)" != 0 ]; then
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
# The package's post-install script may try to start a service; there is
# no init system in CI containers, and the tests start their own servers.
$SUDO apt-get install -y --no-install-recommends etcd-server
found || {
	echo "faults/setup.sh: etcd-server installed but no etcd binary found" >&2
	exit 1
}
