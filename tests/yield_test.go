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

// These tests cover yield requests: RequestYield asks the holders of a
// name to let go, and a hold whose session opted in (WithYield) does.

// yieldRequested reports whether Inspect shows a yield request on key.
func yieldRequested(t *testing.T, c *clientv3.Client, name, key string) bool {
	t.Helper()
	q, err := concurrency.Inspect(t.Context(), c, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range q.Keys {
		if k.Key == key {
			return k.YieldRequested
		}
	}
	t.Fatalf("Inspect shows no key %q", key)
	return false
}

// An opted-in holder asked to yield ends its hold with ErrYieldRequested;
// Do releases it, and a waiter of etcd's package is granted. A request
// stays on the holder's lease but does not ask the session's next hold of
// the same key.
func TestYieldMutex(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c, concurrency.WithYield())
	m := concurrency.NewMutex(s, pfx)
	inFn := make(chan context.Context, 1)
	doErr := async(t, func() error {
		return m.Do(t.Context(), func(ctx context.Context) error {
			inFn <- ctx
			<-ctx.Done()
			return nil
		})
	})
	hctx := <-inFn
	key, tok := m.Key(), m.Token()

	es := newEtcdSession(t, sharedClient(t))
	em := etcdconc.NewMutex(es, pfx)
	errc := async(t, func() error { return em.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	if yieldRequested(t, c, pfx, key) {
		t.Fatal("Inspect shows a yield request before any")
	}

	asked, err := concurrency.RequestYield(t.Context(), c, pfx)
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0].Key != key || asked[0].CreateRevision != tok {
		t.Fatalf("RequestYield asked %v, want the holder %s (token %d)", asked, key, tok)
	}
	requested := time.Now()
	select {
	case <-hctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the opted-in hold still runs 5 s after RequestYield")
	}
	t.Logf("the hold ended %v after RequestYield returned", time.Since(requested))
	if cause := context.Cause(hctx); !errors.Is(cause, concurrency.ErrYieldRequested) {
		t.Fatalf("cause = %v, want ErrYieldRequested", cause)
	}
	if err := within(t, 5*time.Second, doErr, "Do"); !errors.Is(err, concurrency.ErrYieldRequested) {
		t.Fatalf("Do = %v, want an error matching ErrYieldRequested", err)
	}
	if err := within(t, 10*time.Second, errc, "etcd's waiter"); err != nil {
		t.Fatal(err)
	}

	// The same session locks the same key again, behind etcd's holder:
	// the request of the first hold does not ask this one.
	relock := async(t, func() error { return m.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	if err := em.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, relock, "second Lock"); err != nil {
		t.Fatal(err)
	}
	if m.Key() != key || m.Token() <= tok {
		t.Fatalf("second hold %s token %d, want %s with a token above %d", m.Key(), m.Token(), key, tok)
	}
	if resp, err := c.Get(t.Context(), concurrency.YieldPrefix+key); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the first request's key: %v %v, want it deleted by Do's release", resp, err)
	}
	h2 := m.Ctx()
	if yieldRequested(t, c, pfx, key) {
		t.Fatal("Inspect shows the first hold's request on the second hold")
	}
	// The second hold is asked in its turn, and yields.
	if _, err := concurrency.RequestYield(t.Context(), c, pfx); err != nil {
		t.Fatal(err)
	}
	if !yieldRequested(t, c, pfx, key) {
		t.Fatal("Inspect does not show the request")
	}
	select {
	case <-h2.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the second hold still runs 5 s after it was asked")
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A holder whose session did not opt in keeps its lock and its Ctx when
// asked; a Semaphore's request asks every holder, and only the opted-in
// one yields.
func TestYieldOnlyOptedIn(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	plain := concurrency.NewSemaphore(newSession(t, c), pfx, 2)
	opted := concurrency.NewSemaphore(newSession(t, c, concurrency.WithYield()), pfx, 2)
	for _, m := range []*concurrency.Semaphore{plain, opted} {
		if err := m.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	pctx, octx := plain.Ctx(), opted.Ctx()
	asked, err := concurrency.RequestYield(t.Context(), c, pfx)
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 2 {
		t.Fatalf("RequestYield asked %v, want both holders", asked)
	}
	select {
	case <-octx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the opted-in holder still holds 5 s after RequestYield")
	}
	if !errors.Is(context.Cause(octx), concurrency.ErrYieldRequested) {
		t.Fatalf("opted-in cause = %v", context.Cause(octx))
	}
	// The plain holder was asked as well (Inspect shows it), and holds on.
	if !yieldRequested(t, c, pfx, plain.Key()) {
		t.Fatal("Inspect shows no request on the plain holder")
	}
	if pctx.Err() != nil {
		t.Fatalf("the holder that did not opt in lost its hold: %v", context.Cause(pctx))
	}
	if _, err := plain.Txn(t.Context()).Then(clientv3.OpPut(pfx+"-data", "x")).Commit(); err != nil {
		t.Fatalf("the plain holder's guarded write after the request: %v", err)
	}
	for _, m := range []*concurrency.Semaphore{plain, opted} {
		if err := m.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// Lead WithLeadYield: asked to yield, the leader's fn ends with
// ErrYieldRequested, the follower is elected, and the first Lead
// campaigns again behind it.
func TestYieldLead(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	started := make(chan *term, 4)
	cancelA, errA := goLead(t, c, pfx, "a", blockUntilDone("a", started), concurrency.WithLeadTTL(10), concurrency.WithLeadYield())
	a := nextTerm(t, started, 10*time.Second, "first Lead")
	cancelB, errB := goLead(t, c, pfx, "b", blockUntilDone("b", started), concurrency.WithLeadTTL(10), concurrency.WithLeadYield())
	etcdtest.WaitKeys(t, c, pfx, 2)

	if _, err := concurrency.RequestYield(t.Context(), c, pfx); err != nil {
		t.Fatal(err)
	}
	b := nextTerm(t, started, 10*time.Second, "second Lead after the yield")
	if b.val != "b" || b.rev <= a.rev {
		t.Fatalf("after the yield %q leads with token %d, want b above %d", b.val, b.rev, a.rev)
	}
	if cause := context.Cause(a.ctx); !errors.Is(cause, concurrency.ErrYieldRequested) {
		t.Fatalf("first term's cause = %v, want ErrYieldRequested", cause)
	}
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		kvs := etcdtest.Keys(t, c, pfx)
		return len(kvs) == 2 && string(kvs[1].Value) == "a"
	}, "first Lead campaigning again behind b")

	cancelB()
	if err := within(t, 5*time.Second, errB, "second Lead"); !errors.Is(err, context.Canceled) {
		t.Fatalf("second Lead = %v, want Canceled", err)
	}
	a2 := nextTerm(t, started, 10*time.Second, "first Lead's second term")
	if a2.val != "a" || a2.rev <= b.rev {
		t.Fatalf("second term %q token %d, want a above %d", a2.val, a2.rev, b.rev)
	}
	cancelA()
	if err := within(t, 5*time.Second, errA, "first Lead"); !errors.Is(err, context.Canceled) {
		t.Fatalf("first Lead = %v, want Canceled", err)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// The fault: the holder's watches are on a connection that goes silent
// before the request. The hold's yield watch gives the silent stream up
// and reads again elsewhere, and the hold ends within the bound.
func TestYieldHalfOpen(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	w, silence := halfOpenClient(t)
	ws := newSession(t, w, concurrency.WithTTL(halfOpenTTL), concurrency.WithYield())
	m := concurrency.NewMutex(ws, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hctx := m.Ctx()
	silence()
	if _, err := concurrency.RequestYield(t.Context(), c, pfx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hctx.Done():
		if cause := context.Cause(hctx); !errors.Is(cause, concurrency.ErrYieldRequested) {
			t.Fatalf("hold ended with %v, want ErrYieldRequested", cause)
		}
	case <-time.After(halfOpenBound):
		t.Fatalf("the hold is still alive %v after the request: its yield watch trusts a silent stream", halfOpenBound)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// RequestYield on a name nobody holds, and bad input.
func TestYieldNotHeld(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	if _, err := concurrency.RequestYield(t.Context(), c, pfx); !errors.Is(err, concurrency.ErrNotHeld) {
		t.Fatalf("RequestYield on a free name = %v, want ErrNotHeld", err)
	}
	if _, err := concurrency.RequestYield(t.Context(), nil, pfx); !errors.Is(err, concurrency.ErrNilClient) {
		t.Fatalf("nil client: %v", err)
	}
	if _, err := concurrency.RequestYield(t.Context(), c, ""); !errors.Is(err, concurrency.ErrInvalidPrefix) {
		t.Fatalf("empty name: %v", err)
	}
	if resp, err := c.Get(t.Context(), concurrency.YieldPrefix+pfx, clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("refused requests wrote %v %v", resp, err)
	}
}
