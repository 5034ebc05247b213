package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// acquireAsync runs m.Acquire(ctx) in a goroutine that the test waits for.
func acquireAsync(t *testing.T, ctx context.Context, m *concurrency.Semaphore) <-chan error {
	t.Helper()
	return async(t, func() error { return m.Acquire(ctx) })
}

// raiseTo raises most to n if n is larger.
func raiseTo(most *atomic.Int64, n int64) {
	for {
		old := most.Load()
		if n <= old || most.CompareAndSwap(old, n) {
			return
		}
	}
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
					raiseTo(&most, inside.Add(1))
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
	checkMost(t, pfx, most.Load(), limit, 2)
}

// checkMost fails the test if most permits were held at once, more than
// limit, or fewer than least (the holders did not overlap), or if keys
// are left under pfx.
func checkMost(t *testing.T, pfx string, most, limit, least int64) {
	t.Helper()
	if most > limit {
		t.Fatalf("%d permits held at once, limit %d", most, limit)
	}
	if most < least {
		t.Errorf("at most %d permits held at once: holders did not overlap", most)
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

// acquireNAsync runs m.AcquireN(ctx, n) in a goroutine that the test waits
// for.
func acquireNAsync(t *testing.T, ctx context.Context, m *concurrency.Semaphore, n int) <-chan error {
	t.Helper()
	return async(t, func() error { return m.AcquireN(ctx, n) })
}

// notYet fails the test if errc has answered.
func notYet(t *testing.T, errc <-chan error, what string) {
	t.Helper()
	select {
	case err := <-errc:
		t.Fatalf("%s returned (%v) before its turn", what, err)
	default:
	}
}

// semValues returns the values of the keys under pfx, oldest first.
func semValues(t *testing.T, c *clientv3.Client, pfx string) []string {
	t.Helper()
	var vs []string
	for _, kv := range etcdtest.Keys(t, c, pfx) {
		vs = append(vs, string(kv.Value))
	}
	return vs
}

// Weighted holders of random weights never hold more than the limit
// together, unit holders (Acquire) mix with them on the name, everyone
// gets a turn, and nothing is left behind.
func TestSemaphoreWeightedLimit(t *testing.T) {
	pfx := etcdtest.Begin(t)
	const limit, workers, rounds = 5, 10, 5
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	for i := range workers {
		c := etcdtest.NewClient(t, etcdtest.Endpoints()[i%3:i%3+1])
		m := concurrency.NewSemaphore(newSession(t, c), pfx, limit)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				n := 1 + (i+r)%3 // 1, 2 or 3 permits; worker 0's first is unit
				var err error
				if n == 1 && i%2 == 0 {
					err = m.Acquire(ctx)
				} else {
					err = m.AcquireN(ctx, n)
				}
				if err != nil {
					t.Errorf("worker %d: %v", i, err)
					return
				}
				if m.Weight() != n {
					t.Errorf("worker %d: Weight() = %d, acquired %d", i, m.Weight(), n)
				}
				raiseTo(&most, inside.Add(int64(n)))
				// Hold until someone else is inside too, or 250 ms (see
				// TestSemaphoreLimit).
				deadline := time.Now().Add(250 * time.Millisecond)
				for inside.Load() == int64(n) && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				inside.Add(-int64(n))
				if err := m.Release(ctx); err != nil {
					t.Errorf("worker %d: Release: %v", i, err)
					return
				}
				if m.Weight() != 0 {
					t.Errorf("worker %d: Weight() = %d after Release", i, m.Weight())
				}
			}
		}()
	}
	wg.Wait()
	checkMost(t, pfx, most.Load(), limit, 3)
}

// Strict FIFO, as golang.org/x/sync/semaphore.Weighted: a request that does
// not fit blocks the smaller ones behind it, which would fit; a request as
// large as the limit is not starved by unit requests queued after it. The
// weights are in etcd, and Inspect shows them.
func TestSemaphoreWeightedFIFO(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	const limit = 4
	sem := func() *concurrency.Semaphore { return concurrency.NewSemaphore(newSession(t, c), pfx, limit) }
	a, b, d, e := sem(), sem(), sem(), sem()
	if err := a.AcquireN(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	berr := acquireNAsync(t, t.Context(), b, 2) // does not fit: 3+2 > 4
	etcdtest.WaitKeys(t, c, pfx, 2)
	// One permit is free, but b is first: a unit request waits behind it.
	if err := sem().TryAcquire(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryAcquire behind a waiting weight-2 request = %v, want ErrLocked", err)
	}
	derr := acquireNAsync(t, t.Context(), d, 4) // the whole limit
	etcdtest.WaitKeys(t, c, pfx, 3)
	eerr := acquireNAsync(t, t.Context(), e, 1)
	etcdtest.WaitKeys(t, c, pfx, 4)
	if got, want := semValues(t, c, pfx), []string{"4/3", "4/2", "4/4", "4"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("values %q, want %q", got, want)
	}
	q, err := concurrency.Inspect(t.Context(), c, pfx)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []struct{ weight int }{{3}, {2}, {4}, {1}} {
		k := q.Keys[i]
		if k.Kind != concurrency.KindSemaphore || k.Limit != limit || k.Weight != w.weight || k.Holds != (i == 0) {
			t.Errorf("Inspect key %d = kind %v limit %d weight %d holds %v; want semaphore, %d, %d, %v", i, k.Kind, k.Limit, k.Weight, k.Holds, limit, w.weight, i == 0)
		}
	}
	notYet(t, berr, "the weight-2 request")
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, berr, "the weight-2 request"); err != nil {
		t.Fatal(err)
	}
	// 2 held, 2 free: the unit request behind the weight-4 one would fit,
	// but waits its turn.
	notYet(t, derr, "the weight-4 request")
	notYet(t, eerr, "the unit request behind the weight-4 one")
	if err := b.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, derr, "the weight-4 request"); err != nil {
		t.Fatal(err)
	}
	if d.Weight() != 4 {
		t.Fatalf("Weight() = %d, want 4", d.Weight())
	}
	notYet(t, eerr, "the unit request")
	if err := d.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, eerr, "the unit request"); err != nil {
		t.Fatal(err)
	}
	e.Release(t.Context())
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// Bad weights are refused before anything is written, and the limit guard
// keeps its promise with weighted keys on the name: a Semaphore with any
// other limit is refused without writing, whatever the digits (the guard
// compares values as bytes).
func TestSemaphoreWeightedRefused(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	m := concurrency.NewSemaphore(s, pfx, 4)
	for _, tc := range []struct {
		n    int
		want error
	}{{0, concurrency.ErrInvalidWeight}, {-1, concurrency.ErrInvalidWeight}, {5, concurrency.ErrWeightExceedsLimit}} {
		if err := m.AcquireN(t.Context(), tc.n); !errors.Is(err, tc.want) {
			t.Errorf("AcquireN(%d) = %v, want %v", tc.n, err, tc.want)
		}
		if err := m.TryAcquireN(t.Context(), tc.n); !errors.Is(err, tc.want) {
			t.Errorf("TryAcquireN(%d) = %v, want %v", tc.n, err, tc.want)
		}
	}
	if err := concurrency.NewSemaphore(nil, pfx, 4).AcquireN(t.Context(), 2); !errors.Is(err, concurrency.ErrNilSession) {
		t.Errorf("AcquireN on a nil session = %v, want ErrNilSession", err)
	}
	if err := concurrency.NewSemaphore(s, pfx, 0).TryAcquireN(t.Context(), 1); !errors.Is(err, concurrency.ErrInvalidLimit) {
		t.Errorf("TryAcquireN with limit 0 = %v, want ErrInvalidLimit", err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys after refused weights", n)
	}
	if err := m.AcquireN(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	for _, lim := range []int{1, 3, 5, 40, 41, 44, 400} {
		err := concurrency.NewSemaphore(newSession(t, c), pfx, lim).TryAcquire(t.Context())
		if !errors.Is(err, concurrency.ErrLimitMismatch) {
			t.Errorf("limit %d on a name of limit 4 = %v, want ErrLimitMismatch", lim, err)
		}
	}
	// An earlier version's Semaphore compares every value with its limit:
	// the weighted key refuses it. Its guard, by hand:
	resp, err := c.Txn(t.Context()).If(clientv3.Compare(clientv3.Value(pfx+"/"), "=", "4").WithPrefix()).
		Then(clientv3.OpPut(pfx+"/1-1", "4")).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("an earlier version's guard passed (%v) with a weighted key on the name", err)
	}
	if got := semValues(t, c, pfx); fmt.Sprint(got) != "[4/2]" {
		t.Fatalf("values %q after refusals, want only [4/2]", got)
	}
	// A unit holder with the same limit joins.
	u := concurrency.NewSemaphore(newSession(t, c), pfx, 4)
	if err := u.TryAcquire(t.Context()); err != nil {
		t.Fatalf("unit TryAcquire beside a weight-2 holder = %v", err)
	}
	if got := semValues(t, c, pfx); fmt.Sprint(got) != "[4/2 4]" {
		t.Fatalf("values %q, want [4/2 4]", got)
	}
	u.Release(t.Context())
	m.Release(t.Context())
}

// A larger limit lets waiters in at once, with no holder leaving: a waiter
// behind a single holder (which watches that key) and a first waiter
// behind several holders (which watches the name's range and its own key).
// The new limit is in every key, and Semaphores granted under it learn it.
func TestSemaphoreSetLimitGrow(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	sem := func(lim int) *concurrency.Semaphore { return concurrency.NewSemaphore(newSession(t, c), pfx, lim) }
	a, b := sem(1), sem(1)
	if err := a.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	berr := acquireAsync(t, t.Context(), b)
	etcdtest.WaitKeys(t, c, pfx, 2)
	// b waits behind one holder: 1 -> 2 lets it in.
	if err := sem(1).SetLimit(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, berr, "the waiter behind one holder"); err != nil {
		t.Fatal(err)
	}
	if b.Limit() != 2 {
		t.Errorf("b granted under limit 2 has Limit() %d", b.Limit())
	}
	// Two holders, a first waiter of weight 2 and one behind it, which
	// know the name's limit.
	w1, w2 := sem(2), sem(2)
	w1err := acquireNAsync(t, t.Context(), w1, 2)
	etcdtest.WaitKeys(t, c, pfx, 3)
	w2err := acquireAsync(t, t.Context(), w2)
	etcdtest.WaitKeys(t, c, pfx, 4)
	notYet(t, w1err, "the first waiter")
	if err := sem(1).SetLimit(t.Context(), 3); err != nil { // a stale limit may resize
		t.Fatalf("SetLimit(3) = %v", err)
	}
	// 2 held + 2 > 3: still waiting; 4 lets w1 in, then w2 waits (5 > 4).
	notYet(t, w1err, "the first waiter under limit 3")
	if got := semValues(t, c, pfx); fmt.Sprint(got) != "[3 3 3/2 3]" {
		t.Fatalf("values after SetLimit(3) = %q", got)
	}
	if err := a.SetLimit(t.Context(), 4); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, w1err, "the first waiter under limit 4"); err != nil {
		t.Fatal(err)
	}
	notYet(t, w2err, "the waiter behind (5 permits > 4)")
	if err := a.SetLimit(t.Context(), 5); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, w2err, "the last waiter under limit 5"); err != nil {
		t.Fatal(err)
	}
	if got := semValues(t, c, pfx); fmt.Sprint(got) != "[5 5 5/2 5]" {
		t.Fatalf("values after SetLimit(5) = %q", got)
	}
	for _, m := range []*concurrency.Semaphore{a, b, w1, w2} {
		if err := m.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// A smaller limit ends no hold: holders beyond it keep their permits (their
// contexts live, their guarded writes commit) and new grants wait until the
// holders fit. A client with the old limit is refused without writing; a
// limit below a key's weight, or another kind of lock's name, is refused and
// changes nothing.
func TestSemaphoreSetLimitShrink(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	sem := func(lim int) *concurrency.Semaphore { return concurrency.NewSemaphore(newSession(t, c), pfx, lim) }
	hs := []*concurrency.Semaphore{sem(4), sem(4), sem(4)}
	for i, m := range hs {
		if err := m.AcquireN(t.Context(), 1+i%2); err != nil { // weights 1, 2, 1
			t.Fatal(err)
		}
	}
	ctxs := []context.Context{hs[0].Ctx(), hs[1].Ctx(), hs[2].Ctx()}
	if err := hs[0].SetLimit(t.Context(), 1); !errors.Is(err, concurrency.ErrWeightExceedsLimit) {
		t.Fatalf("SetLimit below a holder's weight = %v, want ErrWeightExceedsLimit", err)
	}
	if got := semValues(t, c, pfx); fmt.Sprint(got) != "[4 4/2 4]" {
		t.Fatalf("values after a refused SetLimit = %q", got)
	}
	if err := hs[0].SetLimit(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	if got := semValues(t, c, pfx); fmt.Sprint(got) != "[2 2/2 2]" {
		t.Fatalf("values after SetLimit(2) = %q", got)
	}
	// 4 permits held under a limit of 2: every hold goes on.
	for i, m := range hs {
		if ctxs[i].Err() != nil {
			t.Fatalf("holder %d lost its hold to the shrink: %v", i, context.Cause(ctxs[i]))
		}
		if _, err := m.Txn(t.Context()).Then(clientv3.OpPut(pfx+"-data", fmt.Sprint(i))).Commit(); err != nil {
			t.Fatalf("holder %d's guarded write after the shrink: %v", i, err)
		}
	}
	// The old limit is refused, writing nothing.
	if err := sem(4).TryAcquire(t.Context()); !errors.Is(err, concurrency.ErrLimitMismatch) {
		t.Fatalf("TryAcquire with the old limit = %v, want ErrLimitMismatch", err)
	}
	w := sem(2)
	werr := acquireAsync(t, t.Context(), w)
	etcdtest.WaitKeys(t, c, pfx, 4)
	// Holders leave one by one; w fits only when 1 permit is held.
	if err := hs[0].Release(t.Context()); err != nil { // 3 held
		t.Fatal(err)
	}
	if err := hs[2].Release(t.Context()); err != nil { // 2 held (hs[1], weight 2)
		t.Fatal(err)
	}
	// w's wait ended with hs[2]'s release (its predecessor), and it
	// judged again: 2 + 1 > 2, it waits on. A grant would come within
	// milliseconds; give it half a second to show.
	etcdtest.WaitKeys(t, c, pfx, 2)
	select {
	case err := <-werr:
		t.Fatalf("the waiter returned (%v) while 2 permits are held under limit 2", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := hs[1].Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, werr, "the waiter once the holders fit"); err != nil {
		t.Fatal(err)
	}
	w.Release(t.Context())

	mutexName := pfx + "-mutex"
	mu := concurrency.NewMutex(newSession(t, c), mutexName)
	if err := mu.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := concurrency.NewSemaphore(newSession(t, c), mutexName, 2).SetLimit(t.Context(), 3); !errors.Is(err, concurrency.ErrLockKind) {
		t.Fatalf("SetLimit on a Mutex's name = %v, want ErrLockKind", err)
	}
	mu.Unlock(t.Context())
	for _, n := range []int{0, -1} {
		if err := w.SetLimit(t.Context(), n); !errors.Is(err, concurrency.ErrInvalidLimit) {
			t.Errorf("SetLimit(%d) = %v, want ErrInvalidLimit", n, err)
		}
	}
	// On a free name, SetLimit sets only the caller's limit.
	if err := w.SetLimit(t.Context(), 7); err != nil || w.Limit() != 7 {
		t.Fatalf("SetLimit on a free name = %v, Limit() %d", err, w.Limit())
	}
}

// Resizes from several clients at once, while weighted holders come and
// go: every read of the name sees one limit in all its keys (a resize is
// never seen half done), the permits held never exceed the largest limit
// set.
func TestSemaphoreSetLimitConcurrent(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	const top = 4
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// Holders, each following the limit it is granted under.
	for i := range 4 {
		s := newSession(t, etcdtest.NewClient(t, etcdtest.Endpoints()[i%3:i%3+1]))
		m := concurrency.NewSemaphore(s, pfx, top)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 40; r++ {
				select {
				case <-stop:
					return
				default:
				}
				n := 1 + (i+r)%2
				err := m.AcquireN(ctx, n)
				if errors.Is(err, concurrency.ErrLimitMismatch) {
					// Resized since: learn the name's limit, as a client would.
					q, qerr := concurrency.Inspect(ctx, c, pfx)
					if qerr != nil {
						t.Error(qerr)
						return
					}
					lim := top
					if len(q.Keys) > 0 {
						lim = q.Keys[0].Limit
					}
					m = concurrency.NewSemaphore(s, pfx, lim)
					continue
				}
				if err != nil {
					t.Errorf("holder %d: %v", i, err)
					return
				}
				raiseTo(&most, inside.Add(int64(n)))
				time.Sleep(5 * time.Millisecond)
				inside.Add(-int64(n))
				if err := m.Release(ctx); err != nil {
					t.Errorf("holder %d: Release: %v", i, err)
					return
				}
			}
		}()
	}
	// Resizers: each sets 2, 3 and 4 in turn, on a Semaphore of its own.
	var rg sync.WaitGroup
	for i := range 3 {
		r := concurrency.NewSemaphore(newSession(t, c), pfx, top)
		rg.Add(1)
		go func() {
			defer rg.Done()
			for k := range 12 {
				n := 2 + (i+k)%3
				if err := r.SetLimit(ctx, n); err != nil {
					t.Errorf("resizer %d: SetLimit(%d): %v", i, n, err)
					return
				}
			}
		}()
	}
	// Meanwhile, every read shows one limit.
	reads, mixed := 0, 0
	done := make(chan struct{})
	go func() { rg.Wait(); close(done) }()
	for running := true; running && reads < 100000; {
		select {
		case <-done:
			running = false
		default:
		}
		limits := map[string]bool{}
		for _, v := range semValues(t, c, pfx) {
			l, _, _ := strings.Cut(v, "/")
			limits[l] = true
		}
		reads++
		if len(limits) > 1 {
			mixed++
			t.Errorf("one read shows limits %v", limits)
		}
	}
	close(stop)
	wg.Wait()
	if most.Load() > top {
		t.Fatalf("%d permits held at once; the largest limit set is %d", most.Load(), top)
	}
	t.Logf("%d reads during the resizes, %d mixed; at most %d permits held", reads, mixed, most.Load())
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

// resizeTxn matches Semaphore.SetLimit's rewrite: a transaction that puts
// values on keys, keeping their leases.
func resizeTxn(tr *pb.TxnRequest) bool {
	for _, op := range tr.Success {
		if p := op.GetRequestPut(); p != nil && p.IgnoreLease && !p.IgnoreValue {
			return true
		}
	}
	return false
}

// A resize whose rewrite is held back while a waiter with the old limit
// enqueues and a holder's lease is revoked: the rewrite must not commit on
// the stale read (the new waiter would keep the old limit beside the new
// one, and be refused); SetLimit reads again and rewrites every key, the
// new waiter's too, which the larger limit then lets in.
func TestSemaphoreSetLimitRace(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	g := newGate(resizeTxn)
	rc := sharedClient(t, g.option)
	sem := func(lim int) (*concurrency.Semaphore, *concurrency.Session) {
		s := newSession(t, c)
		return concurrency.NewSemaphore(s, pfx, lim), s
	}
	a, _ := sem(2)
	b, bs := sem(2)
	cw, _ := sem(2)
	d, _ := sem(2)
	for _, m := range []*concurrency.Semaphore{a, b} {
		if err := m.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	cerr := acquireAsync(t, t.Context(), cw)
	etcdtest.WaitKeys(t, c, pfx, 3)

	g.armed.Store(true)
	r := concurrency.NewSemaphore(newSession(t, rc), pfx, 2)
	rerr := async(t, func() error { return r.SetLimit(t.Context(), 3) })
	caught(t, g, "the resize's rewrite") // based on a read of a, b and cw
	derr := acquireAsync(t, t.Context(), d)
	etcdtest.WaitKeys(t, c, pfx, 4)
	if _, err := c.Revoke(t.Context(), bs.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, cerr, "cw after b's lease went"); err != nil {
		t.Fatal(err)
	}
	etcdtest.WaitKeys(t, c, pfx, 3)
	notYet(t, derr, "d (3 permits of 2 before the resize)")
	g.armed.Store(false)
	close(g.open)
	if err := within(t, 10*time.Second, rerr, "SetLimit"); err != nil {
		t.Fatalf("SetLimit = %v", err)
	}
	if got := semValues(t, c, pfx); fmt.Sprint(got) != "[3 3 3]" {
		t.Fatalf("values after the resize = %q, want every key at 3", got)
	}
	if err := within(t, 10*time.Second, derr, "d under limit 3"); err != nil {
		t.Fatalf("d: %v", err)
	}
	for _, m := range []*concurrency.Semaphore{a, cw, d} {
		if err := m.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// Review of the weighted and resizable semaphore (issue 29, items 1 and 2).

// A limit near the largest int: the weights of the keys are added, and
// the sum must not wrap around to let a second holder in.
func TestSemaphoreWeightedHugeLimit(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	a := concurrency.NewSemaphore(newSession(t, c), pfx, math.MaxInt)
	if err := a.AcquireN(t.Context(), math.MaxInt); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, math.MaxInt} {
		b := concurrency.NewSemaphore(newSession(t, c), pfx, math.MaxInt)
		if err := b.TryAcquireN(t.Context(), n); !errors.Is(err, concurrency.ErrLocked) {
			t.Errorf("TryAcquireN(%d) beside a holder of all %d permits = %v, want ErrLocked", n, math.MaxInt, err)
			if err == nil {
				b.Release(t.Context())
			}
		}
	}
	// Inspect adds the weights too: a waiter of weight 1 behind the
	// holder of all permits waits.
	b := concurrency.NewSemaphore(newSession(t, c), pfx, math.MaxInt)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	berr := acquireAsync(t, ctx, b)
	etcdtest.WaitKeys(t, c, pfx, 2)
	q, err := concurrency.Inspect(t.Context(), c, pfx)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Keys) != 2 || !q.Keys[0].Holds || q.Keys[1].Holds {
		t.Errorf("Inspect: %+v, want the first key holding and the second waiting", q.Keys)
	}
	notYet(t, berr, "a unit waiter behind a holder of all permits")
	cancel()
	if err := <-berr; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled waiter = %v, want context.Canceled", err)
	}
	a.Release(t.Context())
	etcdtest.WaitKeys(t, c, pfx, 0)

	// A key written by another client with a limit past the largest int:
	// refused, not parsed as some other limit.
	if _, err := c.Put(t.Context(), pfx+"/1-1", "9223372036854775808"); err != nil {
		t.Fatal(err)
	}
	big := concurrency.NewSemaphore(newSession(t, c), pfx, math.MaxInt)
	if err := big.TryAcquireN(t.Context(), 2); !errors.Is(err, concurrency.ErrLimitMismatch) {
		t.Errorf("TryAcquireN beside a limit past the largest int = %v, want ErrLimitMismatch", err)
	}
	if err := big.SetLimit(t.Context(), 3); !errors.Is(err, concurrency.ErrLimitMismatch) {
		t.Errorf("SetLimit over a limit past the largest int = %v, want ErrLimitMismatch", err)
	}
	if got := semValues(t, c, pfx); fmt.Sprint(got) != "[9223372036854775808]" {
		t.Errorf("values %q after refusals", got)
	}
	if _, err := c.Delete(t.Context(), pfx+"/1-1"); err != nil {
		t.Fatal(err)
	}
}

// SetLimit rewrites every key in one transaction, which compares each key
// and one more: it resizes names of fewer keys than --max-txn-ops (128
// here, etcd's default), and from that many on it returns etcd's error at
// once, with nothing changed.
func TestSemaphoreWeightedSetLimitMaxTxnOps(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	put := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := c.Put(t.Context(), fmt.Sprintf("%s/%x-%x", pfx, int64(s.Lease()), i), "200", clientv3.WithLease(s.Lease())); err != nil {
				t.Fatal(err)
			}
		}
	}
	m := concurrency.NewSemaphore(s, pfx, 200)
	put(0, 127)
	if err := m.SetLimit(t.Context(), 300); err != nil {
		t.Fatalf("SetLimit on a name of 127 keys (--max-txn-ops 128) = %v", err)
	}
	put(127, 128)
	lim := strconv.Itoa(m.Limit())
	if lim != "300" {
		t.Fatalf("Limit() = %s after SetLimit(300)", lim)
	}
	// The new key has the old value: give it the name's.
	if _, err := c.Put(t.Context(), fmt.Sprintf("%s/%x-%x", pfx, int64(s.Lease()), 127), lim, clientv3.WithLease(s.Lease())); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := m.SetLimit(ctx, 400)
	if !errors.Is(err, rpctypes.ErrTooManyOps) || ctx.Err() != nil {
		t.Fatalf("SetLimit on a name of 128 keys = %v (ctx %v), want etcd's ErrTooManyOps at once", err, ctx.Err())
	}
	for _, kv := range etcdtest.Keys(t, c, pfx) {
		if string(kv.Value) != lim {
			t.Fatalf("%s = %q after a refused SetLimit, want %s", kv.Key, kv.Value, lim)
		}
	}
	if _, err := c.Delete(t.Context(), pfx+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
}

// AcquireN whose ctx ends at any point (before the enqueue, during its
// RPC, during the wait) leaves no key behind and disturbs no holder.
func TestSemaphoreWeightedCtxEnds(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	h := concurrency.NewSemaphore(newSession(t, c), pfx, 3)
	if err := h.AcquireN(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	m := concurrency.NewSemaphore(newSession(t, c), pfx, 3)
	for i := range 40 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Duration(i)*250*time.Microsecond)
		err := m.AcquireN(ctx, 1+i%3)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("AcquireN with a %v ctx beside a full holder = %v, want DeadlineExceeded", time.Duration(i)*250*time.Microsecond, err)
		}
		if m.Key() != "" || m.Weight() != 0 {
			t.Fatalf("after a failed AcquireN: Key %q, Weight %d", m.Key(), m.Weight())
		}
	}
	etcdtest.WaitKeys(t, c, pfx, 1)
	if err := h.Ctx().Err(); err != nil {
		t.Fatalf("the holder's hold ended: %v", context.Cause(h.Ctx()))
	}
	// The failed weights left nothing that counts: a grow lets weight 2 in
	// beside the holder at once.
	if err := m.SetLimit(t.Context(), 5); err != nil {
		t.Fatal(err)
	}
	if err := m.TryAcquireN(t.Context(), 2); err != nil {
		t.Fatalf("TryAcquireN(2) beside a holder of 3 under limit 5 = %v", err)
	}
	m.Release(t.Context())
	h.Release(t.Context())
}

// The first waiter watches the name's range and its own key: a grow that
// rewrites its key while its watch is down, with the history compacted
// past the rewrite before the watch resumes, must still let it in.
func TestSemaphoreWeightedGrowWhileWatchDownCompacted(t *testing.T) {
	clus := bridgeCluster(t)
	pfx := etcdtest.Begin(t)
	hc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
	wc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	for _, w := range []int{2, 2} {
		if err := concurrency.NewSemaphore(newSession(t, hc), pfx, 5).AcquireN(t.Context(), w); err != nil {
			t.Fatal(err)
		}
	}
	// 2 + 2 + 3 > 5: the first waiter, behind two holders.
	w := concurrency.NewSemaphore(newSession(t, wc), pfx, 5)
	werr := acquireNAsync(t, t.Context(), w, 3)
	etcdtest.WaitKeys(t, hc, pfx, 3)
	// Cut only once the waiter has its enqueue's answer (Key is set then):
	// the key can be in etcd before, and a cut that loses the answer fails
	// AcquireN with it, as etcd's Mutex fails Lock (seen under -race).
	etcdtest.Eventually(t, 10*time.Second, func() bool { return w.Key() != "" }, "the waiter has no key")
	notYet(t, werr, "the weight-3 waiter")
	etcdtest.Cut(t, clus.Members[0])
	if err := concurrency.NewSemaphore(newSession(t, hc), pfx, 5).SetLimit(t.Context(), 7); err != nil {
		t.Fatal(err)
	}
	compactPast(t, hc, pfx)
	clus.Members[0].Bridge().Unblackhole()
	if err := within(t, 20*time.Second, werr, "the first waiter after a grow it did not see"); err != nil {
		t.Fatal(err)
	}
	if got := semValues(t, hc, pfx); fmt.Sprint(got) != "[7/2 7/2 7/3]" {
		t.Fatalf("values %q, want [7/2 7/2 7/3]", got)
	}
}

// A grow lets in, with no release, a waiter whose predecessor is itself a
// waiter (it watches that key for its grant), not only the waiter behind
// the holder: 3 held, weights 2 and 2 waiting under 4; under 7 all fit.
func TestSemaphoreWeightedGrowWakesWaiterBehindWaiter(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	h := concurrency.NewSemaphore(newSession(t, c), pfx, 4)
	if err := h.AcquireN(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	w1 := concurrency.NewSemaphore(newSession(t, c), pfx, 4)
	e1 := acquireNAsync(t, t.Context(), w1, 2)
	etcdtest.WaitKeys(t, c, pfx, 2)
	w2 := concurrency.NewSemaphore(newSession(t, c), pfx, 4)
	e2 := acquireNAsync(t, t.Context(), w2, 2)
	etcdtest.WaitKeys(t, c, pfx, 3)
	notYet(t, e1, "the first waiter")
	notYet(t, e2, "the second waiter")
	if err := h.SetLimit(t.Context(), 7); err != nil {
		t.Fatal(err)
	}
	for i, e := range []<-chan error{e1, e2} {
		if err := within(t, 10*time.Second, e, fmt.Sprintf("waiter %d after the grow", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if w1.Limit() != 7 || w2.Limit() != 7 {
		t.Errorf("Limit() after a grant under 7: %d and %d", w1.Limit(), w2.Limit())
	}
	for _, m := range []*concurrency.Semaphore{w2, w1, h} {
		if err := m.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// A key a Semaphore would adopt (its own key for weight n, left from an
// earlier attempt) but whose value says another weight is refused, and
// deleted, never judged with the caller's weight.
func TestSemaphoreWeightedAdoptOtherWeight(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	m := concurrency.NewSemaphore(s, pfx, 4)
	if err := m.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	unit := m.Key() // the weight-1 key; weight n's has n XORed into its ID
	if err := m.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	cut := strings.LastIndex(unit, "-")
	id, err := strconv.ParseUint(unit[cut+1:], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	key2 := fmt.Sprintf("%s%x", unit[:cut+1], id^2)
	for _, v := range []string{"4/3", "4"} {
		if _, err := c.Put(t.Context(), key2, v, clientv3.WithLease(s.Lease())); err != nil {
			t.Fatal(err)
		}
		if err := m.AcquireN(t.Context(), 2); !errors.Is(err, concurrency.ErrLimitMismatch) {
			t.Fatalf("AcquireN(2) adopting its key with value %q = %v, want ErrLimitMismatch", v, err)
		}
		etcdtest.WaitKeys(t, c, pfx, 0)
	}
	// The key of weight 2, written as weight 2, is adopted and holds.
	if _, err := c.Put(t.Context(), key2, "4/2", clientv3.WithLease(s.Lease())); err != nil {
		t.Fatal(err)
	}
	if err := m.AcquireN(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	if m.Key() != key2 || m.Weight() != 2 {
		t.Fatalf("after adopting: Key %q (want %q), Weight %d", m.Key(), key2, m.Weight())
	}
	if err := m.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// SetLimit to the name's own limit writes nothing: rewriting every key
// would wake every waiter to read again for nothing.
func TestSemaphoreWeightedSetLimitSame(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	h := concurrency.NewSemaphore(newSession(t, c), pfx, 3)
	if err := h.AcquireN(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	w := concurrency.NewSemaphore(newSession(t, c), pfx, 3)
	werr := acquireAsync(t, t.Context(), w)
	before := etcdtest.WaitKeys(t, c, pfx, 2)
	if err := concurrency.NewSemaphore(newSession(t, c), pfx, 3).SetLimit(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	for i, kv := range etcdtest.Keys(t, c, pfx) {
		if kv.ModRevision != before[i].ModRevision {
			t.Errorf("%s rewritten by SetLimit to its own limit (mod revision %d, was %d)", kv.Key, kv.ModRevision, before[i].ModRevision)
		}
	}
	notYet(t, werr, "the waiter")
	if err := h.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, werr, "the waiter"); err != nil {
		t.Fatal(err)
	}
	w.Release(t.Context())
}
