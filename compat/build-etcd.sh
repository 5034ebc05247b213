#!/bin/sh
# build-etcd.sh VERSION builds the etcd server of that release (e.g. v3.6.16)
# from the Go module proxy with the go command on PATH, caches it, and
# prints the binary's path. A cached binary is reused when it reports the
# version asked for. The cache is $ETCD_COMPAT_CACHE, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/concurrency-compat; building one server
# takes a minute or two.
#
# etcd's server module has replace directives, so `go install
# go.etcd.io/etcd/server/v3@VERSION` is refused; a throwaway module that
# requires it builds it instead.
set -eu
v=$1
case "$v" in v*) ;; *) v=v$v ;; esac
cache=${ETCD_COMPAT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/concurrency-compat}
bin=$cache/etcd-$v/etcd
# One build of a version at a time (go test ./... runs the root's and
# recipes' tests at once, each asking for the server): the second waits,
# then finds the first's binary.
if [ -z "${BUILD_ETCD_LOCKED:-}" ] && command -v flock >/dev/null 2>&1; then
	mkdir -p "$cache"
	BUILD_ETCD_LOCKED=1 exec flock "$cache/etcd-$v.lock" sh "$0" "$v"
fi
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "^etcd Version: ${v#v}\$"; then
	echo "$bin"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$cache/etcd-$v"
(
	cd "$tmp"
	export GOWORK=off GOFLAGS=-mod=mod
	go mod init etcdbuild >/dev/null 2>&1
	go get "go.etcd.io/etcd/server/v3@$v" >/dev/null 2>&1 || go get "go.etcd.io/etcd/server/v3@$v" >&2
	go build -trimpath -o "$bin.$$" go.etcd.io/etcd/server/v3 >&2
)
# Two builds of one version at once (go test ./... runs packages in
# parallel) each rename their own file into place.
mv "$bin.$$" "$bin"
echo "$bin"
