package concurrency_test

import (
	"errors"
	"testing"
	"time"

	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// After SetLimit shrinks a name, holders beyond the limit keep their
// permits, and the older keys of a new waiter may all be holders whose
// weights exceed the limit. The waiter must be granted as soon as the
// holders left fit, whichever of them leaves, not only when the newest
// one does.
func TestSemaphoreSetLimitShrinkOlderLeave(t *testing.T) {
	for _, tc := range []struct {
		name           string
		weights        []int // of the holders, oldest first
		limit, shrunk  int
		waiter, leaves int // the waiter's weight; how many of the oldest holders leave
	}{
		// The waiter's older keys outnumber the limit.
		{"unit", []int{1, 1, 1}, 3, 2, 1, 2},
		// The waiter is the first one (its older keys number no more
		// than the limit).
		{"weighted", []int{3, 3}, 6, 4, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			var hs []*concurrency.Semaphore
			for _, w := range tc.weights {
				m := concurrency.NewSemaphore(newSession(t, c), pfx, tc.limit)
				if err := m.AcquireN(t.Context(), w); err != nil {
					t.Fatal(err)
				}
				hs = append(hs, m)
			}
			if err := hs[0].SetLimit(t.Context(), tc.shrunk); err != nil {
				t.Fatal(err)
			}
			w := concurrency.NewSemaphore(newSession(t, c), pfx, tc.shrunk)
			werr := async(t, func() error { return w.AcquireN(t.Context(), tc.waiter) })
			etcdtest.WaitKeys(t, c, pfx, len(hs)+1)
			for _, m := range hs[:tc.leaves] {
				if err := m.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			if err := within(t, 10*time.Second, werr, "the waiter once the holders left fit beside it"); err != nil {
				t.Fatal(err)
			}
			w.Release(t.Context())
			for _, m := range hs[tc.leaves:] {
				m.Release(t.Context())
			}
		})
	}
}

// A weighted Semaphore's name touched by etcd's Mutex (a misconfigured
// client): etcd's Mutex queues behind the permits held and is granted
// only once they are all released; meanwhile and while it holds, this
// package's acquisitions on the name are refused (ErrLockKind) without
// writing, and a SetLimit on it too.
func TestSemaphoreWeightedEtcdMutex(t *testing.T) {
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
	es := newEtcdSession(t, sharedClient(t))
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
