#!/usr/bin/env bash
# govulncheck.sh runs Go's vulnerability check (golang.org/x/vuln's
# govulncheck) offline, against a database built from a pinned version of
# golang.org/x/vulndb (its data/osv, indexed by its cmd/indexdb), over:
#   library     the root package and recipes, at the floor that go.mod
#               promises importers (GOWORK=off);
#   prometheus  the Prometheus module at its own go.mod, with the library
#               from this checkout;
#   cli         cmd/etcdlock at its go.mod, as `go install` builds it.
# The standard library is checked as the pinned toolchain $GOVULNCHECK_GO
# has it (the newest Go 1.26 patch on the module proxy; the go command
# downloads it once): what a service gets from its own toolchain is the
# service's, not this module's. A vulnerability that govulncheck finds
# reachable fails the run unless .ci/govulncheck.allowed lists it for that
# target (docs/compatibility.md's "Known vulnerabilities at the floor" says
# why); so does an allowed one that is no longer found, so that it stays
# true. Pinned database and toolchain make the verdict depend on this
# checkout only; raising VULNDB_VERSION is how CI learns of new reports.
#
# govulncheck and the database are built once from the module proxy
# (outside every module here) and cached under
# ${XDG_CACHE_HOME:-~/.cache}/concurrency-govulncheck. Measured on the
# shared 2-core machine: with empty module and build caches, installing
# indexdb took 2 min 16 s and govulncheck 52 s (load 12 to 25), indexing
# the 4,789 reports 22 s; with that cache gone but Go's build cache warm,
# the whole script took 57 s (load 5); cached, 35 s (the three scans).
#
# Usage: bash .ci/govulncheck.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
vulndb=${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018} # golang.org/x/vulndb, 2026-11-05
vuln=${GOVULNCHECK_VERSION:-v1.9.0}                            # golang.org/x/vuln
scango=${GOVULNCHECK_GO:-go1.26.10}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/concurrency-govulncheck
bin=$cache/govulncheck-$vuln/govulncheck
db=$cache/vulndb-$vulndb
allowed=$root/.ci/govulncheck.allowed

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
install() { # module@version: go install outside every module here, into $tmp/bin
	(cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod GOBIN="$tmp/bin" go install "$1") >&2
}
if [ ! -x "$bin" ]; then
	install "golang.org/x/vuln/cmd/govulncheck@$vuln"
	mkdir -p "$(dirname "$bin")"
	mv "$tmp/bin/govulncheck" "$bin"
fi
if [ ! -f "$db/index/db.json" ]; then
	install "golang.org/x/vulndb/cmd/indexdb@$vulndb"
	src=$(cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "golang.org/x/vulndb@$vulndb" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	rm -rf "$db.tmp"
	"$tmp/bin/indexdb" -vulns "$src/data/osv" -out "$db.tmp"
	mv "$db.tmp" "$db"
fi

# copyof NAME DIR REPLACES...: a copy of the module in DIR, with the
# modules of this repository that it requires replaced by their
# directories here (the nested modules find them through go.work, which
# GOWORK=off leaves out), tidied.
copyof() {
	local name=$1 dir=$2
	shift 2
	cp -r "$dir" "$tmp/$name"
	for r in "$@"; do
		(cd "$tmp/$name" && GOWORK=off go mod edit -replace="$r")
	done
	(cd "$tmp/$name" && GOWORK=off GOFLAGS=-mod=mod go mod tidy) >&2
	echo "$tmp/$name"
}

failed=0
# scan NAME DIR PATTERNS...
scan() {
	local name=$1 dir=$2 out rc found want bad=0
	shift 2
	out=$tmp/$name.txt
	set +e
	(cd "$dir" && GOWORK=off GOTOOLCHAIN=$scango "$bin" -db "file://$db" "$@") >"$out" 2>&1
	rc=$?
	set -e
	if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then # 3: vulnerabilities found
		cat "$out"
		echo "$name: govulncheck failed (status $rc)"
		failed=1
		return
	fi
	found=$(sed -n 's/^Vulnerability #[0-9]*: \(GO-[0-9]*-[0-9]*\)$/\1/p' "$out" | sort -u)
	want=$(awk -v t="$name" '$1 == t { print $2 }' "$allowed" | sort -u)
	echo "$name: reachable: $(echo ${found:-none}); allowed: $(echo ${want:-none})"
	for id in $found; do
		if ! grep -qx "$id" <<<"$want"; then
			echo "$name: $id is reachable and not in .ci/govulncheck.allowed"
			bad=1
		fi
	done
	for id in $want; do
		if ! grep -qx "$id" <<<"$found"; then
			echo "$name: $id is allowed but no longer found: remove it from .ci/govulncheck.allowed and docs/compatibility.md"
			bad=1
		fi
	done
	if [ $bad = 1 ]; then
		cat "$out"
		failed=1
	fi
}

echo "govulncheck $vuln, database golang.org/x/vulndb@$vulndb, standard library of $scango"
scan library . . ./recipes
scan prometheus "$(copyof prometheus prometheus "github.com/seed-a9d410c6/concurrency=$root")" ./...
scan cli "$(copyof cli cmd/etcdlock "github.com/seed-a9d410c6/concurrency=$root" "github.com/seed-a9d410c6/concurrency/internal/testkit=$root/internal/testkit" "github.com/seed-a9d410c6/concurrency/prometheus=$root/prometheus")" ./...
exit $failed
