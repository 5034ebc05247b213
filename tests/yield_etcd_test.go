package concurrency_test

import (
	"context"
	"testing"
	"time"

	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// RequestYield against holders of etcd's own package, which cannot opt
// in: the holder keeps its lock and its Unlock works; the waiter behind
// it (this package's, WithYield) is not asked, and once granted its hold
// is not ended by the request meant for etcd's holder. An Election leader
// of etcd's package stays the leader (Leader still shows its value) and
// resigns as usual; closing its session takes the request with it.
func TestYieldEtcdHolder(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	_, em := etcdHolder(t, pfx)
	wm := concurrency.NewMutex(newSession(t, c, concurrency.WithYield()), pfx)
	werr := async(t, func() error { return wm.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	asked, err := concurrency.RequestYield(t.Context(), c, pfx)
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0].Key != em.Key() {
		t.Fatalf("RequestYield asked %v, want etcd's holder %s alone", asked, em.Key())
	}
	// etcd's holder still holds: its guarded write commits.
	if resp, err := c.Txn(t.Context()).If(em.IsOwner()).Commit(); err != nil || !resp.Succeeded {
		t.Fatalf("etcd's holder's IsOwner after the request: %v %v", resp, err)
	}
	if keys := etcdtest.Keys(t, c, pfx); len(keys) != 2 {
		t.Fatalf("keys under the name after the request: %v, want the holder's and the waiter's", keys)
	}
	if err := em.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, werr, "the waiter behind etcd's holder"); err != nil {
		t.Fatal(err)
	}
	hctx := wm.Ctx()
	// The request was for etcd's key: the new hold is not asked. It shows
	// in Inspect (a request would show within the read), and the hold
	// lives on through a later read of its key.
	if yieldRequested(t, c, pfx, wm.Key()) {
		t.Fatal("the waiter's hold shows a yield request meant for etcd's holder")
	}
	if _, err := wm.Txn(t.Context()).Commit(); err != nil || hctx.Err() != nil {
		t.Fatalf("the waiter's hold after etcd's release: txn %v, ctx %v", err, context.Cause(hctx))
	}
	if err := wm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}

	name := pfx + "-election"
	ees, err := etcdconc.NewSession(sharedClient(t))
	if err != nil {
		t.Fatal(err)
	}
	el := etcdconc.NewElection(ees, name)
	if err := el.Campaign(t.Context(), "v1"); err != nil {
		t.Fatal(err)
	}
	asked, err = concurrency.RequestYield(t.Context(), c, name)
	if err != nil || len(asked) != 1 {
		t.Fatalf("RequestYield on etcd's election: %v %v", asked, err)
	}
	if l, err := el.Leader(t.Context()); err != nil || string(l.Kvs[0].Value) != "v1" {
		t.Fatalf("etcd's Leader after the request: %v %v", l, err)
	}
	if err := el.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := ees.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(t.Context(), concurrency.YieldPrefix+string(asked[0].Key))
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the request on etcd's leader after its session closed: %v %v, want it gone with the lease", resp, err)
	}
}
