package concurrency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// A review of the issue-21 rewrite (commit a127f9e) found these; each
// test failed on that commit. (A fourth finding, that two live sessions
// sharing a lease share their Mutex keys, so that one's failed Lock can
// delete the key the other holds, is etcd's own semantics and is
// documented on WithLease.)

// holdEach intercepts a client's KV transactions that match, while armed,
// and holds each one separately: every held call is announced on calls,
// and is sent when the channel announced with it is closed. A call whose
// ctx ends first fails with ctx's error, and is sent all the same when
// its channel is closed: a request that etcd received before its client
// cut it short, applied late.
type holdEach struct {
	match func(*pb.TxnRequest) bool
	armed atomic.Int64 // how many more matching calls to hold
	calls chan chan struct{}
}

func newHoldEach(match func(*pb.TxnRequest) bool) *holdEach {
	return &holdEach{match: match, calls: make(chan chan struct{}, 16)}
}

func (h *holdEach) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			tr, ok := req.(*pb.TxnRequest)
			if method != "/etcdserverpb.KV/Txn" || !ok || !h.match(tr) {
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			for {
				n := h.armed.Load()
				if n <= 0 {
					return invoker(ctx, method, req, reply, cc, opts...)
				}
				if h.armed.CompareAndSwap(n, n-1) {
					break
				}
			}
			open := make(chan struct{})
			h.calls <- open
			select {
			case <-open:
			case <-ctx.Done():
				go func() {
					<-open
					ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					defer cancel()
					invoker(ctx, method, req, reply, cc, opts...)
				}()
				return ctx.Err()
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

func (h *holdEach) next(t *testing.T, what string) chan struct{} {
	t.Helper()
	select {
	case open := <-h.calls:
		return open
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not sent within 10s", what)
		return nil
	}
}

// R1: a Campaign that returned context.Canceled must have no effect
// afterwards. Its enqueue, awaited in the background, can be applied after
// a later Campaign of the same session won and after a Proclaim: the
// enqueue's Else branch ("update") then writes the cancelled call's value
// over the live leader's.
func TestCancelledCampaignRewritesLeaderValue(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	h := newHoldEach(enqueueTxn)
	hc := sharedClient(t, h.option)
	s := newSession(t, hc)
	e := concurrency.NewElection(s, pfx)

	h.armed.Store(1)
	ctx1, cancel1 := context.WithCancel(t.Context())
	errc := async(t, func() error { return e.Campaign(ctx1, "stale: the cancelled call's value") })
	open := h.next(t, "the first Campaign's enqueue")
	cancel1()
	if err := within(t, 3*time.Second, errc, "the cancelled Campaign"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Campaign = %v, want context.Canceled", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := e.Campaign(ctx, "fresh"); err != nil {
		t.Fatal(err)
	}
	if err := e.Proclaim(ctx, "newest"); err != nil {
		t.Fatal(err)
	}
	close(open) // the cancelled Campaign's enqueue reaches etcd now
	time.Sleep(time.Second)
	resp, err := concurrency.NewElection(newSession(t, c), pfx).Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v := string(resp.Kvs[0].Value); v != "newest" {
		t.Errorf("leader %s proclaimed %q, but the election shows %q: written by a Campaign that had returned %v",
			e.Key(), "newest", v, context.Canceled)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// R3: Lock's promise (on any error its key is deleted within a bounded
// time) on an orphaned session, which stays usable: Orphan stopped the
// sweeper, so a key whose enqueue had an unknown outcome and was applied
// late stayed for the life of the lease, which its new owner renews.
func TestOrphanedSessionLeavesLateKey(t *testing.T) {
	pfx := etcdtest.Begin(t)
	late := &lateTxn{release: make(chan struct{}), applied: make(chan error, 1)}
	lc := sharedClient(t, late.option)
	c := sharedClient(t)
	grant, err := c.Grant(t.Context(), 5)
	if err != nil {
		t.Fatal(err)
	}
	// The lease's new owner keeps it alive, as etcd's lock service's
	// caller does.
	kctx, kcancel := context.WithCancel(t.Context())
	defer kcancel()
	ka, err := c.KeepAlive(kctx, grant.ID)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range ka {
		}
	}()
	s := newSession(t, lc, concurrency.WithLease(grant.ID))
	s.Orphan()
	late.armed.Store(true)
	if err := concurrency.NewMutex(s, pfx).Lock(t.Context()); err == nil {
		t.Fatal("Lock with a lost enqueue succeeded")
	}
	close(late.release)
	defer late.wg.Wait()
	if err := <-late.applied; err != nil {
		t.Fatalf("the late enqueue failed: %v", err)
	}
	etcdtest.WaitKeys(t, c, pfx, 1)
	time.Sleep(4 * time.Second) // the unorphaned session deletes it within ~1 s
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
		t.Errorf("key %s of a failed Lock on an orphaned session still there after 4 s: it blocks the name for the life of the lease", kvs[0].Key)
	}
	kcancel()
	c.Revoke(context.Background(), grant.ID)
}

// R4: a Semaphore key granted through adoption (its earlier enqueue was
// cancelled and applied late; the next Acquire of the same value finds it)
// is granted without promote: the waiter behind it, which watches only that
// key, is not told that it is now within the limit, and waits for the
// adopted holder's release while a permit is free.
func TestSemaphoreAdoptedGrantLosesWakeup(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	h := newHoldEach(enqueueTxn)
	hc := sharedClient(t, h.option)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	h1 := concurrency.NewSemaphore(newSession(t, c), pfx, 2)
	h2 := concurrency.NewSemaphore(newSession(t, c), pfx, 2)
	for _, m := range []*concurrency.Semaphore{h1, h2} {
		if err := m.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m := concurrency.NewSemaphore(newSession(t, hc), pfx, 2)
	h.armed.Store(3)
	ctx1, cancel1 := context.WithCancel(ctx)
	errc := async(t, func() error { return m.Acquire(ctx1) })
	first := h.next(t, "the first Acquire's enqueue")
	cancel1()
	if err := within(t, 3*time.Second, errc, "the cancelled Acquire"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v", err)
	}
	// The enqueue sent again to settle the cancelled Acquire's key waits
	// until the end, so that the key is there for the second Acquire.
	settling := h.next(t, "the enqueue that settles the cancelled Acquire's key")
	defer close(settling)
	merr := acquireAsync(t, ctx, m)
	second := h.next(t, "the second Acquire's enqueue")
	close(first) // the cancelled Acquire's key is written now, behind h1 and h2
	etcdtest.WaitKeys(t, c, pfx, 3)
	w := concurrency.NewSemaphore(newSession(t, c), pfx, 2)
	werr := acquireAsync(t, ctx, w)
	etcdtest.WaitKeys(t, c, pfx, 4)
	for _, x := range []*concurrency.Semaphore{h1, h2} {
		if err := x.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(second) // the second Acquire adopts the key, which now holds
	if err := within(t, 10*time.Second, merr, "the second Acquire"); err != nil {
		t.Fatalf("second Acquire: %v", err)
	}
	select {
	case err := <-werr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("W still waits 5 s after one of limit 2 permits was free: it watches the adopted key %s, never promoted", m.Key())
		if err := m.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := within(t, 10*time.Second, werr, "W after the adopted holder's release"); err != nil {
			t.Fatal(err)
		}
	}
	m.Release(ctx)
	w.Release(ctx)
}
