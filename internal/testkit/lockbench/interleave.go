package lockbench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds the interleaved comparison (issue 42): the two packages
// measured in short windows that alternate, ours then etcd's, then etcd's
// then ours (ABBA), on the same cluster and the same sessions, so that a
// drift of the machine's load lands on both sides alike, and the ratio of
// each pair of windows is one sample of the ratio, with an interval.

// Window is what one measured window of one package counted.
type Window struct {
	// Ops is the Lock+Unlock cycles completed in the window, Elapsed its
	// length.
	Ops     int
	Elapsed time.Duration
	// Counts is the client traffic of the window (RPCs, watch requests and
	// events), Kinds the unary requests by kind, if a Kinds was given.
	Counts Counts
	Kinds  map[string]int64
	// CPU is the CPU time this process used over the window, and
	// ServerCPU that of the server processes (both -1 if unknown).
	CPU, ServerCPU time.Duration
	// Mallocs is the heap objects this process allocated over the window.
	Mallocs uint64
}

// PerSec is the window's cycles per second.
func (w Window) PerSec() float64 {
	if w.Elapsed <= 0 {
		return 0
	}
	return float64(w.Ops) / w.Elapsed.Seconds()
}

// Per divides x by the window's cycles (0 with no cycle).
func (w Window) Per(x float64) float64 {
	if w.Ops == 0 {
		return 0
	}
	return x / float64(w.Ops)
}

// Pair is one window of each package, run back to back.
type Pair struct {
	Ours, Etcd Window
	// OursFirst says which of the two ran first.
	OursFirst bool
}

// Order returns the order of the pairs of an ABBA interleaving: pair i
// runs ours first when i is even.
func Order(i int) (oursFirst bool) { return i%2 == 0 }

// Interleave runs pairs pairs of windows, one of each package per pair,
// ours first in even pairs and etcd's first in odd ones (ABBA), and
// returns them. measure runs one window of impl (ours or etcd) for pair i.
// It stops at the first error.
func Interleave(ctx context.Context, pairs int, ours, etcd Impl, measure func(ctx context.Context, impl Impl, i int) (Window, error)) ([]Pair, error) {
	var ps []Pair
	for i := range pairs {
		p := Pair{OursFirst: Order(i)}
		steps := []struct {
			impl Impl
			into *Window
		}{{ours, &p.Ours}, {etcd, &p.Etcd}}
		if !p.OursFirst {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, s := range steps {
			if err := ctx.Err(); err != nil {
				return ps, err
			}
			w, err := measure(ctx, s.impl, i)
			if err != nil {
				return ps, fmt.Errorf("pair %d, %s: %w", i, s.impl.Name, err)
			}
			*s.into = w
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// Ratio is the ratio ours ÷ etcd of one measure over pairs of windows.
type Ratio struct {
	// N is the pairs with a ratio (both sides positive).
	N int
	// Geo is the geometric mean of the per-pair ratios; Lo and Hi its 95 %
	// confidence interval by Student's t on the logarithms of the ratios
	// (the ratios' logs are what is roughly normal, and the interval of
	// the mean log maps back to a ratio).
	Geo, Lo, Hi float64
	// BootLo and BootHi are the 2.5 % and 97.5 % percentiles of the
	// geometric mean over bootstrap resamples of the pairs: an interval
	// that assumes no distribution.
	BootLo, BootHi float64
	// Min and Max are the smallest and largest per-pair ratio.
	Min, Max float64
}

// bootstrapResamples is how many resamples Ratios draws.
const bootstrapResamples = 10000

// Ratios computes the ratio ours ÷ etcd of f over ps, pair by pair. Pairs
// where either side is not positive are left out. The bootstrap uses a
// fixed seed, so the same pairs give the same interval.
func Ratios(ps []Pair, f func(Window) float64) Ratio {
	var logs []float64
	r := Ratio{Min: math.Inf(1), Max: math.Inf(-1)}
	for _, p := range ps {
		o, e := f(p.Ours), f(p.Etcd)
		if o <= 0 || e <= 0 {
			continue
		}
		x := o / e
		logs = append(logs, math.Log(x))
		r.Min, r.Max = min(r.Min, x), max(r.Max, x)
	}
	r.N = len(logs)
	if r.N == 0 {
		return Ratio{}
	}
	m, sd := meanSD(logs)
	r.Geo = math.Exp(m)
	r.Lo, r.Hi, r.BootLo, r.BootHi = r.Geo, r.Geo, r.Geo, r.Geo
	if r.N < 2 {
		return r
	}
	half := tQuantile975(r.N-1) * sd / math.Sqrt(float64(r.N))
	r.Lo, r.Hi = math.Exp(m-half), math.Exp(m+half)

	rng := rand.New(rand.NewPCG(42, 42))
	means := make([]float64, bootstrapResamples)
	for b := range means {
		var s float64
		for range logs {
			s += logs[rng.IntN(len(logs))]
		}
		means[b] = s / float64(len(logs))
	}
	slices.Sort(means)
	r.BootLo = math.Exp(means[bootstrapResamples*25/1000])
	r.BootHi = math.Exp(means[bootstrapResamples*975/1000-1])
	return r
}

// meanSD returns the mean and the sample standard deviation of xs.
func meanSD(xs []float64) (m, sd float64) {
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	if len(xs) < 2 {
		return m, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(xs)-1))
}

// tQuantile975 returns the 97.5 % quantile of Student's t with df degrees
// of freedom: a table to 30, then the normal's 1.96 corrected by the
// first terms of its expansion in 1/df (Abramowitz and Stegun 26.7.5).
func tQuantile975(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df < 1 {
		return math.Inf(1)
	}
	if df <= len(table) {
		return table[df-1]
	}
	z, n := 1.959964, float64(df)
	return z + (z*z*z+z)/(4*n) + (5*z*z*z*z*z+16*z*z*z+3*z)/(96*n*n)
}

// Probe reads what a window measures besides the traffic: this process's
// CPU and allocations, and the CPU of the server processes, if any.
type Probe struct {
	// ServerPIDs are the etcd server processes whose CPU is ServerCPU
	// (none: the members run in this process, or elsewhere; ServerCPU is
	// then -1).
	ServerPIDs []int
	// Kinds, if not nil, counts the clients' unary requests by kind.
	Kinds *Kinds
}

type probeMark struct {
	cpu, server time.Duration
	mallocs     uint64
	kinds       map[string]int64
}

func (p Probe) mark() probeMark {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := probeMark{cpu: cpuTime(os.Getpid()), server: -1, mallocs: ms.Mallocs}
	if len(p.ServerPIDs) > 0 {
		m.server = 0
		for _, pid := range p.ServerPIDs {
			c := cpuTime(pid)
			if c < 0 {
				m.server = -1
				break
			}
			m.server += c
		}
	}
	if p.Kinds != nil {
		m.kinds = p.Kinds.Snapshot()
	}
	return m
}

// fill sets w's CPU, server CPU, allocations and kinds from a and b.
func (p Probe) fill(w *Window, a, b probeMark) {
	w.CPU, w.ServerCPU, w.Mallocs = -1, -1, b.mallocs-a.mallocs
	if a.cpu >= 0 && b.cpu >= 0 {
		w.CPU = b.cpu - a.cpu
	}
	if a.server >= 0 && b.server >= 0 {
		w.ServerCPU = b.server - a.server
	}
	if p.Kinds != nil {
		w.Kinds = SubKinds(b.kinds, a.kinds)
	}
}

// Cycle runs one goroutine per mutex of ms, each looping Lock and Unlock
// on it until lim ends (its Duration, or MaxOps cycles of all of them), and
// returns what the window counted. Each mutex should be on a lock of its
// own, or the cycles wait for one another. The mutexes are left unlocked.
func Cycle(ctx context.Context, env Env, probe Probe, impl Impl, ms []Mutex, lim Limits) (Window, error) {
	var (
		w   Window
		ops atomic.Int64
		wg  sync.WaitGroup
	)
	errs := make([]error, len(ms))
	lim.start()
	a, c0, t0 := probe.mark(), env.Counter.Snapshot(), time.Now()
	deadline := t0.Add(lim.Duration)
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lim.more(int(ops.Load()), deadline) {
				if err := m.Lock(ctx); err != nil {
					errs[i] = fmt.Errorf("%s: Lock: %w", impl.Name, err)
					return
				}
				if err := unlock(ctx, impl, m); err != nil {
					errs[i] = err
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	w.Elapsed = time.Since(t0)
	w.Counts = env.Counter.Snapshot().Sub(c0)
	probe.fill(&w, a, probe.mark())
	lim.stop()
	w.Ops = int(ops.Load())
	return w, errors.Join(errs...)
}

// CycleSet is a set of sessions of one package, each with one mutex on a
// lock of its own, kept open across the windows of an interleaved
// comparison so that a window measures only Lock and Unlock.
type CycleSet struct {
	Impl     Impl
	Mutexes  []Mutex
	sessions []Session
	env      Env
	pfx      string
}

// OpenCycleSet opens n sessions of impl over env's clients, each with a
// mutex on pfx/<i>. Close closes them and checks that pfx is empty.
func OpenCycleSet(ctx context.Context, env Env, impl Impl, pfx string, n int) (*CycleSet, error) {
	ss, err := openSessions(ctx, env, impl, n, SessionTTL)
	if err != nil {
		return nil, err
	}
	s := &CycleSet{Impl: impl, sessions: ss, env: env, pfx: pfx}
	for i, sess := range ss {
		s.Mutexes = append(s.Mutexes, impl.NewMutex(sess, fmt.Sprintf("%s/%d", pfx, i)))
	}
	return s, nil
}

// Close closes the set's sessions and checks that no key is left under
// its prefix.
func (s *CycleSet) Close(ctx context.Context) error {
	return closeSessions(ctx, s.env, s.sessions, s.pfx)
}
