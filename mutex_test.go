package concurrency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconcurrency "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
)

// newSession opens a session that is closed when the test ends.
func newSession(t testing.TB, c *clientv3.Client) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// keys returns the number of keys under pfx.
func keys(t *testing.T, c *clientv3.Client, pfx string) int64 {
	t.Helper()
	resp, err := c.Get(testContext(t), pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// waitKeys polls etcd until pfx holds n keys.
func waitKeys(t *testing.T, c *clientv3.Client, pfx string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for keys(t, c, pfx) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d keys, want %d", pfx, keys(t, c, pfx), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// One holder at a time: TryLock fails while another session holds the
// lock, Unlock deletes the holder's key, the next holder's fencing token is
// higher.
func TestMutexExcludesAndHandsOver(t *testing.T) {
	c := newClient(t)
	pfx := "/test/" + t.Name() + "/"
	m1 := concurrency.NewMutex(newSession(t, c), pfx)
	m2 := concurrency.NewMutex(newSession(t, c), pfx)
	ctx := testContext(t)
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m2.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock while held: %v, want ErrLocked", err)
	}
	if n := keys(t, c, pfx); n != 1 {
		t.Fatalf("after a failed TryLock: %d keys, want 1", n)
	}
	first := m1.Token()
	if err := m1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := keys(t, c, pfx); n != 0 {
		t.Fatalf("after Unlock: %d keys, want 0", n)
	}
	if err := m2.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if m2.Token() <= first {
		t.Fatalf("second token %d, not above the first %d", m2.Token(), first)
	}
	if err := m2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter whose context is cancelled gets the context's error and leaves
// no key behind.
func TestMutexCancelledWaitLeavesNoKey(t *testing.T) {
	c := newClient(t)
	pfx := "/test/" + t.Name() + "/"
	m1 := concurrency.NewMutex(newSession(t, c), pfx)
	m2 := concurrency.NewMutex(newSession(t, c), pfx)
	if err := m1.Lock(testContext(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	go func() { done <- m2.Lock(ctx) }()
	waitKeys(t, c, pfx, 2) // the waiter is queued
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, want context.Canceled", err)
	}
	waitKeys(t, c, pfx, 1)
	if err := m1.Unlock(testContext(t)); err != nil {
		t.Fatal(err)
	}
	waitKeys(t, c, pfx, 0)
}

// BenchmarkLockUnlock times Lock then Unlock of a lock nobody else wants,
// the path most services take, for this package (impl=ours) and for
// etcd's (impl=etcd) in one run. The server is the process TestMain
// started, so B/op, allocs/op and cpu-ns/op (the CPU time of the process,
// where it can be read) are the client's alone: what each package costs
// per cycle (issue 52). tests/bench_test.go has the same twins on an
// embedded cluster, whose members count in the process's allocations.
func BenchmarkLockUnlock(b *testing.B) {
	c := newClient(b)
	ctx := testContext(b)
	cycle := func(b *testing.B, m interface {
		Lock(context.Context) error
		Unlock(context.Context) error
	}) {
		b.ReportAllocs()
		b.ResetTimer()
		cpu := processCPU()
		for range b.N {
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if cpu >= 0 {
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		}
	}
	b.Run("impl=ours", func(b *testing.B) {
		cycle(b, concurrency.NewMutex(newSession(b, c), "/bench/"+b.Name()+"/"))
	})
	b.Run("impl=etcd", func(b *testing.B) {
		s, err := etcdconcurrency.NewSession(c, etcdconcurrency.WithTTL(10))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		cycle(b, etcdconcurrency.NewMutex(s, "/bench/"+b.Name()+"/"))
	})
}
