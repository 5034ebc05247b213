package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// want is what a test expects of one key of a queue.
type want struct {
	kind  concurrency.KeyKind
	holds bool
	lease clientv3.LeaseID
	value string
}

// checkQueue inspects pfx and compares its keys with ws, in order, and the
// rest of each key with etcd's own view of it.
func checkQueue(t *testing.T, c *clientv3.Client, pfx string, ttl int64, ws ...want) *concurrency.Queue {
	t.Helper()
	q, err := concurrency.Inspect(t.Context(), c, pfx)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	kvs := etcdtest.Keys(t, c, pfx)
	if q.Name != pfx || len(q.Keys) != len(ws) || len(kvs) != len(ws) {
		t.Fatalf("Inspect(%s) = name %q, %d keys; want %d keys (etcd has %d)", pfx, q.Name, len(q.Keys), len(ws), len(kvs))
	}
	for i, k := range q.Keys {
		w, kv := ws[i], kvs[i]
		if k.Key != string(kv.Key) || k.CreateRevision != kv.CreateRevision || k.Position != i ||
			k.Kind != w.kind || k.Holds != w.holds || k.Lease != w.lease || k.Value != w.value {
			t.Errorf("key %d = %+v; want %s at %d, kind %v, holds %v, lease %x, value %q",
				i, k, kv.Key, kv.CreateRevision, w.kind, w.holds, int64(w.lease), w.value)
		}
		if k.CreateRevision > q.Revision {
			t.Errorf("key %d created at %d, after the read's revision %d", i, k.CreateRevision, q.Revision)
		}
		switch {
		case w.lease == clientv3.NoLease && k.TTL != -1:
			t.Errorf("key %d without a lease has TTL %d, want -1", i, k.TTL)
		case w.lease != clientv3.NoLease && (k.TTL <= 0 || k.TTL > ttl):
			t.Errorf("key %d has TTL %d, want in (0, %d]", i, k.TTL, ttl)
		}
	}
	return q
}

func TestInspectMutex(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ss := []*concurrency.Session{newSession(t, c, concurrency.WithTTL(30)), newSession(t, c, concurrency.WithTTL(30)), newSession(t, c, concurrency.WithTTL(30))}
	holder := concurrency.NewMutex(ss[0], pfx)
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range ss[1:] {
		m := concurrency.NewMutex(s, pfx)
		async(t, func() error { return m.Lock(ctx) })
		etcdtest.WaitKeys(t, c, pfx, i+2) // one at a time, so that the order is known
	}
	q := checkQueue(t, c, pfx, 30,
		want{concurrency.KindMutex, true, ss[0].Lease(), ""},
		want{concurrency.KindMutex, false, ss[1].Lease(), ""},
		want{concurrency.KindMutex, false, ss[2].Lease(), ""})
	if q.Keys[0].CreateRevision != holder.Token() || q.Keys[0].Key != holder.Key() {
		t.Errorf("holder %s at %d; Mutex has %s at %d", q.Keys[0].Key, q.Keys[0].CreateRevision, holder.Key(), holder.Token())
	}
	if h, w := q.Holders(), q.Waiters(); len(h) != 1 || len(w) != 2 || w[0].Position != 1 {
		t.Errorf("Holders %v, Waiters %v; want 1 and 2", h, w)
	}
	if got := fmt.Sprint(q.Keys[0].Kind); got != "mutex" {
		t.Errorf("KindMutex prints as %q", got)
	}
}

func TestInspectSemaphore(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s := newSession(t, c, concurrency.WithTTL(20))
	var ms []*concurrency.Semaphore
	for i := range 3 {
		m := concurrency.NewSemaphore(s, pfx, 2)
		ms = append(ms, m)
		async(t, func() error { return m.Acquire(ctx) })
		etcdtest.WaitKeys(t, c, pfx, i+1)
	}
	q := checkQueue(t, c, pfx, 20,
		want{concurrency.KindSemaphore, true, s.Lease(), "2"},
		want{concurrency.KindSemaphore, true, s.Lease(), "2"},
		want{concurrency.KindSemaphore, false, s.Lease(), "2"})
	for i, k := range q.Keys {
		// The key can be in etcd before its Acquire has read the enqueue's
		// answer (seen under -race on a loaded machine): Key is "" until then.
		etcdtest.Eventually(t, 10*time.Second, func() bool { return ms[i].Key() != "" }, "Semaphore %d has no key", i)
		if k.Limit != 2 || k.Key != ms[i].Key() {
			t.Errorf("key %d: %s limit %d; want %s limit 2", i, k.Key, k.Limit, ms[i].Key())
		}
	}
}

func TestInspectRWMutex(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s := newSession(t, c, concurrency.WithTTL(20))
	// Two readers hold; a writer waits for them; a reader behind the
	// writer waits for it.
	for i, write := range []bool{false, false, true, false} {
		m := concurrency.NewRWMutex(s, pfx)
		if write {
			async(t, func() error { return m.Lock(ctx) })
		} else {
			async(t, func() error { return m.RLock(ctx) })
		}
		etcdtest.WaitKeys(t, c, pfx, i+1)
	}
	checkQueue(t, c, pfx, 20,
		want{concurrency.KindReader, true, s.Lease(), ""},
		want{concurrency.KindReader, true, s.Lease(), ""},
		want{concurrency.KindWriter, false, s.Lease(), ""},
		want{concurrency.KindReader, false, s.Lease(), ""})
}

func TestInspectElection(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s1, s2 := newSession(t, c, concurrency.WithTTL(20)), newSession(t, c, concurrency.WithTTL(20))
	e1 := concurrency.NewElection(s1, pfx)
	if err := e1.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	e2 := concurrency.NewElection(s2, pfx)
	async(t, func() error { return e2.Campaign(ctx, "b") })
	etcdtest.WaitKeys(t, c, pfx, 2)
	q := checkQueue(t, c, pfx, 20,
		want{concurrency.KindMutex, true, s1.Lease(), "a"},
		want{concurrency.KindMutex, false, s2.Lease(), "b"})
	if q.Keys[0].CreateRevision != e1.Rev() {
		t.Errorf("leader's create revision %d, Election.Rev %d", q.Keys[0].CreateRevision, e1.Rev())
	}
}

// A key of no known kind, without a lease, counts as a writer: it holds
// when oldest and blocks every key behind it, readers included; its TTL
// is -1.
func TestInspectOther(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	if _, err := c.Put(t.Context(), pfx+"/by-hand", "x"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Delete(context.Background(), pfx+"/by-hand") })
	s := newSession(t, c, concurrency.WithTTL(20))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	m := concurrency.NewMutex(s, pfx)
	async(t, func() error { return m.Lock(ctx) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	checkQueue(t, c, pfx, 20,
		want{concurrency.KindOther, true, clientv3.NoLease, "x"},
		want{concurrency.KindMutex, false, s.Lease(), ""})

	// A revoked lease's key is deleted with it; a lease gone between the
	// read of the keys and its TimeToLive would read -1 in the same way.
	if _, err := c.Revoke(t.Context(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	etcdtest.WaitKeys(t, c, pfx, 1)
	checkQueue(t, c, pfx, 20, want{concurrency.KindOther, true, clientv3.NoLease, "x"})
}

func TestInspectErrors(t *testing.T) {
	etcdtest.Begin(t)
	c := sharedClient(t)
	if _, err := concurrency.Inspect(t.Context(), nil, "x"); !errors.Is(err, concurrency.ErrNilClient) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := concurrency.Inspect(t.Context(), c, ""); !errors.Is(err, concurrency.ErrInvalidPrefix) {
		t.Errorf("empty name: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if q, err := concurrency.Inspect(ctx, c, "x"); !errors.Is(err, ctx.Err()) || q != nil {
		t.Errorf("cancelled ctx: %v, %v", q, err)
	}
	q, err := concurrency.Inspect(t.Context(), c, "/test/no such lock")
	if err != nil || len(q.Keys) != 0 || q.Revision == 0 {
		t.Errorf("free lock: %+v, %v", q, err)
	}
}
