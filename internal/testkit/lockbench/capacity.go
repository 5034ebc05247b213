package lockbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"
)

// This file holds the capacity workload (issue 42): what N idle sessions,
// holds and waiters cost the client and the cluster, and how long a queue
// of N takes to hand over and to drain, for N up to where the machine can.

// Capacity scenarios.
const (
	// CapSessions is N idle sessions and nothing else.
	CapSessions = "idle sessions"
	// CapHolds is N locks held, each by a session of its own.
	CapHolds = "holds, 1 per session"
	// CapSharedHolds is N locks held, CapPerSession on each session.
	CapSharedHolds = "holds, 100 per session"
	// CapQueue is N waiters, each on a session of its own, queued on one
	// held lock, then drained.
	CapQueue = "waiters on one name"
	// CapSpread is N waiters, each on a session of its own, queued
	// CapPerName on each of N/CapPerName held locks, then drained.
	CapSpread = "waiters, 10 per name"
)

// CapScenarios are the scenarios, in run order.
var CapScenarios = []string{CapSessions, CapHolds, CapSharedHolds, CapQueue, CapSpread}

const (
	// CapPerSession is how many holds share a session in CapSharedHolds,
	// and how many holds of CapSpread's names share a holder session.
	CapPerSession = 100
	// CapPerName is how many wait on each name in CapSpread.
	CapPerName = 10
)

// Member is one etcd server process, as the capacity workload reads it:
// its client URL, whose /metrics page it scrapes (process memory and CPU,
// the Go heap, watchers).
type Member struct {
	Endpoint string
}

// CapResult is what Capacity measured for one scenario, package and N.
type CapResult struct {
	Scenario, Impl string
	// N is the idle sessions, holds or waiters; Sessions the sessions
	// opened in all (holders' included), Names the lock names.
	N, Sessions, Names int
	// Setup is the time from the first session opened to every key in
	// place (every session opened, for CapSessions).
	Setup time.Duration
	// HeapBytes and Goroutines are this process's live heap (after a
	// full collection) and goroutines above the baseline taken before the
	// sessions opened, with everything in place.
	HeapBytes  int64
	Goroutines int
	// StackBytes is the goroutine stacks' memory above the baseline
	// (runtime.MemStats.StackInuse), which the heap leaves out.
	StackBytes int64
	// Base and Loaded are the members' /metrics before the sessions
	// opened and with everything in place; End is read after Window, and
	// End − Loaded is the window's (CPU).
	Base, Loaded, End []Metrics
	// Window is how long Traffic counted the clients' requests with
	// everything in place and idle.
	Window  time.Duration
	Traffic TrafficCounts
	// ClientCPU is this process's CPU time over the window.
	ClientCPU time.Duration
	// FirstHandoff and Drain, for the queue scenarios: from the call of
	// the first holder's Unlock to the first waiter's Lock returning, and
	// to the last waiter's Unlock returning. EarlyGap and LateGap are
	// the mean time between acquisitions over the first and the last
	// tenth of the drain: equal if a handoff costs the same at any queue
	// length.
	FirstHandoff, Drain, EarlyGap, LateGap time.Duration
}

// Member metrics the capacity report reads.
const (
	MetricRSS       = "process_resident_memory_bytes"
	MetricHeap      = "go_memstats_heap_inuse_bytes"
	MetricCPU       = "process_cpu_seconds_total"
	MetricGoroutine = "go_goroutines"
)

// MemberSum returns the sum over members of metric name in ms.
func MemberSum(ms []Metrics, name string) float64 {
	var s float64
	for _, m := range ms {
		s += m.Sum(name)
	}
	return s
}

// MemberMax returns the largest change of metric name from a to b of one
// member.
func MemberMax(a, b []Metrics, name string) float64 {
	var x float64
	for i := range min(len(a), len(b)) {
		x = max(x, b[i].Sum(name)-a[i].Sum(name))
	}
	return x
}

// PerMinute scales n requests over the window to requests per minute.
func (r CapResult) PerMinute(n float64) float64 {
	if r.Window <= 0 {
		return 0
	}
	return n / r.Window.Minutes()
}

// scrapeMembers reads every member's /metrics.
func scrapeMembers(ctx context.Context, members []Member) ([]Metrics, error) {
	var ms []Metrics
	for _, m := range members {
		x, err := ScrapeMetrics(ctx, m.Endpoint)
		if err != nil {
			return nil, err
		}
		ms = append(ms, x)
	}
	return ms, nil
}

// capLayout is the sessions and names of a scenario of n.
func capLayout(scenario string, n int) (holders, waiters, names int, err error) {
	ceil := func(a, b int) int { return (a + b - 1) / b }
	switch scenario {
	case CapSessions:
		return 0, n, 0, nil
	case CapHolds:
		return n, 0, n, nil
	case CapSharedHolds:
		return ceil(n, CapPerSession), 0, n, nil
	case CapQueue:
		return 1, n, 1, nil
	case CapSpread:
		names = ceil(n, CapPerName)
		return ceil(names, CapPerSession), n, names, nil
	}
	return 0, 0, 0, fmt.Errorf("lockbench: unknown capacity scenario %q", scenario)
}

// Capacity builds scenario with n for impl on env's clients (traffic must
// be attached to them), with keys under pfx; measures this process's heap
// and goroutines, the members' metrics, and the clients' requests over
// window with everything idle; drains the queue scenarios; and closes
// everything, checking that pfx is left empty. bound limits the setup and
// the drain each. rate is how many waiters call Lock per second during the
// setup; 0 starts them all at once.
func Capacity(ctx context.Context, env Env, traffic *Traffic, members []Member, impl Impl, scenario, pfx string, n int, window, bound time.Duration, rate int) (r CapResult, err error) {
	holders, waiters, names, err := capLayout(scenario, n)
	if err != nil {
		return r, err
	}
	r = CapResult{Scenario: scenario, Impl: impl.Name, N: n, Names: names, Sessions: holders + waiters}
	// Connect every client before the baseline.
	for _, c := range env.Clients {
		if _, err := countKeys(ctx, c, pfx); err != nil {
			return r, err
		}
	}
	if err := settleTraffic(ctx, traffic, 300*time.Millisecond); err != nil {
		return r, err
	}
	heap0, g0 := liveHeap()
	stack0 := stackInuse()
	if r.Base, err = scrapeMembers(ctx, members); err != nil {
		return r, err
	}

	t0 := time.Now()
	sctx, cancelSetup := context.WithTimeout(ctx, bound)
	defer cancelSetup()
	// Holder sessions first, on clients of their own where there are
	// several: a waiter's client is then not the holder's.
	hs, err := openSessions(sctx, env, impl, holders, SessionTTL)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, closeSessions(ctx, env, hs, pfx)) }()
	var held []Mutex
	release := func() error {
		var mu sync.Mutex
		var errs []error
		_ = parallel(len(held), func(i int) error {
			if e := unlock(ctx, impl, held[i]); e != nil {
				mu.Lock()
				errs = append(errs, e)
				mu.Unlock()
			}
			return nil
		})
		held = nil
		return joinFew(errs)
	}
	if names > 0 {
		held = make([]Mutex, names)
		perSession := max(names/max(holders, 1), 1)
		if scenario != CapHolds {
			perSession = CapPerSession
		}
		err := parallel(names, func(i int) error {
			m := impl.NewMutex(hs[min(i/perSession, len(hs)-1)], fmt.Sprintf("%s/%d", pfx, i))
			if err := m.Lock(sctx); err != nil {
				return fmt.Errorf("%s: holder Lock: %w", impl.Name, err)
			}
			held[i] = m
			return nil
		})
		if err != nil {
			held = slices.DeleteFunc(held, func(m Mutex) bool { return m == nil })
			return r, errors.Join(err, release())
		}
	}
	defer func() { err = errors.Join(err, release()) }()

	ws, err := openSessions(sctx, env, impl, waiters, SessionTTL)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, closeSessions(ctx, env, ws, "")) }()

	// The waiters: each Locks its name, records when it got it, and lets
	// go at once; wctx ends the waits that never got it.
	wctx, cancelWaits := context.WithCancel(ctx)
	defer cancelWaits()
	var (
		mu   sync.Mutex // guards got
		got  []time.Time
		last time.Time // guarded by mu: the latest Unlock's return
	)
	errc := make(chan error, waiters)
	if scenario != CapSessions {
		var start <-chan time.Time
		if rate > 0 {
			t := time.NewTicker(time.Second / time.Duration(rate))
			defer t.Stop()
			start = t.C
		}
		for i, s := range ws {
			if start != nil {
				select {
				case <-start:
				case <-sctx.Done():
					errc <- fmt.Errorf("%s: waiter not started: %w", impl.Name, sctx.Err())
					continue
				}
			}
			name := 0
			if scenario == CapSpread {
				name = i % names
			}
			m := impl.NewMutex(s, fmt.Sprintf("%s/%d", pfx, name))
			go func() {
				if err := m.Lock(wctx); err != nil {
					errc <- fmt.Errorf("%s: waiter Lock: %w", impl.Name, err)
					return
				}
				at := time.Now()
				err := unlock(ctx, impl, m)
				done := time.Now()
				mu.Lock()
				got = append(got, at)
				if done.After(last) {
					last = done
				}
				mu.Unlock()
				errc <- err
			}()
		}
	} else {
		for range ws {
			errc <- nil
		}
	}
	// endWaits cancels the waits not yet granted and collects every
	// waiter's result.
	collected := false
	endWaits := func(want error) error {
		if collected {
			return nil
		}
		collected = true
		cancelWaits()
		var errs []error
		for range ws {
			if e := <-errc; e != nil && !(want != nil && errors.Is(e, want)) {
				errs = append(errs, e)
			}
		}
		return joinFew(errs)
	}
	defer func() { err = errors.Join(err, endWaits(context.Canceled)) }()

	want := int64(names + waiters)
	if scenario == CapSessions {
		want = 0
	}
	var most int64 // the most keys seen in place, and when
	var mostAt time.Duration
	err = poll(sctx, 20*time.Millisecond, func() (bool, error) {
		k, err := countKeys(sctx, env.client(0), pfx)
		if k > most {
			most, mostAt = k, time.Since(t0)
		}
		return k == want, err
	})
	if err != nil {
		return r, fmt.Errorf("%s: %s of %d: setup: at most %d of %d keys in place, %v after the start (%v in all): %w",
			impl.Name, scenario, n, most, want, mostAt.Round(time.Second), time.Since(t0).Round(time.Second), err)
	}
	r.Setup = time.Since(t0)
	if err := settleTraffic(ctx, traffic, 500*time.Millisecond); err != nil {
		return r, err
	}
	heap1, g1 := liveHeap()
	r.HeapBytes, r.Goroutines, r.StackBytes = heap1-heap0, g1-g0, stackInuse()-stack0
	if r.Loaded, err = scrapeMembers(ctx, members); err != nil {
		return r, err
	}

	c0, tw, cpu0 := traffic.Snapshot(), time.Now(), cpuTime(os.Getpid())
	if err := wait(ctx, window); err != nil {
		return r, err
	}
	r.Window, r.Traffic, r.ClientCPU = time.Since(tw), traffic.Snapshot().Sub(c0), cpuTime(os.Getpid())-cpu0
	if r.End, err = scrapeMembers(ctx, members); err != nil {
		return r, err
	}
	mu.Lock()
	early := len(got)
	mu.Unlock()
	if early > 0 {
		return r, fmt.Errorf("%s: %s of %d: %d waiters got a held lock", impl.Name, scenario, n, early)
	}
	if waiters == 0 || scenario == CapSessions {
		return r, nil
	}

	// The drain: every hold released at once; each waiter lets go as soon
	// as it holds.
	d0 := time.Now()
	if err := release(); err != nil {
		return r, err
	}
	dctx, cancelDrain := context.WithTimeout(ctx, bound)
	defer cancelDrain()
	err = poll(dctx, 20*time.Millisecond, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == waiters, nil
	})
	if err != nil {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		return r, fmt.Errorf("%s: %s of %d: drain: %d of %d acquired in %v: %w", impl.Name, scenario, n, k, waiters, bound, err)
	}
	if err := endWaits(nil); err != nil {
		return r, err
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(got, func(a, b time.Time) int { return a.Compare(b) })
	r.FirstHandoff, r.Drain = got[0].Sub(d0), last.Sub(d0)
	r.EarlyGap, r.LateGap = gaps(got)
	return r, nil
}

// stackInuse returns the bytes of this process's goroutine stacks.
func stackInuse() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.StackInuse)
}

// gaps returns the mean time between consecutive times of sorted over its
// first and its last tenth (at least two times each).
func gaps(sorted []time.Time) (early, late time.Duration) {
	k := max(len(sorted)/10, 2)
	if len(sorted) < k {
		return 0, 0
	}
	mean := func(ts []time.Time) time.Duration {
		return ts[len(ts)-1].Sub(ts[0]) / time.Duration(len(ts)-1)
	}
	return mean(sorted[:k]), mean(sorted[len(sorted)-k:])
}
