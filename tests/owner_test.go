package concurrency_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// Inspect shows the owner recorded by each key's session, for every kind
// of key, and nil for a session without one; the record goes with the
// lease.
func TestOwnerInspect(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	a := concurrency.Owner{Host: "host-a", PID: 11, Label: "billing"}
	b := concurrency.ProcessOwner("reports")
	sa := newSession(t, c, concurrency.WithOwner(a))
	sb := newSession(t, c, concurrency.WithOwner(b))
	plain := newSession(t, c)

	// A semaphore and a reader of each owned session, an election with the
	// plain session's candidate behind an owned leader.
	for i, s := range []*concurrency.Session{sa, sb} {
		if err := concurrency.NewSemaphore(s, pfx+"/sem", 2).Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		if err := concurrency.NewRWMutex(s, pfx+"/rw").RLock(ctx); err != nil {
			t.Fatal(err)
		}
		etcdtest.WaitKeys(t, c, pfx+"/rw", i+1)
	}
	if err := concurrency.NewElection(sa, pfx+"/elect").Campaign(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	e := concurrency.NewElection(plain, pfx+"/elect")
	async(t, func() error { return e.Campaign(ctx, "next") })
	etcdtest.WaitKeys(t, c, pfx+"/elect", 2)

	for name, owners := range map[string][]*concurrency.Owner{
		"sem": {&a, &b}, "rw": {&a, &b}, "elect": {&a, nil},
	} {
		q, err := concurrency.Inspect(t.Context(), c, pfx+"/"+name)
		if err != nil {
			t.Fatal(err)
		}
		if len(q.Keys) != len(owners) {
			t.Fatalf("%s: %d keys, want %d", name, len(q.Keys), len(owners))
		}
		for i, k := range q.Keys {
			switch want := owners[i]; {
			case want == nil && k.Owner != nil:
				t.Errorf("%s key %d (plain session): owner %+v, want none", name, i, *k.Owner)
			case want != nil && (k.Owner == nil || *k.Owner != *want):
				t.Errorf("%s key %d: owner %v, want %+v", name, i, k.Owner, *want)
			}
		}
	}
	if b.Host == "" || b.PID == 0 || b.String() != "reports pid "+strconv.Itoa(b.PID)+" on "+b.Host {
		t.Errorf("ProcessOwner = %+v, String %q", b, b)
	}

	// The record is on the lease: Close takes it away.
	key := concurrency.OwnerPrefix + strconv.FormatInt(int64(sa.Lease()), 16)
	if n := countKey(t, c, key); n != 1 {
		t.Fatalf("owner record %s: %d keys, want 1", key, n)
	}
	if err := sa.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countKey(t, c, key); n != 0 {
		t.Fatalf("owner record %s outlived Close", key)
	}
}

// A Mutex of an owned session keeps an empty key value, and so
// interoperates with etcd's own Mutex on the same name.
func TestOwnerKeepsMutexInterop(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c, concurrency.WithOwner(concurrency.ProcessOwner("interop")))
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 1 || len(kvs[0].Value) != 0 {
		t.Fatalf("keys %v, want one empty key", kvs)
	}
	es, err := etcdconc.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	if err := etcdconc.NewMutex(es, pfx).TryLock(t.Context()); !errors.Is(err, etcdconc.ErrLocked) {
		t.Fatalf("etcd's TryLock while ours holds = %v, want ErrLocked", err)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// putHook runs f in place of each Put request of a client, with the
// request's invoker, and remembers the last lease granted.
type putHook struct {
	f       func(ctx context.Context, invoke func(context.Context) error) error
	granted atomic.Int64
}

func (h *putHook) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			invoke := func(ctx context.Context) error { return invoker(ctx, method, req, reply, cc, opts...) }
			if method == "/etcdserverpb.KV/Put" {
				return h.f(ctx, invoke)
			}
			err := invoke(ctx)
			if r, ok := reply.(*pb.LeaseGrantResponse); ok && err == nil {
				h.granted.Store(r.ID)
			}
			return err
		}))
}

// A session whose owner record is refused (a user without permission on
// OwnerPrefix) goes on without it, with a warning: its locks work, and
// Inspect shows no owner.
func TestOwnerRefused(t *testing.T) {
	pfx := etcdtest.Begin(t)
	h := putHook{f: func(context.Context, func(context.Context) error) error {
		return status.Error(codes.PermissionDenied, "test: permission denied")
	}}
	logs, observed := observer.New(zap.WarnLevel)
	c := sharedClient(t, h.option, func(cfg *clientv3.Config) { cfg.Logger = zap.New(logs) })
	s := newSession(t, c, concurrency.WithOwner(concurrency.ProcessOwner("denied")))
	if w := observed.FilterMessageSnippet("owner record was not written").All(); len(w) != 1 {
		t.Errorf("%d warnings about the refused record, want 1: %v", len(w), observed.All())
	}
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatalf("Lock on a session whose owner record was refused: %v", err)
	}
	q, err := concurrency.Inspect(t.Context(), c, pfx)
	if err != nil || len(q.Keys) != 1 || q.Keys[0].Owner != nil {
		t.Fatalf("Inspect = %+v, %v; want one key without an owner", q, err)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A slow owner put never costs the session: it is given up after a third
// of the TTL, before the first renewal is due. (Unbounded, a put of 2 s on
// a 3 s lease ended the session 0.7 s after NewSession returned.)
func TestOwnerSlowPut(t *testing.T) {
	etcdtest.Begin(t)
	h := putHook{f: func(ctx context.Context, invoke func(context.Context) error) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
		return invoke(ctx)
	}}
	c := sharedClient(t, h.option)
	s := newSession(t, c, concurrency.WithTTL(3), concurrency.WithOwner(concurrency.ProcessOwner("slow")))
	first := s.Deadline()
	// Two renewals later, the session still lives.
	etcdtest.Eventually(t, 10*time.Second, func() bool { return s.Deadline().After(first.Add(time.Second)) || s.Ctx().Err() != nil },
		"two renewals of the session")
	if err := context.Cause(s.Ctx()); err != nil {
		t.Fatalf("the session ended after a slow owner record: %v", err)
	}
}

// When NewSession's context ends during the owner put (here after etcd
// applied it, the answer lost), NewSession fails and leaves nothing: the
// lease it granted is revoked; on an adopted lease, which lives on, the
// record it wrote is deleted.
func TestOwnerContextEndsDuringPut(t *testing.T) {
	etcdtest.Begin(t)
	var stop context.CancelFunc // NewSession's context, in turn
	h := putHook{f: func(ctx context.Context, invoke func(context.Context) error) error {
		err := invoke(ctx)
		stop()
		if err != nil {
			return err
		}
		return context.Canceled
	}}
	c := sharedClient(t, h.option)
	owner := concurrency.WithOwner(concurrency.ProcessOwner("cancelled"))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stop = cancel
	if s, err := concurrency.NewSession(c, concurrency.WithContext(ctx), owner); err == nil || s != nil {
		t.Fatalf("NewSession = %v, %v; want an error", s, err)
	}
	id := clientv3.LeaseID(h.granted.Load())
	if resp, err := c.TimeToLive(t.Context(), id); id == clientv3.NoLease || err != nil || resp.TTL != -1 {
		t.Fatalf("the lease %x of the failed NewSession: %v, %v; want revoked", int64(id), resp, err)
	}

	grant, err := c.Grant(t.Context(), 30)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Revoke(context.Background(), grant.ID)
	actx, acancel := context.WithCancel(t.Context())
	defer acancel()
	stop = acancel
	if s, err := concurrency.NewSession(c, concurrency.WithContext(actx), concurrency.WithLease(grant.ID), owner); err == nil || s != nil {
		t.Fatalf("NewSession on an adopted lease = %v, %v; want an error", s, err)
	}
	if n := countKey(t, c, concurrency.OwnerPrefix+strconv.FormatInt(int64(grant.ID), 16)); n != 0 {
		t.Fatal("the owner record of the failed NewSession is left on the adopted lease")
	}
	if resp, err := c.TimeToLive(t.Context(), grant.ID); err != nil || resp.TTL <= 0 {
		t.Fatalf("the adopted lease: %v, %v; want it alive", resp, err)
	}
}

// A record too large is refused before any round trip, by NewSession and
// at once by Lead.
func TestOwnerTooLarge(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	huge := concurrency.Owner{Label: strings.Repeat("x", 2000)}
	if _, err := concurrency.NewSession(c, concurrency.WithOwner(huge)); !errors.Is(err, concurrency.ErrInvalidOwner) {
		t.Fatalf("NewSession with a 2000-byte label = %v, want ErrInvalidOwner", err)
	}
	err := concurrency.Lead(t.Context(), c, pfx, "v", func(context.Context, *concurrency.Election) error {
		t.Error("Lead ran fn with an invalid owner")
		return nil
	}, concurrency.WithLeadOwner(huge))
	if !errors.Is(err, concurrency.ErrInvalidOwner) {
		t.Fatalf("Lead with a 2000-byte label = %v, want ErrInvalidOwner", err)
	}
}

// Lead's sessions record WithLeadOwner: Inspect shows who leads.
func TestOwnerLead(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	o := concurrency.Owner{Host: "scheduler-1", PID: 7, Label: "scheduler"}
	err := concurrency.Lead(t.Context(), c, pfx, "v", func(ctx context.Context, e *concurrency.Election) error {
		q, err := concurrency.Inspect(ctx, c, pfx)
		if err != nil {
			return err
		}
		if len(q.Keys) != 1 || q.Keys[0].Owner == nil || *q.Keys[0].Owner != o {
			t.Errorf("Inspect of the election = %+v, want one key owned by %+v", q.Keys, o)
		}
		return nil
	}, concurrency.WithLeadOwner(o), concurrency.WithLeadTTL(5))
	if err != nil {
		t.Fatal(err)
	}
}

func countKey(t *testing.T, c *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := c.Get(t.Context(), key, clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}
