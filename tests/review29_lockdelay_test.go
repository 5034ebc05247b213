package concurrency_test

import (
	"testing"
	"time"

	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
)

// Issue 29 asks that the next holder be delayed after a hold that ended
// by loss, not by release, and that a release by etcd's Mutex or `etcdctl
// lock` be told apart from a loss. A waiter with lock-delay queued behind
// a holder of etcd's package that Unlocks (its session still alive) must
// be granted at once, without a lock-delay.
func TestReview29LockDelayEtcdMutexRelease(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	es, err := etcdconc.NewSession(sharedClient(t))
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	em := etcdconc.NewMutex(es, pfx)
	if err := em.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	ws := newSession(t, c, concurrency.WithLockDelay(lockDelay))
	wm := concurrency.NewMutex(ws, pfx)
	errc := async(t, func() error { return wm.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	if err := em.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := within(t, 15*time.Second, errc, "waiter behind etcd's Mutex"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(released); took >= lockDelay {
		t.Fatalf("granted %v after etcd's Mutex released (its session alive), want no lock-delay", took)
	}
	if delayRunning(t, c, pfx) {
		t.Fatal("a lock-delay started after a release by etcd's Mutex")
	}
	if err := wm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// The other side: a holder of etcd's package lost (its lease revoked from
// outside, as when its session expires) is a loss, and the waiter with
// lock-delay behind it is granted only lock-delay later.
func TestReview29LockDelayEtcdMutexLost(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	es, err := etcdconc.NewSession(sharedClient(t))
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	em := etcdconc.NewMutex(es, pfx)
	if err := em.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	ws := newSession(t, c, concurrency.WithLockDelay(lockDelay))
	wm := concurrency.NewMutex(ws, pfx)
	errc := async(t, func() error { return wm.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	if _, err := c.Revoke(t.Context(), es.Lease()); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	if err := within(t, 15*time.Second, errc, "waiter behind a lost holder of etcd's Mutex"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(lost); took < lockDelay {
		t.Fatalf("granted %v after etcd's Mutex lost its lease, want the lock-delay %v", took, lockDelay)
	}
	if err := wm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
