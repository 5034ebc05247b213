#!/bin/sh
# run.sh is the compatibility job: the core tests of this directory (Lock
# and Unlock exclusion, interplay with etcd's own Mutex, Campaign and
# Resign, Semaphore, the STM options, a revoked session) against real etcd
# server processes of every supported line, with etcd's client at the floor
# the library's go.mod requires (go.mod) and at the newest release
# (go.newest.mod), both with the go command on PATH and under -race, and
# the floor once more with the oldest Go the library's go.mod allows (its
# go line, fetched as a toolchain module through the module proxy): 3
# builds x 4 servers.
#
#   3.4   Debian's etcd-server (sh faults/setup.sh installs it), the oldest
#         server: $FAULTS_OLD_ETCD, else /usr/bin/etcd, else etcd on PATH
#   3.5, 3.6, 3.7   built from the module proxy by build-etcd.sh, cached
#
# Usage: sh compat/run.sh [go test flags, e.g. -test.v]
set -eu
cd "$(dirname "$0")"
export GOWORK=off

servers="v3.5.35 v3.6.16 v3.7.3"
old=
for b in "${FAULTS_OLD_ETCD:-}" /usr/bin/etcd "$(command -v etcd 2>/dev/null || true)"; do
	if [ -n "$b" ] && [ -x "$b" ]; then
		old=$b
		break
	fi
done
if [ -z "$old" ]; then
	echo "compat/run.sh: no etcd 3.4 server; run sh faults/setup.sh" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
summary=$tmp/summary
echo "go command on PATH: $(go version)" >"$summary"
status=0
oldgo=go$(sed -n 's/^go //p' ../go.mod)
for client in floor newest "floor-$oldgo"; do
	modfile=
	race=-race
	toolchain=${GOTOOLCHAIN:-}
	case "$client" in
	newest) modfile=-modfile=go.newest.mod ;;
	floor-*)
		toolchain=$oldgo
		race=
		;;
	esac
	cv=$(go list $modfile -m -f '{{.Version}}' go.etcd.io/etcd/api/v3)
	GOTOOLCHAIN=$toolchain go test $modfile $race -c -o "$tmp/$client.test" .
	for s in old $servers; do
		if [ "$s" = old ]; then
			bin=$old
			want=3.4.
		else
			bin=$(sh build-etcd.sh "$s")
			want=${s#v}
		fi
		echo "== compat: client $cv ($client), server ${want%.} ($bin)"
		if ETCD_COMPAT_SERVER=$bin ETCD_COMPAT_WANT_SERVER=$want ETCD_COMPAT_WANT_CLIENT=$cv \
			"$tmp/$client.test" -test.count=1 -test.timeout=5m "$@"; then
			echo "client $cv ($client) x server ${want%.}: ok" >>"$summary"
		else
			echo "client $cv ($client) x server ${want%.}: FAIL" >>"$summary"
			status=1
		fi
	done
done
echo "== compat summary"
cat "$summary"
exit $status
