package concurrency_test

import (
	"errors"
	"testing"
	"time"

	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

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

// A weighted Semaphore's name touched by etcd's Mutex (a misconfigured
// client): etcd's Mutex queues behind the permits held and is granted
// only once they are all released; meanwhile and while it holds, this
// package's acquisitions on the name are refused (ErrLockKind) without
// writing, and a SetLimit on it too.
func TestReview29WeightedEtcdMutex(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	a := concurrency.NewSemaphore(newSession(t, c), pfx, 3)
	b := concurrency.NewSemaphore(newSession(t, c), pfx, 3)
	if err := a.AcquireN(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	if err := b.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	es, err := etcdconc.NewSession(sharedClient(t))
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	em := etcdconc.NewMutex(es, pfx)
	eerr := async(t, func() error { return em.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 3)
	refused := func(when string) {
		t.Helper()
		before := etcdtest.Keys(t, c, pfx)
		s := concurrency.NewSemaphore(newSession(t, c), pfx, 3)
		if err := s.TryAcquireN(t.Context(), 1); !errors.Is(err, concurrency.ErrLockKind) {
			t.Fatalf("%s: TryAcquireN = %v, want ErrLockKind", when, err)
		}
		if err := s.SetLimit(t.Context(), 4); !errors.Is(err, concurrency.ErrLockKind) {
			t.Fatalf("%s: SetLimit = %v, want ErrLockKind", when, err)
		}
		if after := etcdtest.Keys(t, c, pfx); len(after) != len(before) {
			t.Fatalf("%s: keys %v after a refused acquisition, were %v", when, after, before)
		}
	}
	refused("etcd's Mutex waiting")
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	etcdtest.WaitKeys(t, c, pfx, 2)
	select {
	case err := <-eerr:
		t.Fatalf("etcd's Mutex granted (%v) while a permit is held", err)
	default:
	}
	if err := b.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, eerr, "etcd's Mutex once every permit is released"); err != nil {
		t.Fatal(err)
	}
	refused("etcd's Mutex holding")
	if err := em.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
