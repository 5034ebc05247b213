package concurrency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdproc"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// These tests cover WithMaxHold: a hold bounded in time even while its
// process runs and renews its session, its key on a lease of its own.

// keyOf reads key; nil if it is gone.
func keyOf(t *testing.T, c *clientv3.Client, key string) *clientv3.GetResponse {
	t.Helper()
	resp, err := c.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp
}

// ownLease checks that the key of a hold with token tok is on a lease
// that is not the session's, granted with ttl seconds, and returns it.
func ownLease(t *testing.T, c *clientv3.Client, s *concurrency.Session, key string, tok int64, ttl int64) clientv3.LeaseID {
	t.Helper()
	resp := keyOf(t, c, key)
	if resp == nil {
		t.Fatalf("key %q gone while held", key)
	}
	kv := resp.Kvs[0]
	if kv.CreateRevision != tok {
		t.Fatalf("token %d, key's create revision %d: the fencing token changed", tok, kv.CreateRevision)
	}
	lease := clientv3.LeaseID(kv.Lease)
	if lease == s.Lease() || lease == clientv3.NoLease {
		t.Fatalf("key %q is on lease %x, the session's is %x: want a lease of its own", key, kv.Lease, s.Lease())
	}
	ttlr, err := c.TimeToLive(t.Context(), lease)
	if err != nil {
		t.Fatal(err)
	}
	if ttlr.GrantedTTL != ttl || ttlr.TTL > ttl || ttlr.TTL < 0 {
		t.Fatalf("hold lease granted %d s, %d s left; want %d s granted", ttlr.GrantedTTL, ttlr.TTL, ttl)
	}
	return lease
}

// leaseGone waits until lease no longer exists.
func leaseGone(t *testing.T, c *clientv3.Client, lease clientv3.LeaseID, within time.Duration) {
	t.Helper()
	etcdtest.Eventually(t, within, func() bool {
		r, err := c.TimeToLive(t.Context(), lease)
		return err == nil && r.TTL == -1
	}, "lease %x still exists", lease)
}

// A hold on a session WithMaxHold(5 s) ends with ErrMaxHold within 5 s
// of Lock, its key is removed, and a waiter of etcd's own package, which
// sees an ordinary key, is granted next with a larger token.
func TestMaxHoldEndsHold(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c, concurrency.WithMaxHold(5*time.Second))
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	hctx := m.Ctx()
	tok := m.Token()
	ownLease(t, c, s, m.Key(), tok, 5)

	es := newEtcdSession(t, sharedClient(t))
	em := etcdconc.NewMutex(es, pfx)
	errc := async(t, func() error { return em.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	if hctx.Err() != nil {
		t.Fatalf("hold ended %v after Lock, before etcd's waiter queued: %v", time.Since(locked), context.Cause(hctx))
	}

	select {
	case <-hctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("hold context alive 10 s after Lock with a max hold of 5 s")
	}
	took := time.Since(locked)
	if cause := context.Cause(hctx); !errors.Is(cause, concurrency.ErrMaxHold) {
		t.Fatalf("cause = %v, want ErrMaxHold", cause)
	}
	if took > 5*time.Second {
		t.Errorf("hold ended %v after Lock, want within 5 s", took)
	}
	t.Logf("hold ended %v after Lock: %v", took, context.Cause(hctx))
	if s.Ctx().Err() != nil {
		t.Fatalf("the session ended with the hold: %v", context.Cause(s.Ctx()))
	}

	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("etcd's waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("etcd's waiter not granted 10 s after the max hold")
	}
	kvs := etcdtest.Keys(t, c, pfx)
	if len(kvs) != 1 || string(kvs[0].Key) != em.Key() || kvs[0].CreateRevision <= tok {
		t.Fatalf("keys after the max hold: %v, want etcd's waiter's alone with a token above %d", kvs, tok)
	}
	// The hold was lost: guarded writes fail, and Unlock is not an error.
	if _, err := m.Txn(t.Context()).Then(clientv3.OpPut(pfx+"-data", "x")).Commit(); !errors.Is(err, concurrency.ErrLockLost) {
		t.Fatalf("guarded Txn after the max hold = %v, want ErrLockLost", err)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock after the max hold: %v", err)
	}
	if err := em.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Every primitive takes a max hold: its key moves to a lease of its own
// with its token unchanged, a release deletes the key and revokes the
// lease, and an Election's Proclaim keeps the key on that lease.
func TestMaxHoldPrimitives(t *testing.T) {
	type held struct {
		key     string
		tok     int64
		ctx     context.Context
		release func(ctx context.Context) error
	}
	cases := []struct {
		name string
		take func(t *testing.T, s *concurrency.Session, pfx string) held
	}{
		{"mutex", func(t *testing.T, s *concurrency.Session, pfx string) held {
			m := concurrency.NewMutex(s, pfx)
			if err := m.Lock(t.Context()); err != nil {
				t.Fatal(err)
			}
			return held{m.Key(), m.Token(), m.Ctx(), m.Unlock}
		}},
		{"semaphore", func(t *testing.T, s *concurrency.Session, pfx string) held {
			m := concurrency.NewSemaphore(s, pfx, 2)
			if err := m.Acquire(t.Context()); err != nil {
				t.Fatal(err)
			}
			return held{m.Key(), m.Token(), m.Ctx(), m.Release}
		}},
		{"rwmutex read", func(t *testing.T, s *concurrency.Session, pfx string) held {
			m := concurrency.NewRWMutex(s, pfx)
			if err := m.RLock(t.Context()); err != nil {
				t.Fatal(err)
			}
			return held{m.Key(), m.Token(), m.Ctx(), m.RUnlock}
		}},
		{"rwmutex write", func(t *testing.T, s *concurrency.Session, pfx string) held {
			m := concurrency.NewRWMutex(s, pfx)
			if err := m.Lock(t.Context()); err != nil {
				t.Fatal(err)
			}
			return held{m.Key(), m.Token(), m.Ctx(), m.Unlock}
		}},
		{"election", func(t *testing.T, s *concurrency.Session, pfx string) held {
			e := concurrency.NewElection(s, pfx)
			if err := e.Campaign(t.Context(), "a"); err != nil {
				t.Fatal(err)
			}
			if err := e.Proclaim(t.Context(), "b"); err != nil {
				t.Fatal(err)
			}
			return held{e.Key(), e.Rev(), e.Ctx(), e.Resign}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			s := newSession(t, c, concurrency.WithMaxHold(30*time.Second))
			h := tc.take(t, s, pfx)
			lease := ownLease(t, c, s, h.key, h.tok, 30)
			if tc.name == "election" {
				if v := string(keyOf(t, c, h.key).Kvs[0].Value); v != "b" {
					t.Fatalf("leader value %q after Proclaim, want b", v)
				}
			}
			if err := h.release(t.Context()); err != nil {
				t.Fatal(err)
			}
			if cause := context.Cause(h.ctx); !errors.Is(cause, concurrency.ErrLockReleased) {
				t.Fatalf("cause after release = %v, want ErrLockReleased", cause)
			}
			if keyOf(t, c, h.key) != nil {
				t.Fatalf("key %q left after the release", h.key)
			}
			leaseGone(t, c, lease, 10*time.Second)
		})
	}
}

// The fault: the holder's only connection goes silent after Lock, so the
// holder can neither release nor revoke anything. etcd removes the key
// itself when the hold's lease expires, although the session's lease
// lives on, and a waiter elsewhere is granted; the holder's Ctx has ended
// with ErrMaxHold before that.
func TestMaxHoldEtcdRemovesKeyWhenHolderIsCutOff(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	p, err := etcdproc.NewProxy(etcdtest.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	hc := etcdtest.NewClient(t, []string{p.URL()})
	hs := newSession(t, hc, concurrency.WithMaxHold(3*time.Second))
	t.Cleanup(p.Heal) // before the session's Close
	m := concurrency.NewMutex(hs, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hctx := m.Ctx()
	lease := ownLease(t, c, hs, m.Key(), m.Token(), 3)
	ws := newSession(t, c)
	wm := concurrency.NewMutex(ws, pfx)
	errc := async(t, func() error { return wm.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	p.Blackhole()
	cut := time.Now()

	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("waiter not granted 15 s after the holder was cut off, with a max hold of 3 s")
	}
	granted := time.Since(cut)
	t.Logf("waiter granted %v after the cut", granted)
	if hctx.Err() == nil {
		t.Fatal("waiter granted while the cut-off holder's Ctx is alive")
	}
	if cause := context.Cause(hctx); !errors.Is(cause, concurrency.ErrMaxHold) {
		t.Fatalf("holder's cause = %v, want ErrMaxHold", cause)
	}
	// The key went with its own lease, not with the session's: that one
	// was renewed until the cut and still lives.
	r, err := c.TimeToLive(t.Context(), hs.Lease())
	if err != nil || r.TTL <= 0 {
		t.Fatalf("session lease: %v %v, want it alive", r, err)
	}
	leaseGone(t, c, lease, time.Second)
	if err := wm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// The fault: the session's lease is revoked from outside. The hold's key
// is not on it, so the revoke alone leaves the key; the session notices
// at its next renewal, its hold ends, and the hold's own lease is revoked
// with it, so the key is gone long before the max hold.
func TestMaxHoldSessionLeaseRevoked(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c, concurrency.WithTTL(3), concurrency.WithMaxHold(time.Minute))
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hctx := m.Ctx()
	lease := ownLease(t, c, s, m.Key(), m.Token(), 60)
	if _, err := c.Revoke(t.Context(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("hold alive 10 s after its session's lease was revoked")
	}
	if cause := context.Cause(hctx); !errors.Is(cause, concurrency.ErrSessionExpired) {
		t.Fatalf("cause = %v, want ErrSessionExpired", cause)
	}
	leaseGone(t, c, lease, 10*time.Second)
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
		t.Fatalf("keys left: %v", kvs)
	}
}

// Close ends every max hold of the session and removes its key, as it
// does without one.
func TestMaxHoldSessionClose(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s, err := concurrency.NewSession(c, concurrency.WithMaxHold(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewSemaphore(s, pfx, 3)
	if err := m.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	lease := ownLease(t, c, s, m.Key(), m.Token(), 60)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(m.Ctx()); !errors.Is(cause, concurrency.ErrSessionExpired) {
		t.Fatalf("cause = %v, want ErrSessionExpired", cause)
	}
	// Close waits for the hold's lease's revoke.
	leaseGone(t, c, lease, 0)
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
		t.Fatalf("keys left after Close: %v", kvs)
	}
}

// A max hold under a second (etcd's leases count whole seconds) is
// refused.
func TestMaxHoldInvalid(t *testing.T) {
	etcdtest.Begin(t)
	c := sharedClient(t)
	for _, d := range []time.Duration{-time.Second, time.Millisecond, 999 * time.Millisecond} {
		s, err := concurrency.NewSession(c, concurrency.WithMaxHold(d))
		if !errors.Is(err, concurrency.ErrInvalidMaxHold) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("WithMaxHold(%v): %v, want ErrInvalidMaxHold", d, err)
		}
	}
	s := newSession(t, c, concurrency.WithMaxHold(0)) // 0: no max hold
	m := concurrency.NewMutex(s, etcdtest.Begin(t))
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if l := keyOf(t, c, m.Key()).Kvs[0].Lease; clientv3.LeaseID(l) != s.Lease() {
		t.Fatalf("without a max hold the key is on lease %x, want the session's %x", l, s.Lease())
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
