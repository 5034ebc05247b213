package lockbench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/embedetcd"
)

// Both readings of the server's watcher gauge follow watches as a client
// opens and cancels them.
func TestWatcherCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	clus, err := embedetcd.Start(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer clus.Close()
	c, err := clientv3.New(clientv3.Config{Endpoints: clus.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	counts := map[string]WatcherCount{
		"gathered": GatheredWatchers(prometheus.DefaultGatherer),
		"scraped":  ScrapedWatchers(clus.Endpoints),
	}
	base, err := counts["gathered"](ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every count reaches want, polled: a watch reaches the server after
	// Watch returns.
	reach := func(want float64) {
		t.Helper()
		for name, count := range counts {
			err := poll(ctx, 10*time.Millisecond, func() (bool, error) {
				n, err := count(ctx)
				return n == want, err
			})
			if err != nil {
				n, _ := count(ctx)
				t.Fatalf("%s: %v watchers, want %v: %v", name, n, want, err)
			}
		}
	}
	wctx, stop := context.WithCancel(ctx)
	for i := range 3 {
		c.Watch(clientv3.WithRequireLeader(wctx), fmt.Sprintf("/w/%d", i))
	}
	reach(base + 3)
	stop()
	reach(base)
}

func TestWatchersPerHeld(t *testing.T) {
	r := ManyResult{WatcherSamples: []WatcherSample{{Watchers: 2, Held: 1}, {Watchers: 4, Held: 3}}}
	if w, h, ok := r.Watchers(); !ok || w != 3 || h != 2 {
		t.Fatalf("Watchers = %v, %v, %v; want 3, 2, true", w, h, ok)
	}
	if x, ok := r.WatchersPerHeld(); !ok || x != 1.5 {
		t.Fatalf("WatchersPerHeld = %v, %v; want 1.5, true", x, ok)
	}
	if _, ok := (ManyResult{WatcherSamples: []WatcherSample{{Watchers: 1}}}).WatchersPerHeld(); ok {
		t.Fatal("WatchersPerHeld with no lock held: ok")
	}
}
