package lockbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	etcdconc "go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/seed-a9d410c6/concurrency"
)

// RWLock is what a workload needs of a reader/writer lock.
type RWLock interface {
	RLock(ctx context.Context) error
	RUnlock(ctx context.Context) error
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// RWImpl is one reader/writer lock under test, with the sessions of its
// package.
type RWImpl struct {
	Impl // sessions; Name labels the lock in results
	// NewRWMutex returns a reader/writer lock named pfx on s.
	NewRWMutex func(s Session, pfx string) RWLock
	// Cancellable says whether RLock and Lock end with their ctx.
	Cancellable bool
}

// OursRW is this module's RWMutex.
var OursRW = RWImpl{
	Impl: Ours,
	NewRWMutex: func(s Session, pfx string) RWLock {
		return concurrency.NewRWMutex(s.(*concurrency.Session), pfx)
	},
	Cancellable: true,
}

// EtcdRW is etcd's recipe, go.etcd.io/etcd/client/v3/experimental/recipes
// RWMutex, on etcd's sessions. Its calls take no context: they are made
// with none, and a wait ends only when it is granted.
var EtcdRW = RWImpl{
	Impl: func() Impl { i := Etcd; i.Name = "etcd recipe"; return i }(),
	NewRWMutex: func(s Session, pfx string) RWLock {
		return recipeRW{recipe.NewRWMutex(s.(*etcdconc.Session), pfx)}
	},
}

type recipeRW struct{ m *recipe.RWMutex }

func (r recipeRW) RLock(context.Context) error   { return r.m.RLock() }
func (r recipeRW) RUnlock(context.Context) error { return r.m.RUnlock() }
func (r recipeRW) Lock(context.Context) error    { return r.m.Lock() }
func (r recipeRW) Unlock(context.Context) error  { return r.m.Unlock() }

// RWResult is what RWMixed measured.
type RWResult struct {
	// Result covers every acquisition: Samples are the latencies of RLock
	// and Lock (call to return, wait included), Unlocks those of RUnlock
	// and Unlock, Ops the acquisitions in the window.
	Result
	Sessions int
	ReadFrac float64
	// Reads and Writes split Samples by side.
	Reads, Writes []time.Duration
}

// drainBound is how long RWMixed waits, once its window has closed, for
// the acquisitions in flight to end. A lock whose waits cannot be
// cancelled (etcd's recipe) finishes them; one that takes longer is hung.
const drainBound = 30 * time.Second

// RWMixed runs one RWMutex per session, one goroutine each, every one
// looping: with probability readFrac RLock then RUnlock, else Lock then
// Unlock. It times each acquisition from call to return. Ops counts the
// acquisitions that returned within the window, and the traffic is that of
// the window. If the acquisitions in flight when the window closes do not
// end within drainBound, it returns an error naming the hang.
func RWMixed(ctx context.Context, env Env, impl RWImpl, pfx string, sessions int, readFrac float64, lim Limits) (RWResult, error) {
	var out RWResult
	r, err := withSessions(ctx, env, impl.Impl, pfx, sessions, func(ss []Session) (Result, error) {
		var err error
		out, err = rwMixed(ctx, env, impl, pfx, ss, readFrac, lim)
		return out.Result, err
	})
	out.Result = r
	return out, err
}

func rwMixed(ctx context.Context, env Env, impl RWImpl, pfx string, ss []Session, readFrac float64, lim Limits) (RWResult, error) {
	out := RWResult{Sessions: len(ss), ReadFrac: readFrac}
	out.Workload = fmt.Sprintf("RWMutex, %d sessions, %.0f%% reads", len(ss), 100*readFrac)
	out.Impl = impl.Name
	wctx, cancel := context.WithCancel(ctx) // ends the window
	defer cancel()
	var (
		mu            sync.Mutex // guards reads, writes, unlocks
		reads, writes []time.Duration
		unlocks       []time.Duration
		once          sync.Once
		t1            time.Time
		c1            Counts
		acq           atomic.Int64
	)
	halt := func() {
		once.Do(func() {
			t1, c1 = time.Now(), env.Counter.Snapshot()
			lim.stop()
			cancel()
		})
	}
	lim.start()
	t0, c0 := time.Now(), env.Counter.Snapshot()
	timer := time.AfterFunc(lim.Duration, halt)
	defer timer.Stop()

	errc := make(chan error, len(ss))
	for _, s := range ss {
		m := impl.NewRWMutex(s, pfx)
		go func() {
			err := rwCycle(ctx, wctx, impl, m, readFrac, func(read bool, d, u time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				if read {
					reads = append(reads, d)
				} else {
					writes = append(writes, d)
				}
				unlocks = append(unlocks, u)
				if n := acq.Add(1); lim.MaxOps > 0 && n >= int64(lim.MaxOps) {
					go halt()
				}
			})
			if err != nil {
				halt()
			}
			errc <- err
		}()
	}
	var errs []error
	<-wctx.Done()
	bound := time.NewTimer(drainBound)
	defer bound.Stop()
	for range ss {
		select {
		case err := <-errc:
			errs = append(errs, err)
		case <-bound.C:
			// Closing the sessions (the caller's) deletes the keys, which
			// ends the waits of etcd's recipe.
			return out, fmt.Errorf("%s: RWMutex: %d of %d sessions still in RLock, Lock or their release %v after the window closed (hang)",
				impl.Name, len(ss)-len(errs), len(ss), drainBound)
		}
	}
	halt()
	mu.Lock()
	defer mu.Unlock()
	out.Reads, out.Writes, out.Unlocks = reads, writes, unlocks
	out.Samples = append(slices.Clone(reads), writes...)
	out.Ops = len(out.Samples)
	out.Elapsed, out.Counts = t1.Sub(t0), c1.Sub(c0)
	return out, errors.Join(errs...)
}

// rwCycle is one goroutine of RWMixed: until wctx ends, it takes the read
// side with probability readFrac and the write side otherwise, releases it
// at once, and reports the latencies of each acquisition that returned
// within the window and of its release.
func rwCycle(ctx, wctx context.Context, impl RWImpl, m RWLock, readFrac float64, done func(read bool, acquire, release time.Duration)) error {
	for wctx.Err() == nil {
		read := rand.Float64() < readFrac
		lock, unlock, lockName, unlockName := m.Lock, m.Unlock, "Lock", "Unlock"
		if read {
			lock, unlock, lockName, unlockName = m.RLock, m.RUnlock, "RLock", "RUnlock"
		}
		t := time.Now()
		if err := lock(wctx); err != nil {
			if wctx.Err() != nil {
				return nil // the window closed while waiting
			}
			return fmt.Errorf("%s: %s: %w", impl.Name, lockName, err)
		}
		d := time.Since(t)
		counted := wctx.Err() == nil
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		t = time.Now()
		err := unlock(uctx)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %s: %w", impl.Name, unlockName, err)
		}
		if counted {
			done(read, d, time.Since(t))
		}
	}
	return nil
}
