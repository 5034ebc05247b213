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

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
)

// acquireAsync runs m.Acquire(ctx) in a goroutine that the test waits for.
func acquireAsync(t *testing.T, ctx context.Context, m *concurrency.Semaphore) <-chan error {
	t.Helper()
	return async(t, func() error { return m.Acquire(ctx) })
}

// Never more than limit holders, and everyone gets a turn.
func TestSemaphoreLimit(t *testing.T) {
	pfx := etcdtest.Begin(t)
	const limit, workers, rounds = 3, 16, 6
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for i := range workers {
		// Each worker talks to one member, so that a waiter's watch and
		// reads meet members that lag one another.
		c := etcdtest.NewClient(t, etcdtest.Endpoints()[i%3:i%3+1])
		m := concurrency.NewSemaphore(newSession(t, c), pfx, limit)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				err := m.Do(ctx, func(context.Context) error {
					n := inside.Add(1)
					for {
						old := most.Load()
						if n <= old || most.CompareAndSwap(old, n) {
							break
						}
					}
					// Hold until another holder is inside, or 250 ms: only
					// the first waiter watches the name's deletions, so
					// free permits are taken one handoff after another;
					// a hold shorter than a handoff (2 ms under -race) would
					// never overlap the next, and prove nothing.
					deadline := time.Now().Add(250 * time.Millisecond)
					for inside.Load() < 2 && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
					inside.Add(-1)
					return nil
				})
				if err != nil {
					t.Errorf("worker %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if most.Load() > limit {
		t.Fatalf("%d holders at once, limit %d", most.Load(), limit)
	}
	if most.Load() < 2 {
		t.Errorf("at most %d holder at once: the semaphore did not let holders in together", most.Load())
	}
	if n := len(etcdtest.Keys(t, sharedClient(t), pfx)); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

// Permits go in create-revision order, whichever holder leaves: the first
// waiter's turn comes with any holder's release (here the oldest's, whose
// key it does not watch one to one) or its lease's end, and a waiter that
// moved up behind a new holder is told (see promote).
func TestSemaphoreFIFO(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	const limit = 2
	sems := make([]*concurrency.Semaphore, 5)
	sessions := make([]*concurrency.Session, 5)
	for i := range sems {
		sessions[i] = newSession(t, c)
		sems[i] = concurrency.NewSemaphore(sessions[i], pfx, limit)
	}
	for i := range limit {
		if err := sems[i].Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	var errcs []<-chan error
	for i := limit; i < len(sems); i++ {
		errcs = append(errcs, acquireAsync(t, t.Context(), sems[i]))
		etcdtest.WaitKeys(t, c, pfx, i+1)
	}
	expectOnly := func(want int) {
		t.Helper()
		if err := within(t, 10*time.Second, errcs[want-limit], fmt.Sprintf("waiter %d", want)); err != nil {
			t.Fatalf("waiter %d: %v", want, err)
		}
		for i := want + 1; i < len(sems); i++ {
			select {
			case err := <-errcs[i-limit]:
				t.Fatalf("waiter %d acquired (%v) before waiter %d's turn", i, err, want)
			default:
			}
		}
	}
	// The oldest holder leaves: the first waiter (2) watches the name's keys.
	if err := sems[0].Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	expectOnly(2)
	// Holder 1 leaves: waiter 3 watched waiter 2, which now holds and told it.
	if err := sems[1].Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	expectOnly(3)
	// Holder 2's lease is revoked: waiter 4 gets its turn.
	if _, err := c.Revoke(t.Context(), sessions[2].Lease()); err != nil {
		t.Fatal(err)
	}
	expectOnly(4)
	for _, m := range sems[3:] {
		if err := m.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// Several Semaphores on one session hold one permit each, and TryAcquire
// misses with ErrLocked once all are taken, leaving nothing behind.
func TestSemaphoreSharedSession(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	a, b, extra := concurrency.NewSemaphore(s, pfx, 2), concurrency.NewSemaphore(s, pfx, 2), concurrency.NewSemaphore(s, pfx, 2)
	if err := a.TryAcquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.TryAcquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	if a.Key() == b.Key() || a.Token() == b.Token() {
		t.Fatalf("two Semaphores of one session share key %q", a.Key())
	}
	if err := extra.TryAcquire(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryAcquire with every permit taken = %v, want ErrLocked", err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 2 {
		t.Fatalf("%d keys after the miss, want 2", n)
	}
	// Guarded writes, and the hold's context.
	if _, err := a.Txn(t.Context()).Then(clientv3.OpPut(pfx+"-data", "x")).Commit(); err != nil {
		t.Fatal(err)
	}
	hold := a.Ctx()
	if _, err := c.Delete(t.Context(), a.Key()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hold.Done():
		if !errors.Is(context.Cause(hold), concurrency.ErrLockLost) {
			t.Fatalf("cause %v, want ErrLockLost", context.Cause(hold))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the permit's context did not end when its key was deleted")
	}
	if _, err := a.Txn(t.Context()).Then(clientv3.OpPut(pfx+"-data", "y")).Commit(); !errors.Is(err, concurrency.ErrLockLost) {
		t.Fatalf("guarded Txn after loss = %v, want ErrLockLost", err)
	}
	a.Release(t.Context())
	b.Release(t.Context())
}

// The limit is agreed: a Semaphore with another limit, or on a name that a
// Mutex uses, is refused with a clear error and leaves no key; the name
// stays usable.
func TestSemaphoreMismatch(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	two := concurrency.NewSemaphore(s, pfx, 2)
	if err := two.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	three := concurrency.NewSemaphore(newSession(t, c), pfx, 3)
	if err := three.Acquire(t.Context()); !errors.Is(err, concurrency.ErrLimitMismatch) {
		t.Fatalf("Acquire with another limit = %v, want ErrLimitMismatch", err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 1 {
		t.Fatalf("%d keys after the refusal, want 1", n)
	}
	if err := two.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The last user left: the next one sets the limit.
	if err := three.Acquire(t.Context()); err != nil {
		t.Fatalf("Acquire once the name was free = %v", err)
	}
	three.Release(t.Context())

	mutexName := pfx + "-mutex"
	m := concurrency.NewMutex(s, mutexName)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := concurrency.NewSemaphore(newSession(t, c), mutexName, 2).TryAcquire(t.Context()); !errors.Is(err, concurrency.ErrLockKind) {
		t.Fatalf("a Semaphore on a Mutex's name = %v, want ErrLockKind", err)
	}
	if n := len(etcdtest.Keys(t, c, mutexName)); n != 1 {
		t.Fatalf("%d keys under the Mutex's name, want its own", n)
	}
	m.Unlock(t.Context())
}

func TestSemaphoreBadInput(t *testing.T) {
	pfx := etcdtest.Begin(t)
	s := newSession(t, sharedClient(t))
	for _, tc := range []struct {
		m    *concurrency.Semaphore
		want error
	}{
		{concurrency.NewSemaphore(nil, pfx, 1), concurrency.ErrNilSession},
		{concurrency.NewSemaphore(s, "", 1), concurrency.ErrInvalidPrefix},
		{concurrency.NewSemaphore(s, pfx, 0), concurrency.ErrInvalidLimit},
		{concurrency.NewSemaphore(s, pfx, -2), concurrency.ErrInvalidLimit},
	} {
		if err := tc.m.Acquire(t.Context()); !errors.Is(err, tc.want) {
			t.Errorf("Acquire = %v, want %v", err, tc.want)
		}
		if err := tc.m.TryAcquire(t.Context()); !errors.Is(err, tc.want) {
			t.Errorf("TryAcquire = %v, want %v", err, tc.want)
		}
		if err := tc.m.Release(t.Context()); !errors.Is(err, tc.want) {
			t.Errorf("Release = %v, want %v", err, tc.want)
		}
	}
	if n := len(etcdtest.Keys(t, sharedClient(t), pfx)); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

// A waiter whose session ends returns at once; a cancelled one leaves no
// key.
func TestSemaphoreWaiterEnds(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	holder := concurrency.NewSemaphore(newSession(t, c), pfx, 1)
	if err := holder.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	ws := newSession(t, c)
	errc := acquireAsync(t, t.Context(), concurrency.NewSemaphore(ws, pfx, 1))
	etcdtest.WaitKeys(t, c, pfx, 2)
	ws.Close()
	if err := within(t, 5*time.Second, errc, "waiter"); !errors.Is(err, concurrency.ErrSessionExpired) {
		t.Fatalf("waiter = %v, want ErrSessionExpired", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc = acquireAsync(t, ctx, concurrency.NewSemaphore(newSession(t, c), pfx, 1))
	etcdtest.WaitKeys(t, c, pfx, 2)
	cancel()
	if err := within(t, 5*time.Second, errc, "waiter"); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter = %v, want Canceled", err)
	}
	etcdtest.WaitKeys(t, c, pfx, 1)
	holder.Release(t.Context())
}
