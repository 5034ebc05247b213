#!/usr/bin/env bash
# observe.sh checks what doc.go and docs/compatibility.md say about Election.Observe
# for services on etcd 3.5 and 3.6, whose Observe returns
# <-chan clientv3.GetResponse where this package's (and etcd 3.7's) returns
# <-chan *clientv3.GetResponse. For etcd's client at the floor and the
# newest patch of 3.5 and 3.6 it builds testdata/observe, a service that
# passes Observe's channel to a function typed for those lines, in a
# throwaway module, and checks that
#   1. it builds and runs with etcd's package, against a real server of
#      its line (build-etcd.sh), so it is a valid 3.5/3.6 service;
#   2. with only the import path swapped to this module (a replace to this
#      checkout), it fails to build with one error: the channel Observe
#      returns is not the one follow takes;
#   3. with that line changed as doc.go says (clientv3.GetResponse to
#      *clientv3.GetResponse), it vets, builds and runs against the same
#      server.
#
# Time, with warm caches (2 shared cores): 1.5 minutes measured at a
# moderate load, 3 at a load average of 25 (40 s of CPU); several more on
# empty caches (etcd's modules, and servers 3.5 and 3.6 built by
# build-etcd.sh, as for run.sh).
#
# Usage: bash compat/observe.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=$(cd "$here/.." && pwd)
export GOWORK=off GOFLAGS=-mod=mod
work=$(mktemp -d)
srvpid=
cleanup() {
	if [ -n "$srvpid" ]; then kill "$srvpid" 2>/dev/null || true; wait "$srvpid" 2>/dev/null || true; fi
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# etcd's client, the server of its line
cases=(
	"v3.5.0  v3.5.35"
	"v3.5.35 v3.5.35"
	"v3.6.0  v3.6.16"
	"v3.6.16 v3.6.16"
)
old='func follow(ch <-chan clientv3.GetResponse, want string) (int64, error) {'
new='func follow(ch <-chan *clientv3.GetResponse, want string) (int64, error) {'

. "$here/etcd-server.sh"

status=0
server=
for c in "${cases[@]}"; do
	read -r ver srv <<<"$c"
	if [ "$srv" != "$server" ]; then
		[ -z "$srvpid" ] || stop_server
		start_server "$srv"
		server=$srv
	fi
	d=$work/svc-$ver
	mkdir -p "$d"
	fail() { echo "observe: etcd $ver: $*"; status=1; }
	(
		cd "$d"
		printf 'module example.com/observe\n\ngo 1.23.0\n' >go.mod
		cp "$here/testdata/observe/main.go" .
		go get "go.etcd.io/etcd/client/v3@$ver" >go.log 2>&1 || { cat go.log; exit 1; }
		go mod tidy >go.log 2>&1 || { cat go.log; exit 1; }
		got=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/client/v3)
		[ "$got" = "$ver" ] || { echo "etcd's client is $got"; exit 1; }
		go build -o svc-etcd . && ./svc-etcd >run-etcd.log 2>&1 || { cat run-etcd.log; exit 1; }
	) || { fail "the service does not build or run with etcd's package"; continue; }
	(
		cd "$d"
		sed -i 's#"go.etcd.io/etcd/client/v3/concurrency"#"github.com/seed-a9d410c6/concurrency"#' main.go
		go mod edit -require "github.com/seed-a9d410c6/concurrency@v0.0.0-00010101000000-000000000000" \
			-replace "github.com/seed-a9d410c6/concurrency=$lib"
		go mod tidy >go.log 2>&1 || { cat go.log; exit 1; }
	) || { fail "go mod tidy failed after the swap"; continue; }
	# 2: the swap alone fails on the line naming the element type, only.
	if (cd "$d" && go build -o svc-swapped . >build.log 2>&1); then
		fail "builds with only the import path swapped: doc.go says it does not"
	else
		errs=$(grep -c '^\./main\.go:[0-9]*:[0-9]*: ' "$d/build.log" || true)
		if [ "$errs" != 1 ] || ! grep -q "^\./main\.go:[0-9]*:[0-9]*: .*cannot use ch .*<-chan \*.*GetResponse.* as <-chan .*GetResponse" "$d/build.log"; then
			cat "$d/build.log"
			fail "the swap failed otherwise than at follow's channel type (want 1 error, got $errs)"
		fi
		at=$(sed -n 's/^\.\/main\.go:\([0-9]*\):[0-9]*: \(.*\)/line \1: \2/p' "$d/build.log")
	fi
	# 3: the one-line change of doc.go.
	(
		cd "$d"
		cp main.go main.go.swapped
		sed -i "s#^$(sed 's/[]*.[^$\\/#]/\\&/g' <<<"$old")\$#$new#" main.go
		n=$(diff main.go.swapped main.go | grep -c '^>' || true)
		[ "$n" = 1 ] || { echo "the migration changed $n lines"; exit 1; }
		rm main.go.swapped
		go vet . && go build -o svc-ours . && ./svc-ours >run-ours.log 2>&1 || { cat run-ours.log; exit 1; }
	) || { fail "does not vet, build or run with the one-line change"; continue; }
	echo "observe: etcd $ver, server $srv: runs with etcd's package; swapped, fails to build ($at); runs with the one-line change"
done
exit $status
