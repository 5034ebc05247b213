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

if ! command -v apt-get >/dev/null 2>&1; then
	cat >&2 <<'MSG'
faults/setup.sh: missing the etcd 3.4 server that the fault and compatibility
tests run against (the oldest server supported), and this machine has no
apt-get to install Debian's etcd-server package. Provide one: download an
etcd v3.4.x release (https://github.com/etcd-io/etcd/releases, the
etcd-v3.4.*-linux-amd64.tar.gz archive) and run
	FAULTS_OLD_ETCD=/path/to/etcd sh test.sh
MSG
	exit 1
fi

SUDO=
if [ "$(id -u)" != 0 ]; then
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
# Debian's package starts an etcd service on 127.0.0.1:2379 after
# installing (and enables it at boot) where an init system runs. The tests
# start their own servers and need only the binary, so the install leaves
# no service running that the user did not ask for: a policy-rc.d that
# refuses every start is in place during the install (unless the machine
# has its own), and where systemd runs the unit is stopped and disabled
# afterwards.
policy=/usr/sbin/policy-rc.d
ours=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
	$SUDO chmod 755 "$policy"
	ours=1
fi
status=0
$SUDO apt-get install -y --no-install-recommends etcd-server || status=$?
[ -z "$ours" ] || $SUDO rm -f "$policy"
[ "$status" = 0 ] || exit "$status"
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
	$SUDO systemctl disable --now etcd.service >/dev/null 2>&1 || true
fi
found || {
	echo "faults/setup.sh: etcd-server installed but no etcd binary found" >&2
	exit 1
}
