#!/bin/sh
# test.sh runs every test of the repository, as CI does. The library's
# tests on embedded etcd clusters are in ./tests (its own module, so that
# etcd's server never reaches importers); go.work joins the modules.
#
# What it installs, through apt-get (as root or with sudo), and only when
# missing: Debian's etcd-server package (etcd 3.4, the oldest server the
# fault and compatibility tests run against), via faults/setup.sh. What it
# builds and caches: etcd servers 3.5, 3.6 and 3.7 from the Go module
# proxy (compat/build-etcd.sh, 1 to 4 CPU-minutes each the first time, under
# ~/.cache/concurrency-compat), and the Go 1.23.0 toolchain (the library's
# go line) as a module from the proxy. The comparison with Redis and
# ZooKeeper (compare/) runs only when their servers are installed already:
# `sh compare/setup.sh` installs them (redis-server, zookeeper and a Java
# runtime); CI does.
#
# With PROMTOOL set to the path of Prometheus's promtool (CI sets it with
# .ci/promtool.sh, which builds and caches it), the tests also parse the
# dashboard's queries with it; without, that one test is skipped (and fails
# when CI is set).
#
# Extra arguments go to the main go test run, e.g. sh test.sh -run TestMutex.
set -eu
cd "$(dirname "$0")"
sh faults/setup.sh
go test -count=1 -timeout 45m "$@" . ./internal/request/... ./internal/watch/... ./internal/renew/... ./prometheus/... ./tests/... ./internal/testkit/... ./faults/... ./cmd/etcdlock/... ./cmd/lockbench/...
# The compatibility job: the core tests against real etcd 3.4 to 3.7
# servers, with the client at the floor and at the newest release.
sh compat/run.sh
if sh compare/setup.sh --check; then
	(cd compare && go test -count=1 -short -timeout 10m ./...)
else
	echo "test.sh: skipping the Redis/ZooKeeper comparison (sh compare/setup.sh installs its servers)"
fi
