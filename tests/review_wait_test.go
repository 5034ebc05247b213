package concurrency_test

import (
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
)

// The wait's rewrite for heap per waiter (issue 30), reviewed: one probe
// per watch stream, the session's list of its waits' watches, the gate
// that excludes a Mutex's own goroutines.

// A Mutex excludes its own goroutines "as sync.Mutex does". Its channel of
// one token handed the Mutex to the goroutines waiting for it in turn (a
// channel's senders wait in order); the gate that replaced it wakes them
// all at Unlock and lets in whoever comes first, and the goroutine that
// unlocked comes first when it locks again at once: the one waiting may
// wait for ever while another goroutine of the Mutex loops.
func TestReviewWaitGateStarvation(t *testing.T) {
	pfx := etcdtest.Begin(t)
	s := newSession(t, sharedClient(t))
	m := concurrency.NewMutex(s, pfx)
	ctx := t.Context()
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	errc := async(t, func() error {
		if err := m.Lock(ctx); err != nil {
			return err
		}
		close(got)
		return m.Unlock(ctx)
	})
	const rounds = 100
	n := 0
	for ; n < rounds; n++ {
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
		default:
			continue
		}
		break
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, errc, "the second goroutine's Lock"); err != nil {
		t.Fatal(err)
	}
	if n == rounds {
		t.Errorf("a goroutine waiting for a Mutex was let in only after %d Unlocks of another goroutine that locked again at once", rounds)
	}
}
