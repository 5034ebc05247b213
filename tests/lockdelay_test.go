package concurrency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// These tests cover WithLockDelay: after a hold that ended by loss, the
// next Mutex holder with lock-delay is granted only d later; after a
// release, at once.

// lockDelay is the delay of these tests: long enough to tell from a
// handover (milliseconds), short enough to wait for.
const lockDelay = 3 * time.Second

// delayRunning reports whether the lock-delay key of name exists.
func delayRunning(t *testing.T, c *clientv3.Client, name string) bool {
	t.Helper()
	resp, err := c.Get(t.Context(), concurrency.LockDelayPrefix+"delay"+name+"/")
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Kvs) == 1
}

// A holder with lock-delay loses its hold while another waits: its lease
// revoked from outside, or its key deleted by someone else. The waiter is
// granted only lock-delay after the loss; meanwhile its key holds, the
// delay shows in etcd, and a TryLock with lock-delay misses.
func TestLockDelayAfterLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, c *clientv3.Client, s *concurrency.Session, m *concurrency.Mutex)
	}{
		{"lease revoked", func(t *testing.T, c *clientv3.Client, s *concurrency.Session, _ *concurrency.Mutex) {
			if _, err := c.Revoke(t.Context(), s.Lease()); err != nil {
				t.Fatal(err)
			}
		}},
		{"key deleted", func(t *testing.T, c *clientv3.Client, _ *concurrency.Session, m *concurrency.Mutex) {
			if _, err := c.Delete(t.Context(), m.Key()); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			hs := newSession(t, c, concurrency.WithLockDelay(lockDelay))
			hm := concurrency.NewMutex(hs, pfx)
			if err := hm.Lock(t.Context()); err != nil {
				t.Fatal(err)
			}
			ws := newSession(t, sharedClient(t), concurrency.WithLockDelay(lockDelay))
			wm := concurrency.NewMutex(ws, pfx)
			errc := async(t, func() error { return wm.Lock(t.Context()) })
			etcdtest.WaitKeys(t, c, pfx, 2)

			tc.lose(t, c, hs, hm)
			lost := time.Now()
			etcdtest.Eventually(t, 10*time.Second, func() bool { return delayRunning(t, c, pfx) }, "no lock-delay started after the loss")
			kvs := etcdtest.Keys(t, c, pfx)
			if len(kvs) != 1 {
				t.Fatalf("keys during the delay: %v, want the waiter's alone", kvs)
			}
			select {
			case err := <-errc:
				t.Fatalf("waiter's Lock returned %v %v after the loss, within the lock-delay", err, time.Since(lost))
			default:
			}
			ts := newSession(t, sharedClient(t), concurrency.WithLockDelay(lockDelay))
			if err := concurrency.NewMutex(ts, pfx).TryLock(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
				t.Fatalf("TryLock during the delay = %v, want ErrLocked", err)
			}
			// Inspect shows the delay and what is left of it.
			if q, err := concurrency.Inspect(t.Context(), c, pfx); err != nil {
				t.Fatal(err)
			} else if q.LockDelay <= 0 || q.LockDelay > lockDelay {
				t.Fatalf("Inspect during the delay: LockDelay %v, want in (0, %v]", q.LockDelay, lockDelay)
			}

			if err := within(t, 15*time.Second, errc, "waiter"); err != nil {
				t.Fatal(err)
			}
			took := time.Since(lost)
			t.Logf("waiter granted %v after the loss, lock-delay %v", took, lockDelay)
			if took < lockDelay {
				t.Fatalf("waiter granted %v after the loss, before the lock-delay of %v", took, lockDelay)
			}
			if delayRunning(t, c, pfx) {
				t.Fatal("the delay key is still there after the grant")
			}
			if q, err := concurrency.Inspect(t.Context(), c, pfx); err != nil {
				t.Fatal(err)
			} else if q.LockDelay != 0 {
				t.Fatalf("Inspect after the delay: LockDelay %v, want 0", q.LockDelay)
			}
			if err := hm.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := wm.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// After a release by a holder with lock-delay, the next one is granted at
// once, waiting or not, and so is the first holder of a fresh name.
func TestLockDelayAfterRelease(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	hs := newSession(t, c, concurrency.WithLockDelay(time.Minute))
	hm := concurrency.NewMutex(hs, pfx)
	t0 := time.Now()
	if err := hm.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("first Lock of a fresh name took %v", d)
	}
	ws := newSession(t, sharedClient(t), concurrency.WithLockDelay(time.Minute))
	wm := concurrency.NewMutex(ws, pfx)
	errc := async(t, func() error { return wm.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	if err := hm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, errc, "waiter after a release"); err != nil {
		t.Fatal(err)
	}
	if delayRunning(t, c, pfx) {
		t.Fatal("a release started a lock-delay")
	}
	if err := wm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Not waiting: TryLock after the release succeeds at once.
	if err := hm.TryLock(t.Context()); err != nil {
		t.Fatalf("TryLock after a release: %v", err)
	}
	// A second Mutex of the session shares the held key: its Lock returns
	// at once, the record naming its own key.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := concurrency.NewMutex(hs, pfx).Lock(ctx); err != nil {
		t.Fatalf("Lock of a second Mutex on the holding session: %v", err)
	}
	if err := hm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A holder with lock-delay is lost while nobody waits (its lease revoked
// from outside, as after a crash): a Lock that comes later, on a free
// name, still sees the loss and waits the delay; a TryLock misses until
// the delay is over, and then succeeds.
func TestLockDelayLaterAcquirer(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	hs := newSession(t, c, concurrency.WithLockDelay(lockDelay))
	hm := concurrency.NewMutex(hs, pfx)
	if err := hm.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(t.Context(), hs.Lease()); err != nil {
		t.Fatal(err)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)

	// The checks below must all run within the delay, which begins at the
	// first TryLock: a longer one than the other tests', so that a loaded
	// machine's slow round trips do not outlast it (at lockDelay, 3 s, the
	// delay key was once gone before the test read it, at load 13).
	const delay = 3 * lockDelay
	ts := newSession(t, sharedClient(t), concurrency.WithLockDelay(delay))
	tm := concurrency.NewMutex(ts, pfx)
	if err := tm.TryLock(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock after the loss = %v, want ErrLocked (lock-delay)", err)
	}
	started := time.Now()
	if !delayRunning(t, c, pfx) {
		t.Fatal("no delay key after the TryLock that found the loss")
	}
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
		t.Fatalf("the missed TryLock left %v", kvs)
	}
	// A second TryLock misses too: the delay is in etcd, not in the record.
	if err := tm.TryLock(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("second TryLock during the delay = %v, want ErrLocked", err)
	}
	ls := newSession(t, sharedClient(t), concurrency.WithLockDelay(delay))
	lm := concurrency.NewMutex(ls, pfx)
	ctx, cancel := context.WithTimeout(t.Context(), delay+15*time.Second)
	defer cancel()
	if err := lm.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(started); took < delay-time.Second {
		t.Fatalf("Lock granted %v after the delay started, want about %v", took, delay)
	}
	if err := lm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := tm.TryLock(t.Context()); err != nil {
		t.Fatalf("TryLock after the delay and a release: %v", err)
	}
	if err := tm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A negative lock-delay is refused; a Lock whose ctx ends during the delay
// returns its error and leaves no key.
func TestLockDelayInvalidAndCancel(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	if s, err := concurrency.NewSession(c, concurrency.WithLockDelay(-time.Second)); !errors.Is(err, concurrency.ErrInvalidLockDelay) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("WithLockDelay(-1s): %v, want ErrInvalidLockDelay", err)
	}
	hs := newSession(t, c, concurrency.WithLockDelay(time.Minute))
	if err := concurrency.NewMutex(hs, pfx).Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(t.Context(), hs.Lease()); err != nil {
		t.Fatal(err)
	}
	ws := newSession(t, sharedClient(t), concurrency.WithLockDelay(time.Minute))
	ctx, cancel := context.WithCancel(t.Context())
	errc := async(t, func() error { return concurrency.NewMutex(ws, pfx).Lock(ctx) })
	etcdtest.Eventually(t, 10*time.Second, func() bool { return delayRunning(t, c, pfx) }, "no lock-delay started")
	cancel()
	if err := within(t, 10*time.Second, errc, "Lock cancelled in its delay"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock cancelled during the delay = %v, want Canceled", err)
	}
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
		t.Fatalf("keys left after the cancelled Lock: %v", kvs)
	}
}
