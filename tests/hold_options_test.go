package concurrency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// A Mutex WithMaxHold and WithLockDelay, granted after a loss, waits out
// its lock-delay while its key holds so that nobody else is granted. With
// a max hold shorter than the delay, its key must not go (its own lease
// expiring) while the delay still runs: a waiter of etcd's package queued
// behind it would be granted within the delay.
func TestMaxHoldShorterThanLockDelay(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	const maxHold, delay = 2 * time.Second, 6 * time.Second
	hs := newSession(t, c, concurrency.WithLockDelay(delay))
	hm := concurrency.NewMutex(hs, pfx)
	if err := hm.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	ws := newSession(t, sharedClient(t), concurrency.WithLockDelay(delay), concurrency.WithMaxHold(maxHold))
	wm := concurrency.NewMutex(ws, pfx)
	werr := async(t, func() error { return wm.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)

	es := newEtcdSession(t, sharedClient(t))
	em := etcdconc.NewMutex(es, pfx)
	eerr := async(t, func() error { return em.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 3)

	// The loss: the first holder's lease revoked.
	if _, err := c.Revoke(t.Context(), hs.Lease()); err != nil {
		t.Fatal(err)
	}
	etcdtest.Eventually(t, 10*time.Second, func() bool { return delayRunning(t, c, pfx) }, "no lock-delay started after the loss")
	// Until the delay key goes, etcd's waiter must not be granted.
	for i := 0; i < 200 && delayRunning(t, c, pfx); i++ {
		select {
		case err := <-eerr:
			if err != nil {
				t.Fatal(err)
			}
			t.Fatalf("etcd's waiter granted while the lock-delay runs (keys %v)", etcdtest.Keys(t, c, pfx))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := within(t, 15*time.Second, werr, "waiter with lock-delay"); err != nil {
		t.Fatalf("Lock with lock-delay %v and max hold %v: %v", delay, maxHold, err)
	}
	if err := wm.Ctx().Err(); err != nil {
		t.Fatalf("hold ended as Lock returned: %v", context.Cause(wm.Ctx()))
	}
	if err := wm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 15*time.Second, eerr, "etcd's waiter"); err != nil {
		t.Fatal(err)
	}
	if err := em.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A lock-delay wait ends when its delay key is deleted from outside (an
// operator clearing the delay): the waiter is granted then, not at the
// delay's TTL nor never.
func TestLockDelayKeyDeletedFromOutside(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	const delay = 60 * time.Second
	hs := newSession(t, c, concurrency.WithLockDelay(delay))
	hm := concurrency.NewMutex(hs, pfx)
	if err := hm.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	ws := newSession(t, sharedClient(t), concurrency.WithLockDelay(delay))
	wm := concurrency.NewMutex(ws, pfx)
	werr := async(t, func() error { return wm.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	if _, err := c.Delete(t.Context(), hm.Key()); err != nil {
		t.Fatal(err)
	}
	etcdtest.Eventually(t, 10*time.Second, func() bool { return delayRunning(t, c, pfx) }, "no lock-delay started after the loss")
	if _, err := c.Delete(t.Context(), concurrency.LockDelayPrefix+"delay"+pfx+"/"); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, werr, "waiter after its delay key was deleted"); err != nil {
		t.Fatal(err)
	}
	if err := wm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	_ = hm.Unlock(t.Context())
}

// Drop-in: without the options, Lock and Unlock of a Mutex, a Semaphore
// and an Election's Campaign and Resign write no key outside the lock's
// own prefix (nothing under /_concurrency/), interoperating with etcd's
// Mutex on the same name.
func TestHoldOptionsDefaultWritesNoNewKeys(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	keysUnder := func() int64 {
		resp, err := c.Get(t.Context(), "/_concurrency/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	startRev := func() int64 {
		resp, err := c.Get(t.Context(), "/_concurrency/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}()
	before := keysUnder()
	s := newSession(t, c)
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hctx := m.Ctx() // starts the watcher
	es := newEtcdSession(t, sharedClient(t))
	em := etcdconc.NewMutex(es, pfx)
	eerr := async(t, func() error { return em.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(hctx), concurrency.ErrLockReleased) {
		t.Fatalf("cause after Unlock = %v", context.Cause(hctx))
	}
	if err := within(t, 10*time.Second, eerr, "etcd's waiter"); err != nil {
		t.Fatal(err)
	}
	if err := em.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	sem := concurrency.NewSemaphore(s, pfx+"-sem", 2)
	if err := sem.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := sem.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	e := concurrency.NewElection(s, pfx+"-el")
	if err := e.Campaign(t.Context(), "v"); err != nil {
		t.Fatal(err)
	}
	_ = e.Ctx()
	if err := e.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Nothing written under /_concurrency/ since startRev by this test's
	// leases.
	resp, err := c.Get(t.Context(), "/_concurrency/", clientv3.WithPrefix(), clientv3.WithMinModRev(startRev+1))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if clientv3.LeaseID(kv.Lease) == s.Lease() {
			t.Errorf("default path wrote %s", kv.Key)
		}
	}
	if after := keysUnder(); after > before {
		t.Errorf("keys under /_concurrency/: %d before, %d after the default path", before, after)
	}
}
