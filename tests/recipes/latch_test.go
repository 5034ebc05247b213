package recipes_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// TestCountDownLatch: concurrent CountDowns each count once; waiters
// block until the last, then return; the key is gone.
func TestCountDownLatch(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	l := recipes.NewCountDownLatch(c, pfx+"/latch")
	const n = 8
	if err := l.Start(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(t.Context(), n); !errors.Is(err, recipes.ErrKeyExists) {
		t.Fatalf("second Start = %v, want ErrKeyExists", err)
	}
	if err := l.Wait(bounded(t, 200*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a closed latch = %v, want DeadlineExceeded", err)
	}
	errc := async(t, func() error {
		return recipes.NewCountDownLatch(sharedClient(t), pfx+"/latch").Wait(bounded(t, 10*time.Second))
	})
	var wg sync.WaitGroup
	for range n - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := recipes.NewCountDownLatch(sharedClient(t), pfx+"/latch").CountDown(t.Context()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got, err := l.Count(t.Context()); err != nil || got != 1 {
		t.Fatalf("Count after %d CountDowns = %d, %v, want 1", n-1, got, err)
	}
	notYet(t, errc, "Wait")
	if err := l.CountDown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 5*time.Second, errc, "Wait"); err != nil {
		t.Fatal(err)
	}
	if err := l.CountDown(t.Context()); err != nil {
		t.Fatalf("CountDown on an open latch = %v", err)
	}
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
		t.Fatalf("%d keys left", len(kvs))
	}
}
