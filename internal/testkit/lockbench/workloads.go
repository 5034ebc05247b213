package lockbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// SessionTTL is the TTL, in seconds, of the sessions of every workload but
// LostNotice: the packages' default, long enough that no lease is renewed
// more than a few times during a window.
const SessionTTL = 60

// opTimeout bounds each Unlock, session setup and cleanup step, so that a
// workload cannot hang on an unreachable cluster.
const opTimeout = 30 * time.Second

// Env is where a workload runs.
type Env struct {
	// Clients are the clients that sessions are opened on, round robin.
	// LostNotice needs two: one holds, the other revokes.
	Clients []*clientv3.Client
	// Counter, if not nil, is attached to every client in Clients.
	Counter *Counter
	// Watchers, if not nil, counts the watchers the cluster's members hold
	// (ManyLocks reads it).
	Watchers WatcherCount
	// WatchStreams, if not nil, counts the gRPC watch streams the
	// cluster's members serve (Idle reads it).
	WatchStreams WatcherCount
	// HeapProfile, if not "", is a file that Queue writes the heap
	// profile to with every waiter queued, at the point where it reads
	// the heap per waiter (for `go tool pprof -diff_base`).
	HeapProfile string
}

func (e Env) client(i int) *clientv3.Client { return e.Clients[i%len(e.Clients)] }

// Limits bound a measured window: it closes after Duration or after MaxOps
// operations, whichever comes first.
type Limits struct {
	Duration time.Duration
	MaxOps   int // 0: no limit but Duration
	// OnStart and OnStop, if set, are called as the window opens and closes
	// (a testing.B resets and stops its timer there).
	OnStart, OnStop func()
	// Pause, if positive, is how long a session of the anatomy workload
	// waits after its Unlock before it locks again: the next waiter's read
	// then no longer meets the releaser's new enqueue (issue 43).
	Pause time.Duration
}

func (l Limits) start() {
	if l.OnStart != nil {
		l.OnStart()
	}
}

func (l Limits) stop() {
	if l.OnStop != nil {
		l.OnStop()
	}
}

// more reports whether an operation n (from 0) may start at now.
func (l Limits) more(n int, deadline time.Time) bool {
	return (l.MaxOps <= 0 || n < l.MaxOps) && time.Now().Before(deadline)
}

// loop runs op repeatedly within lim and times each call.
func loop(ctx context.Context, env Env, lim Limits, op func(ctx context.Context) error) (Result, error) {
	var r Result
	lim.start()
	c0 := env.Counter.Snapshot()
	t0 := time.Now()
	deadline := t0.Add(lim.Duration)
	for n := 0; lim.more(n, deadline); n++ {
		t := time.Now()
		if err := op(ctx); err != nil {
			lim.stop()
			return r, err
		}
		r.Samples = append(r.Samples, time.Since(t))
	}
	r.Elapsed = time.Since(t0)
	lim.stop()
	r.Counts = env.Counter.Snapshot().Sub(c0)
	r.Ops = len(r.Samples)
	return r, nil
}

// RawPut times a Put of one key under pfx: the floor that a lock operation,
// which is at least one write, is compared with. It deletes the key after.
func RawPut(ctx context.Context, env Env, pfx string, lim Limits) (r Result, err error) {
	c := env.client(0)
	key := pfx + "/put"
	defer func() {
		err = errors.Join(err, cleanup(ctx, c, pfx, func(ctx context.Context) error { _, err := c.Delete(ctx, key); return err }))
	}()
	r, err = loop(ctx, env, lim, func(ctx context.Context) error {
		_, err := c.Put(ctx, key, "x")
		return err
	})
	r.Workload, r.Impl = "raw Put", "-"
	return r, err
}

// RawGet times a linearizable Get of one key under pfx: with the watch
// event, the floor of a handoff, whose waiter re-reads once after the
// event.
func RawGet(ctx context.Context, env Env, pfx string, lim Limits) (Result, error) {
	c := env.client(0)
	key := pfx + "/get"
	r, err := loop(ctx, env, lim, func(ctx context.Context) error {
		_, err := c.Get(ctx, key)
		return err
	})
	r.Workload, r.Impl = "raw Get (linearizable)", "-"
	return r, err
}

// Uncontended times Lock followed by Unlock on one session, with no other
// session on the lock.
func Uncontended(ctx context.Context, env Env, impl Impl, pfx string, lim Limits) (Result, error) {
	return withSessions(ctx, env, impl, pfx, 1, func(ss []Session) (Result, error) {
		m := impl.NewMutex(ss[0], pfx)
		r, err := loop(ctx, env, lim, func(ctx context.Context) error {
			if err := m.Lock(ctx); err != nil {
				return fmt.Errorf("%s: Lock: %w", impl.Name, err)
			}
			return unlock(ctx, impl, m)
		})
		r.Workload, r.Impl = "uncontended Lock+Unlock", impl.Name
		return r, err
	})
}

// TryLockMiss times TryLock on a lock that another session holds.
func TryLockMiss(ctx context.Context, env Env, impl Impl, pfx string, lim Limits) (Result, error) {
	return withSessions(ctx, env, impl, pfx, 2, func(ss []Session) (Result, error) {
		holder, m := impl.NewMutex(ss[0], pfx), impl.NewMutex(ss[1], pfx)
		if err := holder.Lock(ctx); err != nil {
			return Result{}, fmt.Errorf("%s: holder Lock: %w", impl.Name, err)
		}
		r, err := loop(ctx, env, lim, func(ctx context.Context) error {
			if err := m.TryLock(ctx); !errors.Is(err, impl.ErrLocked) {
				return fmt.Errorf("%s: TryLock on a held lock = %v, want ErrLocked", impl.Name, err)
			}
			return nil
		})
		r.Workload, r.Impl = "TryLock miss", impl.Name
		return r, errors.Join(err, unlock(ctx, impl, holder))
	})
}

// Contended runs one session per goroutine, each looping Lock and Unlock on
// one lock, and times each handoff: from the return of the holder's Unlock
// to the return of the next holder's Lock. Ops counts acquisitions; the
// traffic per operation is that of one Lock+Unlock cycle under contention.
// For a semaphore (impl.Permits > 1) the next holder is the one that took
// the released permit (see handoffs).
func Contended(ctx context.Context, env Env, impl Impl, pfx string, sessions int, lim Limits) (Result, error) {
	return withSessions(ctx, env, impl, pfx, sessions, func(ss []Session) (Result, error) {
		return contended(ctx, env, impl, pfx, ss, lim)
	})
}

func contended(ctx context.Context, env Env, impl Impl, pfx string, ss []Session, lim Limits) (Result, error) {
	r := Result{Workload: fmt.Sprintf("contended, %d sessions", len(ss)), Impl: impl.Name}
	switch {
	case impl.Weight > 0:
		r.Workload = fmt.Sprintf("semaphore of %d, weight %d each, %d sessions", impl.Permits*impl.Weight, impl.Weight, len(ss))
	case impl.Permits > 1:
		r.Workload = fmt.Sprintf("semaphore of %d, %d sessions", impl.Permits, len(ss))
	}
	h := newPermitHandoffs(impl.Permits)
	wctx, cancel := context.WithCancel(ctx) // ends the window; Lock waits on it
	defer cancel()
	var (
		once   sync.Once
		t0, t1 time.Time
		c0, c1 Counts
		acq    atomic.Int64
		ops    int64 // acquisitions when the window closed
	)
	halt := func() {
		once.Do(func() {
			t1, c1, ops = time.Now(), env.Counter.Snapshot(), acq.Load()
			lim.stop()
			cancel()
		})
	}
	w := openWhenQueued(wctx, env.client(0), pfx, len(ss), lim.Duration, halt, func() {
		lim.start()
		t0, c0 = time.Now(), env.Counter.Snapshot()
	})
	err := each(ss, halt, func(s Session) error {
		return contend(ctx, wctx, impl, impl.NewMutex(s, pfx), h, &acq, lim.MaxOps, halt, w)
	})
	w.wait()
	r.Samples, r.Early, r.Unlocks = h.result()
	// Acquisitions that goroutines counted after the window closed, while
	// lim.stop ran (it may scrape the members), are not the window's.
	r.Ops, r.Elapsed, r.Counts = int(ops), t1.Sub(t0), c1.Sub(c0)
	return r, err
}

// window is the measured window of a workload whose sessions loop on one
// lock: it opens once the queue has formed (see openWhenQueued), so that
// the start-up of the sessions' first Locks, one enqueue and one watch
// each, which with many sessions on a slow cluster would be a large part
// of a short window's traffic and commits, is not measured.
type window struct {
	open  atomic.Bool
	timer *time.Timer   // closes the window; set once it opens
	done  chan struct{} // closed once the window has opened or given up
}

// openWhenQueued starts a goroutine that waits until n keys are under
// pfx+"/" (every session queued or holding), or for bound at most, then
// calls start, opens the window, and closes it (halt) after bound. It
// gives up when ctx ends first.
func openWhenQueued(ctx context.Context, c *clientv3.Client, pfx string, n int, bound time.Duration, halt, start func()) *window {
	w := &window{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		qctx, cancel := context.WithTimeout(ctx, bound)
		// A failed poll or the bound opens the window all the same.
		_ = poll(qctx, 10*time.Millisecond, func() (bool, error) {
			k, err := countKeys(qctx, c, pfx)
			return k >= int64(n), err
		})
		cancel()
		if ctx.Err() != nil {
			return
		}
		start()
		w.open.Store(true)
		w.timer = time.AfterFunc(bound, halt)
	}()
	return w
}

// isOpen reports whether the window has opened.
func (w *window) isOpen() bool { return w.open.Load() }

// wait waits for the window's goroutine and stops its timer.
func (w *window) wait() {
	<-w.done
	if w.timer != nil {
		w.timer.Stop()
	}
}

// each runs fn for each session on a goroutine of its own, calls halt as
// soon as one fails and once all have returned, and returns their errors
// joined.
func each(ss []Session, halt func(), fn func(s Session) error) error {
	errc := make(chan error, len(ss))
	for _, s := range ss {
		go func() {
			err := fn(s)
			if err != nil {
				halt()
			}
			errc <- err
		}()
	}
	var errs []error
	for range ss {
		errs = append(errs, <-errc)
	}
	halt()
	return errors.Join(errs...)
}

// contend is one goroutine of Contended: it locks and unlocks m until wctx
// ends, and ends the window (halt) at the maxOps-th acquisition.
func contend(ctx, wctx context.Context, impl Impl, m Mutex, h *handoffs, acq *atomic.Int64, maxOps int, halt func(), w *window) error {
	for wctx.Err() == nil {
		if err := m.Lock(wctx); err != nil {
			if wctx.Err() != nil {
				return nil // the window closed while waiting
			}
			return fmt.Errorf("%s: Lock: %w", impl.Name, err)
		}
		at := time.Now()
		counted := w.isOpen() && wctx.Err() == nil
		var gen int64
		if counted {
			gen = h.acquired(at)
			if n := acq.Add(1); maxOps > 0 && n >= int64(maxOps) {
				halt()
			}
		}
		called := time.Now()
		if err := unlock(ctx, impl, m); err != nil {
			return err
		}
		if counted {
			h.released(gen, called, time.Now())
		}
	}
	return nil
}

// QueueResult is what Queue measured.
type QueueResult struct {
	// Result covers the drain: one sample per handoff, one operation per
	// acquisition (with its Unlock).
	Result
	Waiters int
	// Heap bytes and goroutines added per session opened, and per Lock
	// then left waiting, measured after a GC. Meaningful only when the
	// process runs no etcd member (cmd/lockbench measures in a child).
	HeapPerSession, HeapPerWaiter             float64
	GoroutinesPerSession, GoroutinesPerWaiter float64
}

// Queue queues waiters sessions on a lock held through holder (for a
// semaphore, impl.Permits holds on holder's one session), measures
// the memory and goroutines they cost, then releases the lock and lets the
// queue drain, each waiter unlocking as soon as it holds. It times each
// handoff of the drain and counts the traffic of env's clients, which carry
// the waiters (holder should not be counted): per acquisition, a waiter's
// wake-up, re-check and Unlock. With no herd, that traffic does not depend
// on the length of the queue. timeout bounds the whole workload.
func Queue(ctx context.Context, env Env, holder *clientv3.Client, impl Impl, pfx string, waiters int, timeout time.Duration) (r QueueResult, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r.Workload, r.Impl, r.Waiters = fmt.Sprintf("queue of %d, drain", waiters), impl.Name, waiters
	holders := max(impl.Permits, 1)
	if holders > 1 {
		r.Workload = fmt.Sprintf("semaphore of %d, queue of %d, drain", holders, waiters)
	}
	holderS, err := openSessions(ctx, Env{Clients: []*clientv3.Client{holder}}, impl, 1, SessionTTL)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, closeSessions(ctx, env, holderS, pfx)) }()
	h := newPermitHandoffs(holders)
	var hms []Mutex
	var holderGens []int64
	// unlockHolders releases every hold of holder, in the order taken.
	unlockHolders := func() error {
		var errs []error
		for i, hm := range hms {
			called := time.Now()
			errs = append(errs, unlock(ctx, impl, hm))
			h.released(holderGens[i], called, time.Now())
		}
		hms = nil
		return errors.Join(errs...)
	}
	for range holders {
		hm := impl.NewMutex(holderS[0], pfx)
		if err := hm.Lock(ctx); err != nil {
			return r, errors.Join(fmt.Errorf("%s: holder Lock: %w", impl.Name, err), unlockHolders())
		}
		hms = append(hms, hm)
		holderGens = append(holderGens, h.acquired(time.Now()))
	}

	// Connect every client before the baseline, so that connections are
	// not counted as the sessions' cost.
	for _, c := range env.Clients {
		if _, err := countKeys(ctx, c, pfx); err != nil {
			return r, errors.Join(err, unlockHolders())
		}
	}
	heap0, g0 := liveHeap()
	ss, err := openSessions(ctx, env, impl, waiters, SessionTTL)
	if err != nil {
		return r, errors.Join(err, unlockHolders())
	}
	defer func() { err = errors.Join(err, closeSessions(ctx, env, ss, "")) }()
	if err := settle(ctx, env.Counter, 300*time.Millisecond); err != nil {
		return r, errors.Join(err, unlockHolders())
	}
	heap1, g1 := liveHeap()

	var last atomic.Int64 // UnixNano of the latest acquisition
	errc := make(chan error, waiters)
	for _, s := range ss {
		m := impl.NewMutex(s, pfx)
		go func() {
			if err := m.Lock(ctx); err != nil {
				errc <- fmt.Errorf("%s: waiter Lock: %w", impl.Name, err)
				return
			}
			at := time.Now()
			gen := h.acquired(at)
			last.Store(at.UnixNano())
			called := time.Now()
			err := unlock(ctx, impl, m)
			h.released(gen, called, time.Now())
			errc <- err
		}()
	}
	// All queued: every key is in etcd and the clients have gone quiet.
	err = poll(ctx, 10*time.Millisecond, func() (bool, error) {
		n, err := countKeys(ctx, holder, pfx)
		return n == int64(waiters+holders), err
	})
	if err == nil {
		err = settle(ctx, env.Counter, 300*time.Millisecond)
	}
	heap2, g2 := liveHeap()
	if env.HeapProfile != "" {
		err = errors.Join(err, writeHeapProfile(env.HeapProfile))
	}

	c0 := env.Counter.Snapshot()
	t0 := time.Now()
	err = errors.Join(err, unlockHolders())
	var errs []error
	for range ss {
		errs = append(errs, <-errc)
	}
	if err = errors.Join(append(errs, err)...); err != nil {
		return r, err
	}
	r.Elapsed = time.Unix(0, last.Load()).Sub(t0)
	r.Counts = env.Counter.Snapshot().Sub(c0)
	r.Ops = waiters
	r.Samples, r.Early, r.Unlocks = h.result()
	n := float64(waiters)
	r.HeapPerSession, r.HeapPerWaiter = float64(heap1-heap0)/n, float64(heap2-heap1)/n
	r.GoroutinesPerSession, r.GoroutinesPerWaiter = float64(g1-g0)/n, float64(g2-g1)/n
	return r, nil
}

// writeHeapProfile writes the heap profile of the last collection to the
// file at path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
}

// liveHeap returns the live heap bytes, after a full collection, and the
// number of goroutines.
func liveHeap() (int64, int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), runtime.NumGoroutine()
}

// LostNotice measures, over trials holds, the time from a lease revoke sent
// by another client to the holder being told through impl.Lost. Sessions
// have a TTL of ttl seconds; the revoke comes at a random point of the
// keepalive period, after the holder's clients have gone quiet (its watch,
// if any, is in place). A wait longer than bound is not a sample: it is
// counted in capped.
func LostNotice(ctx context.Context, env Env, impl Impl, pfx string, ttl, trials int, bound time.Duration) (samples []time.Duration, capped int, err error) {
	if len(env.Clients) < 2 {
		return nil, 0, errors.New("lockbench: LostNotice needs two clients")
	}
	for i := 0; i < trials; i++ {
		d, err := lostOnce(ctx, env, impl, pfx, ttl, bound)
		switch {
		case err != nil:
			return samples, capped, err
		case d > bound:
			capped++
		default:
			samples = append(samples, d)
		}
	}
	return samples, capped, nil
}

func lostOnce(ctx context.Context, env Env, impl Impl, pfx string, ttl int, bound time.Duration) (d time.Duration, err error) {
	ss, err := openSessions(ctx, Env{Clients: env.Clients[:1]}, impl, 1, ttl)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, closeSessions(ctx, env, ss, pfx)) }()
	m := impl.NewMutex(ss[0], pfx)
	if err := m.Lock(ctx); err != nil {
		return 0, fmt.Errorf("%s: Lock: %w", impl.Name, err)
	}
	// The hold's own cleanup: the key is gone with the lease, so Unlock
	// only releases the Mutex.
	defer func() { err = errors.Join(err, unlock(ctx, impl, m)) }()
	lost := impl.Lost(ss[0], m)
	if err := settle(ctx, env.Counter, 100*time.Millisecond); err != nil {
		return 0, err
	}
	// A random point in the keepalive period (TTL/3 for both packages).
	period := time.Duration(ttl) * time.Second / 3
	if err := wait(ctx, rand.N(period)); err != nil {
		return 0, err
	}
	t := time.Now()
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	_, err = env.Clients[1].Revoke(rctx, ss[0].Lease())
	cancel()
	if err != nil {
		return 0, fmt.Errorf("revoke: %w", err)
	}
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-lost:
		return time.Since(t), nil
	case <-timer.C:
		return bound + 1, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// unlock unlocks m with a fresh context bounded by opTimeout, so that the
// end of a window (or of ctx) never leaves a lock held.
func unlock(ctx context.Context, impl Impl, m Mutex) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	if err := m.Unlock(uctx); err != nil {
		return fmt.Errorf("%s: Unlock: %w", impl.Name, err)
	}
	return nil
}

// withSessions opens n sessions, runs fn with them, closes them and checks
// that no key is left under pfx.
func withSessions(ctx context.Context, env Env, impl Impl, pfx string, n int, fn func([]Session) (Result, error)) (r Result, err error) {
	ss, err := openSessions(ctx, env, impl, n, SessionTTL)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, closeSessions(ctx, env, ss, pfx)) }()
	return fn(ss)
}

// setupWorkers bounds the sessions opened or closed at once.
const setupWorkers = 16

// openSessions opens n sessions of impl, spread over env's clients, that
// live at most as long as ctx. On error it closes those it opened.
func openSessions(ctx context.Context, env Env, impl Impl, n, ttl int) ([]Session, error) {
	ss := make([]Session, n)
	err := parallel(n, func(i int) error {
		s, err := impl.NewSession(ctx, env.client(i), ttl)
		if err != nil {
			return fmt.Errorf("%s: NewSession: %w", impl.Name, err)
		}
		ss[i] = s
		return nil
	})
	if err != nil {
		opened := ss[:0]
		for _, s := range ss {
			if s != nil {
				opened = append(opened, s)
			}
		}
		return nil, errors.Join(err, closeSessions(ctx, env, opened, ""))
	}
	return ss, nil
}

func isLeaseNotFound(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

// closeSessions closes ss (a lease already revoked is not an error) and,
// if pfx is not empty, checks that no key is left under it.
func closeSessions(ctx context.Context, env Env, ss []Session, pfx string) error {
	err := parallel(len(ss), func(i int) error {
		if err := ss[i].Close(); err != nil && !isLeaseNotFound(err) {
			return fmt.Errorf("session Close: %w", err)
		}
		return nil
	})
	if pfx == "" {
		return err
	}
	return errors.Join(err, cleanup(ctx, env.client(0), pfx, nil))
}

// cleanup runs del, if any, then checks that no key is left under pfx+"/".
func cleanup(ctx context.Context, c *clientv3.Client, pfx string, del func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	if del != nil {
		if err := del(ctx); err != nil {
			return err
		}
	}
	n, err := countKeys(ctx, c, pfx)
	if err == nil && n != 0 {
		err = fmt.Errorf("lockbench: %d keys left under %s/", n, pfx)
	}
	return err
}

// countKeys returns the number of keys under pfx+"/".
func countKeys(ctx context.Context, c *clientv3.Client, pfx string) (int64, error) {
	resp, err := c.Get(ctx, pfx+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

// parallel runs fn(0..n-1) on at most setupWorkers goroutines and returns
// the errors joined.
func parallel(n int, fn func(i int) error) error {
	sem := make(chan struct{}, setupWorkers)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return joinFew(errs)
}

// joinFew joins the errors of errs that are not nil, the first three of
// them and how many more: a setup of 100,000 that fails should say how,
// not print 100,000 lines.
func joinFew(errs []error) error {
	var some []error
	n := 0
	for _, e := range errs {
		if e == nil {
			continue
		}
		if n++; len(some) < 3 {
			some = append(some, e)
		}
	}
	if n > len(some) {
		some = append(some, fmt.Errorf("and %d more", n-len(some)))
	}
	return errors.Join(some...)
}

// poll calls cond every interval until it holds, fails, or ctx ends.
func poll(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if ok || err != nil {
			return err
		}
		if err := wait(ctx, interval); err != nil {
			return err
		}
	}
}

// settle waits until the counters of c have not moved for quiet: the
// clients have no request or event in flight. With no counter it waits
// quiet once.
func settle(ctx context.Context, c *Counter, quiet time.Duration) error {
	if c == nil {
		return wait(ctx, quiet)
	}
	step := quiet / 5
	last, still := c.Snapshot(), 0
	return poll(ctx, step, func() (bool, error) {
		now := c.Snapshot()
		if now == last {
			still++
		} else {
			last, still = now, 0
		}
		return still > 5, nil
	})
}

// wait waits for d, or returns ctx's error if it ends first.
func wait(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
