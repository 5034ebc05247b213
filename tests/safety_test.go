package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// The regression tests of issue 21: an outside review got two holders,
// waiters that never woke and keys left behind, each with a scenario
// below; every one failed on the code before the fix.

// gate intercepts a client's KV transactions that match: while armed it
// holds each of them until open is closed (then sends it) or answers it
// with fail without sending it. caught is signalled once per held call.
type gate struct {
	match  func(*pb.TxnRequest) bool
	armed  atomic.Bool
	fail   error         // if not nil, matching calls get this error at once
	open   chan struct{} // closed: held calls go on
	caught chan struct{}
	wg     sync.WaitGroup
}

func newGate(match func(*pb.TxnRequest) bool) *gate {
	return &gate{match: match, open: make(chan struct{}), caught: make(chan struct{}, 64)}
}

func (g *gate) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			tr, ok := req.(*pb.TxnRequest)
			if method != "/etcdserverpb.KV/Txn" || !ok || !g.armed.Load() || !g.match(tr) {
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			if g.fail != nil {
				select {
				case g.caught <- struct{}{}:
				default:
				}
				return g.fail
			}
			g.caught <- struct{}{}
			select {
			case <-g.open:
			case <-ctx.Done():
				return ctx.Err()
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

// readOnly matches a transaction without writes: a waiter's re-check.
func readOnly(tr *pb.TxnRequest) bool {
	for _, op := range append(tr.Success, tr.Failure...) {
		if op.GetRequestRange() == nil {
			return false
		}
	}
	return len(tr.Compare) == 0
}

// promotion matches a Semaphore holder's promote: a put that keeps the
// key's value and lease.
func promotion(tr *pb.TxnRequest) bool {
	for _, op := range tr.Success {
		if p := op.GetRequestPut(); p != nil && p.IgnoreValue {
			return true
		}
	}
	return false
}

// enqueueTxn matches a lock key's enqueue: a transaction on a key's absence
// that writes it.
func enqueueTxn(tr *pb.TxnRequest) bool {
	return len(tr.Compare) == 1 && tr.Compare[0].Target == pb.Compare_CREATE && !readOnly(tr) && !promotion(tr)
}

func caught(t *testing.T, g *gate, what string) {
	t.Helper()
	select {
	case <-g.caught:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not sent within 10s", what)
	}
}

// Issue 21.1: W waits on a follower; its re-check after the holder's
// release is held back, the follower is paused, W's key is deleted at the
// leader and X, behind W, is granted. The held re-check, answered by the
// paused member, must not grant W: before the fix it read W's key
// serializably on the stale member and returned nil (two holders).
func TestWaiterOnLaggingMemberIsNotGranted(t *testing.T) {
	pfx := etcdtest.Begin(t)
	clus := etcdtest.NewCluster(t, &integration.ClusterConfig{Size: 3})
	lead := clus.WaitLeader(t)
	f := (lead + 1) % 3
	lc := etcdtest.NewClient(t, []string{clus.Members[lead].GRPCURL})
	g := newGate(readOnly)
	wc := etcdtest.NewClient(t, []string{clus.Members[f].GRPCURL}, g.option)

	h := concurrency.NewMutex(newSession(t, lc), pfx)
	if err := h.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := concurrency.NewMutex(newSession(t, wc), pfx)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	werr := lockAsync(t, ctx, w)
	etcdtest.WaitKeys(t, lc, pfx, 2)
	x := concurrency.NewMutex(newSession(t, lc), pfx)
	xerr := lockAsync(t, ctx, x)
	kvs := etcdtest.WaitKeys(t, lc, pfx, 3)

	g.armed.Store(true)
	if err := h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	caught(t, g, "W's re-check")
	clus.Members[f].Pause()
	resumed := false
	defer func() {
		if !resumed {
			clus.Members[f].Resume()
		}
	}()
	// W's key: a force-unlock. With one member paused, the other two must
	// both commit it; on a loaded machine etcd has answered "request timed
	// out" (the delete may or may not have applied), so it is sent again.
	for attempt := 1; ; attempt++ {
		_, err := lc.Delete(t.Context(), string(kvs[1].Key))
		if err == nil {
			break
		}
		if !errors.Is(err, rpctypes.ErrTimeout) || attempt == 5 {
			t.Fatal(err)
		}
	}
	if err := within(t, 10*time.Second, xerr, "X.Lock"); err != nil {
		t.Fatalf("X.Lock: %v", err)
	}
	g.armed.Store(false)
	close(g.open) // W's re-check now reaches the paused member
	select {
	case err := <-werr:
		if err == nil {
			t.Fatalf("W.Lock returned nil while X holds (token %d): two holders", x.Token())
		}
		if !errors.Is(err, concurrency.ErrSessionExpired) {
			t.Fatalf("W.Lock = %v, want ErrSessionExpired (its key was deleted)", err)
		}
		return
	case <-time.After(2 * time.Second):
	}
	clus.Members[f].Resume()
	resumed = true
	err := within(t, 30*time.Second, werr, "W.Lock after the member resumed")
	if !errors.Is(err, concurrency.ErrSessionExpired) {
		t.Fatalf("W.Lock = %v, want ErrSessionExpired (its key was deleted)", err)
	}
	if err := x.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Issue 21.2: a key that the enqueue finds already there (left by an
// earlier enqueue whose outcome was unknown) is judged as a fresh one is:
// a Semaphore of limit 5 must not adopt its key beside two holders of a
// limit-2 name, nor an RWMutex reader beside a Mutex. The leftover is made
// by writing the key the value would write, on its lease.
func TestLeftoverKeyIsJudged(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)

	t.Run("semaphore", func(t *testing.T) {
		name := pfx + "/sem"
		m := concurrency.NewSemaphore(s, name, 5)
		if err := m.TryAcquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		key := m.Key()
		if err := m.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := concurrency.NewSemaphore(newSession(t, c), name, 2).TryAcquire(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Put(t.Context(), key, "5", clientv3.WithLease(s.Lease())); err != nil {
			t.Fatal(err)
		}
		err := m.Acquire(t.Context())
		if err == nil {
			t.Fatalf("Acquire of limit 5 adopted %s beside two holders of limit 2: three holders", key)
		}
		if !errors.Is(err, concurrency.ErrLimitMismatch) {
			t.Fatalf("Acquire = %v, want ErrLimitMismatch", err)
		}
		etcdtest.WaitKeys(t, c, name, 2) // the leftover was deleted
	})
	t.Run("reader", func(t *testing.T) {
		name := pfx + "/rw"
		m := concurrency.NewRWMutex(s, name)
		if err := m.TryRLock(t.Context()); err != nil {
			t.Fatal(err)
		}
		key := m.Key()
		if err := m.RUnlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		mu := concurrency.NewMutex(newSession(t, c), name)
		if err := mu.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(t.Context(), key, "", clientv3.WithLease(s.Lease())); err != nil {
			t.Fatal(err)
		}
		err := m.RLock(t.Context())
		if err == nil {
			t.Fatalf("RLock adopted %s while a Mutex holds the name", key)
		}
		if !errors.Is(err, concurrency.ErrLockKind) {
			t.Fatalf("RLock = %v, want ErrLockKind", err)
		}
		etcdtest.WaitKeys(t, c, name, 1)
	})
}

// Issues 21.3 and 21.6: a Semaphore's grant after a wait does not wait for
// the hint to the waiter behind it (promote), and a hint that fails for a
// while is sent again: before the fix, Acquire waited up to 5 s for it
// (returning a permit after its ctx and session had ended), and a failed
// hint left the next waiter watching a holder, never told it was first.
func TestSemaphorePromoteNeverDelaysNorLosesAWakeup(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	g := newGate(promotion)
	wc := sharedClient(t, g.option)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	a := concurrency.NewSemaphore(newSession(t, c), pfx, 2)
	b := concurrency.NewSemaphore(newSession(t, c), pfx, 2)
	for _, m := range []*concurrency.Semaphore{a, b} {
		if err := m.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w := concurrency.NewSemaphore(newSession(t, wc), pfx, 2)
	werr := acquireAsync(t, ctx, w)
	etcdtest.WaitKeys(t, c, pfx, 3)
	w2 := concurrency.NewSemaphore(newSession(t, c), pfx, 2)
	w2err := acquireAsync(t, ctx, w2)
	etcdtest.WaitKeys(t, c, pfx, 4)

	g.armed.Store(true)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	caught(t, g, "W's promote")
	// The hint is held; the grant is not.
	if err := within(t, 3*time.Second, werr, "W.Acquire while its promote is held"); err != nil {
		t.Fatalf("W.Acquire: %v", err)
	}
	// The first attempt fails (it is held past its bound): the hint is
	// sent again. Let that one through.
	caught(t, g, "W's promote, again after a failed attempt")
	g.armed.Store(false)
	close(g.open)
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// W2 is first behind W and B's permit is free: it must get it while W
	// still holds.
	if err := within(t, 15*time.Second, w2err, "W2.Acquire after B's release"); err != nil {
		t.Fatalf("W2.Acquire: %v", err)
	}
	for _, m := range []*concurrency.Semaphore{w, w2} {
		if err := m.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Issue 21.5: a Lock whose ctx ends while its enqueue is in flight returns
// within a second, and the key that the enqueue writes afterwards is deleted within
// seconds, whatever the TTL; a cancelled Campaign leaves no leader. Before
// the fix the key stayed until the session's next renewal (TTL/3: 20 s).
func TestCancelledEnqueueLeavesNoKey(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	for _, kind := range []string{"mutex", "semaphore", "election"} {
		t.Run(kind, func(t *testing.T) {
			name := pfx + "/" + kind
			g := newGate(enqueueTxn)
			gc := sharedClient(t, g.option)
			s := newSession(t, gc) // the default TTL, 60 s
			ctx, cancel := context.WithCancel(t.Context())
			var op func() error
			switch kind {
			case "mutex":
				op = func() error { return concurrency.NewMutex(s, name).Lock(ctx) }
			case "semaphore":
				op = func() error { return concurrency.NewSemaphore(s, name, 2).Acquire(ctx) }
			case "election":
				op = func() error { return concurrency.NewElection(s, name).Campaign(ctx, "v") }
			}
			g.armed.Store(true)
			errc := async(t, op)
			caught(t, g, "the enqueue")
			cancel()
			if err := within(t, 3*time.Second, errc, "the cancelled call"); !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			// The enqueue reaches etcd now, after its caller gave up.
			w := c.Watch(t.Context(), name+"/", clientv3.WithPrefix())
			close(g.open)
			var put *clientv3.Event
			for put == nil {
				select {
				case wr := <-w:
					for _, ev := range wr.Events {
						if ev.Type == mvccpb.PUT {
							put = ev
						}
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the late enqueue was never applied")
				}
			}
			etcdtest.Eventually(t, 3*time.Second, func() bool { return len(etcdtest.Keys(t, c, name)) == 0 },
				"key %s, applied after its call was cancelled, still there", put.Kv.Key)
			if kind == "election" {
				_, err := concurrency.NewElection(newSession(t, c), name).Leader(t.Context())
				if !errors.Is(err, concurrency.ErrElectionNoLeader) {
					t.Fatalf("Leader after a cancelled Campaign: %v, want ErrElectionNoLeader", err)
				}
			}
		})
	}
}

// Issue 21.7: the getters never wait for an Unlock or Resign that retries
// while etcd does not answer.
func TestGettersDoNotWaitForRelease(t *testing.T) {
	pfx := etcdtest.Begin(t)
	g := newGate(func(*pb.TxnRequest) bool { return true })
	g.fail = status.Error(codes.Unavailable, "test: etcd unreachable")
	c := sharedClient(t, g.option)
	s := newSession(t, c)
	m := concurrency.NewMutex(s, pfx+"/m")
	e := concurrency.NewElection(s, pfx+"/e")
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.Campaign(t.Context(), "v"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		release func(context.Context) error
		getters func()
	}{
		{"Mutex.Unlock", m.Unlock, func() {
			m.Token()
			m.Key()
			m.IsOwner()
			m.Ctx()
			m.Txn(t.Context())
			m.Header()
		}},
		{"Election.Resign", e.Resign, func() { e.Rev(); e.Key(); e.Ctx(); e.Txn(t.Context()); e.Header() }},
	} {
		g.armed.Store(true)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		released := make(chan error, 1)
		go func() { released <- tc.release(ctx) }()
		caught(t, g, tc.name)
		done := make(chan struct{})
		go func() { tc.getters(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatalf("getters still blocked 2 s into a %s that retries", tc.name)
		}
		if len(released) > 0 {
			t.Fatalf("%s returned before the getters: the test proves nothing", tc.name)
		}
		if err := <-released; err == nil {
			t.Fatalf("%s succeeded while every transaction failed", tc.name)
		}
		cancel()
		g.armed.Store(false)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// rangeWatches counts, per client, the watches it creates on a range.
type rangeWatches struct{ n atomic.Int64 }

func (rw *rangeWatches) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || method != "/etcdserverpb.Watch/Watch" {
				return cs, err
			}
			return &countingStream{ClientStream: cs, rw: rw}, nil
		}))
}

type countingStream struct {
	grpc.ClientStream
	rw *rangeWatches
}

func (cs *countingStream) SendMsg(m any) error {
	if wr, ok := m.(*pb.WatchRequest); ok {
		if cr := wr.GetCreateRequest(); cr != nil && len(cr.RangeEnd) > 0 {
			cs.rw.n.Add(1)
		}
	}
	return cs.ClientStream.SendMsg(m)
}

// Issue 21.8: only a Semaphore's first waiter watches the name's range;
// before the fix every new waiter started on it.
func TestSemaphoreOnlyFirstWaiterWatchesRange(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var holders []*concurrency.Semaphore
	for range 2 {
		m := concurrency.NewSemaphore(newSession(t, c), pfx, 2)
		if err := m.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		holders = append(holders, m)
	}
	var counts []*rangeWatches
	var waiters []<-chan error
	for i := range 3 {
		rw := &rangeWatches{}
		wc := sharedClient(t, rw.option)
		waiters = append(waiters, acquireAsync(t, ctx, concurrency.NewSemaphore(newSession(t, wc), pfx, 2)))
		counts = append(counts, rw)
		etcdtest.WaitKeys(t, c, pfx, 3+i)
	}
	etcdtest.Eventually(t, 5*time.Second, func() bool { return counts[0].n.Load() > 0 }, "the first waiter watches no range")
	for i, rw := range counts[1:] {
		if n := rw.n.Load(); n != 0 {
			t.Errorf("waiter %d (not first) created %d range watches", i+2, n)
		}
	}
	for _, m := range holders {
		if err := m.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, errc := range waiters[:2] {
		if err := within(t, 10*time.Second, errc, fmt.Sprintf("waiter %d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := within(t, 10*time.Second, waiters[2], "waiter 3"); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter 3: %v", err)
	}
}

// puts returns, once stop is called, the keys put under pfx+"/" from now.
func puts(t *testing.T, c *clientv3.Client, pfx string) (stop func() []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	w := c.Watch(ctx, pfx+"/", clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithCreatedNotify())
	<-w // created
	return func() []string {
		// A marker put, seen last: every earlier put has been delivered.
		marker := pfx + "/~marker"
		if _, err := c.Put(t.Context(), marker, ""); err != nil {
			t.Fatal(err)
		}
		defer c.Delete(t.Context(), marker)
		defer cancel()
		var keys []string
		for wr := range w {
			for _, ev := range wr.Events {
				if string(ev.Kv.Key) == marker {
					return keys
				}
				keys = append(keys, string(ev.Kv.Key))
			}
		}
		t.Fatal("watch ended before the marker")
		return nil
	}
}

// Issue 21.9: a Semaphore with the wrong limit, or a lock of another kind,
// is refused without writing a key, so that it never stands in the way of
// the name's rightful users (before the fix, its key was written, then
// refused and deleted; meanwhile, or until its lease ended if its process
// died, correct acquirers failed with ErrLimitMismatch).
func TestRefusedLockWritesNothing(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx := t.Context()
	sem := pfx + "/sem"
	if err := concurrency.NewSemaphore(newSession(t, c), sem, 2).Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	rw := pfx + "/rw"
	if err := concurrency.NewMutex(newSession(t, c), rw).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	s := newSession(t, c)
	for _, tc := range []struct {
		name string
		pfx  string
		op   func() error
		want error
	}{
		{"limit", sem, func() error { return concurrency.NewSemaphore(s, sem, 5).Acquire(ctx) }, concurrency.ErrLimitMismatch},
		{"rwmutex on a semaphore", sem, func() error { return concurrency.NewRWMutex(s, sem).Lock(ctx) }, concurrency.ErrLockKind},
		{"reader on a mutex", rw, func() error { return concurrency.NewRWMutex(s, rw).RLock(ctx) }, concurrency.ErrLockKind},
		{"semaphore on a mutex", rw, func() error { return concurrency.NewSemaphore(s, rw, 2).TryAcquire(ctx) }, concurrency.ErrLockKind},
	} {
		stop := puts(t, c, tc.pfx)
		if err := tc.op(); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
		if keys := stop(); len(keys) > 0 {
			t.Errorf("%s: refused, yet wrote %v", tc.name, keys)
		}
	}
	// Correct users go on meanwhile.
	if err := concurrency.NewSemaphore(newSession(t, c), sem, 2).TryAcquire(ctx); err != nil {
		t.Fatalf("second permit of limit 2: %v", err)
	}
}

// Issue 21.11: LockAll refuses two Mutexes of one name rather than
// deadlocking on itself.
func TestLockAllRefusesOneNameTwice(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	a := concurrency.NewMutex(newSession(t, c), pfx+"/x")
	b := concurrency.NewMutex(newSession(t, c), pfx+"/x")
	o := concurrency.NewMutex(newSession(t, c), pfx+"/y")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := concurrency.LockAll(ctx, o, a, b); !errors.Is(err, concurrency.ErrDuplicateName) {
		t.Fatalf("LockAll of two Mutexes of one name: %v, want ErrDuplicateName", err)
	}
	if keys := etcdtest.Keys(t, c, pfx); len(keys) != 0 {
		t.Fatalf("refused LockAll left %d keys", len(keys))
	}
}

// semKeyChild, set in a child process of this test binary, makes TestMain
// print the key of the first Semaphore of the process on the lease and
// endpoint it names, instead of running tests.
const semKeyChild = "CONCURRENCY_TEST_SEMKEY"

// semKeyMain is the child's main (see TestMain).
func semKeyMain() {
	var ep, name string
	var lease int64
	fmt.Sscanf(os.Getenv(semKeyChild), "%s %s %x", &ep, &name, &lease)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer c.Close()
	s, err := concurrency.NewSession(c, concurrency.WithLease(clientv3.LeaseID(lease)))
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer s.Orphan()
	m := concurrency.NewSemaphore(s, name, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.TryAcquire(ctx); err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("key:", m.Key())
	m.Release(ctx)
}

// Issue 21.12: the keys of Semaphores on one lease differ across processes
// (before the fix, each process numbered its values from 1, so the first
// Semaphore of two processes sharing a lease had one key).
func TestSemaphoreKeysUniqueAcrossProcesses(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	var keys []string
	for range 2 {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %x", semKeyChild, etcdtest.Endpoints()[0], pfx, int64(s.Lease())))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		var key string
		for _, line := range strings.Split(string(out), "\n") {
			if k, ok := strings.CutPrefix(line, "key: "); ok {
				key = k
			}
		}
		if key == "" {
			t.Fatalf("child said %q", out)
		}
		keys = append(keys, key)
	}
	if keys[0] == keys[1] {
		t.Fatalf("two processes on one lease chose the same key %s", keys[0])
	}
}

// Issue 21.13: a release whose delete was applied but whose answer was
// lost is a release, not a loss.
func TestReleaseWithLostAnswerIsReleased(t *testing.T) {
	pfx := etcdtest.Begin(t)
	var rc rpcCounter
	c := sharedClient(t, rc.option)
	m := concurrency.NewMutex(newSession(t, c), pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hold := m.Ctx()
	rc.armed.Store(true)
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if cause := context.Cause(hold); !errors.Is(cause, concurrency.ErrLockReleased) {
		t.Fatalf("hold ended with %v, want ErrLockReleased", cause)
	}
}

// Issue 21.13: "too many requests" (ResourceExhausted) does not end a
// waiter's place: waiting is what fixes it.
func TestWaiterOutlastsTooManyRequests(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	g := newGate(readOnly)
	g.fail = status.Error(codes.ResourceExhausted, "etcdserver: too many requests")
	wc := sharedClient(t, g.option)
	h := concurrency.NewMutex(newSession(t, c), pfx)
	if err := h.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := concurrency.NewMutex(newSession(t, wc), pfx)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	werr := lockAsync(t, ctx, w)
	etcdtest.WaitKeys(t, c, pfx, 2)
	g.armed.Store(true)
	if err := h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-werr:
		t.Fatalf("W.Lock ended while etcd was busy: %v", err)
	case <-time.After(time.Second):
	}
	g.armed.Store(false)
	if err := within(t, 10*time.Second, werr, "W.Lock"); err != nil {
		t.Fatalf("W.Lock: %v", err)
	}
	if err := w.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A call whose ctx has already ended writes nothing: its enqueue, which
// runs on a context of its own, is not started.
func TestEndedCtxWritesNothing(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	stop := puts(t, c, pfx)
	for name, op := range map[string]func() error{
		"Lock":     func() error { return concurrency.NewMutex(s, pfx).Lock(ctx) },
		"TryLock":  func() error { return concurrency.NewMutex(s, pfx).TryLock(ctx) },
		"Acquire":  func() error { return concurrency.NewSemaphore(s, pfx+"/sem", 2).Acquire(ctx) },
		"RLock":    func() error { return concurrency.NewRWMutex(s, pfx+"/rw").RLock(ctx) },
		"Campaign": func() error { return concurrency.NewElection(s, pfx+"/e").Campaign(ctx, "v") },
	} {
		if err := op(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with an ended ctx: %v, want context.Canceled", name, err)
		}
	}
	if keys := stop(); len(keys) > 0 {
		t.Fatalf("calls with an ended ctx wrote %v", keys)
	}
}
