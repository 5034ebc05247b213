#!/usr/bin/env bash
# consumers.sh measures what adopting this library does to a service, in
# the three ways a user adopts it, for services on etcd 3.5, 3.6 and 3.7,
# client only and with an embedded etcd server (server/v3/embed in their
# tests):
#   (a) add: a go.mod that pins etcd (and the service's go line), code
#       that imports this library, one `go mod tidy`;
#   (b) swap: an already tidy service on etcd's own concurrency package
#       swaps the import path, then tidies;
#   (c) new: a brand-new service (`go mod init`, no etcd pin) runs the
#       README's install line (`go get go.etcd.io/etcd/client/v3@latest`
#       and this module), then tidies; and (c0) the same service with only
#       `go mod tidy`, which must get gRPC 1.56.3 or newer (CVE-2023-44487).
# The reference for (a) and (b) is the same service on etcd's package,
# tidied; for (c) a new service on etcd's package after the same install
# line. Every flow must tidy (an ambiguous import fails it), keep etcd's
# modules (client, api, client/pkg, server) and gRPC where the reference
# has them (other moves, such as the go line, are printed), add no more
# modules than the budget (3, the issue's target), vet, build and run:
# client-only services against a real etcd server process of their line
# (compat/build-etcd.sh), the others' tests against their embedded etcd.
# This module is added through a replace to this checkout.
# It prints one line per service and flow and fails if any check fails.
#
# Usage: bash .ci/consumers.sh   (CONSUMERS=regexp picks services by name,
# FLOWS=regexp picks flows (a, b, c, c0), RUN=no only tidies and compares;
# needs the module proxy)
set -euo pipefail
lib=$(cd "$(dirname "$0")/.." && pwd)
libmod=github.com/seed-a9d410c6/concurrency
export GOWORK=off GOFLAGS=-mod=mod
work=$(mktemp -d)
srvpid=
cleanup() {
	if [ -n "$srvpid" ]; then kill "$srvpid" 2>/dev/null || true; wait "$srvpid" 2>/dev/null || true; fi
	chmod -R u+w "$work" 2>/dev/null || true
	[ -n "${KEEP:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT

# name, etcd version (latest: flow c), the service's go line (new: go mod
# init's), embed (yes/no), server line for client-only runs, budget of
# added modules: 3, the target, except where the measured cost is known to
# be higher and why:
#  - etcd v3.5.0 to v3.5.9: the library's floor is etcd v3.5.10 (gRPC
#    1.58.3), the oldest 3.5 release whose graph holds no pre-split genproto
#    (docs/compatibility.md): such a service is raised to it, on its line,
#    and its direct requirement on genproto, now at the post-split version
#    etcd v3.5.10 requires, brings that version's requirements into its
#    graph (cloud.google.com/go/..., 90 modules, none of whose code is
#    built), as raising etcd to v3.5.10 by hand does;
#  - etcd v3.7: go.uber.org/atomic (zap v1.17.0), gogo/protobuf (etcd api
#    v3.5) and google.golang.org/genproto are graph nodes etcd 3.7 no longer
#    has (no code of theirs is built): 4 with this module.
# (Before the Prometheus metrics moved to the nested module prometheus/,
# the root package imported client_golang: client-only services on 3.5.21,
# 3.6.16 and 3.7.3 got 23, 15 and 17.)
services=(
	"client-3.5.0   v3.5.0  1.22   no  v3.5.35 93"
	"client-3.5.21  v3.5.21 1.23.0 no  v3.5.35 3"
	"client-3.5.35  v3.5.35 1.26.0 no  v3.5.35 3"
	"client-3.6.16  v3.6.16 1.26.0 no  v3.6.16 3"
	"client-3.7.3   v3.7.3  1.26.0 no  v3.7.3  4"
	"embed-3.5.21   v3.5.21 1.23.0 yes -       3"
	"embed-3.6.16   v3.6.16 1.26.0 yes -       3"
	"embed-3.7.3    v3.7.3  1.26.0 yes -       4"
	"new-client     latest  new    no  v3.7.3  4"
	"new-embed      latest  new    yes -       4"
)


write_service() { # dir embed
	cat >"$1/main.go" <<'GO'
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func main() {
	if err := run(strings.Split(os.Getenv("ETCD_ENDPOINTS"), ",")); err != nil {
		log.Fatal(err)
	}
	fmt.Println("lock and election: ok")
}

// run locks and unlocks a mutex, then campaigns, checks it leads, and
// resigns.
func run(endpoints []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		return err
	}
	defer s.Close()
	m := concurrency.NewMutex(s, "/svc/lock")
	if err := m.Lock(ctx); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := m.Unlock(ctx); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	e := concurrency.NewElection(s, "/svc/leader")
	if err := e.Campaign(ctx, "me"); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	l, err := e.Leader(ctx)
	if err != nil {
		return fmt.Errorf("leader: %w", err)
	}
	if v := string(l.Kvs[0].Value); v != "me" {
		return fmt.Errorf("leader %q, want me", v)
	}
	if err := e.Resign(ctx); err != nil {
		return fmt.Errorf("resign: %w", err)
	}
	return nil
}
GO
	[ "$2" = yes ] || return 0
	cat >"$1/main_test.go" <<'GO'
package main

import (
	"net"
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// freeURL is a loopback URL whose port was free a moment ago.
func freeURL(t *testing.T) url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

func TestEmbedded(t *testing.T) {
	// A port free a moment ago may be taken by another process before
	// etcd binds it (a busy CI machine): up to three tries.
	var (
		e   *embed.Etcd
		c   url.URL
		err error
	)
	for try := 0; try < 3 && e == nil; try++ {
		cfg := embed.NewConfig()
		cfg.Dir = t.TempDir()
		cfg.LogLevel = "error"
		var p url.URL
		c, p = freeURL(t), freeURL(t)
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{c}, []url.URL{c}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{p}, []url.URL{p}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		if e, err = embed.StartEtcd(cfg); err != nil {
			t.Log(err)
		}
	}
	if e == nil {
		t.Fatal(err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("embedded etcd not ready")
	}
	if err := run([]string{c.String()}); err != nil {
		t.Fatal(err)
	}
}
GO
}

# pinned prints the versions that must not move; others prints the rest
# of what is reported.
pinned() {
	go list -m -f '{{.Path}} {{.Version}}' all | grep -E '^(go.etcd.io/etcd/(client/v3|api/v3|client/pkg/v3|server/v3)|google.golang.org/grpc) ' || true
}
others() {
	echo "go $(go mod edit -json | sed -n 's/^\t"Go": "\(.*\)",*$/\1/p')"
	go list -m -f '{{.Path}} {{.Version}}' all | grep -E '^(go.opentelemetry.io/otel|go.opentelemetry.io/otel/trace|github.com/prometheus/client_golang|go.uber.org/zap) ' || true
}

. "$lib/compat/etcd-server.sh"

use_library() { # dir: the service's code imports this library, resolved to this checkout
	sed -i "s#\"go.etcd.io/etcd/client/v3/concurrency\"#\"$libmod\"#" "$1/main.go"
	(cd "$1" && go mod edit -require="$libmod@v0.0.0-00010101000000-000000000000" -replace="$libmod=$lib")
}

new_module() { # dir name goline
	mkdir -p "$1"
	if [ "$3" = new ]; then
		(cd "$1" && go mod init "example.com/$2" >/dev/null 2>&1)
	else
		printf 'module example.com/%s\n\ngo %s\n' "$2" "$3" >"$1/go.mod"
	fi
}

pin() { # dir version embed: require etcd's client (and server) at version
	local v=$2
	(
		cd "$1"
		if [ "$v" = latest ]; then
			go get "go.etcd.io/etcd/client/v3@latest" >/dev/null 2>&1
			[ "$3" = no ] || go get "go.etcd.io/etcd/server/v3@latest" >/dev/null 2>&1
		else
			go mod edit -require="go.etcd.io/etcd/client/v3@$v"
			[ "$3" = no ] || go mod edit -require="go.etcd.io/etcd/server/v3@$v"
		fi
	)
}

record() { # dir prefix
	(cd "$1" && go list -m all | sort >"$2.txt" && pinned >"$2.pinned" && others >"$2.others")
}

tidy() { # dir
	(cd "$1" && go mod tidy >tidy.log 2>&1) || { sed 's/^/    /' "$1/tidy.log"; return 1; }
}

# compare ref dir label budget: the checks on what the flow did to the
# service, one line of the table.
compare() {
	local ref=$1 d=$2 label=$3 budget=$4 before after added
	before=$(wc -l <"$ref/before.txt")
	after=$(wc -l <"$d/after.txt")
	added=$(comm -13 <(cut -d' ' -f1 "$ref/before.txt") <(cut -d' ' -f1 "$d/after.txt") | tr '\n' ' ')
	printf '%-22s %-8s %7d %7d %6d %6d  %s\n' "$label" "$(sed -n 's#^go.etcd.io/etcd/client/v3 ##p' "$d/after.pinned")" \
		"$before" "$after" $((after - before)) "$budget" "$added"
	if ! diff "$ref/before.pinned" "$d/after.pinned" >/dev/null; then
		diff "$ref/before.pinned" "$d/after.pinned" | grep '^[<>]' | sed 's/^/    /' || true
		# A service below the library's floor moves up to the floor, no
		# further, and stays on its etcd line (docs/compatibility.md).
		if comm -13 "$ref/before.pinned" "$d/after.pinned" | grep -vxFf "$floor" >/dev/null ||
			[ "$(sed -n 's#^go.etcd.io/etcd/client/v3 \(v3\.[0-9]*\).*#\1#p' "$ref/before.pinned")" != \
			"$(sed -n 's#^go.etcd.io/etcd/client/v3 \(v3\.[0-9]*\).*#\1#p' "$d/after.pinned")" ]; then
			echo "    $label: etcd or gRPC moved"
			status=1
		else
			echo "    $label: (known) raised to the library's floor, on the same etcd line"
		fi
	fi
	if ! diff "$ref/before.others" "$d/after.others" >/dev/null; then
		diff "$ref/before.others" "$d/after.others" | grep '^[<>]' | sed 's/^/    (info) /' || true
	fi
	if [ $((after - before)) -gt "$budget" ]; then
		echo "    $label: $((after - before)) modules added, budget $budget"
		status=1
	fi
}

# exercise dir label embed srv: vet, build and run the service.
exercise() {
	local d=$1 label=$2
	if [ "$3" = yes ]; then
		(cd "$d" && go vet ./... && go test -count=1 ./... >"$d/run.log" 2>&1) ||
			{ sed 's/^/    /' "$d/run.log"; echo "    $label: test against its embedded etcd failed"; status=1; }
	else
		start_server "$4"
		(cd "$d" && go vet ./... && go build -o svc . && ./svc >"$d/run.log" 2>&1) ||
			{ sed 's/^/    /' "$d/run.log"; echo "    $label: run against etcd $4 failed"; status=1; }
		stop_server
	fi
}

# floor lists the library's requirements that a service may be raised to
# (read from go.mod: listing the module graph would write go.sum).
floor=$work/floor
sed -n 's/^[[:space:]]*\([^ ]*\) \(v[^ ]*\).*/\1 \2/p' "$lib/go.mod" >"$floor"

status=0
printf '%-22s %-8s %7s %7s %6s %6s  %s\n' "service/flow" etcd before after added budget "added modules"
for line in "${services[@]}"; do
	read -r name ver goline embed srv budget <<<"$line"
	[[ $name =~ ${CONSUMERS:-.} ]] || continue
	# The reference: the service on etcd's package, pinned and tidied.
	ref=$work/$name
	new_module "$ref" "$name" "$goline"
	write_service "$ref" "$embed"
	pin "$ref" "$ver" "$embed"
	tidy "$ref" || { echo "$name: the reference on etcd's package does not tidy"; status=1; continue; }
	record "$ref" before
	flows="a b"
	[ "$ver" != latest ] || flows="c"
	[ "$ver" != latest ] || [ "$embed" = yes ] || flows="c c0"
	for f in $flows; do
		[[ $f =~ ^(${FLOWS:-.*})$ ]] || continue
		d=$work/$name-$f
		case $f in
		a | c) # a go.mod pinning etcd (a) or the README's install line (c), this library, one tidy
			new_module "$d" "$name" "$goline"
			write_service "$d" "$embed"
			use_library "$d"
			pin "$d" "$ver" "$embed" ;;
		b) # the tidy service swaps its import
			cp -r "$ref" "$d"
			rm -f "$d"/before.* "$d/tidy.log"
			use_library "$d" ;;
		c0) # a new service, this library, nothing but go mod tidy
			new_module "$d" "$name" "$goline"
			write_service "$d" "$embed"
			use_library "$d" ;;
		esac
		tidy "$d" || { echo "$name/$f: tidy failed"; status=1; continue; }
		record "$d" after
		if [ "$f" = c0 ]; then
			grpc=$(sed -n 's#^google.golang.org/grpc ##p' "$d/after.pinned")
			printf '%-22s %-8s %7s %7d %6s %6s  gRPC %s\n' "$name/$f" "$(sed -n 's#^go.etcd.io/etcd/client/v3 ##p' "$d/after.pinned")" - "$(wc -l <"$d/after.txt")" - - "$grpc"
			if [ "$(printf '%s\n%s\n' v1.56.3 "$grpc" | sort -V | head -1)" != v1.56.3 ]; then
				echo "    $name/$f: gRPC $grpc, older than v1.56.3 (CVE-2023-44487)"
				status=1
			fi
		else
			compare "$ref" "$d" "$name/$f" "$budget"
		fi
		[ "${RUN:-yes}" = no ] || exercise "$d" "$name/$f" "$embed" "$srv"
	done
done
exit $status
