package recipes_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
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
