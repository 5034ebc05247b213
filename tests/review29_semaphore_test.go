package concurrency_test

import (
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
)

// After SetLimit shrinks a name, holders beyond the limit keep their
// permits, and the older keys of a new waiter may all be holders whose
// weights exceed the limit. The waiter must be granted as soon as the
// holders left fit, whichever of them leaves, not only when the newest
// one does: here three unit holders under limit 3, shrunk to 2; the two
// oldest release, and the waiter fits beside the newest, which holds on.
func TestReview29SetLimitShrinkOldestLeave(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	sem := func(lim int) *concurrency.Semaphore { return concurrency.NewSemaphore(newSession(t, c), pfx, lim) }
	hs := []*concurrency.Semaphore{sem(3), sem(3), sem(3)}
	for _, m := range hs {
		if err := m.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if err := hs[0].SetLimit(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	w := sem(2)
	werr := acquireAsync(t, t.Context(), w)
	etcdtest.WaitKeys(t, c, pfx, 4)
	for _, m := range hs[:2] {
		if err := m.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if err := within(t, 10*time.Second, werr, "the waiter once 1 permit is held under limit 2"); err != nil {
		t.Fatal(err)
	}
	w.Release(t.Context())
	hs[2].Release(t.Context())
}

// The same with weights, where the waiter is the first one (its older
// keys number no more than the limit): weights 3 and 3 held under limit
// 6, shrunk to 4; the older holder leaves, and a waiter of weight 1 fits
// beside the newer.
func TestReview29WeightedShrinkOlderLeaves(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	sem := func(lim int) *concurrency.Semaphore { return concurrency.NewSemaphore(newSession(t, c), pfx, lim) }
	hs := []*concurrency.Semaphore{sem(6), sem(6)}
	for _, m := range hs {
		if err := m.AcquireN(t.Context(), 3); err != nil {
			t.Fatal(err)
		}
	}
	if err := hs[0].SetLimit(t.Context(), 4); err != nil {
		t.Fatal(err)
	}
	w := sem(4)
	werr := acquireAsync(t, t.Context(), w)
	etcdtest.WaitKeys(t, c, pfx, 3)
	if err := hs[0].Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, werr, "the waiter of weight 1 beside a holder of 3 under limit 4"); err != nil {
		t.Fatal(err)
	}
	w.Release(t.Context())
	hs[1].Release(t.Context())
}
