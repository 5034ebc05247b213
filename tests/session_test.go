package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

func TestSessionTTL(t *testing.T) {
	etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c, concurrency.WithTTL(90))
	resp, err := c.TimeToLive(t.Context(), s.Lease())
	if err != nil {
		t.Fatal(err)
	}
	if resp.TTL < 70 || resp.TTL > 90 {
		t.Fatalf("TimeToLive = %d s, want within [70, 90]", resp.TTL)
	}
	if resp.GrantedTTL != 90 {
		t.Fatalf("granted TTL = %d, want 90", resp.GrantedTTL)
	}
	if d := time.Until(s.Deadline()); d < 80*time.Second || d > 90*time.Second {
		t.Fatalf("conservative deadline in %v, want within [80s, 90s]", d)
	}
}

func TestSessionDefaultTTL(t *testing.T) {
	etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	resp, err := c.TimeToLive(t.Context(), s.Lease())
	if err != nil {
		t.Fatal(err)
	}
	if resp.GrantedTTL != 60 {
		t.Fatalf("granted TTL = %d, want the default 60", resp.GrantedTTL)
	}
}

func TestSessionBadInput(t *testing.T) {
	etcdtest.Begin(t)
	if _, err := concurrency.NewSession(nil); !errors.Is(err, concurrency.ErrNilClient) {
		t.Errorf("NewSession(nil) = %v, want ErrNilClient", err)
	}
}

// etcdctl lock --ttl 0 passes WithTTL(0): etcd's package keeps the TTL it
// had (the default) and logs a warning; so does this one.
func TestSessionNonPositiveTTLKeepsDefault(t *testing.T) {
	etcdtest.Begin(t)
	c := sharedClient(t)
	for _, opts := range [][]concurrency.SessionOption{
		{concurrency.WithTTL(0)},
		{concurrency.WithTTL(-1)},
		{concurrency.WithTTL(30), concurrency.WithTTL(0)},
	} {
		s := newSession(t, c, opts...)
		resp, err := c.TimeToLive(t.Context(), s.Lease())
		if err != nil {
			t.Fatal(err)
		}
		want := int64(60)
		if len(opts) == 2 {
			want = 30
		}
		if resp.GrantedTTL != want {
			t.Errorf("%d options: granted TTL = %d, want %d", len(opts), resp.GrantedTTL, want)
		}
	}
}

// As etcd's package does, NewSession on a lease that does not exist returns
// a session that has already ended (etcd's election service opens one on
// lease -1 only to read). Reads work on it; Lock and Campaign fail at once
// with a clear error and write nothing.
func TestSessionWithMissingLease(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	grant, err := c.Grant(t.Context(), 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(t.Context(), grant.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []clientv3.LeaseID{grant.ID, -1} {
		s, err := concurrency.NewSession(c, concurrency.WithLease(id))
		if err != nil {
			t.Fatalf("NewSession(WithLease(%x)) = %v, want a session as etcd's gives", int64(id), err)
		}
		select {
		case <-s.Done():
		default:
			t.Fatalf("lease %x: the session on a missing lease has not ended", int64(id))
		}
		if cause := context.Cause(s.Ctx()); !errors.Is(cause, concurrency.ErrLeaseNotFound) {
			t.Errorf("lease %x: cause %v, want ErrLeaseNotFound", int64(id), cause)
		}
		err = concurrency.NewMutex(s, pfx).Lock(t.Context())
		if !errors.Is(err, concurrency.ErrSessionExpired) || !errors.Is(err, concurrency.ErrLeaseNotFound) {
			t.Errorf("lease %x: Lock = %v, want ErrSessionExpired and ErrLeaseNotFound", int64(id), err)
		}
		e := concurrency.NewElection(s, pfx)
		if err := e.Campaign(t.Context(), "v"); !errors.Is(err, concurrency.ErrLeaseNotFound) {
			t.Errorf("lease %x: Campaign = %v, want ErrLeaseNotFound", int64(id), err)
		}
		if _, err := e.Leader(t.Context()); !errors.Is(err, concurrency.ErrElectionNoLeader) {
			t.Errorf("lease %x: Leader = %v, want ErrElectionNoLeader", int64(id), err)
		}
		if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
			t.Errorf("lease %x: %d keys left", int64(id), n)
		}
		if err := s.Close(); err != nil {
			t.Errorf("lease %x: Close = %v", int64(id), err)
		}
	}
}

func TestSessionWithLeaseAdopts(t *testing.T) {
	etcdtest.Begin(t)
	c := sharedClient(t)
	grant, err := c.Grant(t.Context(), 30)
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(t, c, concurrency.WithLease(grant.ID))
	if s.Lease() != grant.ID {
		t.Fatalf("Lease() = %x, want %x", s.Lease(), grant.ID)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ttl, err := c.TimeToLive(t.Context(), grant.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Fatalf("lease TTL after Close = %d, want -1 (revoked)", ttl.TTL)
	}
}

func TestSessionOrphan(t *testing.T) {
	etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c, concurrency.WithTTL(30))
	s.Orphan()
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Orphan returned")
	}
	if !errors.Is(context.Cause(s.Ctx()), concurrency.ErrSessionExpired) {
		t.Fatalf("Ctx cause = %v, want ErrSessionExpired", context.Cause(s.Ctx()))
	}
	// The lease lives on until it expires.
	resp, err := c.TimeToLive(t.Context(), s.Lease())
	if err != nil {
		t.Fatal(err)
	}
	if resp.TTL <= 0 {
		t.Fatalf("orphaned lease TTL = %d, want it still alive", resp.TTL)
	}
}

func TestSessionCloseRevokes(t *testing.T) {
	etcdtest.Begin(t)
	c := sharedClient(t)
	s, err := concurrency.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := c.TimeToLive(t.Context(), s.Lease())
	if err != nil {
		t.Fatal(err)
	}
	if resp.TTL != -1 {
		t.Fatalf("lease TTL after Close = %d, want -1", resp.TTL)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done open after Close")
	}
}

func TestSessionContextEnds(t *testing.T) {
	etcdtest.Begin(t)
	c := sharedClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	s := newSession(t, c, concurrency.WithContext(ctx))
	cancel()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5 s after the session's context was cancelled")
	}
	if cause := context.Cause(s.Ctx()); !errors.Is(cause, concurrency.ErrSessionExpired) || !errors.Is(cause, context.Canceled) {
		t.Fatalf("cause = %v, want ErrSessionExpired wrapping context.Canceled", cause)
	}
}

// A lease revoked from outside ends the session at the next renewal. With
// a watched hold (Mutex.Ctx) it is noticed within milliseconds; see
// TestMutexCtxRevoke.
func TestSessionRevokedOutside(t *testing.T) {
	etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c, concurrency.WithTTL(3)) // renews every second
	if _, err := c.Revoke(t.Context(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5 s after the lease was revoked")
	}
	if !errors.Is(context.Cause(s.Ctx()), concurrency.ErrSessionExpired) {
		t.Fatalf("cause = %v", context.Cause(s.Ctx()))
	}
}

// A session whose hold is watched (its context was asked for) notices a
// revoke from outside within milliseconds, through the watch on its lock
// key, long before its next renewal.
func TestSessionRevokedWhileHolding(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	other := sharedClient(t)
	s := newSession(t, c) // TTL 60 s: the next renewal is 20 s away
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	m.Ctx()
	if _, err := other.Revoke(t.Context(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	// The next renewal is 20 s after the Lock; a session that ends within
	// 10 s of the revoke heard it through the watch. (How much sooner is
	// the machine's speed: about 10 ms idle, 150 ms seen under -race with
	// the 2 cores loaded 12 times over, so that is logged, not asserted.)
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10 s after the lease was revoked: the hold's watch did not tell the session")
	}
	took := time.Since(revoked)
	if !errors.Is(context.Cause(s.Ctx()), concurrency.ErrSessionExpired) {
		t.Fatalf("cause = %v", context.Cause(s.Ctx()))
	}
	t.Logf("session ended %v after the revoke", took)
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// When keepalives stop being answered, the session ends by its conservative
// deadline: before the server expires the lease, so before the lock key
// disappears. The margin is a tenth of the TTL, at most 1 s: the TTL is
// 10 s, for a margin of 1 s, since at TTL 3 the 300 ms margin was less than
// the delays of a loaded machine under -race (the session's timer firing
// and this test's read of the key after it).
func TestSessionDeadlineBeforeServerExpiry(t *testing.T) {
	etcdtest.Begin(t)
	clus := bridgeCluster(t)
	holder := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	observer := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
	pfx := "/deadline"
	s := newSession(t, holder, concurrency.WithTTL(10))
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hold := m.Ctx()
	clus.Members[0].Bridge().Blackhole()
	defer clus.Members[0].Bridge().Unblackhole()

	select {
	case <-s.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("session did not end within 20 s of its member being blackholed")
	}
	ended := time.Now()
	if len(etcdtest.Keys(t, observer, pfx)) != 1 {
		t.Fatal("the lock key was already gone on the server when the session ended")
	}
	if !errors.Is(context.Cause(hold), concurrency.ErrSessionExpired) {
		t.Fatalf("hold cause = %v, want ErrSessionExpired", context.Cause(hold))
	}
	etcdtest.WaitKeys(t, observer, pfx, 0)
	t.Logf("session ended %v before the server deleted the lock key", time.Since(ended).Round(time.Millisecond))
}

// The keepalive goroutine never waits on cleanup. Deletes of cancelled
// waiters' keys hang on a blackholed member while renewals reach another;
// whatever happens to the renewals, the session must end no later than the
// server can expire its lease. (Before, the keepalive goroutine sat in the
// cleanup of leftover keys: the server expired the lease at +6.7 s, Done
// fired at +25-30 s.)
func TestSessionNeverWaitsOnCleanup(t *testing.T) {
	pfx := etcdtest.Begin(t)
	clus := bridgeCluster(t)
	c := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL, clus.Members[1].GRPCURL})
	observer := etcdtest.NewClient(t, []string{clus.Members[2].GRPCURL})
	s := newSession(t, c, concurrency.WithTTL(5))
	if err := concurrency.NewMutex(s, pfx+"/x").Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	others := newSession(t, observer)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for i := range 8 {
		name := fmt.Sprintf("%s/w%d", pfx, i)
		if err := concurrency.NewMutex(others, name).Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			concurrency.NewMutex(s, name).Lock(ctx)
		}()
		etcdtest.WaitKeys(t, observer, name, 2)
	}
	clus.Members[0].Bridge().Blackhole()
	defer clus.Members[0].Bridge().Unblackhole()
	cancel()

	doneAt := make(chan time.Time, 1)
	go func() {
		select {
		case <-s.Done():
			doneAt <- time.Now()
		case <-time.After(30 * time.Second):
		}
	}()
	defer wg.Wait()
	// Watch the lease from the server's side for over two TTLs.
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); {
		resp, err := observer.TimeToLive(t.Context(), s.Lease())
		if err != nil {
			t.Fatal(err)
		}
		if resp.TTL == -1 {
			goneAt := time.Now()
			select {
			case at := <-doneAt:
				t.Logf("the session ended %v before the server expired its lease", goneAt.Sub(at).Round(time.Millisecond))
				return
			default:
				t.Fatal("the server expired the lease while the session had not ended")
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-s.Done():
		t.Fatalf("the session ended (%v) while the server still held its lease, 12 s on", context.Cause(s.Ctx()))
	default:
		t.Log("the session kept its lease alive through the other member")
	}
}

// Cancelled Locks clean up concurrently, each within its own bound: four
// Locks on different names, cancelled together while etcd is unreachable,
// all return within one cleanup timeout (they returned after 5, 10, 15 and
// 20 s while cleanups took turns under a session-wide lock). Their keys are
// deleted once etcd answers again.
func TestSessionCleanupsDoNotQueue(t *testing.T) {
	pfx := etcdtest.Begin(t)
	clus := bridgeCluster(t)
	wc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	hc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
	holder := newSession(t, hc)
	s := newSession(t, wc)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	took := make(chan time.Duration, 4)
	var start atomic.Pointer[time.Time]
	var wg sync.WaitGroup
	for i := range 4 {
		name := fmt.Sprintf("%s/%d", pfx, i)
		if err := concurrency.NewMutex(holder, name).Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := concurrency.NewMutex(s, name).Lock(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Lock = %v, want Canceled", err)
			}
			took <- time.Since(*start.Load())
		}()
		etcdtest.WaitKeys(t, hc, name, 2)
	}
	clus.Members[0].Bridge().Blackhole()
	now := time.Now()
	start.Store(&now)
	cancel()
	wg.Wait()
	close(took)
	var longest time.Duration
	for d := range took {
		longest = max(longest, d)
	}
	t.Logf("the slowest cancelled Lock returned after %v", longest.Round(time.Millisecond))
	if longest > 7*time.Second {
		t.Fatalf("a cancelled Lock took %v to return: cleanups waited for one another", longest)
	}
	clus.Members[0].Bridge().Unblackhole()
	clus.Members[0].Bridge().DropConnections()
	for i := range 4 {
		etcdtest.WaitKeys(t, hc, fmt.Sprintf("%s/%d", pfx, i), 1)
	}
}

// lateTxn turns the next KV transaction of a client, once armed, into one
// that the server applies late: the caller gets Unavailable at once, and the
// transaction is sent only when release is closed, as a request that timed
// out on the client but was still in flight to the server would be.
type lateTxn struct {
	armed   atomic.Bool
	release chan struct{}
	applied chan error
	wg      sync.WaitGroup
}

func (l *lateTxn) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method != "/etcdserverpb.KV/Txn" || !l.armed.CompareAndSwap(true, false) {
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				<-l.release
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				l.applied <- invoker(ctx, method, req, reply, cc, opts...)
			}()
			return status.Error(codes.Unavailable, "test: request timed out on the client, still in flight")
		}))
}

// A Lock whose enqueue failed on the client may still be applied by the
// server after the Lock cleaned up. The session deletes such a key while
// nobody uses it, so that it cannot hold the lock name for the life of the
// session (it stayed until the session ended).
func TestSessionLateEnqueueIsDeleted(t *testing.T) {
	pfx := etcdtest.Begin(t)
	late := &lateTxn{release: make(chan struct{}), applied: make(chan error, 1)}
	c := sharedClient(t, late.option)
	observer := sharedClient(t)
	s := newSession(t, c, concurrency.WithTTL(3))
	late.armed.Store(true)
	err := concurrency.NewMutex(s, pfx).Lock(t.Context())
	if err == nil {
		t.Fatal("Lock with a lost enqueue succeeded")
	}
	close(late.release)
	defer late.wg.Wait()
	if err := <-late.applied; err != nil {
		t.Fatalf("the late enqueue failed: %v", err)
	}
	// The late write is there, on the session's lease, in the queue...
	kvs := etcdtest.WaitKeys(t, observer, pfx, 1)
	if clientv3.LeaseID(kvs[0].Lease) != s.Lease() {
		t.Fatalf("the late key is on lease %x, want the session's %x", kvs[0].Lease, int64(s.Lease()))
	}
	// ...and the session deletes it after a renewal (every TTL/3 = 1 s).
	appeared := time.Now()
	etcdtest.WaitKeys(t, observer, pfx, 0)
	t.Logf("the late key was deleted %v after it appeared", time.Since(appeared).Round(time.Millisecond))
	// The name is usable by anyone.
	other := newSession(t, observer)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := concurrency.NewMutex(other, pfx).Lock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Orphan hands the lease over, as in etcd's package (etcd's Lock and
// Election services orphan sessions on leases their callers renew): Done
// closes, but Lock, Campaign, Proclaim, Unlock and Resign keep working while
// the lease lives. Once it is gone, Lock and Campaign fail with a clear
// error and leave no key, and a hold ends when its key goes.
func TestSessionOrphanedStaysUsable(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	grant, err := c.Grant(t.Context(), 30)
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(t, c, concurrency.WithLease(grant.ID))
	s.Orphan()
	select {
	case <-s.Done():
	default:
		t.Fatal("Done is not closed after Orphan")
	}
	m := concurrency.NewMutex(s, pfx+"/lock")
	if err := m.Lock(t.Context()); err != nil {
		t.Fatalf("Lock on an orphaned session: %v", err)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock on an orphaned session: %v", err)
	}
	e := concurrency.NewElection(s, pfx+"/elect")
	if err := e.Campaign(t.Context(), "a"); err != nil {
		t.Fatalf("Campaign on an orphaned session: %v", err)
	}
	if err := e.Proclaim(t.Context(), "b"); err != nil {
		t.Fatalf("Proclaim on an orphaned session: %v", err)
	}
	if err := e.Resign(t.Context()); err != nil {
		t.Fatalf("Resign on an orphaned session: %v", err)
	}

	// A hold on the orphaned session ends when the lease does.
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hold := m.Ctx()
	if _, err := c.Revoke(t.Context(), grant.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hold.Done():
		if cause := context.Cause(hold); !errors.Is(cause, concurrency.ErrLockLost) {
			t.Errorf("hold cause = %v, want ErrLockLost", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the hold on the orphaned session did not end when its lease was revoked")
	}
	m.Unlock(t.Context())
	err = concurrency.NewMutex(s, pfx+"/after").Lock(t.Context())
	if !errors.Is(err, concurrency.ErrSessionExpired) || !errors.Is(err, concurrency.ErrLeaseNotFound) {
		t.Fatalf("Lock after the lease was revoked = %v, want ErrSessionExpired and ErrLeaseNotFound", err)
	}
	if err := concurrency.NewElection(s, pfx+"/after").Campaign(t.Context(), "x"); !errors.Is(err, concurrency.ErrLeaseNotFound) {
		t.Fatalf("Campaign after the lease was revoked = %v, want ErrLeaseNotFound", err)
	}
	if n := len(etcdtest.Keys(t, c, pfx+"/after")); n != 0 {
		t.Fatalf("%d keys left by the refused Lock and Campaign", n)
	}
}

// Releases survive a blip: Unlock, Resign and Close retry while the
// connection is down or the member answers Unavailable. A release that
// fails (its ctx ended while the member was unreachable) keeps its state,
// and the same call with a fresh ctx finishes it once the network is back.
func TestSessionReleasesRetry(t *testing.T) {
	pfx := etcdtest.Begin(t)
	clus := bridgeCluster(t)
	c := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	observer := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
	s := newSession(t, c)
	m := concurrency.NewMutex(s, pfx+"/lock")
	e := concurrency.NewElection(s, pfx+"/elect")
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.Campaign(t.Context(), "v"); err != nil {
		t.Fatal(err)
	}

	// Cut: the calls fail when their ctx ends, and keep their state.
	etcdtest.Cut(t, clus.Members[0])
	for name, release := range map[string]func(context.Context) error{"Unlock": m.Unlock, "Resign": e.Resign} {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		if err := release(ctx); err == nil {
			t.Fatalf("%s succeeded while its member was blackholed", name)
		}
		cancel()
	}
	if m.Token() == 0 || e.Rev() == 0 {
		t.Fatal("a failed release dropped its state")
	}
	// Back, with every connection dropped: the retried calls go through.
	clus.Members[0].Bridge().Unblackhole()
	clus.Members[0].Bridge().DropConnections()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the network came back: %v", err)
	}
	clus.Members[0].Bridge().DropConnections()
	if err := e.Resign(ctx); err != nil {
		t.Fatalf("Resign after the network came back: %v", err)
	}
	if n := len(etcdtest.Keys(t, observer, pfx+"/lock")) + len(etcdtest.Keys(t, observer, pfx+"/elect")); n != 0 {
		t.Fatalf("%d keys left after the releases", n)
	}
	clus.Members[0].Bridge().DropConnections()
	if err := s.Close(); err != nil {
		t.Fatalf("Close right after the connections dropped: %v", err)
	}
	if resp, err := observer.TimeToLive(t.Context(), s.Lease()); err != nil || resp.TTL != -1 {
		t.Fatalf("the lease outlived Close: %v, %v", resp, err)
	}
}

// unavailable makes the next n KV transactions of a client fail with
// Unavailable before they are sent, as a blip's reconnecting connection
// answers.
type unavailable struct{ n atomic.Int64 }

func (u *unavailable) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == "/etcdserverpb.KV/Txn" && u.n.Add(-1) >= 0 {
				return status.Error(codes.Unavailable, "test: connection reset")
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

// Unlock and Resign retry a transport's Unavailable answers, which a call
// right after a blip gets (it failed, before, in 2 of 3 runs).
func TestSessionReleasesRetryUnavailable(t *testing.T) {
	pfx := etcdtest.Begin(t)
	var u unavailable
	c := sharedClient(t, u.option)
	s := newSession(t, c)
	m := concurrency.NewMutex(s, pfx+"/lock")
	e := concurrency.NewElection(s, pfx+"/elect")
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.Campaign(t.Context(), "v"); err != nil {
		t.Fatal(err)
	}
	u.n.Store(3)
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock through 3 Unavailable answers: %v", err)
	}
	u.n.Store(3)
	if err := e.Resign(t.Context()); err != nil {
		t.Fatalf("Resign through 3 Unavailable answers: %v", err)
	}
	if n := len(etcdtest.Keys(t, c, pfx+"/lock")) + len(etcdtest.Keys(t, c, pfx+"/elect")); n != 0 {
		t.Fatalf("%d keys left after the releases", n)
	}
}

// hedgedTxns makes a client's enqueue slow in two ways at once: its first
// transaction is applied at once but its answer never comes (it waits
// for its attempt's ctx), and its second, once sent, is held back until
// release is closed, then applied; later ones pass. So the first attempt
// writes the key, request.Ask sends a second beside it, and the second
// lands after whatever came between.
type hedgedTxns struct {
	n       atomic.Int32
	release chan struct{}
	applied chan error
	wg      sync.WaitGroup
}

func (h *hedgedTxns) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method != "/etcdserverpb.KV/Txn" {
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			switch h.n.Add(1) {
			case 1:
				if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
					return err
				}
				<-ctx.Done() // applied, its answer lost
				return ctx.Err()
			case 2:
				h.wg.Add(1)
				go func() {
					defer h.wg.Done()
					<-h.release
					actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					defer cancel()
					h.applied <- invoker(actx, method, req, reply, cc, opts...)
				}()
				<-ctx.Done()
				return ctx.Err()
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

// A Lock whose ctx ends while its enqueue has two attempts out, the first
// applied (its answer lost) and the second not yet: the enqueue sent again
// in the background finds the key, which is deleted by revision; the
// second attempt, applied after that, writes the key anew on the live
// session. The session must delete it while nobody uses it (the key is
// suspect because its enqueue sent two attempts, although the resend found
// it), or it would hold the name until the session ends (checked: it
// stays when enqueue does not mark a key suspect after a second attempt).
func TestSessionHedgedEnqueueLandsAfterSettle(t *testing.T) {
	pfx := etcdtest.Begin(t)
	h := &hedgedTxns{release: make(chan struct{}), applied: make(chan error, 1)}
	c := sharedClient(t, h.option)
	observer := sharedClient(t)
	s := newSession(t, c, concurrency.WithTTL(3))
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	if err := concurrency.NewMutex(s, pfx).Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with its enqueue's answers lost = %v, want DeadlineExceeded", err)
	}
	defer h.wg.Wait()
	if n := h.n.Load(); n < 3 {
		t.Fatalf("%d transactions sent, want the first, a second attempt beside it and the resend", n)
	}
	// The resend found the first attempt's key and deleted it by revision.
	etcdtest.WaitKeys(t, observer, pfx, 0)
	close(h.release)
	if err := <-h.applied; err != nil {
		t.Fatalf("the held-back attempt failed: %v", err)
	}
	kvs := etcdtest.WaitKeys(t, observer, pfx, 1)
	if clientv3.LeaseID(kvs[0].Lease) != s.Lease() {
		t.Fatalf("the late key is on lease %x, want the session's %x", kvs[0].Lease, int64(s.Lease()))
	}
	appeared := time.Now()
	etcdtest.WaitKeys(t, observer, pfx, 0)
	t.Logf("the late key was deleted %v after it appeared", time.Since(appeared).Round(time.Millisecond))
}
