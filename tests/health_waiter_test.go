package concurrency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// A session whose health checks start failing while its Lock waits ends
// the wait with ErrUnhealthy and leaves no key in the queue; the holder
// is unaffected.
func TestHealthEndsWaiter(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	hs := newSession(t, c)
	hm := concurrency.NewMutex(hs, pfx)
	if err := hm.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	var sick atomic.Bool
	ws := newSession(t, sharedClient(t), concurrency.WithHealthCheck(200*time.Millisecond, 2, func(ctx context.Context) error {
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
