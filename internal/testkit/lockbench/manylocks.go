package lockbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// WatcherSample is one reading of the server's watchers during a window.
type WatcherSample struct {
	// Watchers is the server's watcher count above the baseline taken
	// before the workload's sessions opened.
	Watchers float64
	// Held is the number of locks held when the count was read: Lock has
	// returned and Unlock has not (the lock's key is on the server until
	// Unlock's delete commits). It is the mean of a reading just before and
	// one just after the count.
	Held float64
}

// ManyResult is what ManyLocks measured.
type ManyResult struct {
	// Result covers the window: one sample per Lock+Unlock cycle of one
	// session, one operation per cycle, ops/s summed over the sessions.
	Result
	Sessions int
	// Baseline is the server's watcher count before the sessions opened,
	// After its count once they were closed and the clients went quiet.
	Baseline, After float64
	// WatcherSamples are read a few times during the window.
	WatcherSamples []WatcherSample
	// WatchersErr says why there is no server-side count, if there is none.
	WatchersErr string
}

// Watchers returns the mean server-side watchers above the baseline and the
// mean number of locks held over the samples; ok is false with no samples.
func (r ManyResult) Watchers() (watchers, held float64, ok bool) {
	if len(r.WatcherSamples) == 0 {
		return 0, 0, false
	}
	for _, s := range r.WatcherSamples {
		watchers += s.Watchers
		held += s.Held
	}
	n := float64(len(r.WatcherSamples))
	return watchers / n, held / n, true
}

// WatchersPerHeld returns the mean watchers above the baseline divided by
// the mean locks held (a ratio of means: a sample taken while few locks
// happen to be held does not weigh more than the others); ok is false if
// there is no sample or no lock was seen held.
func (r ManyResult) WatchersPerHeld() (float64, bool) {
	w, h, ok := r.Watchers()
	if !ok || h == 0 {
		return 0, false
	}
	return w / h, true
}

// ManyLocks opens sessions sessions, each looping Lock and Unlock on a lock
// of its own, all at once, and times each cycle; each hold lasts hold
// (0: Unlock right after Lock returns). Ops counts cycles of all
// sessions. If env.Watchers is set it reads the server's watchers before
// the sessions open (the baseline), about ten times during the window
// together with the number of locks held, and once the sessions are closed.
func ManyLocks(ctx context.Context, env Env, impl Impl, pfx string, sessions int, hold time.Duration, lim Limits) (r ManyResult, err error) {
	r.Workload, r.Impl, r.Sessions = fmt.Sprintf("many locks, %d sessions", sessions), impl.Name, sessions
	count := env.Watchers
	if count == nil {
		r.WatchersErr = "no server-side watcher count for this cluster"
	} else {
		if err := settle(ctx, env.Counter, 100*time.Millisecond); err != nil {
			return r, err
		}
		if r.Baseline, err = count(ctx); err != nil {
			r.WatchersErr, count = err.Error(), nil
		}
	}

	ss, err := openSessions(ctx, env, impl, sessions, SessionTTL)
	if err != nil {
		return r, err
	}
	closed := false
	closeAll := func() error {
		if closed {
			return nil
		}
		closed = true
		return closeSessions(ctx, env, ss, pfx)
	}
	defer func() { err = errors.Join(err, closeAll()) }()

	var (
		held, ops atomic.Int64
		mu        sync.Mutex // guards samples, r.WatcherSamples and r.WatchersErr
		samples   []time.Duration
		wg        sync.WaitGroup
	)
	errc := make(chan error, sessions)
	lim.start()
	c0, t0 := env.Counter.Snapshot(), time.Now()
	deadline := t0.Add(lim.Duration)
	more := func() bool {
		return time.Now().Before(deadline) && (lim.MaxOps <= 0 || ops.Load() < int64(lim.MaxOps))
	}
	for i, s := range ss {
		m := impl.NewMutex(s, fmt.Sprintf("%s/%d", pfx, i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() { mu.Lock(); samples = append(samples, mine...); mu.Unlock() }()
			for more() {
				t := time.Now()
				if err := m.Lock(ctx); err != nil {
					errc <- fmt.Errorf("%s: Lock: %w", impl.Name, err)
					return
				}
				held.Add(1)
				if hold > 0 {
					_ = wait(ctx, hold) // if ctx ends, the next Lock says so
				}
				err := unlock(ctx, impl, m)
				held.Add(-1)
				if err != nil {
					errc <- err
					return
				}
				mine = append(mine, time.Since(t))
				ops.Add(1)
			}
			errc <- nil
		}()
	}

	// Sample the server while the sessions run.
	sampled := make(chan struct{})
	if count != nil {
		go func() {
			defer close(sampled)
			interval := max(lim.Duration/10, 5*time.Millisecond)
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
				if !time.Now().Add(interval / 2).Before(deadline) {
					return
				}
				h := held.Load()
				w, err := count(ctx)
				if err != nil {
					mu.Lock()
					r.WatchersErr = err.Error()
					mu.Unlock()
					return
				}
				mu.Lock()
				r.WatcherSamples = append(r.WatcherSamples, WatcherSample{w - r.Baseline, float64(h+held.Load()) / 2})
				mu.Unlock()
			}
		}()
	} else {
		close(sampled)
	}

	var errs []error
	for range ss {
		errs = append(errs, <-errc)
	}
	wg.Wait()
	r.Elapsed = time.Since(t0)
	lim.stop()
	r.Counts = env.Counter.Snapshot().Sub(c0)
	<-sampled
	r.Samples, r.Ops = samples, int(ops.Load())
	if err := errors.Join(errs...); err != nil {
		return r, err
	}

	if err := closeAll(); err != nil {
		return r, err
	}
	if count != nil && r.WatchersErr == "" {
		if err := settle(ctx, env.Counter, 100*time.Millisecond); err != nil {
			return r, err
		}
		after, err := count(ctx)
		if err != nil {
			r.WatchersErr = err.Error()
		}
		r.After = after
	}
	return r, nil
}
