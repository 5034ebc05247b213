#!/usr/bin/env bash
# apidiff.sh proves the drop-in promise at the API level: it runs
# golang.org/x/exp/cmd/apidiff with etcd's package as the old API and this
# module's as the new one, for
#   go.etcd.io/etcd/client/v3/concurrency              vs the root package
#   go.etcd.io/etcd/client/v3/experimental/recipes     vs ./recipes
# at the floor and the newest patch release of every supported line (the
# LINES below), both read from the module proxy when it runs, so that a new
# etcd release that exports a name this module lacks fails here before a
# user finds it. It fails on every incompatible change (etcd exports a
# name this module lacks, or with another type) that .ci/apidiff.allowed
# does not list for that line, on an allowed entry that no longer shows on
# a line it names, and on a docs/compatibility.md whose "Differences from etcd's package"
# table does not list exactly the allowed entries. Names this module adds
# are compatible changes and are not reported.
#
# Each API is written with `apidiff -w` in a throwaway module that resolves
# it: etcd's at exactly the release, this module's (replace to the
# checkout) with etcd's client required at that release, so nothing is
# added to the library's go.mod. apidiff is built once into the cache
# (${XDG_CACHE_HOME:-$HOME/.cache}/concurrency-compat, as compat/build-etcd.sh
# uses), and so is each release's export data, which never changes.
#
# Time, with warm caches (6 releases, 2 shared cores): 50 s measured at a
# moderate load, 2 minutes at a load average of 25 (20 s of CPU); about 4
# minutes on empty caches (downloading etcd's modules, building apidiff).
#
# Usage: bash .ci/apidiff.sh   (APIDIFF_VERSIONS="v3.5.0 v3.7.3" checks
# those releases instead of the floor and newest patch of each line)
set -euo pipefail
lib=$(cd "$(dirname "$0")/.." && pwd)
allowed=$lib/.ci/apidiff.allowed
export GOWORK=off GOFLAGS=-mod=mod

LINES="3.5 3.6 3.7"
XEXP=v0.0.0-20261113113407-e3970619a1a4 # golang.org/x/exp, for cmd/apidiff
ours=github.com/seed-a9d410c6/concurrency
etcd=go.etcd.io/etcd/client/v3
# package short name, etcd's import path, ours
pkgs=(
	"concurrency $etcd/concurrency $ours"
	"recipes $etcd/experimental/recipes $ours/recipes"
)

cache=${APIDIFF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/concurrency-compat}/apidiff
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null || true; rm -rf "$work"' EXIT

apidiff=$cache/apidiff-$XEXP
if [ ! -x "$apidiff" ]; then
	mkdir -p "$cache"
	GOBIN=$work/bin go install "golang.org/x/exp/cmd/apidiff@$XEXP"
	mv "$work/bin/apidiff" "$apidiff"
fi

# The releases: the floor and the newest patch of each line, no
# pre-releases. A stable release of a newer line fails the job: the
# supported lines (here, docs/compatibility.md, compat/) must be extended first.
all=$(cd "$work" && go list -m -versions "$etcd" | tr ' ' '\n' | grep -E '^v3\.[0-9]+\.[0-9]+$')
if [ -n "${APIDIFF_VERSIONS:-}" ]; then
	versions=$APIDIFF_VERSIONS
else
	versions=
	for l in $LINES; do
		rel=$(grep -F "v$l." <<<"$all" | grep -E "^v${l//./\\.}\.[0-9]+$" || true)
		[ -n "$rel" ] || { echo "apidiff: no release of etcd $l on the module proxy" >&2; exit 1; }
		versions="$versions $(head -n1 <<<"$rel") $(tail -n1 <<<"$rel")"
	done
	newest=${LINES##* }
	if newer=$(awk -F. -v m="${newest#*.}" '$2 + 0 > m + 0' <<<"$all" | grep .); then
		echo "apidiff: etcd released a line newer than $newest: $(tr '\n' ' ' <<<"$newer")- add it to LINES" >&2
		exit 1
	fi
fi

# mkmod DIR MODULE VERSION [ours] writes a throwaway module that imports
# etcd's packages (or, with ours, this module's, replaced by the checkout)
# and requires etcd's client at VERSION; this module's go.mod may lift it.
mkmod() {
	mkdir -p "$1"
	(
		cd "$1"
		printf 'module %s\n\ngo 1.23.0\n' "$2" >go.mod
		{
			echo "package x"
			echo
			echo "import ("
			for p in "${pkgs[@]}"; do
				read -r _ e o <<<"$p"
				if [ -n "${4:-}" ]; then echo "	_ \"$o\""; else echo "	_ \"$e\""; fi
			done
			echo ")"
		} >x.go
		# etcd first (go get settles its graph, such as genproto's split),
		# then this module, whose requirements may lift it, as a service
		# swapping the import path gets it (.ci/consumers.sh).
		go get "$etcd@$3" >"$1.log" 2>&1 || { cat "$1.log" >&2; exit 1; }
		if [ -n "${4:-}" ]; then
			go mod edit -require "$ours@v0.0.0-00010101000000-000000000000" -replace "$ours=$lib"
		fi
		go mod tidy >"$1.log" 2>&1 || { cat "$1.log" >&2; exit 1; }
	)
}

status=0
declare -A seen # "package|change" -> lines it showed on
for v in $versions; do
	line=${v#v}
	line=${line%.*}
	for p in "${pkgs[@]}"; do
		read -r name e _ <<<"$p"
		if [ ! -s "$cache/etcd-$v-$name.export" ]; then
			[ -d "$work/etcd-$v" ] || mkmod "$work/etcd-$v" apidiff.local/etcd "$v"
			(cd "$work/etcd-$v" && "$apidiff" -w "$work/etcd-$v-$name.export" "$e")
			mv "$work/etcd-$v-$name.export" "$cache/etcd-$v-$name.export"
		fi
	done
	mkmod "$work/ours-$v" apidiff.local/ours "$v" ours
	got=$(cd "$work/ours-$v" && go list -m -f '{{.Version}}' "$etcd")
	note=
	[ "$got" = "$v" ] || note=" (this module's go.mod lifts etcd's client to $got)"
	for p in "${pkgs[@]}"; do
		read -r name _ o <<<"$p"
		(cd "$work/ours-$v" && "$apidiff" -w "$work/ours-$v-$name.export" "$o")
		changes=$("$apidiff" -incompatible "$cache/etcd-$v-$name.export" "$work/ours-$v-$name.export" | sed -n 's/^- //p')
		n=0
		while IFS= read -r c; do
			[ -n "$c" ] || continue
			n=$((n + 1))
			seen["$name|$c"]+=" $line"
			if ! awk -F' [|] ' -v p="$name" -v l="$line" -v c="$c" '
				!/^#/ && $1 == p && $3 == c { split($2, ls, " "); for (i in ls) if (ls[i] == l) found = 1 }
				END { exit !found }' "$allowed"; then
				echo "apidiff: etcd $v, $name: not allowed for $line: $c"
				status=1
			fi
		done <<<"$changes"
		echo "etcd $v$note, $name: $n incompatible changes"
	done
done

# Every allowed entry has a reason, shows on every line it names that was
# checked (a line is checked when one of its releases was), on no other,
# and is listed in docs/compatibility.md's table.
checked=" $(for v in $versions; do l=${v#v}; echo "${l%.*}"; done | sort -u | tr '\n' ' ')"
documented=$(awk '/^## Differences from etcd.s package/ { on = 1; next } /^## / { on = 0 } on' "$lib/docs/compatibility.md" |
	sed -n 's/^| *\(concurrency\|recipes\) *| *`\([^`]*\)` *| *\([^|]*[^ |]\) *|.*/\1 | \3 | \2/p' | sort)
want=
while IFS= read -r entry; do
	case "$entry" in '' | '#'*) continue ;; esac
	IFS='|' read -r name lines change reason <<<"${entry// | /|}"
	if [ -z "$reason" ]; then
		echo "apidiff: .ci/apidiff.allowed: no reason for $name: $change"
		status=1
	fi
	for l in $lines; do
		case "$checked" in *" $l "*) ;; *) continue ;; esac
		n=$(tr ' ' '\n' <<<"${seen["$name|$change"]:-}" | grep -cFx "$l" || true)
		want_n=$(tr ' ' '\n' <<<"$versions" | grep -c "^v$l\." || true)
		if [ "$n" -ne "$want_n" ]; then
			echo "apidiff: allowed for $l but shown by $n of its $want_n releases (drop or fix the entry): $name: $change"
			status=1
		fi
	done
	want="$want$name | $lines | ${change%%:*}"$'\n'
done <"$allowed"
if ! diff <(sort <<<"${want%$'\n'}") <(echo "$documented") >"$work/documented.diff"; then
	echo "apidiff: docs/compatibility.md's table (>) and .ci/apidiff.allowed (<) differ:"
	cat "$work/documented.diff"
	status=1
fi
[ "$status" = 0 ] && echo "apidiff: only the allowed differences, on $(wc -w <<<"$versions") releases: $(echo $versions)"
exit $status
