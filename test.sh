#!/bin/sh
# test.sh runs every test of the module, as CI does. It first installs what
# the fault tests need beyond Go modules (Debian's etcd-server, the old-server
# target; nothing when it is already there), then runs go test over all
# packages. Extra arguments go to go test, e.g. sh test.sh -run TestMutex.
set -eu
cd "$(dirname "$0")"
sh faults/setup.sh
# The comparison with Redis and ZooKeeper (issue 16) is its own module:
# install its servers and run its smoke test; COMPARISON.md has the full run.
sh compare/setup.sh
(cd compare && go test -count=1 -short -timeout 10m ./...)
exec go test -count=1 -timeout 45m "$@" ./...
