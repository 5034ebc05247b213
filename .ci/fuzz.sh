#!/usr/bin/env bash
# fuzz.sh runs each fuzz target (testing.F) of the parsers of data that
# another process wrote (issue 40) for $FUZZTIME (default 20000x: twenty
# thousand inputs each, 3 to 10 s at the 2,800 to 8,200 inputs a second
# seen here) with
# $FUZZPARALLEL workers (default 2): a Semaphore key's value, owner,
# health and lock-delay records and yield requests, a Shards member key's
# value and the shard plan from any keys under a group (issue 49) (the
# root package), the CLI's duration and signal flags (cmd/etcdlock). Their seed corpora in
# testdata/fuzz also run with every go test. A failing input is written
# to the package's testdata/fuzz/<target>/ by go test: commit it with the
# fix, as a regression test. Measured on the shared 2-core machine (load
# 6 to 8): 1 min 43 s for the eight targets at 10s each with Go's build
# cache warm; 5 min 56 s the first time, which builds both packages and
# their dependencies with the fuzzer's instrumentation (cached after). The
# root package's test binary starts its etcd server once per target.
#
# The default is a count, not a duration: with a duration, Go 1.26's fuzz
# coordinator can fail a target with a bare "context deadline exceeded"
# when the time runs out while a worker is busy (golang/go#75804, fixed in
# Go 1.27), as it did in a CI run here on a loaded machine, with no
# failing input. A count has no deadline to race.
#
# Usage: bash .ci/fuzz.sh   (FUZZTIME=10m for the long runs of RELIABILITY.md)
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-20000x}
parallel=${FUZZPARALLEL:-2}
for pkg in . ./cmd/etcdlock ./recipes; do
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(f \*testing.F).*/\1/p' "$pkg"/*_test.go); do
		echo "== $pkg $target ($fuzztime)"
		go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" -parallel "$parallel" "$pkg"
	done
done
