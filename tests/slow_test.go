package concurrency_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/slowwrite"
)

// Issue 38: slow is not dead. A client whose writes take seconds to be
// answered, while its reads, watches and keepalives are answered at once
// (slowwrite.Writes: the model of a cluster whose commits wait for a
// slow disk), must complete every operation that etcd's own package
// completes, in about its time, without sending each write many times;
// and a write applied twice or late must undo nothing.

// slowClient returns a client of the shared cluster whose writes are
// slowed by the returned SlowWrites (nothing yet), which the test's
// cleanup waits for.
func slowClient(t *testing.T) (*clientv3.Client, *slowwrite.Writes) {
	t.Helper()
	sw := slowwrite.New()
	c := sharedClient(t, sw.Option)
	t.Cleanup(sw.Wait) // before the client's own cleanup (cleanups run last first)
	return c, sw
}

const (
	grantMethod = "/etcdserverpb.Lease/LeaseGrant"
	txnMethod   = "/etcdserverpb.KV/Txn"
)

// NewSession with writes taking 2 s: etcd's package returns a session
// after about 2 s; so must this one, having granted one lease (the second
// attempt, if any, asks for the same ID and grants nothing).
func TestSlowNewSession(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c, sw := slowClient(t)
	sw.Set(2 * time.Second)

	start := time.Now()
	es, err := etcdconc.NewSession(c, etcdconc.WithTTL(10))
	if err != nil {
		t.Fatalf("etcd's NewSession: %v", err)
	}
	etcdTook := time.Since(start)
	etcdGrants := sw.Count(grantMethod)

	start = time.Now()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(10), concurrency.WithOwner(concurrency.Owner{Label: pfx}))
	if err != nil {
		t.Fatalf("NewSession with writes taking 2 s: %v (etcd's took %v)", err, etcdTook)
	}
	took := time.Since(start)
	grants := sw.Count(grantMethod) - etcdGrants
	sw.Set(0)
	es.Close()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	t.Logf("etcd's NewSession: %v, %d grant(s); ours: %v, %d grant attempt(s)", etcdTook, etcdGrants, took, grants)
	// Ours writes the owner record too: two writes of 2 s each.
	if limit := 2*etcdTook + 2*time.Second + time.Second; took > limit {
		t.Errorf("NewSession took %v, more than %v (etcd's: %v)", took, limit, etcdTook)
	}
	if grants > 2*etcdGrants+2 {
		t.Errorf("NewSession sent %d grants, more than 2×%d+2", grants, etcdGrants)
	}
}

// Lock on a free name with writes taking 2 s, on a session opened before:
// etcd's Mutex returns after about 2 s; ours must too, and send its
// enqueue at most twice (2× etcd's + 2 in all writes).
func TestSlowLock(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c, sw := slowClient(t)
	es := newEtcdSession(t, c)
	s := newSession(t, c, concurrency.WithTTL(10))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	sw.Set(2 * time.Second)

	em := etcdconc.NewMutex(es, pfx+"/etcd")
	start, before := time.Now(), sw.Total()
	if err := em.Lock(ctx); err != nil {
		t.Fatalf("etcd's Lock: %v", err)
	}
	etcdTook, etcdWrites := time.Since(start), sw.Total()-before

	m := concurrency.NewMutex(s, pfx+"/ours")
	start, before = time.Now(), sw.Total()
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("Lock with writes taking 2 s: %v (etcd's took %v)", err, etcdTook)
	}
	took, writes := time.Since(start), sw.Total()-before
	t.Logf("etcd's Lock: %v, %d write(s); ours: %v, %d write(s)", etcdTook, etcdWrites, took, writes)
	if limit := etcdTook + 2*time.Second; took > limit {
		t.Errorf("Lock took %v, more than etcd's %v plus one attempt's wait", took, etcdTook)
	}
	if writes > 2*etcdWrites+2 {
		t.Errorf("Lock sent %d writes, more than 2×%d+2", writes, etcdWrites)
	}

	start, before = time.Now(), sw.Total()
	if err := em.Unlock(ctx); err != nil {
		t.Fatalf("etcd's Unlock: %v", err)
	}
	etcdTook, etcdWrites = time.Since(start), sw.Total()-before
	start, before = time.Now(), sw.Total()
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with writes taking 2 s: %v", err)
	}
	took, writes = time.Since(start), sw.Total()-before
	t.Logf("etcd's Unlock: %v, %d write(s); ours: %v, %d write(s)", etcdTook, etcdWrites, took, writes)
	if writes > 2*etcdWrites+2 {
		t.Errorf("Unlock sent %d writes, more than 2×%d+2", writes, etcdWrites)
	}
	sw.Set(0)
	sw.Wait()
	if keys := etcdtest.Keys(t, sharedClient(t), pfx+"/ours"); len(keys) != 0 {
		t.Errorf("%d key(s) left after Unlock: %s", len(keys), keys[0].Key)
	}
}

// A resize whose first attempt is applied late, after a later resize by
// another client, must not set the name's keys back to its limit: the
// rewrite applies only to the keys as it read them.
func TestSlowSetLimitAppliedLate(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c, sw := slowClient(t)
	s := newSession(t, c, concurrency.WithTTL(10))
	var ms []*concurrency.Semaphore
	for range 3 {
		m := concurrency.NewSemaphore(s, pfx, 3)
		if err := m.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Release(context.WithoutCancel(t.Context())) })
		ms = append(ms, m)
	}
	m := ms[0]
	// The first write transaction from now on (SetLimit's rewrite) is
	// held back 4 s; its second attempt goes at once.
	var first bool
	sw.SetFunc(func(method string, n int) time.Duration {
		if method == txnMethod && !first {
			first = true
			return 4 * time.Second
		}
		return 0
	})
	if err := m.SetLimit(t.Context(), 5); err != nil {
		t.Fatalf("SetLimit(5): %v", err)
	}
	other := concurrency.NewSemaphore(newSession(t, sharedClient(t)), pfx, 5)
	if err := other.SetLimit(t.Context(), 2); err != nil {
		t.Fatalf("SetLimit(2): %v", err)
	}
	sw.Wait() // the held-back attempt has been applied, or refused
	for _, kv := range etcdtest.Keys(t, sharedClient(t), pfx) {
		if !strings.HasPrefix(string(kv.Value), "2") {
			t.Errorf("%s = %q after SetLimit(5) then SetLimit(2): a late attempt set the limit back", kv.Key, kv.Value)
		}
	}
	// With the keys set back to 5, a Semaphore of limit 5 would be granted
	// a fourth permit, over the limit of 2 in force.
	if err := concurrency.NewSemaphore(newSession(t, sharedClient(t)), pfx, 5).TryAcquire(t.Context()); err == nil {
		t.Errorf("a fourth permit granted under a limit of 2")
	}
}

// A waiter with lock-delay that gives up during its grant, while the
// lease of the delay is being granted, must not swallow the delay: the
// next waiter, granted after it, waits out a delay too, since the hold
// before both ended by loss.
func TestSlowLockDelayGrantGivesUp(t *testing.T) {
	pfx := etcdtest.Begin(t)
	const delay = 4 * time.Second
	a := newSession(t, sharedClient(t), concurrency.WithLockDelay(delay))
	am := concurrency.NewMutex(a, pfx)
	if err := am.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	wc, sw := slowClient(t)
	ws := newSession(t, wc, concurrency.WithLockDelay(delay))
	wctx, wcancel := context.WithCancel(t.Context())
	defer wcancel()
	werr := make(chan error, 1)
	go func() { werr <- concurrency.NewMutex(ws, pfx).Lock(wctx) }()
	etcdtest.WaitKeys(t, sharedClient(t), pfx, 2)
	xs := newSession(t, sharedClient(t), concurrency.WithLockDelay(delay))
	xerr := make(chan error, 1)
	xm := concurrency.NewMutex(xs, pfx)
	go func() { xerr <- xm.Lock(t.Context()) }()
	etcdtest.WaitKeys(t, sharedClient(t), pfx, 3)

	// W's lease grants now hang until W has given up.
	grants := sw.Count(grantMethod)
	sw.SetFunc(func(method string, n int) time.Duration {
		if method == grantMethod {
			return 3 * time.Second
		}
		return 0
	})
	// A loses its hold: its lease is revoked from outside.
	lost := time.Now()
	if _, err := sharedClient(t).Revoke(t.Context(), a.Lease()); err != nil {
		t.Fatal(err)
	}
	etcdtest.Eventually(t, 10*time.Second, func() bool { return sw.Count(grantMethod) > grants },
		"W never asked for its delay's lease")
	wcancel()
	if err := <-werr; err == nil {
		t.Fatalf("W's Lock returned nil after its ctx ended during its grant")
	}
	select {
	case err := <-xerr:
		if err != nil {
			t.Fatalf("X's Lock: %v", err)
		}
	case <-time.After(3 * delay):
		t.Fatalf("X not granted within %v of A's loss", 3*delay)
	}
	defer xm.Unlock(context.WithoutCancel(t.Context()))
	if since := time.Since(lost); since < delay-200*time.Millisecond {
		t.Errorf("X granted %v after A's loss, within the lock-delay of %v", since, delay)
	}
}

// A client without a gRPC connection of its own (etcd's v3client, which
// serves an embedded server in process) has no ActiveConnection for a
// grant with an ID of the client's choosing: NewSession grants through
// its Lease, as etcd's package does, and the session works.
func TestInProcessClientSession(t *testing.T) {
	pfx := etcdtest.Begin(t)
	clus := etcdtest.NewCluster(t, &integration.ClusterConfig{Size: 1})
	c := v3client.New(clus.Members[0].Server)
	t.Cleanup(func() { c.Close() })
	s := newSession(t, c, concurrency.WithTTL(10), concurrency.WithMaxHold(5*time.Second))
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatalf("Lock on an in-process client: %v", err)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}
