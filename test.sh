#!/bin/sh
# test.sh runs every test of the module, as CI does. It first installs what
# the fault tests need beyond Go modules (Debian's etcd-server, the old-server
# target; nothing when it is already there), then runs go test over all
# packages. Extra arguments go to go test, e.g. sh test.sh -run TestMutex.
set -eu
cd "$(dirname "$0")"
sh faults/setup.sh
exec go test -count=1 -timeout 45m "$@" ./...
