package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// A session WithMaxHold and WithHealthCheck (and WithOwner): its holds'
// keys are on leases of their own, while the health and owner records are
// on the session's lease. Inspect must still show, for each held key,
// the failing checks (the cause issue 29 asks it to show) and the owner.
func TestHealthInspectMaxHold(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	owner := concurrency.Owner{Host: "host-r29", PID: 29, Label: "review"}
	sick := errors.New("sick")
	s := newSession(t, c, concurrency.WithMaxHold(time.Minute), concurrency.WithOwner(owner),
		concurrency.WithHealthCheck(200*time.Millisecond, 1000, func(context.Context) error { return sick }))
	m := concurrency.NewMutex(s, pfx+"/m")
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	sem := concurrency.NewSemaphore(s, pfx+"/s", 2)
	if err := sem.AcquireN(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		resp, err := c.Get(t.Context(), fmt.Sprintf("%s%x", concurrency.HealthPrefix, int64(s.Lease())))
		return err == nil && len(resp.Kvs) == 1
	}, "no health record for the session's failing checks")
	for _, name := range []string{pfx + "/m", pfx + "/s"} {
		q, err := concurrency.Inspect(t.Context(), c, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(q.Keys) != 1 {
			t.Fatalf("%s: keys %+v, want the holder's", name, q.Keys)
		}
		k := q.Keys[0]
		if k.Lease == s.Lease() {
			t.Fatalf("%s: the key is on the session's lease, want its max hold's", name)
		}
		if k.Health == nil || k.Health.Err != sick.Error() {
			t.Errorf("%s: Inspect's Health = %+v, want the session's failing checks", name, k.Health)
		}
		if k.Owner == nil || k.Owner.Host != owner.Host {
			t.Errorf("%s: Inspect's Owner = %+v, want %+v", name, k.Owner, owner)
		}
	}
	m.Unlock(t.Context())
	sem.Release(t.Context())
}
