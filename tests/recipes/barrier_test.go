package recipes_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/slowwrite"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// TestBarrierWaitContext: Wait blocks while the barrier is held, returns
// the context's error when it ends, and returns once it is released.
func TestBarrierWaitContext(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	b := recipes.NewBarrier(c, pfx)
	if err := b.HoldContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.HoldContext(t.Context()); !errors.Is(err, recipes.ErrKeyExists) {
		t.Fatalf("second Hold = %v, want ErrKeyExists", err)
	}
	if err := recipes.NewBarrier(c, pfx).WaitContext(bounded(t, 200*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a held barrier = %v, want DeadlineExceeded", err)
	}
	errc := async(t, func() error { return recipes.NewBarrier(sharedClient(t), pfx).WaitContext(bounded(t, 10*time.Second)) })
	notYet(t, errc, "Wait")
	if err := b.ReleaseContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 5*time.Second, errc, "Wait"); err != nil {
		t.Fatal(err)
	}
}

// TestBarrierWaitMemberRestart: the member a waiter is connected to stops
// and restarts while the barrier is held; the wait goes on, and returns
// when the barrier is released through another member.
func TestBarrierWaitMemberRestart(t *testing.T) {
	clus := etcdtest.NewCluster(t, &integration.ClusterConfig{Size: 3})
	pfx := etcdtest.Begin(t)
	wc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	hc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
	b := recipes.NewBarrier(hc, pfx)
	if err := b.Hold(); err != nil {
		t.Fatal(err)
	}
	errc := async(t, func() error { return recipes.NewBarrier(wc, pfx).WaitContext(bounded(t, 30*time.Second)) })
	notYet(t, errc, "Wait")
	clus.Members[0].Stop(t)
	notYet(t, errc, "Wait with its member stopped")
	if err := clus.Members[0].Restart(t); err != nil {
		t.Fatal(err)
	}
	clus.WaitLeader(t)
	notYet(t, errc, "Wait after its member restarted")
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 15*time.Second, errc, "Wait"); err != nil {
		t.Fatalf("Wait after the restart: %v", err)
	}
}

// TestBlockingCallsServerUnreachable: with the server unreachable,
// every blocking call returns the context's error soon after the context
// ends; etcd's would block for ever. Two faults: the client's member
// blackholed (it accepts bytes and answers none, as a process stopped
// with SIGSTOP does), and every member's raft paused (the members answer
// watches but commit nothing and serve no linearizable read). Once the
// server answers again, nothing was lost.
func TestBlockingCallsServerUnreachable(t *testing.T) {
	for _, fault := range []string{"blackholed", "raft paused"} {
		t.Run(fault, func(t *testing.T) { testUnreachable(t, fault) })
	}
}

func testUnreachable(t *testing.T, fault string) {
	clus := bridgeCluster(t)
	pfx := etcdtest.Begin(t)
	oc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
	pc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	b := recipes.NewBarrier(oc, pfx+"/barrier")
	if err := b.Hold(); err != nil {
		t.Fatal(err)
	}
	if err := recipes.NewQueue(oc, pfx+"/q").Enqueue("kept"); err != nil {
		t.Fatal(err)
	}
	ds := newSession(t, oc)
	calls := []struct {
		name string
		call func(context.Context) error
	}{
		{"Barrier.WaitContext", recipes.NewBarrier(pc, pfx+"/barrier").WaitContext},
		{"Queue.DequeueContext", func(ctx context.Context) error {
			_, err := recipes.NewQueue(pc, pfx+"/q").DequeueContext(ctx)
			return err
		}},
		{"Queue.DequeueContext empty", func(ctx context.Context) error {
			_, err := recipes.NewQueue(pc, pfx+"/empty").DequeueContext(ctx)
			return err
		}},
		{"PriorityQueue.DequeueContext", func(ctx context.Context) error {
			_, err := recipes.NewPriorityQueue(pc, pfx+"/pq").DequeueContext(ctx)
			return err
		}},
		{"WaitEventsContext", func(ctx context.Context) error {
			_, err := recipes.WaitEventsContext(ctx, pc, pfx+"/none", 1, []mvccpb.Event_EventType{mvccpb.DELETE})
			return err
		}},
		{"DoubleBarrier.EnterContext", recipes.NewDoubleBarrier(ds, pfx+"/db", 2).EnterContext},
	}
	// The double barrier's entrant is on the reachable member: it waits
	// for a second entrant that never comes, and leaves no key.
	if fault == "blackholed" {
		etcdtest.Cut(t, clus.Members[0])
	} else {
		for _, m := range clus.Members {
			m.Pause()
		}
	}
	for _, c := range calls {
		start := time.Now()
		err := c.call(bounded(t, 500*time.Millisecond))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s with the server unreachable = %v, want DeadlineExceeded", c.name, err)
		}
		if d := time.Since(start); d > 7*time.Second {
			t.Errorf("%s returned %v after it began, with a 500 ms deadline", c.name, d)
		}
	}
	if fault == "blackholed" {
		clus.Members[0].Bridge().Unblackhole()
		clus.Members[0].Bridge().DropConnections() // a blackhole loses bytes mid-stream
	} else {
		for _, m := range clus.Members {
			m.Resume()
		}
	}
	if v, err := recipes.NewQueue(pc, pfx+"/q").DequeueContext(bounded(t, 10*time.Second)); err != nil || v != "kept" {
		t.Fatalf("Dequeue after the server came back = %q, %v, want kept", v, err)
	}
	// With raft paused, the entrant's key was proposed but not committed
	// when its delete gave up (bounded): it may commit later, and then its
	// session's lease removes it. Blackholed, the entrant's member answered.
	if fault == "blackholed" {
		if kvs := etcdtest.Keys(t, oc, pfx+"/db"); len(kvs) != 0 {
			t.Fatalf("a cancelled Enter left %d keys", len(kvs))
		}
	}
}

// TestDoubleBarrierContext: an Enter whose context ends leaves no key, and
// the count is then reached by others; Leave returns once all have left.
func TestDoubleBarrierContext(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	if err := recipes.NewDoubleBarrier(newSession(t, c), pfx, 2).EnterContext(bounded(t, 200*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Enter alone = %v, want DeadlineExceeded", err)
	}
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
		t.Fatalf("a cancelled Enter left %d keys", len(kvs))
	}
	a := recipes.NewDoubleBarrier(newSession(t, c), pfx, 2)
	b := recipes.NewDoubleBarrier(newSession(t, sharedClient(t)), pfx, 2)
	errc := async(t, func() error { return a.EnterContext(bounded(t, 10*time.Second)) })
	notYet(t, errc, "first Enter")
	if err := b.EnterContext(bounded(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 5*time.Second, errc, "first Enter"); err != nil {
		t.Fatal(err)
	}
	if err := recipes.NewDoubleBarrier(newSession(t, c), pfx, 2).EnterContext(t.Context()); !errors.Is(err, recipes.ErrTooManyClients) {
		t.Fatalf("third Enter = %v, want ErrTooManyClients", err)
	}
	errc = async(t, func() error { return a.LeaveContext(bounded(t, 10*time.Second)) })
	notYet(t, errc, "first Leave")
	if err := b.LeaveContext(bounded(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 5*time.Second, errc, "first Leave"); err != nil {
		t.Fatal(err)
	}
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
		t.Fatalf("%d keys left after everyone left", len(kvs))
	}
}

// TestRWMutexContext: the recipe RWMutex is concurrency.RWMutex: a reader
// waiting for a writer gives up with its context and leaves no key.
func TestRWMutexContext(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	w := recipes.NewRWMutex(newSession(t, c), pfx)
	if err := w.LockContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := recipes.NewRWMutex(newSession(t, c), pfx)
	if err := r.RLockContext(bounded(t, 200*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RLock under a writer = %v, want DeadlineExceeded", err)
	}
	etcdtest.WaitKeys(t, c, pfx, 1)
	errc := async(t, func() error { return r.RLockContext(bounded(t, 10*time.Second)) })
	notYet(t, errc, "RLock")
	if err := w.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 5*time.Second, errc, "RLock"); err != nil {
		t.Fatal(err)
	}
	if r.RWMutex().Token() == 0 {
		t.Fatal("a held read side has no fencing token")
	}
	if err := r.RUnlockContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// TestBarrierWaitClientClosed: a Wait without a context returns an error
// when its client is closed, rather than retrying for ever.
func TestBarrierWaitClientClosed(t *testing.T) {
	pfx := etcdtest.Begin(t)
	b := recipes.NewBarrier(sharedClient(t), pfx)
	if err := b.Hold(); err != nil {
		t.Fatal(err)
	}
	wc := sharedClient(t)
	errc := async(t, func() error { return recipes.NewBarrier(wc, pfx).Wait() })
	notYet(t, errc, "Wait")
	wc.Close()
	if err := within(t, 5*time.Second, errc, "Wait on a closed client"); err == nil {
		t.Fatal("Wait on a closed client returned nil while the barrier is held")
	}
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestBarrierReleasedWhileCutOff (issue 27, finding 4): a waiter watches
// the barrier's key through m0; m0 is cut off; the barrier is released,
// held again (a new key) and the history compacted; m0 comes back, and
// the waiter's watch resumes into the compacted revision. The wait reads
// the key again and tells the new hold from the one it waited on by its
// create revision: it returns. It used to find a key and wait for the
// next release. A CountDownLatch's Wait is the same wait.
func TestBarrierReleasedWhileCutOff(t *testing.T) {
	clus := bridgeCluster(t)
	for _, kind := range []string{"Barrier", "CountDownLatch"} {
		t.Run(kind, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			wc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
			hc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
			hold, release := recipes.NewBarrier(hc, pfx+"/b").HoldContext, recipes.NewBarrier(hc, pfx+"/b").ReleaseContext
			wait := recipes.NewBarrier(wc, pfx+"/b").WaitContext
			if kind == "CountDownLatch" {
				l := recipes.NewCountDownLatch(hc, pfx+"/b")
				hold = func(ctx context.Context) error { return l.Start(ctx, 1) }
				release = l.CountDown
				wait = recipes.NewCountDownLatch(wc, pfx+"/b").Wait
			}
			if err := hold(t.Context()); err != nil {
				t.Fatal(err)
			}
			errc := async(t, func() error { return wait(bounded(t, 30*time.Second)) })
			notYet(t, errc, "Wait")
			etcdtest.Cut(t, clus.Members[0])
			if err := release(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := hold(t.Context()); err != nil {
				t.Fatal(err)
			}
			compactNow(t, hc, pfx, 5)
			clus.Members[0].Bridge().Unblackhole()
			clus.Members[0].Bridge().DropConnections() // a blackhole loses bytes mid-stream
			if err := within(t, 15*time.Second, errc, "Wait"); err != nil {
				t.Fatalf("Wait after a release it did not see = %v", err)
			}
		})
	}
}

// TestDoubleBarrierReadyWhileCutOff (issue 27, finding 4): A waits for
// the ready key through m0; m0 is cut off; B completes the count, writing
// the ready key on its lease, and dies (its lease revoked: the ready key
// goes too); the history is compacted; m0 comes back, and A's watch
// resumes into the compacted revision. A finds its release on its own key,
// which B touched with the ready key, and enters. It used to wait for a
// ready key that had come and gone.
func TestDoubleBarrierReadyWhileCutOff(t *testing.T) {
	clus := bridgeCluster(t)
	pfx := etcdtest.Begin(t)
	wc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	hc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
	// A's lease outlives the cut by far.
	as, err := concurrency.NewSession(wc, concurrency.WithTTL(60))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { as.Close() })
	a := recipes.NewDoubleBarrier(as, pfx, 2)
	errc := async(t, func() error { return a.EnterContext(bounded(t, 30*time.Second)) })
	etcdtest.WaitKeys(t, hc, pfx+"/waiters", 1)
	notYet(t, errc, "A's Enter")
	etcdtest.Cut(t, clus.Members[0])
	bs, err := concurrency.NewSession(hc, concurrency.WithTTL(60))
	if err != nil {
		t.Fatal(err)
	}
	if err := recipes.NewDoubleBarrier(bs, pfx, 2).EnterContext(bounded(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := bs.Close(); err != nil { // B dies: its key and the ready key go with its lease
		t.Fatal(err)
	}
	etcdtest.WaitKeys(t, hc, pfx, 1) // A's key alone
	compactNow(t, hc, pfx+"-c", 5)
	clus.Members[0].Bridge().Unblackhole()
	clus.Members[0].Bridge().DropConnections() // a blackhole loses bytes mid-stream
	if err := within(t, 15*time.Second, errc, "A's Enter"); err != nil {
		t.Fatalf("A's Enter after a release it did not see = %v", err)
	}
	if err := a.LeaveContext(bounded(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	etcdtest.WaitKeys(t, hc, pfx, 0)
}

// lateKV holds back, once armed, the transaction that writes a key under
// its prefix: Commit tells inflight, waits for release, and then, if the
// context the caller gave it has ended, answers with that context's error
// and keeps the transaction for the test to apply later (a write that
// etcd applies after its caller gave up); if not, it commits it.
type lateKV struct {
	clientv3.KV
	under    string
	armed    atomic.Bool
	inflight chan struct{}
	release  chan struct{}
	late     func() error // set by Commit before it returns
}

func (k *lateKV) Txn(ctx context.Context) clientv3.Txn {
	return &lateTxn{Txn: k.KV.Txn(ctx), held: k.KV.Txn(context.WithoutCancel(ctx)), ctx: ctx, kv: k}
}

type lateTxn struct {
	clientv3.Txn
	held   clientv3.Txn // the same transaction, for a late apply
	ctx    context.Context
	kv     *lateKV
	writes bool
}

func (t *lateTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.Txn, t.held = t.Txn.If(cs...), t.held.If(cs...)
	return t
}

func (t *lateTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.writes = t.writes || op.IsPut() && strings.HasPrefix(string(op.KeyBytes()), t.kv.under)
	}
	t.Txn, t.held = t.Txn.Then(ops...), t.held.Then(ops...)
	return t
}

func (t *lateTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn, t.held = t.Txn.Else(ops...), t.held.Else(ops...)
	return t
}

func (t *lateTxn) Commit() (*clientv3.TxnResponse, error) {
	if !t.writes || !t.kv.armed.CompareAndSwap(true, false) {
		return t.Txn.Commit()
	}
	close(t.kv.inflight)
	<-t.kv.release
	if err := t.ctx.Err(); err != nil {
		t.kv.late = func() error { _, err := t.held.Commit(); return err }
		return nil, err
	}
	return t.Txn.Commit()
}

// TestDoubleBarrierEnterCancelledMidPut (issue 27, finding 5): A's
// EnterContext's ctx ends while the put of its key is in flight, and etcd
// applies the put after A's call has given up on it. EnterContext waits
// for the answer and deletes the key by its revision, so no phantom
// entrant is left on A's live lease: B, entering a barrier of 2 alone, is
// not released. It used to return at once and delete the key by name
// before the put landed, leaving the key for the life of A's session.
func TestDoubleBarrierEnterCancelledMidPut(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	lk := &lateKV{KV: c.KV, under: pfx + "/waiters/", inflight: make(chan struct{}), release: make(chan struct{})}
	c.KV = lk
	a := recipes.NewDoubleBarrier(newSession(t, c), pfx, 2)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	lk.armed.Store(true)
	errc := async(t, func() error { return a.EnterContext(ctx) })
	select {
	case <-lk.inflight:
	case err := <-errc:
		t.Fatalf("A's Enter returned %v before it wrote its key", err)
	case <-time.After(10 * time.Second):
		t.Fatal("A's Enter did not write its key")
	}
	cancel()
	close(lk.release)
	if err := within(t, 10*time.Second, errc, "A's Enter"); !errors.Is(err, context.Canceled) {
		t.Fatalf("A's cancelled Enter = %v, want context.Canceled", err)
	}
	if lk.late != nil {
		if err := lk.late(); err != nil { // the put lands after Enter returned
			t.Fatal(err)
		}
	}
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
		t.Errorf("A's cancelled Enter left %d keys: %s", len(kvs), kvs[0].Key)
	}
	b := recipes.NewDoubleBarrier(newSession(t, sharedClient(t)), pfx, 2)
	if err := b.EnterContext(bounded(t, 500*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("B's Enter alone in a barrier of 2 = %v, want DeadlineExceeded", err)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// TestDoubleBarrierEnterPutAppliedLate (issue 38, finding 5): A's
// EnterContext gives up on its put, which etcd applies only after the 3 s
// that EnterContext waits for an answer (a cluster whose commits take 5 s,
// slowwrite.Writes). The key then appears on A's live lease after
// Enter returned: it must be swept as the core sweeps a late enqueue, for
// as long as A's session lives, so that B, entering a barrier of 2 alone,
// is not released by a phantom entrant.
func TestDoubleBarrierEnterPutAppliedLate(t *testing.T) {
	pfx := etcdtest.Begin(t)
	sw := slowwrite.New()
	c := etcdtest.NewClient(t, etcdtest.Endpoints(), sw.Option)
	t.Cleanup(sw.Wait)
	a := recipes.NewDoubleBarrier(newSession(t, c), pfx, 2)
	// The put (a transaction) is held back 5 s; the delete by name that
	// Enter sends when it gives up is not, so it lands before the put.
	sw.SetFunc(func(method string, n int) time.Duration {
		if method == "/etcdserverpb.KV/Txn" {
			return 5 * time.Second
		}
		return 0
	})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := a.EnterContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("A's Enter with its put held back = %v, want DeadlineExceeded", err)
	}
	sw.Wait() // the put has been applied now, after Enter returned
	sw.SetFunc(nil)
	etcdtest.WaitKeys(t, sharedClient(t), pfx+"/waiters", 0)
	b := recipes.NewDoubleBarrier(newSession(t, sharedClient(t)), pfx, 2)
	if err := b.EnterContext(bounded(t, 500*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("B's Enter alone in a barrier of 2 = %v, want DeadlineExceeded", err)
	}
	etcdtest.WaitKeys(t, sharedClient(t), pfx, 0)
}
