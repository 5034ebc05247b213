package concurrency_test

import (
	"testing"
	"time"

	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// etcdHolder locks name with a Mutex of etcd's own package, on a session
// of its own client that is closed when the test ends.
func etcdHolder(t *testing.T, name string) (*etcdconc.Session, *etcdconc.Mutex) {
	t.Helper()
	es := newEtcdSession(t, sharedClient(t))
	em := etcdconc.NewMutex(es, name)
	if err := em.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	return es, em
}

// Issue 29 asks that the next holder be delayed after a hold that ended
// by loss, not by release, and that a release by etcd's Mutex or `etcdctl
// lock` be told apart from a loss. A waiter with lock-delay queued behind
// a holder of etcd's package is granted at once after its Unlock (its
// session alive), and only lock-delay later after its loss (its lease
// revoked from outside, as when its session expires).
func TestLockDelayEtcdMutex(t *testing.T) {
	for _, tc := range []struct {
		name  string
		end   func(t *testing.T, es *etcdconc.Session, em *etcdconc.Mutex) error
		delay bool
	}{
		{"released", func(t *testing.T, _ *etcdconc.Session, em *etcdconc.Mutex) error { return em.Unlock(t.Context()) }, false},
		{"lost", func(t *testing.T, es *etcdconc.Session, _ *etcdconc.Mutex) error {
			_, err := sharedClient(t).Revoke(t.Context(), es.Lease())
			return err
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			es, em := etcdHolder(t, pfx)
			wm := concurrency.NewMutex(newSession(t, c, concurrency.WithLockDelay(lockDelay)), pfx)
			errc := async(t, func() error { return wm.Lock(t.Context()) })
			etcdtest.WaitKeys(t, c, pfx, 2)
			if err := tc.end(t, es, em); err != nil {
				t.Fatal(err)
			}
			ended := time.Now()
			if err := within(t, 15*time.Second, errc, "waiter behind etcd's Mutex"); err != nil {
				t.Fatal(err)
			}
			switch took := time.Since(ended); {
			case tc.delay && took < lockDelay:
				t.Fatalf("granted %v after etcd's Mutex was lost, want the lock-delay %v", took, lockDelay)
			case !tc.delay && took >= lockDelay:
				t.Fatalf("granted %v after etcd's Mutex released (its session alive), want no lock-delay", took)
			case !tc.delay && delayRunning(t, c, pfx):
				t.Fatal("a lock-delay started after a release by etcd's Mutex")
			}
			if err := wm.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
