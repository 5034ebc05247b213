package concurrency_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	concurrencyprom "github.com/seed-a9d410c6/concurrency/prometheus"
)

// Tests of the unowned-shard spans a member measures
// (concurrency.ShardMetricsRecorder, through WithShardMetrics): on the
// shared cluster, a shard made unowned for a known interval, an owner's
// crash and an owner's leave, each checked against what happened, and the
// Prometheus series that concurrencyprom makes of them.

// spanRecorder is a concurrencyprom.Metrics that also keeps each unowned
// span it is told of, by shard.
type spanRecorder struct {
	*concurrencyprom.Metrics

	t     *testing.T // reports calls out of order (the members return before the test ends)
	mu    sync.Mutex
	open  map[int]bool            // shards seen unowned now
	spans map[int][]time.Duration // shard -> ended spans, in order
}

// newSpanRecorder returns a spanRecorder and a function that reads the
// value of a series of its metrics (a histogram's count).
func newSpanRecorder(t *testing.T) (*spanRecorder, func(name string) float64) {
	t.Helper()
	metrics, reg := newMetrics(t)
	r := &spanRecorder{Metrics: metrics, t: t, open: map[int]bool{}, spans: map[int][]time.Duration{}}
	return r, func(name string) float64 { return sample(t, reg, name, nil) }
}

func (r *spanRecorder) ShardUnownedStarted(group string, shard int) {
	r.Metrics.ShardUnownedStarted(group, shard)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open[shard] {
		r.t.Errorf("shard %d: a span started while one is open", shard)
	}
	r.open[shard] = true
}

func (r *spanRecorder) ShardUnownedEnded(group string, shard int, d time.Duration) {
	r.Metrics.ShardUnownedEnded(group, shard, d)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.open[shard] {
		r.t.Errorf("shard %d: a span ended that had not started", shard)
	}
	delete(r.open, shard)
	r.spans[shard] = append(r.spans[shard], d)
}

// ended returns the spans of shard that ended, and whether one is open.
func (r *spanRecorder) ended(shard int) ([]time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans[shard]), r.open[shard]
}

// count is how many spans ended, over all shards.
func (r *spanRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := 0
	for _, s := range r.spans {
		k += len(s)
	}
	return k
}

// A shard held by a client outside the group has no member owner: a member
// that joins sees it unowned from its first read, queues behind the holder,
// and sees it owned (by itself) once the holder lets go, about a second
// later. The span it records covers at least the time from when its key
// was seen waiting to the release, and at most the whole test; the other
// shard, free at the start, has one span, no longer than from the start
// until the test saw it end. The Prometheus series follow: the gauge at 1
// while the outsider holds, back at 0 after, one observation per span.
func TestShardsUnownedMetrics(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	const n = 2
	rec, value := newSpanRecorder(t)
	outsider := concurrency.NewMutex(newSession(t, c), group+"/shard/0")
	if err := outsider.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	var st concurrency.ShardStatus
	fn := func(ctx context.Context, sh concurrency.Shard) error { <-ctx.Done(); return nil }
	goShards(t, c, group, n, fn, concurrency.WithShardTTL(5), concurrency.WithShardMetrics(rec), concurrency.WithShardStatus(&st))
	// The member owns shard 1 and waits behind the outsider on shard 0.
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		g := inspectShards(t, c, group, n)
		return g.Shards[0].Waiters == 1 && !g.Shards[0].Member && g.Shards[1].Member
	}, "the member does not own shard 1 and wait on shard 0")
	t1 := time.Now()
	etcdtest.Eventually(t, 10*time.Second, func() bool { s, _ := rec.ended(1); return len(s) == 1 }, "no span of shard 1 ended")
	t1b := time.Now() // the member may see its own key on shard 1 after the test does
	if s, open := rec.ended(0); len(s) != 0 || !open {
		t.Fatalf("shard 0, held by the outsider: spans %v, open %v; want none ended and one open", s, open)
	}
	if v := value("concurrency_shard_unowned"); v != 1 {
		t.Errorf("concurrency_shard_unowned = %v while the outsider holds shard 0, want 1", v)
	}

	// The interval under test: the outsider holds shard 0 for a second
	// more. This wait is the quantity measured, not a synchronisation.
	const hold = time.Second
	<-time.After(hold)
	t2 := time.Now()
	if err := outsider.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	etcdtest.Eventually(t, 10*time.Second, func() bool { s, _ := rec.ended(0); return len(s) == 1 }, "no span of shard 0 ended after the release")
	t3 := time.Now()
	etcdtest.Eventually(t, 5*time.Second, func() bool { return len(st.Owned()) == n }, "the member owns %v", st.Owned())

	s0, _ := rec.ended(0)
	s1, _ := rec.ended(1)
	t.Logf("shard 0: unowned %v (seen waiting to release: %v; whole: %v); shard 1: %v", s0[0], t2.Sub(t1), t3.Sub(t0), s1[0])
	if s0[0] < t2.Sub(t1) || s0[0] > t3.Sub(t0) {
		t.Errorf("shard 0 unowned %v, want between %v and %v", s0[0], t2.Sub(t1), t3.Sub(t0))
	}
	if s1[0] <= 0 || s1[0] > t1b.Sub(t0) {
		t.Errorf("shard 1 unowned %v, want above 0 and at most %v", s1[0], t1b.Sub(t0))
	}
	if v := value("concurrency_shard_unowned"); v != 0 {
		t.Errorf("concurrency_shard_unowned = %v once every shard is owned, want 0", v)
	}
	if v := value("concurrency_shard_unowned_seconds"); v != 2 {
		t.Errorf("concurrency_shard_unowned_seconds has %v observations, want 2", v)
	}
}

// A second member's lease is revoked (a crash, as far as etcd can tell):
// the first sees each of its shards unowned, once, from the revoke until
// it owns the shard itself, a span within the time the test saw between
// the revoke and the takeover. Then the second, having joined again, leaves
// by its ctx: the first sees each of its shards unowned from the deletion
// of its member key to its release, again once and within the leave.
func TestShardsUnownedCrashLeave(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	const n, ttl = 6, 5
	rec, value := newSpanRecorder(t)
	fn := func(ctx context.Context, sh concurrency.Shard) error { <-ctx.Done(); return nil }
	var stA, stB concurrency.ShardStatus
	goShards(t, c, group, n, fn, concurrency.WithShardTTL(ttl), concurrency.WithShardMetrics(rec), concurrency.WithShardStatus(&stA))
	waitBalanced(t, c, group, n, 1, 10*time.Second)
	cancelB, errB := goShards(t, c, group, n, fn, concurrency.WithShardTTL(ttl), concurrency.WithShardStatus(&stB))
	waitBalanced(t, c, group, n, 2, 10*time.Second)

	// spansOf waits until each shard of ids has one span more than in
	// before, and returns those new spans and when they were all seen.
	snapshot := func() map[int]int {
		m := map[int]int{}
		for i := 0; i < n; i++ {
			s, _ := rec.ended(i)
			m[i] = len(s)
		}
		return m
	}
	spansOf := func(what string, before map[int]int, ids []int) ([]time.Duration, time.Time) {
		t.Helper()
		etcdtest.Eventually(t, 4*ttl*time.Second, func() bool {
			for _, id := range ids {
				if s, _ := rec.ended(id); len(s) <= before[id] {
					return false
				}
			}
			return true
		}, "%s: spans of shards %v not ended", what, ids)
		seen := time.Now()
		var ds []time.Duration
		for i := 0; i < n; i++ {
			s, _ := rec.ended(i)
			want := before[i]
			if slices.Contains(ids, i) {
				want++
			}
			if len(s) != want {
				t.Errorf("%s: shard %d has %d spans, want %d", what, i, len(s), want)
			}
			if len(s) > before[i] {
				ds = append(ds, s[before[i]:]...)
			}
		}
		return ds, seen
	}

	// The crash.
	leaseB, ownedB := leaseOf(t, c, group, n, &stB)
	before := snapshot()
	revoked := time.Now()
	if _, err := c.Revoke(t.Context(), leaseB); err != nil {
		t.Fatal(err)
	}
	spans, seen := spansOf("crash", before, ownedB)
	t.Logf("crash: shards %v unowned %v, seen %v after the revoke", ownedB, spans, seen.Sub(revoked))
	for _, d := range spans {
		if d <= 0 || d > seen.Sub(revoked) {
			t.Errorf("crash: a span of %v, want above 0 and at most %v", d, seen.Sub(revoked))
		}
	}

	// The leave, once the second member joined again on a new session.
	waitBalanced(t, c, group, n, 2, 4*ttl*time.Second)
	_, ownedB = leaseOf(t, c, group, n, &stB)
	before = snapshot()
	left := time.Now()
	cancelB()
	if err := <-errB; !errors.Is(err, context.Canceled) {
		t.Fatalf("the second member returned %v", err)
	}
	spans, seen = spansOf("leave", before, ownedB)
	t.Logf("leave: shards %v unowned %v, seen %v after the cancel", ownedB, spans, seen.Sub(left))
	for _, d := range spans {
		if d <= 0 || d > seen.Sub(left) {
			t.Errorf("leave: a span of %v, want above 0 and at most %v", d, seen.Sub(left))
		}
	}
	waitBalanced(t, c, group, n, 1, 10*time.Second)
	if v := value("concurrency_shard_unowned"); v != 0 {
		t.Errorf("concurrency_shard_unowned = %v once every shard is owned, want 0", v)
	}
	if v, k := value("concurrency_shard_unowned_seconds"), rec.count(); v != float64(k) {
		t.Errorf("concurrency_shard_unowned_seconds has %v observations, the recorder %d spans", v, k)
	}
}
