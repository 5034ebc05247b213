package concurrency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/etcdproc"
	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
)

// Issue 27: a connection that goes silent without a reset. The client
// has clientv3's default configuration (no gRPC keepalive) and two
// endpoints, m0 and m1, each behind a proxy. Its watches are opened while
// m0 is its only endpoint, so they sit on m0's connection (created, or
// with their creation still in flight: either way they must not wait on
// m0); then m1 is added and m0's proxy blackholed: bytes are accepted and
// nothing comes back, and no connection is reset. Unary requests are balanced round
// robin, so the session's renewals, each bounded, keep succeeding through
// m1, and the session lives. Nothing may wait on m0 for ever.

// halfOpenBound is how long a wait or hold on a session of TTL
// halfOpenTTL may take to notice: its stream's liveness check (a third
// and a sixth of the TTL, at least 1 s each), a read or two sent to m0
// first and timed out (1 s each), and the rest for a loaded machine.
const (
	halfOpenTTL   = 3
	halfOpenBound = 20 * time.Second
)

// halfOpenClient returns a client of the shared cluster's first member,
// through a proxy, and what makes its connection silent: silence adds the
// second member's proxy to the client's endpoints and blackholes the
// first's.
func halfOpenClient(t *testing.T) (c *clientv3.Client, silence func()) {
	t.Helper()
	eps := etcdtest.Endpoints()
	var px [2]*etcdproc.Proxy
	for i := range px {
		p, err := etcdproc.NewProxy(eps[i])
		if err != nil {
			t.Fatalf("proxy: %v", err)
		}
		t.Cleanup(p.Close)
		px[i] = p
	}
	// clientv3's defaults: no DialKeepAliveTime, no per-request timeout.
	c = etcdtest.NewClient(t, []string{px[0].URL()})
	return c, func() {
		c.SetEndpoints(px[0].URL(), px[1].URL())
		// Let the balancer connect to m1 before m0 goes silent: a read
		// answered by m1 shows it.
		etcdtest.Eventually(t, 10*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			resp, err := c.Get(ctx, "halfopen-probe", clientv3.WithSerializable())
			return err == nil && resp.Header.MemberId == memberID(t, eps[1])
		}, "the client never reached the second member")
		px[0].Blackhole()
	}
}

// memberID is the ID of the member of the shared cluster at endpoint ep.
func memberID(t *testing.T, ep string) uint64 {
	t.Helper()
	c := sharedClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	st, err := c.Status(ctx, ep)
	if err != nil {
		t.Fatalf("status of %s: %v", ep, err)
	}
	return st.Header.MemberId
}

// A waiter whose watch is on the silent connection is granted the lock
// once its holder unlocks: its stream's liveness check opens the watch
// again elsewhere, and the read that follows finds the lock free.
func TestHalfOpenWaiterIsGranted(t *testing.T) {
	pfx := etcdtest.Begin(t)
	h := sharedClient(t)
	hs := newSession(t, h)
	hm := concurrency.NewMutex(hs, pfx)
	if err := hm.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}

	w, silence := halfOpenClient(t)
	ws := newSession(t, w, concurrency.WithTTL(halfOpenTTL))
	wm := concurrency.NewMutex(ws, pfx)
	errc := async(t, func() error { return wm.Lock(t.Context()) })
	etcdtest.WaitKeys(t, h, pfx, 2) // the waiter is queued, and watches
	silence()

	if err := hm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("waiter's Lock: %v", err)
		}
	case <-time.After(halfOpenBound):
		t.Fatalf("the waiter still waits %v after the unlock, its key the only one left: its watch trusts a silent stream", halfOpenBound)
	}
	if kvs := etcdtest.Keys(t, h, pfx); len(kvs) != 1 || string(kvs[0].Key) != wm.Key() {
		t.Fatalf("after the grant the keys are %v, want only the waiter's %q", kvs, wm.Key())
	}
	if err := wm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A hold whose key is deleted from outside while its watch is on the
// silent connection ends with ErrLockLost, although its session's
// renewals go on succeeding.
func TestHalfOpenHoldEnds(t *testing.T) {
	pfx := etcdtest.Begin(t)
	h := sharedClient(t)
	w, silence := halfOpenClient(t)
	ws := newSession(t, w, concurrency.WithTTL(halfOpenTTL))
	wm := concurrency.NewMutex(ws, pfx)
	if err := wm.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Ctx starts the hold's watch, on m0. Whether etcd has created it
	// when m0 goes silent or its creation is lost in the silence, the
	// hold must not wait on m0.
	hctx := wm.Ctx()
	silence()

	if _, err := h.Delete(t.Context(), wm.Key()); err != nil { // etcdlock force-unlock
		t.Fatal(err)
	}
	select {
	case <-hctx.Done():
		if cause := context.Cause(hctx); !errors.Is(cause, concurrency.ErrLockLost) {
			t.Fatalf("hold ended with %v, want ErrLockLost", cause)
		}
	case <-time.After(halfOpenBound):
		t.Fatalf("the hold's context is still alive %v after its key was deleted", halfOpenBound)
	}
	if ws.Ctx().Err() != nil {
		t.Logf("the session ended too: %v", context.Cause(ws.Ctx()))
	}
}

// Two leaders at once: Lead A's key is deleted from outside while the
// watch of its term is on the silent connection, and B is elected. A's fn
// context ends within the bound, so A stops acting as leader.
func TestHalfOpenLeaderStepsDown(t *testing.T) {
	pfx := etcdtest.Begin(t)
	h := sharedClient(t)
	w, silence := halfOpenClient(t)

	startedA := make(chan *term, 4)
	goLead(t, w, pfx, "a", blockUntilDone("a", startedA), concurrency.WithLeadTTL(halfOpenTTL))
	a := nextTerm(t, startedA, 10*time.Second, "A's first term")
	silence()

	if _, err := h.Delete(t.Context(), a.key); err != nil {
		t.Fatal(err)
	}
	startedB := make(chan *term, 4)
	goLead(t, h, pfx, "b", blockUntilDone("b", startedB))
	nextTerm(t, startedB, 10*time.Second, "B's term")
	select {
	case <-a.done:
		if cause := context.Cause(a.ctx); !errors.Is(cause, concurrency.ErrLockLost) {
			t.Fatalf("A's term ended with %v, want ErrLockLost", cause)
		}
	case <-time.After(halfOpenBound):
		t.Fatalf("A still leads %v after its key was deleted and B was elected", halfOpenBound)
	}
}

// NewSession on a client whose only member went silent returns an error
// within its bound instead of waiting for ever (etcd #19778).
func TestHalfOpenNewSessionReturns(t *testing.T) {
	etcdtest.Begin(t)
	eps := etcdtest.Endpoints()
	p, err := etcdproc.NewProxy(eps[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c := etcdtest.NewClient(t, []string{p.URL()})
	if _, err := c.Get(t.Context(), "halfopen-probe"); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()

	const ttl = 2
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(ttl))
		if err == nil {
			s.Close()
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("NewSession: %v, want an error matching context.DeadlineExceeded", err)
		}
		if took := time.Since(start); took < ttl*time.Second {
			t.Fatalf("NewSession gave up after %v, before its bound of %d s", took, ttl)
		}
	case <-time.After(halfOpenBound):
		c.Close() // ends the hung call
		<-errc
		t.Fatalf("NewSession still waits %v on a member that never answers", halfOpenBound)
	}
}
