package concurrency_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
)

// Sessions WithHealthCheck, each holding a lock whose Ctx was asked for,
// leave no goroutine behind once closed: the health goroutine and any
// check call end with Close.
func TestReviewHoldOptsHealthNoGoroutinesAfterClose(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	var calls atomic.Int64
	check := func(ctx context.Context) error { calls.Add(1); return nil }
	// Warm the client up (its watch stream) with a session without checks.
	{
		s := newSession(t, c)
		m := concurrency.NewMutex(s, pfx+"/warm")
		if err := m.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		_ = m.Ctx()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	before := runtime.NumGoroutine()
	for i := range 5 {
		s, err := concurrency.NewSession(c, concurrency.WithHealthCheck(20*time.Millisecond, 2, check))
		if err != nil {
			t.Fatal(err)
		}
		m := concurrency.NewMutex(s, pfx+"/"+string(rune('a'+i)))
		if err := m.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		_ = m.Ctx()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() == 0 {
		t.Log("no check ran before Close")
	}
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		n := runtime.NumGoroutine()
		t.Logf("goroutines: %d before, %d now", before, n)
		return n-before <= 2
	},
		"goroutines after closing 5 sessions with health checks: %d before", before)
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left after Close", n)
	}
}

// A session whose health checks start failing while its Lock waits ends
// the wait with ErrUnhealthy and leaves no key in the queue; the holder
// is unaffected.
func TestReviewHoldOptsHealthEndsWaiter(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	hs := newSession(t, c)
	hm := concurrency.NewMutex(hs, pfx)
	if err := hm.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	var sick atomic.Bool
	ws := newSession(t, sharedClient(t), concurrency.WithHealthCheck(50*time.Millisecond, 2, func(ctx context.Context) error {
		if sick.Load() {
			return errors.New("test: sick")
		}
		return nil
	}))
	wm := concurrency.NewMutex(ws, pfx)
	werr := async(t, func() error { return wm.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	sick.Store(true)
	err := within(t, 10*time.Second, werr, "waiter of an unhealthy session")
	if !errors.Is(err, concurrency.ErrUnhealthy) {
		t.Fatalf("Lock = %v, want ErrUnhealthy", err)
	}
	etcdtest.WaitKeys(t, c, pfx, 1)
	if hm.Ctx().Err() != nil {
		t.Fatalf("holder ended: %v", context.Cause(hm.Ctx()))
	}
	if err := hm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
