#!/usr/bin/env bash
# promtool.sh prints the path of Prometheus's promtool, building it first if
# it is not cached: `go install` from the module proxy, outside every module
# of this repository (GOWORK=off, GOFLAGS=-mod=mod, in a temporary
# directory), so nothing of Prometheus reaches any go.mod here. The binary
# is cached under ${XDG_CACHE_HOME:-~/.cache}/concurrency-promtool/VERSION
# and reused by later runs. A cold build (empty module and build caches:
# it downloads about 1.8 GB of modules and compiles some 1,300 packages)
# took 18.5 CPU-minutes (877 s user, 230 s system): 52 minutes of wall
# clock on the shared 2-core machine under a load of 20 to 30, about 10 on
# an idle one. A cached one costs nothing.
#
# Usage: "$(bash .ci/promtool.sh)" check rules prometheus/rules.yml
set -euo pipefail
version=${PROMTOOL_VERSION:-v0.316.0} # Prometheus 3.16.0: its Go module versions are v0.3MM.P for v3.MM.P
dir=${XDG_CACHE_HOME:-$HOME/.cache}/concurrency-promtool/$version
if [ ! -x "$dir/promtool" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	mkdir -p "$dir"
	(cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod GOBIN="$tmp/bin" \
		go install "github.com/prometheus/prometheus/cmd/promtool@$version") >&2
	mv "$tmp/bin/promtool" "$dir/promtool"
fi
echo "$dir/promtool"
