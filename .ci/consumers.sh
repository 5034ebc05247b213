#!/usr/bin/env bash
# consumers.sh measures what swapping the import path does to a service:
# for each service below it builds a throwaway module that uses etcd's own
# concurrency package (Lock/Unlock, Campaign/Resign), runs `go mod tidy`,
# records `go list -m all`, then swaps the import path to this library
# (with a replace to this checkout), tidies again and checks that
#   - etcd's modules (client, api, client/pkg, server) and gRPC did not
#     move (other moves, such as the go line, are printed),
#   - no more modules were added than the service's budget: 3, the
#     issue's target, except where the measured cost is known to be
#     higher and why (the budget column below),
#   - it builds, vets, and runs: client-only services against a real etcd
#     server process of their line (compat/build-etcd.sh), services with
#     an embedded etcd in their tests with `go test`.
# It prints one line per service and fails if any check fails.
#
# Usage: bash .ci/consumers.sh   (CONSUMERS=regexp picks services; needs the module proxy; about 5 minutes
# on a cold cache, under a minute warm)
set -euo pipefail
lib=$(cd "$(dirname "$0")/.." && pwd)
export GOWORK=off GOFLAGS=-mod=mod
work=$(mktemp -d)
srvpid=
cleanup() {
	if [ -n "$srvpid" ]; then kill "$srvpid" 2>/dev/null || true; wait "$srvpid" 2>/dev/null || true; fi
	chmod -R u+w "$work" 2>/dev/null || true
	[ -n "${KEEP:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT

# name, etcd version, the service's go line, embed (yes/no), server line,
# budget of added modules. Over 3: the floor's go.uber.org/atomic (zap
# v1.17.0), gogo/protobuf (etcd api v3.5) and google.golang.org/genproto
# are graph nodes etcd 3.6 and 3.7 no longer have (no code of theirs is
# built): services on 3.7.3 get all three, so 4 with this module. (Before
# the Prometheus metrics moved to the nested module prometheus/, the root
# package imported client_golang, which etcd's client stops importing from
# v3.5.21: client-only services on 3.5.21, 3.6.16 and 3.7.3 got 23, 15 and
# 17.)
services=(
	"client-3.5.0   v3.5.0  1.22   no  v3.5.35 3"
	"client-3.5.21  v3.5.21 1.23.0 no  v3.5.35 3"
	"client-3.6.16  v3.6.16 1.26.0 no  v3.6.16 3"
	"client-3.7.3   v3.7.3  1.26.0 no  v3.7.3  4"
	"embed-3.6.16   v3.6.16 1.26.0 yes -       3"
	"embed-3.7.3    v3.7.3  1.26.0 yes -       4"
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
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	c, p := freeURL(t), freeURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{c}, []url.URL{c}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{p}, []url.URL{p}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
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

status=0
printf '%-14s %-8s %7s %7s %6s %6s  %s\n' service etcd before after added budget "added modules"
for line in "${services[@]}"; do
	read -r name ver goline embed srv budget <<<"$line"
	[[ $name =~ ${CONSUMERS:-.} ]] || continue
	d=$work/$name
	mkdir -p "$d"
	(
		cd "$d"
		printf 'module example.com/%s\n\ngo %s\n' "$name" "$goline" >go.mod
		write_service "$d" "$embed"
		go get "go.etcd.io/etcd/client/v3@$ver" >/dev/null 2>&1
		[ "$embed" = no ] || go get "go.etcd.io/etcd/server/v3@$ver" >/dev/null 2>&1
		go mod tidy >/dev/null 2>&1
		go list -m all | sort >before.txt
		pinned >before.pinned
		others >before.others
		sed -i 's#"go.etcd.io/etcd/client/v3/concurrency"#"github.com/seed-a9d410c6/concurrency"#' main.go
		go mod edit -replace "github.com/seed-a9d410c6/concurrency=$lib"
		go mod tidy >tidy.log 2>&1 || { cat tidy.log; exit 1; }
		go list -m all | sort >after.txt
		pinned >after.pinned
		others >after.others
	) || { echo "$name: tidy failed"; status=1; continue; }
	before=$(wc -l <"$d/before.txt")
	after=$(wc -l <"$d/after.txt")
	added=$(comm -13 <(cut -d' ' -f1 "$d/before.txt") <(cut -d' ' -f1 "$d/after.txt") | tr '\n' ' ')
	printf '%-14s %-8s %7d %7d %6d %6d  %s\n' "$name" "$ver" "$before" "$after" $((after - before)) "$budget" "$added"
	if ! diff "$d/before.pinned" "$d/after.pinned" >/dev/null; then
		diff "$d/before.pinned" "$d/after.pinned" | sed 's/^/    /' || true
		echo "    $name: etcd or gRPC moved"
		status=1
	fi
	if ! diff "$d/before.others" "$d/after.others" >/dev/null; then
		diff "$d/before.others" "$d/after.others" | grep '^[<>]' | sed 's/^/    (info) /' || true
	fi
	if [ $((after - before)) -gt "$budget" ]; then
		echo "    $name: $((after - before)) modules added, budget $budget"
		status=1
	fi
	if [ "$embed" = yes ]; then
		(cd "$d" && go vet ./... && go test -count=1 ./... >"$d/run.log" 2>&1) ||
			{ cat "$d/run.log"; echo "    $name: test against its embedded etcd failed"; status=1; }
	else
		start_server "$srv"
		(cd "$d" && go vet ./... && go build -o svc . && ./svc >"$d/run.log" 2>&1) ||
			{ cat "$d/run.log"; echo "    $name: run against etcd $srv failed"; status=1; }
		stop_server
	fi
done
exit $status
