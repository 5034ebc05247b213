package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdproc"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
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
// The TTL is 6 s, not less: half the renewals go to the silent m0 and
// wait there until they time out, and under -race on a loaded machine a
// TTL of 3 s expired the sessions the tests need alive.
const (
	halfOpenTTL   = 6
	halfOpenBound = 20 * time.Second
)

// halfOpenClient returns a client of the shared cluster's first member,
// through a proxy, and what makes its connection silent: silence adds the
// second member's proxy to the client's endpoints and blackholes the
// first's. opts configure the client, as sharedClient's do.
func halfOpenClient(t *testing.T, opts ...func(*clientv3.Config)) (c *clientv3.Client, silence func()) {
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
	c = etcdtest.NewClient(t, []string{px[0].URL()}, opts...)
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

// A watch opened on a stream that is silent already: clientv3's Watch
// returns only once etcd has created the watch. A waiter on another lock
// keeps the client's stream of watches on m0; m0 goes silent; then the
// hold's Ctx opens its watch on that stream, and its key is deleted.
func TestHalfOpenHoldWatchOpenedOnSilentStream(t *testing.T) {
	pfx := etcdtest.Begin(t)
	h := sharedClient(t)
	hs := newSession(t, h)
	blocker := concurrency.NewMutex(hs, pfx+"/pin")
	if err := blocker.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	w, silence := halfOpenClient(t)
	ws := newSession(t, w, concurrency.WithTTL(halfOpenTTL))
	pin := concurrency.NewMutex(ws, pfx+"/pin")
	pinc := async(t, func() error { return pin.Lock(t.Context()) })
	etcdtest.WaitKeys(t, h, pfx+"/pin", 2)
	wm := concurrency.NewMutex(ws, pfx+"/held")
	if err := wm.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	silence()
	hctx := wm.Ctx()
	if _, err := h.Delete(t.Context(), wm.Key()); err != nil {
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
	if err := blocker.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-pinc; err != nil {
		t.Fatalf("the pinning waiter: %v", err)
	}
	if err := pin.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// The holder unlocks only after the waiter's probe has given up the
// silent stream (within 3 + 2 × 1 s at TTL 6 s): the waiter's watch is
// opened again, on a stream that the balancer may place on m0 again.
func TestHalfOpenWaiterReopensWatch(t *testing.T) {
	pfx := etcdtest.Begin(t)
	h := sharedClient(t)
	hm := concurrency.NewMutex(newSession(t, h), pfx)
	if err := hm.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	w, silence := halfOpenClient(t)
	wm := concurrency.NewMutex(newSession(t, w, concurrency.WithTTL(halfOpenTTL)), pfx)
	errc := async(t, func() error { return wm.Lock(t.Context()) })
	etcdtest.WaitKeys(t, h, pfx, 2)
	silence()
	time.Sleep(7 * time.Second) // the scenario: a hold that lasts past the probe's verdict
	if err := hm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("waiter's Lock: %v", err)
		}
	case <-time.After(halfOpenBound):
		t.Fatalf("the waiter still waits %v after the unlock", halfOpenBound)
	}
	if err := wm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// NewSession on a client whose only member went silent returns an error
// within its bound (its TTL, at least 10 s) instead of waiting for ever
// (etcd #19778).
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
		if took := time.Since(start); took < 10*time.Second {
			t.Fatalf("NewSession gave up after %v, before its bound of 10 s (TTL %d s, floored)", took, ttl)
		}
	case <-time.After(halfOpenBound):
		c.Close() // ends the hung call
		<-errc
		t.Fatalf("NewSession still waits %v on a member that never answers", halfOpenBound)
	}
}

// trafficCounter counts, for a client, its unary requests to etcd's KV
// service and the progress requests sent on its watch streams.
type trafficCounter struct{ kv, progress atomic.Int64 }

func (tc *trafficCounter) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions,
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if strings.HasPrefix(method, "/etcdserverpb.KV/") {
				tc.kv.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			return progressCounting{cs, &tc.progress}, err
		}))
}

type progressCounting struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s progressCounting) SendMsg(m any) error {
	if r, ok := m.(*pb.WatchRequest); ok && r.GetProgressRequest() != nil {
		s.n.Add(1)
	}
	return s.ClientStream.SendMsg(m)
}

// The liveness check must cost an idle client next to nothing: its watches
// share one stream and one progress request, and a healthy stream never
// looks silent, so nothing is read again. Here a client holds a lock (its
// Ctx watched), queues 12 waiters behind it, and observes an election, all
// with a TTL of 3 s (a progress request after 1 to 1.5 s of silence), and
// sits idle for 6 s. A watch opened at a revision not yet written (etcd's
// Observe and clientv3's resumed watches do) would leave every progress
// request of the stream unanswered while the cluster is idle, and every
// watch would read again every two seconds or so.
func TestIdleWatchesCostOneProgressRequest(t *testing.T) {
	pfx := etcdtest.Begin(t)
	var tc trafficCounter
	c := sharedClient(t, tc.option)
	s := newSession(t, c, concurrency.WithTTL(3))

	other := sharedClient(t)
	leader := concurrency.NewElection(newSession(t, other), pfx+"/e")
	if err := leader.Campaign(t.Context(), "v"); err != nil {
		t.Fatal(err)
	}
	m := concurrency.NewMutex(s, pfx+"/held")
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	m.Ctx()
	const waiters = 12
	for i := range waiters {
		name := fmt.Sprintf("%s/w%d", pfx, i)
		hm := concurrency.NewMutex(newSession(t, other), name)
		if err := hm.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		wm := concurrency.NewMutex(s, name)
		errc := async(t, func() error { return wm.Lock(t.Context()) })
		t.Cleanup(func() {
			hm.Unlock(context.Background())
			<-errc
			wm.Unlock(context.Background())
		})
	}
	for i := range waiters {
		etcdtest.WaitKeys(t, other, fmt.Sprintf("%s/w%d", pfx, i), 2)
	}
	// Observe last, after every write of the set-up: a watch from the
	// revision after its read would wait for one not yet written.
	ch := observe(t, concurrency.NewElection(s, pfx+"/e"))
	if resp := next(t, ch, 10*time.Second); string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Observe posted %q", resp.Kvs[0].Value)
	}

	// The window: whatever the set-up read has been read by now.
	time.Sleep(time.Second)
	kv0, pr0 := tc.kv.Load(), tc.progress.Load()
	const window = 6 * time.Second
	time.Sleep(window)
	kv, pr := tc.kv.Load()-kv0, tc.progress.Load()-pr0
	t.Logf("in %v idle: %d KV requests, %d progress requests (%d watches on the client)", window, kv, pr, waiters+2)
	if kv != 0 {
		t.Errorf("%d KV requests while idle: a watch took a live stream for silent and read again", kv)
	}
	// One request per 1 to 1.5 s for all watches: 4 to 6, and more when
	// several watches' timers fire before the first answer is back (a
	// loaded machine saw 14); one request per watch: 56 to 84.
	if pr < 1 || pr > 30 {
		t.Errorf("%d progress requests in %v, want 1 to 30 (one per 1 to 1.5 s, shared by the %d watches)", pr, window, waiters+2)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
