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
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/tests/v3/framework/integration"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// rpcCounter counts the unary RPCs of a client, and can be armed to turn the
// answer of the next KV write into an error after etcd has applied it.
type rpcCounter struct {
	n     atomic.Int64
	armed atomic.Bool
}

func (rc *rpcCounter) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			rc.n.Add(1)
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil && (method == "/etcdserverpb.KV/Txn" || method == "/etcdserverpb.KV/DeleteRange") && rc.armed.CompareAndSwap(true, false) {
				return status.Error(codes.Unavailable, "test: connection lost after commit")
			}
			return err
		}))
}

// lockAsync runs m.Lock(ctx) in a goroutine that the test waits for.
func lockAsync(t *testing.T, ctx context.Context, m mutex) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		errc <- m.Lock(ctx)
	}()
	t.Cleanup(wg.Wait)
	return errc
}

// within returns the value from errc, or fails the test after d.
func within(t *testing.T, d time.Duration, errc <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(d):
		t.Fatalf("%s: no return within %v", what, d)
		return nil
	}
}

// awaitWorkers collects the results of n workers from errc and returns the
// first error. It fails the test on a stall rather than on slowness: when
// done, the workers' count of completed acquisitions, stays unchanged for
// stall (a waiter that missed its wake-up holds up all queued behind it
// until the idle probe, a third of the TTL, finds it). Under -race on a
// loaded 2-core machine a fixed total bound was exceeded while every worker
// progressed. The whole wait is still bounded, at 5 minutes.
func awaitWorkers(t *testing.T, errc <-chan error, n int, done *atomic.Int64, stall time.Duration) error {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last, since, end := done.Load(), time.Now(), time.Now().Add(5*time.Minute)
	for n > 0 {
		select {
		case err := <-errc:
			if err != nil {
				return err
			}
			n--
		case now := <-tick.C:
			switch d := done.Load(); {
			case d != last:
				last, since = d, now
			case now.Sub(since) > stall:
				t.Fatalf("stalled: no acquisition for %v, after %d, with %d workers not done", stall, d, n)
			case now.After(end):
				t.Fatalf("not done in 5 minutes: %d acquisitions, %d workers not done", d, n)
			}
		}
	}
	return nil
}

func TestMutexUncontendedRoundTrips(t *testing.T) {
	pfx := etcdtest.Begin(t)
	var rc rpcCounter
	c := sharedClient(t, rc.option)
	s := newSession(t, c)
	m := concurrency.NewMutex(s, pfx)
	before := rc.n.Load()
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := rc.n.Load() - before; n != 1 {
		t.Errorf("uncontended Lock took %d RPCs, want 1", n)
	}
	before = rc.n.Load()
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := rc.n.Load() - before; n != 1 {
		t.Errorf("Unlock took %d RPCs, want 1", n)
	}
}

func TestMutexLockUnlock(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	m := concurrency.NewMutex(s, pfx)
	if got := m.Key(); got != "" {
		t.Fatalf("Key before Lock = %q, want empty", got)
	}
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s/%x", pfx, s.Lease())
	if m.Key() != want {
		t.Fatalf("Key = %q, want %q", m.Key(), want)
	}
	kvs := etcdtest.Keys(t, c, pfx)
	if len(kvs) != 1 || string(kvs[0].Key) != want || kvs[0].Lease != int64(s.Lease()) {
		t.Fatalf("keys = %v, want one key %q on the session lease", kvs, want)
	}
	if m.Token() != kvs[0].CreateRevision || m.Header() == nil {
		t.Fatalf("Token = %d, Header = %v; want the key's create revision %d and a header", m.Token(), m.Header(), kvs[0].CreateRevision)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left after Unlock", n)
	}
	if err := m.Unlock(t.Context()); !errors.Is(err, concurrency.ErrLockReleased) {
		t.Fatalf("second Unlock = %v, want ErrLockReleased", err)
	}
	if err := concurrency.NewMutex(s, pfx).Unlock(t.Context()); !errors.Is(err, concurrency.ErrLockReleased) {
		t.Fatalf("Unlock before Lock = %v, want ErrLockReleased", err)
	}
}

// Waiters get the lock in the order their keys were created, and never
// two at once.
func TestMutexFIFO(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	const n = 5
	ms := make([]*concurrency.Mutex, n)
	for i := range ms {
		ms[i] = concurrency.NewMutex(newSession(t, c), pfx)
	}
	if err := ms[0].Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	var order []int
	var mu sync.Mutex
	errcs := make([]<-chan error, n)
	for i := 1; i < n; i++ {
		i := i
		errc := make(chan error, 1)
		errcs[i] = errc
		go func() {
			err := ms[i].Lock(t.Context())
			if err == nil {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				err = ms[i].Unlock(t.Context())
			}
			errc <- err
		}()
		etcdtest.WaitKeys(t, c, pfx, i+1) // queue the next waiter only behind this one
	}
	if err := ms[0].Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if err := within(t, 10*time.Second, errcs[i], "waiter"); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range order {
		if w != i+1 {
			t.Fatalf("acquisition order %v, want 1..%d", order, n-1)
		}
	}
}

// exclusion runs workers that each lock through its own session and checks
// that no two hold at once and that tokens strictly increase.
func exclusion(t *testing.T, c *clientv3.Client, pfx string, workers, rounds int, mk func(i int) (lock func() (int64, error), unlock func() error)) {
	t.Helper()
	var holders atomic.Int32
	var done atomic.Int64
	var mu sync.Mutex
	var last int64
	errc := make(chan error, workers)
	for i := 0; i < workers; i++ {
		lock, unlock := mk(i)
		go func() {
			for r := 0; r < rounds; r++ {
				tok, err := lock()
				if err != nil {
					errc <- err
					return
				}
				if h := holders.Add(1); h != 1 {
					errc <- fmt.Errorf("%d holders at once", h)
					return
				}
				mu.Lock()
				if tok <= last {
					mu.Unlock()
					errc <- fmt.Errorf("token %d after %d", tok, last)
					return
				}
				last = tok
				mu.Unlock()
				holders.Add(-1)
				if err := unlock(); err != nil {
					errc <- err
					return
				}
				done.Add(1)
			}
			errc <- nil
		}()
	}
	if err := awaitWorkers(t, errc, workers, &done, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

func TestMutexExclusion(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	exclusion(t, c, pfx, 5, 20, func(int) (func() (int64, error), func() error) {
		m := concurrency.NewMutex(newSession(t, c), pfx)
		return func() (int64, error) {
				err := m.Lock(t.Context())
				return m.Token(), err
			},
			func() error { return m.Unlock(t.Context()) }
	})
}

// A mixed fleet of this package and etcd's on one lock name excludes each
// other, and the fencing tokens of this package's holders keep increasing.
func TestMutexInteropWithEtcd(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	exclusion(t, c, pfx, 6, 15, func(i int) (func() (int64, error), func() error) {
		if i%2 == 0 {
			m := concurrency.NewMutex(newSession(t, c), pfx)
			return func() (int64, error) {
					err := m.Lock(t.Context())
					return m.Token(), err
				},
				func() error { return m.Unlock(t.Context()) }
		}
		m := etcdconc.NewMutex(etcds.mustSession(t, c, 60).(*etcdconc.Session), pfx)
		return func() (int64, error) {
				err := m.Lock(t.Context())
				if err != nil {
					return 0, err
				}
				resp, err := c.Get(t.Context(), m.Key())
				if err != nil || len(resp.Kvs) != 1 {
					return 0, fmt.Errorf("etcd holder's key: %v %v", resp, err)
				}
				return resp.Kvs[0].CreateRevision, nil
			},
			func() error { return m.Unlock(t.Context()) }
	})
}

// etcd's Mutex is not safe for concurrent use: a second goroutine's Lock on
// a held Mutex returns at once, and both "hold" it. This package's Mutex
// makes it wait, as sync.Mutex does.
func TestMutexSecondGoroutineWaits(t *testing.T) {
	for _, im := range []impl{ours, etcds} {
		t.Run(im.name, func(t *testing.T) {
			if im.name == "etcd" && raceEnabled {
				t.Skip("sharing etcd's Mutex between goroutines is a data race; this case runs without -race")
			}
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			m := im.newMutex(im.mustSession(t, c, 60), pfx)
			if err := m.Lock(t.Context()); err != nil {
				t.Fatal(err)
			}
			second := lockAsync(t, t.Context(), m)
			var violation error
			select {
			case err := <-second:
				violation = fmt.Errorf("a second goroutine's Lock returned %v while the Mutex was held", err)
			case <-time.After(time.Second):
				// Still waiting, as it should.
			}
			if err := m.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			if violation == nil {
				if err := within(t, 5*time.Second, second, "second Lock after Unlock"); err != nil {
					t.Fatal(err)
				}
				if err := m.Unlock(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			expectBug(t, im, violation)
		})
	}
}

// Goroutines sharing one Mutex take turns, and the race detector finds
// nothing to say.
func TestMutexConcurrentGoroutines(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	m := concurrency.NewMutex(newSession(t, c), pfx)
	var holders atomic.Int32
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 10; r++ {
				if err := m.Lock(t.Context()); err != nil {
					errc <- err
					return
				}
				if h := holders.Add(1); h != 1 {
					errc <- fmt.Errorf("%d goroutines hold one Mutex", h)
				}
				_ = m.Key()
				_ = m.Token()
				_ = m.Ctx()
				holders.Add(-1)
				if err := m.Unlock(t.Context()); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

func TestMutexSameSessionSharesKey(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	m1, m2 := concurrency.NewMutex(s, pfx), concurrency.NewMutex(s, pfx)
	if err := m1.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 5*time.Second, lockAsync(t, t.Context(), m2), "second Mutex on the same session"); err != nil {
		t.Fatal(err)
	}
	if m1.Key() != m2.Key() || m1.Token() != m2.Token() {
		t.Fatalf("keys %q/%q tokens %d/%d, want shared", m1.Key(), m2.Key(), m1.Token(), m2.Token())
	}
	if err := m2.TryLock(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock on a held Mutex = %v, want ErrLocked", err)
	}
	if err := m1.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The shared key is gone: m2's hold ended with it.
	if err := m2.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

func TestMutexTryLock(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	m1 := concurrency.NewMutex(newSession(t, c), pfx)
	m2 := concurrency.NewMutex(newSession(t, c), pfx)
	if err := m1.TryLock(t.Context()); err != nil {
		t.Fatalf("TryLock on a free lock = %v", err)
	}
	if err := m2.TryLock(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock on a held lock = %v, want ErrLocked", err)
	}
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 1 || string(kvs[0].Key) != m1.Key() {
		t.Fatalf("keys after a failed TryLock: %v, want only the holder's", kvs)
	}
	if m2.Key() != "" || m2.Token() != 0 {
		t.Fatalf("failed TryLock left Key %q Token %d", m2.Key(), m2.Token())
	}
	if err := m1.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := m2.TryLock(t.Context()); err != nil {
		t.Fatalf("TryLock after release = %v", err)
	}
	if err := m2.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestMutexCancelLeavesNoKey(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	holder := concurrency.NewMutex(newSession(t, c), pfx)
	if err := holder.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Run("timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		m := concurrency.NewMutex(newSession(t, c), pfx)
		if err := m.Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock = %v, want DeadlineExceeded", err)
		}
		if n := len(etcdtest.Keys(t, c, pfx)); n != 1 {
			t.Fatalf("%d keys after a timed-out Lock, want only the holder's", n)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		m := concurrency.NewMutex(newSession(t, c), pfx)
		errc := lockAsync(t, ctx, m)
		etcdtest.WaitKeys(t, c, pfx, 2)
		cancel()
		if err := within(t, 5*time.Second, errc, "cancelled Lock"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock = %v, want Canceled", err)
		}
		if n := len(etcdtest.Keys(t, c, pfx)); n != 1 {
			t.Fatalf("%d keys after a cancelled Lock, want only the holder's", n)
		}
	})
	if err := holder.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestMutexBadInput(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx := t.Context()
	nilm := concurrency.NewMutex(nil, pfx)
	for name, err := range map[string]error{
		"Lock": nilm.Lock(ctx), "TryLock": nilm.TryLock(ctx), "Unlock": nilm.Unlock(ctx),
	} {
		if !errors.Is(err, concurrency.ErrNilSession) {
			t.Errorf("nil session: %s = %v, want ErrNilSession", name, err)
		}
	}
	s := newSession(t, c)
	if err := concurrency.NewMutex(s, "").Lock(ctx); !errors.Is(err, concurrency.ErrInvalidPrefix) {
		t.Errorf("empty prefix: Lock = %v, want ErrInvalidPrefix", err)
	}
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("Locker with a nil session did not panic")
			}
		}()
		concurrency.NewLocker(nil, pfx).Lock()
	}()

	closed, err := concurrency.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	m := concurrency.NewMutex(closed, pfx)
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(ctx); !errors.Is(err, concurrency.ErrSessionExpired) {
		t.Errorf("Lock on a closed session = %v, want ErrSessionExpired", err)
	}
	if err := m.TryLock(ctx); !errors.Is(err, concurrency.ErrSessionExpired) {
		t.Errorf("TryLock on a closed session = %v, want ErrSessionExpired", err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Errorf("%d keys left by a closed session", n)
	}
}

// A hold whose session ends is released locally by Unlock, and the Mutex
// then refuses to lock again on the dead session.
func TestMutexAfterSessionEnded(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s, err := concurrency.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock after the session closed = %v, want nil (the key went with the lease)", err)
	}
	if err := m.Lock(t.Context()); !errors.Is(err, concurrency.ErrSessionExpired) {
		t.Fatalf("Lock after the session closed = %v, want ErrSessionExpired", err)
	}
}

// etcd #19597: a waiter whose own session ends keeps waiting in etcd's
// package until every older key is gone.
func TestMutexWaiterSessionEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, c *clientv3.Client, s session)
	}{
		{"closed", func(t *testing.T, _ *clientv3.Client, s session) { s.Close() }},
		{"revoked", func(t *testing.T, c *clientv3.Client, s session) {
			if _, err := c.Revoke(t.Context(), s.Lease()); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, im := range []impl{ours, etcds} {
				t.Run(im.name, func(t *testing.T) {
					pfx := etcdtest.Begin(t)
					c := sharedClient(t)
					holder := im.newMutex(im.mustSession(t, c, 60), pfx)
					if err := holder.Lock(t.Context()); err != nil {
						t.Fatal(err)
					}
					// A revoke reaches a waiter through its session's next
					// renewal, every TTL/3: 1 s here.
					ws := im.mustSession(t, c, 3)
					errc := lockAsync(t, t.Context(), im.newMutex(ws, pfx))
					etcdtest.WaitKeys(t, c, pfx, 2)
					tc.end(t, c, ws)

					var violation error
					select {
					case err := <-errc:
						if !errors.Is(err, im.sessionEnded) {
							violation = fmt.Errorf("waiter returned %v, want ErrSessionExpired", err)
						}
					case <-time.After(3 * time.Second):
						violation = errors.New("waiter still waiting 3 s after its session ended")
					}
					holder.Unlock(t.Context())
					expectBug(t, im, violation)
				})
			}
		})
	}
}

// expectBug fails the test if this package shows the violation, or if etcd's
// package does not: the scenario must reproduce the upstream bug.
func expectBug(t *testing.T, im impl, violation error) {
	t.Helper()
	switch {
	case im.name == "ours" && violation != nil:
		t.Fatal(violation)
	case im.name == "etcd" && violation == nil:
		// Whether etcd's package shows its bug may depend on timing that
		// the test does not control (when a watch reconnects): its side
		// reports, and only this package's side asserts (issue 33).
		t.Logf("etcd's package did not show the bug this run")
	case violation != nil:
		t.Logf("etcd's package, as expected: %v", violation)
	}
}

// etcd #22082: an Unlock whose answer was lost, when retried, deleted a
// newer hold of the same session.
func TestMutexStaleUnlock(t *testing.T) {
	for _, im := range []impl{ours, etcds} {
		t.Run(im.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			var rc rpcCounter
			c := sharedClient(t, rc.option)
			s := im.mustSession(t, c, 60)
			old := im.newMutex(s, pfx)
			if err := old.Lock(t.Context()); err != nil {
				t.Fatal(err)
			}
			rc.armed.Store(true)
			// etcd's Unlock returns the lost answer's error; ours retries it
			// (the retry finds the key gone) and returns nil.
			if err := old.Unlock(t.Context()); (err == nil) != (im.name == "ours") {
				t.Fatalf("Unlock with a lost answer returned %v", err)
			}
			if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
				t.Fatalf("the lost Unlock did not delete the key (%d keys)", n)
			}
			newer := im.newMutex(s, pfx)
			if err := newer.Lock(t.Context()); err != nil {
				t.Fatal(err)
			}
			before := etcdtest.Keys(t, c, pfx)
			old.Unlock(t.Context()) // the retry
			after := etcdtest.Keys(t, c, pfx)
			var violation error
			if len(after) != 1 || after[0].CreateRevision != before[0].CreateRevision {
				violation = errors.New("the retried stale Unlock deleted the newer hold")
			}
			newer.Unlock(t.Context())
			expectBug(t, im, violation)
		})
	}
}

// etcd #12017: IsOwner held in a transaction while Lock was still waiting.
func TestMutexIsOwnerWhileWaiting(t *testing.T) {
	for _, im := range []impl{ours, etcds} {
		t.Run(im.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			holder := im.newMutex(im.mustSession(t, c, 60), pfx)
			if err := holder.Lock(t.Context()); err != nil {
				t.Fatal(err)
			}
			if im.name == "etcd" && raceEnabled {
				t.Skip("etcd's Mutex is not safe for concurrent use: reading IsOwner while Lock waits is a data race; this case runs without -race")
			}
			waiter := im.newMutex(im.mustSession(t, c, 60), pfx)
			errc := lockAsync(t, t.Context(), waiter)
			etcdtest.WaitKeys(t, c, pfx, 2)
			// etcd's Mutex records its revision only after its transaction
			// returns, a moment after the key appears: watch IsOwner for a
			// second rather than once.
			var violation error
			for end := time.Now().Add(time.Second); violation == nil && time.Now().Before(end); {
				resp, err := c.Txn(t.Context()).If(waiter.IsOwner()).Commit()
				if err != nil {
					t.Fatal(err)
				}
				if resp.Succeeded {
					violation = errors.New("IsOwner held while Lock was waiting")
				}
			}
			if err := holder.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := within(t, 5*time.Second, errc, "waiter"); err != nil {
				t.Fatal(err)
			}
			resp, err := c.Txn(t.Context()).If(waiter.IsOwner()).Commit()
			if err != nil || !resp.Succeeded {
				t.Fatalf("IsOwner after Lock returned: succeeded=%v err=%v", resp != nil && resp.Succeeded, err)
			}
			waiter.Unlock(t.Context())
			expectBug(t, im, violation)
		})
	}
}

// compactPast writes pfx+"-other" a few times and compacts etcd's history
// up to the last write, so that a watch resuming from before fails.
func compactPast(t *testing.T, c *clientv3.Client, pfx string) {
	t.Helper()
	var rev int64
	for range 5 {
		resp, err := c.Put(t.Context(), pfx+"-other", "x")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := c.Compact(t.Context(), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
}

// A compaction while a waiter waits must not fail its Lock: in etcd's
// package a watch that resumes after a dropped connection from a compacted
// revision ended the Lock with ErrCompacted.
func TestMutexCompactionDuringWait(t *testing.T) {
	clus := bridgeCluster(t)
	for _, im := range []impl{ours, etcds} {
		t.Run(im.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			hc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
			wc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
			holder := im.newMutex(im.mustSession(t, hc, 60), pfx)
			if err := holder.Lock(t.Context()); err != nil {
				t.Fatal(err)
			}
			errc := lockAsync(t, t.Context(), im.newMutex(im.mustSession(t, wc, 60), pfx))
			etcdtest.WaitKeys(t, hc, pfx, 2)
			compactPast(t, hc, pfx)
			clus.Members[0].Bridge().DropConnections()
			if err := holder.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			var violation error
			if err := within(t, 10*time.Second, errc, "waiter"); err != nil {
				violation = fmt.Errorf("waiter's Lock failed after compaction: %v", err)
			}
			expectBug(t, im, violation)
		})
	}
}

// etcd #18082: etcd's package cleans up after a cancelled Lock with the
// client's context, and hangs while etcd cannot be reached. Cleanup here is
// bounded, and the key is deleted once etcd answers again.
func TestMutexCleanupBounded(t *testing.T) {
	clus := bridgeCluster(t)
	for _, im := range []impl{ours, etcds} {
		t.Run(im.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			hc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
			wc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
			holder := im.newMutex(im.mustSession(t, hc, 60), pfx)
			if err := holder.Lock(t.Context()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			errc := lockAsync(t, ctx, im.newMutex(im.mustSession(t, wc, 60), pfx))
			etcdtest.WaitKeys(t, hc, pfx, 2)

			clus.Members[0].Bridge().Blackhole()
			cancel()
			var violation error
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Lock = %v, want Canceled", err)
				}
			case <-time.After(8 * time.Second):
				violation = errors.New("cancelled Lock still cleaning up 8 s later while etcd is unreachable")
			}
			clus.Members[0].Bridge().Unblackhole()
			clus.Members[0].Bridge().DropConnections() // a blackhole loses bytes mid-stream
			if im.name == "ours" {
				etcdtest.WaitKeys(t, hc, pfx, 1) // the session deletes the waiter's key
			} else if violation == nil {
				// etcd's cleanup did not hang this time (its delete failed
				// at once on the broken connection): the other face of the
				// same bug is the key it then leaves, never deleted.
				left := true
				for end := time.Now().Add(3 * time.Second); left && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
					left = len(etcdtest.Keys(t, hc, pfx)) == 2
				}
				if left {
					violation = errors.New("cancelled Lock returned while etcd was unreachable and left its key, not deleted 3 s after etcd answered again")
				}
			}
			if err := holder.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			expectBug(t, im, violation)
		})
	}
}

// A waiter keeps waiting, and keeps its place, while its member has no
// leader (etcd's package does too): the wait's watch requires a leader, and
// a leaderless member ends it with "no leader", which ended Lock here.
func TestMutexWaitSurvivesLeaderLoss(t *testing.T) {
	clus := etcdtest.NewCluster(t, &integration.ClusterConfig{Size: 3})
	for _, im := range []impl{ours, etcds} {
		t.Run(im.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			hc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
			wc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
			holder := im.newMutex(im.mustSession(t, hc, 60), pfx)
			if err := holder.Lock(t.Context()); err != nil {
				t.Fatal(err)
			}
			waiter := im.newMutex(im.mustSession(t, wc, 60), pfx)
			errc := lockAsync(t, t.Context(), waiter)
			etcdtest.WaitKeys(t, hc, pfx, 2)

			clus.Members[1].Stop(t)
			clus.Members[2].Stop(t)
			// Keep the waiter's member without a leader for longer than it
			// takes etcd to cancel watches that require one (3 election
			// timeouts).
			etcdtest.Eventually(t, 10*time.Second, func() bool {
				ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
				defer cancel()
				st, err := wc.Status(ctx, clus.Members[0].GRPCURL)
				return err == nil && st.Leader == 0
			}, "member 0 still has a leader")
			time.Sleep(time.Second) // the fault lasts a second more
			select {
			case err := <-errc:
				t.Fatalf("the waiter returned while its member had no leader: %v", err)
			default:
			}
			if err := clus.Members[1].Restart(t); err != nil {
				t.Fatal(err)
			}
			if err := clus.Members[2].Restart(t); err != nil {
				t.Fatal(err)
			}
			clus.WaitLeader(t)
			if err := holder.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := within(t, 15*time.Second, errc, "waiter"); err != nil {
				t.Fatalf("the waiter's Lock failed after the leader came back: %v", err)
			}
			if err := waiter.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Do releases the lock even when fn panics (a server that recovers per
// request, as net/http does, would otherwise keep the key for the life of
// the session), and even when Unlock fails: the Mutex is free for the next
// Do at once, and the session deletes the key once etcd answers.
func TestMutexDoAlwaysReleases(t *testing.T) {
	t.Run("panic", func(t *testing.T) {
		pfx := etcdtest.Begin(t)
		c := sharedClient(t)
		m := concurrency.NewMutex(newSession(t, c), pfx)
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v, want the panic of fn", r)
				}
			}()
			m.Do(t.Context(), func(context.Context) error { panic("boom") })
		}()
		if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
			t.Fatalf("%d keys left after fn panicked", n)
		}
		if err := m.TryLock(t.Context()); err != nil {
			t.Fatalf("TryLock after a panicking Do: %v", err)
		}
		m.Unlock(t.Context())
	})
	t.Run("failed unlock", func(t *testing.T) {
		pfx := etcdtest.Begin(t)
		clus := bridgeCluster(t)
		c := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
		observer := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
		m := concurrency.NewMutex(newSession(t, c), pfx)
		err := m.Do(t.Context(), func(context.Context) error {
			etcdtest.Cut(t, clus.Members[0])
			return nil
		})
		if err == nil {
			t.Fatal("Do returned nil although its Unlock could not reach etcd")
		}
		if m.Token() != 0 {
			t.Fatal("the Mutex is still held after Do returned")
		}
		clus.Members[0].Bridge().Unblackhole()
		clus.Members[0].Bridge().DropConnections()
		// The key goes in the background; another session gets the lock.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		other := concurrency.NewMutex(newSession(t, observer), pfx)
		if err := other.Lock(ctx); err != nil {
			t.Fatalf("another session could not lock after the failed Do: %v", err)
		}
		if err := other.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		// And the Mutex itself is free for the next Do.
		if err := m.Do(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatalf("the next Do: %v", err)
		}
	})
}

// NewLocker panics with the error itself, as etcd's does, so that code that
// recovers can match it with errors.Is.
func TestLockerPanicsWithError(t *testing.T) {
	pfx := etcdtest.Begin(t)
	s, err := concurrency.NewSession(sharedClient(t))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	l := concurrency.NewLocker(s, pfx)
	defer func() {
		err, ok := recover().(error)
		if !ok || !errors.Is(err, concurrency.ErrSessionExpired) {
			t.Fatalf("recovered %v, want an error matching ErrSessionExpired", err)
		}
	}()
	l.Lock()
	t.Fatal("Lock on a closed session did not panic")
}

// Many sessions cycling on one lock all get through, one at a time: every
// wake-up and re-check of the wait, under contention, for long enough to
// meet the interleavings where the key a waiter is about to watch goes
// between its read and its watch.
//
// It fails on a stall, not on slowness (awaitWorkers).
func TestMutexContendedLiveness(t *testing.T) {
	pfx := etcdtest.Begin(t)
	const workers, rounds = 8, 25
	var inside, done atomic.Int64
	errc := make(chan error, workers)
	for i := range workers {
		m := concurrency.NewMutex(newSession(t, sharedClient(t)), pfx)
		go func() {
			for r := range rounds {
				err := m.Do(t.Context(), func(context.Context) error {
					if n := inside.Add(1); n != 1 {
						return fmt.Errorf("%d holders at once", n)
					}
					inside.Add(-1)
					return nil
				})
				if err != nil {
					errc <- fmt.Errorf("worker %d, round %d: %w", i, r, err)
					return
				}
				done.Add(1)
			}
			errc <- nil
		}()
	}
	if err := awaitWorkers(t, errc, workers, &done, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}
