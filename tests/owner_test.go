package concurrency_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
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

// failPuts makes a client's Put requests fail with PermissionDenied, as
// on a cluster where the user may not write OwnerPrefix.
func failPuts(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == "/etcdserverpb.KV/Put" {
				return status.Error(codes.PermissionDenied, "test: permission denied")
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

// A session whose owner record is refused goes on without it: its locks
// work, and Inspect shows no owner. A record too large is refused before
// any round trip, by NewSession and at once by Lead.
func TestOwnerErrors(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t, failPuts)
	s := newSession(t, c, concurrency.WithOwner(concurrency.ProcessOwner("denied")))
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatalf("Lock on a session whose owner record was refused: %v", err)
	}
	q, err := concurrency.Inspect(t.Context(), c, pfx)
	if err != nil || len(q.Keys) != 1 || q.Keys[0].Owner != nil {
		t.Fatalf("Inspect = %+v, %v; want one key without an owner", q, err)
	}
	if n := countKey(t, c, concurrency.OwnerPrefix+strconv.FormatInt(int64(s.Lease()), 16)); n != 0 {
		t.Fatalf("a refused owner record exists")
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}

	huge := concurrency.Owner{Label: strings.Repeat("x", 2000)}
	if _, err := concurrency.NewSession(c, concurrency.WithOwner(huge)); !errors.Is(err, concurrency.ErrInvalidOwner) {
		t.Fatalf("NewSession with a 2000-byte label = %v, want ErrInvalidOwner", err)
	}
	err = concurrency.Lead(t.Context(), c, pfx+"/lead", "v", func(context.Context, *concurrency.Election) error {
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
