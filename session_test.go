package concurrency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
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

// A session that holds a lock notices a revoke from outside within
// milliseconds, through the watch on its lock key, whether or not anyone
// asked for the hold's context.
func TestSessionRevokedWhileHolding(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	other := sharedClient(t)
	s := newSession(t, c) // TTL 60 s: the next renewal is 20 s away
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Revoke(t.Context(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5 s after the lease was revoked")
	}
	took := time.Since(revoked)
	if !errors.Is(context.Cause(s.Ctx()), concurrency.ErrSessionExpired) {
		t.Fatalf("cause = %v", context.Cause(s.Ctx()))
	}
	if took > 100*time.Millisecond {
		t.Errorf("session ended %v after the revoke, want within 100 ms", took)
	}
	t.Logf("session ended %v after the revoke", took)
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// When keepalives stop being answered, the session ends by its conservative
// deadline: before the server expires the lease, so before the lock key
// disappears.
func TestSessionDeadlineBeforeServerExpiry(t *testing.T) {
	etcdtest.Begin(t)
	clus := bridgeCluster(t)
	holder := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	observer := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
	pfx := "/deadline"
	s := newSession(t, holder, concurrency.WithTTL(3))
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hold := m.Ctx()
	clus.Members[0].Bridge().Blackhole()
	defer clus.Members[0].Bridge().Unblackhole()

	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("session did not end within 10 s of its member being blackholed")
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
