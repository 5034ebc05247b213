package concurrency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// A process that does not campaign sees every leader in turn, and "no
// leader" before the first and after the last: the zero LeaderInfo.
func TestWatchLeader(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	reports := make(chan concurrency.LeaderInfo, 16)
	ctx, cancel := context.WithCancel(t.Context())
	errc := async(t, func() error {
		return concurrency.WatchLeader(ctx, c, pfx, func(li concurrency.LeaderInfo) { reports <- li })
	})
	t.Cleanup(cancel)
	next := func(what string) concurrency.LeaderInfo {
		t.Helper()
		select {
		case li := <-reports:
			return li
		case <-time.After(10 * time.Second):
			t.Fatalf("no report of %s within 10 s", what)
			return concurrency.LeaderInfo{}
		}
	}
	if li := next("no leader"); li != (concurrency.LeaderInfo{}) {
		t.Fatalf("first report %+v, want no leader", li)
	}
	e1 := concurrency.NewElection(newSession(t, c), pfx)
	if err := e1.Campaign(t.Context(), "one"); err != nil {
		t.Fatal(err)
	}
	if li := next("the first leader"); li.Key != e1.Key() || li.Value != "one" || li.Rev != e1.Rev() {
		t.Fatalf("report %+v, want %s %q %d", li, e1.Key(), "one", e1.Rev())
	}
	e2 := concurrency.NewElection(newSession(t, c), pfx)
	won := async(t, func() error { return e2.Campaign(t.Context(), "two") })
	etcdtest.WaitKeys(t, c, pfx, 2)
	if err := e1.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	if li := next("the second leader"); li.Key != e2.Key() || li.Value != "two" || li.Rev != e2.Rev() {
		t.Fatalf("report %+v, want %s %q %d", li, e2.Key(), "two", e2.Rev())
	}
	if err := e2.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if li := next("no leader after the last"); li != (concurrency.LeaderInfo{}) {
		t.Fatalf("report %+v, want no leader", li)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("WatchLeader returned %v, want context.Canceled", err)
	}
	select {
	case li := <-reports:
		t.Fatalf("an extra report: %+v", li)
	default:
	}
}

// A process that does not join sees the group's members and owners
// change: one member owning every shard, two sharing them, one again after
// the second left, at increasing revisions.
func TestWatchShards(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	const n = 6
	reports := make(chan *concurrency.ShardGroup, 256)
	ctx, cancel := context.WithCancel(t.Context())
	errc := async(t, func() error {
		return concurrency.WatchShards(ctx, c, group, n, func(g *concurrency.ShardGroup) { reports <- g })
	})
	t.Cleanup(cancel)
	var last int64
	// until reads reports until one shows members members, each owning
	// its share, and every shard owned (or none, without members).
	until := func(members int) *concurrency.ShardGroup {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case g := <-reports:
				if g.Revision <= last {
					t.Errorf("report at revision %d after one at %d", g.Revision, last)
				}
				last = g.Revision
				if len(g.Members) != members {
					continue
				}
				if members == 0 {
					return g
				}
				owned := 0
				for _, m := range g.Members {
					if len(m.Owned) != m.Share {
						owned = -1
						break
					}
					owned += len(m.Owned)
				}
				if owned == n {
					return g
				}
			case <-timeout:
				t.Fatalf("no report of %d balanced members within 10 s", members)
				return nil
			}
		}
	}
	if g := until(0); len(g.Members) != 0 {
		t.Fatal(g)
	}
	fn := func(ctx context.Context, sh concurrency.Shard) error { <-ctx.Done(); return nil }
	goShards(t, c, group, n, fn, concurrency.WithShardTTL(5))
	a := until(1)
	cancelB, errB := goShards(t, c, group, n, fn, concurrency.WithShardTTL(5))
	until(2)
	cancelB()
	if err := <-errB; !errors.Is(err, context.Canceled) {
		t.Fatalf("b returned %v", err)
	}
	if g := until(1); g.Members[0].Lease != a.Members[0].Lease {
		t.Errorf("member %x after b left, want %x", g.Members[0].Lease, a.Members[0].Lease)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("WatchShards returned %v, want context.Canceled", err)
	}
}
