// Package compat holds the core tests that CI runs against real etcd
// server processes of every supported line (3.4 to 3.7), with etcd's client
// at the floor this library's go.mod requires (go.mod) and at the newest
// release (go.newest.mod). See run.sh.
package compat

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
)

// testCtx bounds a test's calls.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newSession opens a session that is closed when t ends.
func newSession(t *testing.T, cli *clientv3.Client, opts ...concurrency.SessionOption) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(cli, opts...)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Never two holders; each holder's fencing token is newer than the last;
// a guarded write commits only while held; TryLock on a held lock fails
// with ErrLocked.
func TestMutexExclusion(t *testing.T) {
	pfx := prefix(t)
	ctx := testCtx(t)
	const workers, rounds = 4, 5
	var (
		inside    atomic.Int32
		lastToken atomic.Int64
		wg        sync.WaitGroup
	)
	for i := range workers {
		m := concurrency.NewMutex(newSession(t, newClient(t)), pfx+"lock")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if err := m.Lock(ctx); err != nil {
					t.Errorf("worker %d: Lock: %v", i, err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("worker %d: %d holders at once", i, n)
				}
				if tok := m.Token(); tok <= lastToken.Load() {
					t.Errorf("worker %d: token %d not newer than %d", i, tok, lastToken.Load())
				} else {
					lastToken.Store(tok)
				}
				resp, err := m.Txn(ctx).Then(clientv3.OpPut(pfx+"guarded", "x")).Commit()
				if err != nil || !resp.Succeeded {
					t.Errorf("worker %d: guarded write while held: %v", i, err)
				}
				inside.Add(-1)
				if err := m.Unlock(ctx); err != nil {
					t.Errorf("worker %d: Unlock: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()

	a := concurrency.NewMutex(newSession(t, newClient(t)), pfx+"try")
	b := concurrency.NewMutex(newSession(t, newClient(t)), pfx+"try")
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Errorf("TryLock on a held lock: %v, want ErrLocked", err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.TryLock(ctx); err != nil {
		t.Errorf("TryLock on a free lock: %v", err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t).Delete(ctx, pfx+"guarded"); err != nil {
		t.Fatal(err)
	}
}

// This package's Mutex and etcd's exclude one another on one name, with
// etcd's client of this build.
func TestMutexWithEtcdPackage(t *testing.T) {
	pfx := prefix(t) + "lock"
	ctx := testCtx(t)
	cli := newClient(t)
	es, err := etcdconc.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { es.Close() })
	theirs := etcdconc.NewMutex(es, pfx)
	ours := concurrency.NewMutex(newSession(t, cli), pfx)

	if err := theirs.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ours.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Errorf("our TryLock while etcd's Mutex holds: %v, want ErrLocked", err)
	}
	if err := theirs.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ours.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := theirs.TryLock(ctx); !errors.Is(err, etcdconc.ErrLocked) {
		t.Errorf("etcd's TryLock while ours holds: %v, want its ErrLocked", err)
	}
	if err := ours.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A second candidate leads only once the first resigns; Leader follows;
// after both resign there is no leader.
func TestElectionCampaignResign(t *testing.T) {
	pfx := prefix(t) + "elect"
	ctx := testCtx(t)
	a := concurrency.NewElection(newSession(t, newClient(t)), pfx)
	b := concurrency.NewElection(newSession(t, newClient(t)), pfx)
	if err := a.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	bLeads := make(chan error, 1)
	go func() { bLeads <- b.Campaign(ctx, "b") }()
	leader(t, ctx, b, "a")
	// b's key is written before it waits; once it is there, b must still
	// be waiting.
	waitKeys(t, ctx, pfx, 2)
	select {
	case err := <-bLeads:
		t.Fatalf("b's Campaign returned (%v) while a leads", err)
	default:
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-bLeads:
		if err != nil {
			t.Fatalf("b's Campaign: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("b never led after a resigned")
	}
	leader(t, ctx, a, "b")
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Leader(ctx); !errors.Is(err, concurrency.ErrElectionNoLeader) {
		t.Errorf("Leader after both resigned: %v, want ErrElectionNoLeader", err)
	}
}

// leader checks that e sees want as the leader's value.
func leader(t *testing.T, ctx context.Context, e *concurrency.Election, want string) {
	t.Helper()
	resp, err := e.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	if got := string(resp.Kvs[0].Value); got != want {
		t.Fatalf("leader %q, want %q", got, want)
	}
}

// waitKeys polls etcd until n keys are under pfx, for at most 10 s.
func waitKeys(t *testing.T, ctx context.Context, pfx string, n int64) {
	t.Helper()
	cli := newClient(t)
	for range 100 {
		resp, err := cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("never %d keys under %s", n, pfx)
}

// Two permits: two holders at once, a third waits until one releases.
func TestSemaphore(t *testing.T) {
	pfx := prefix(t) + "sem"
	ctx := testCtx(t)
	const limit = 2
	sems := make([]*concurrency.Semaphore, 3)
	for i := range sems {
		sems[i] = concurrency.NewSemaphore(newSession(t, newClient(t)), pfx, limit)
	}
	for _, s := range sems[:limit] {
		if err := s.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := sems[2].TryAcquire(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryAcquire with no permit left: %v, want ErrLocked", err)
	}
	third := make(chan error, 1)
	go func() { third <- sems[2].Acquire(ctx) }()
	waitKeys(t, ctx, pfx, limit+1)
	select {
	case err := <-third:
		t.Fatalf("third Acquire returned (%v) with no permit left", err)
	default:
	}
	if err := sems[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-third:
		if err != nil {
			t.Fatalf("third Acquire: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("third never acquired after a release")
	}
	for _, s := range sems[1:] {
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// The STM options reach etcd's STM on every etcd line: the isolation and
// prefetch options run a transaction, and an ended abort context ends it.
func TestSTMOptions(t *testing.T) {
	pfx := prefix(t)
	ctx := testCtx(t)
	cli := newClient(t)
	if _, err := cli.Put(ctx, pfx+"n", "1"); err != nil {
		t.Fatal(err)
	}
	for _, iso := range []concurrency.Isolation{concurrency.SerializableSnapshot, concurrency.Serializable, concurrency.RepeatableReads, concurrency.ReadCommitted} {
		_, err := concurrency.NewSTM(cli, func(s concurrency.STM) error {
			s.Put(pfx+"n", s.Get(pfx+"n")+"1")
			return nil
		}, concurrency.WithIsolation(iso), concurrency.WithPrefetch(pfx+"n"), concurrency.WithAbortContext(ctx))
		if err != nil {
			t.Fatalf("isolation %v: %v", iso, err)
		}
	}
	resp, err := cli.Get(ctx, pfx+"n")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.Kvs[0].Value); got != "11111" {
		t.Errorf("value %q after four transactions, want 11111", got)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	_, err = concurrency.NewSTM(cli, func(s concurrency.STM) error {
		s.Get(pfx + "n")
		return nil
	}, concurrency.WithAbortContext(ended))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("NewSTM with an ended abort context: %v, want context.Canceled", err)
	}
	if _, err := cli.Delete(ctx, pfx, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
}

// A session whose lease is revoked ends, and a Lock on it fails with
// ErrSessionExpired.
func TestSessionLeaseRevoked(t *testing.T) {
	pfx := prefix(t) + "lock"
	ctx := testCtx(t)
	cli := newClient(t)
	// The session learns of the revocation at its next keepalive, a third
	// of the TTL later.
	s := newSession(t, cli, concurrency.WithTTL(3))
	if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("session did not end after its lease was revoked")
	}
	if err := concurrency.NewMutex(s, pfx).Lock(ctx); !errors.Is(err, concurrency.ErrSessionExpired) {
		t.Errorf("Lock on an ended session: %v, want ErrSessionExpired", err)
	}
}
