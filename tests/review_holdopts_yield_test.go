package concurrency_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
)

// A session WithYield that locks many names, each asked to yield once and
// released: the requests' keys are left on the session's lease until the
// session ends, one per name.
func TestReviewHoldOptsYieldKeysLeftAfterUnlock(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c, concurrency.WithYield())
	const names = 5
	for i := 0; i < names; i++ {
		name := pfx + "/n" + string(rune('a'+i))
		m := concurrency.NewMutex(s, name)
		if err := m.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		hctx := m.Ctx()
		if _, err := concurrency.RequestYield(t.Context(), c, name); err != nil {
			t.Fatal(err)
		}
		select {
		case <-hctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("hold not ended 10 s after RequestYield")
		}
		if err := m.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := c.Get(t.Context(), concurrency.YieldPrefix+pfx, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		var ks []string
		for _, kv := range resp.Kvs {
			ks = append(ks, string(kv.Key))
		}
		t.Errorf("%d yield request keys left after every hold was released, session alive: %v", len(resp.Kvs), ks)
	}
}
