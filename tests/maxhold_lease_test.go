package concurrency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// A hold WithMaxHold whose own lease (the one Inspect shows for its key)
// is revoked from outside loses its key with that lease. The hold's cause
// and the metrics must say the lease went (lost_lease), as they do for a
// hold on the session's lease, not that someone deleted the key.
func TestMaxHoldLeaseRevokedCause(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	metrics, reg := newMetrics(t)
	s := newSession(t, c, concurrency.WithMetrics(metrics), concurrency.WithMaxHold(time.Minute))
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hold := m.Ctx()
	lease := ownLease(t, c, s, m.Key(), m.Token(), 60)
	if _, err := c.Revoke(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hold.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("hold alive 10 s after its lease was revoked")
	}
	if cause := context.Cause(hold); !errors.Is(cause, concurrency.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	eventually(t, reg, "concurrency_lock_holds_ended_total", map[string]string{"kind": "mutex", "cause": "lost_lease"}, func(v float64) bool { return v == 1 })
	if s.Ctx().Err() != nil {
		t.Fatalf("the session ended: %v", context.Cause(s.Ctx()))
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
