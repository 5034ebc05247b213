package lockbench

import (
	"slices"
	"sync"
	"time"
)

// Result is what one workload measured for one package.
type Result struct {
	Workload string
	Impl     string
	// Samples are the latencies measured: of each operation, or of each
	// handoff for contended workloads.
	Samples []time.Duration
	// Ops is the number of operations (cycles, attempts, acquisitions) in
	// the measured window, and Elapsed the window's length.
	Ops     int
	Elapsed time.Duration
	// Counts is the client traffic during the window.
	Counts Counts
	// Early counts handoffs whose next Lock returned before the previous
	// holder's Unlock did; their samples are negative.
	Early int
	// Unlocks are the latencies of the Unlock calls of a contended
	// workload: with the handoff, they make up the cycle that bounds
	// throughput.
	Unlocks []time.Duration
}

// Merge appends the samples, operations, time and traffic of o to r, for
// workloads measured in several interleaved rounds. An empty r takes o's
// names.
func (r *Result) Merge(o Result) {
	if r.Workload == "" {
		r.Workload, r.Impl = o.Workload, o.Impl
	}
	r.Samples = append(r.Samples, o.Samples...)
	r.Unlocks = append(r.Unlocks, o.Unlocks...)
	r.Ops += o.Ops
	r.Elapsed += o.Elapsed
	r.Counts = r.Counts.Add(o.Counts)
	r.Early += o.Early
}

// Stats summarises a Result.
type Stats struct {
	N                   int // samples
	Mean, P50, P90, P99 time.Duration
	PerSec              float64 // operations per second of the window
	// Per operation: unary RPCs, watch requests, watch events.
	RPC, WatchReqs, Events float64
	// UnlockMean is the mean of Result.Unlocks, if any.
	UnlockMean time.Duration
}

// Stats computes the summary of r. Percentiles are nearest-rank.
func (r Result) Stats() Stats {
	st := Stats{N: len(r.Samples)}
	if r.Elapsed > 0 {
		st.PerSec = float64(r.Ops) / r.Elapsed.Seconds()
	}
	if r.Ops > 0 {
		n := float64(r.Ops)
		st.RPC = float64(r.Counts.Unary) / n
		st.WatchReqs = float64(r.Counts.WatchReqs) / n
		st.Events = float64(r.Counts.Events) / n
	}
	st.UnlockMean = mean(r.Unlocks)
	if len(r.Samples) == 0 {
		return st
	}
	s := slices.Clone(r.Samples)
	slices.Sort(s)
	st.Mean = mean(s)
	st.P50, st.P90, st.P99 = rank(s, 50), rank(s, 90), rank(s, 99)
	return st
}

// mean returns the mean of ds, or 0 if there are none.
func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// rank returns the nearest-rank p-th percentile of sorted samples.
func rank(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100 // ceil(n*p/100)
	return sorted[max(i, 1)-1]
}

// handoffs pairs the return of each holder's Unlock with the return of the
// Lock that took over its place. Holders are numbered in the order their
// Lock returned (generations). With one permit (a Mutex) at most one holds
// at a time, so holder g+1 is the one that took over from holder g. With
// limit permits (a Semaphore), acquisition a takes the permit of the
// (a−limit)-th release: releases are numbered in the order their Unlock
// returned, which is the order etcd applied them unless two returned
// within a round trip of each other.
type handoffs struct {
	limit    int        // permits: 1 for a Mutex
	mu       sync.Mutex // guards all fields below
	gen      int64
	releases int64               // Unlocks returned, with limit > 1
	unlocked map[int64]time.Time // release -> when its Unlock returned, next Lock not yet
	locked   map[int64]time.Time // release -> when the next Lock returned, its Unlock not yet
	samples  []time.Duration
	early    int
	unlocks  []time.Duration // latencies of the Unlocks of released
}

func newHandoffs() *handoffs { return newPermitHandoffs(1) }

// newPermitHandoffs pairs the handoffs of a lock that limit may hold at
// once.
func newPermitHandoffs(limit int) *handoffs {
	return &handoffs{limit: max(limit, 1), unlocked: make(map[int64]time.Time), locked: make(map[int64]time.Time)}
}

// acquired records a Lock that returned at t and returns its generation.
func (h *handoffs) acquired(t time.Time) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	prev := h.gen - int64(h.limit)
	if prev <= 0 {
		return h.gen
	}
	if u, ok := h.unlocked[prev]; ok {
		delete(h.unlocked, prev)
		h.samples = append(h.samples, t.Sub(u))
	} else {
		h.locked[prev] = t
	}
	return h.gen
}

// released records that the Unlock of generation gen, called at called,
// returned at t.
func (h *handoffs) released(gen int64, called, t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unlocks = append(h.unlocks, t.Sub(called))
	if h.limit > 1 {
		h.releases++
		gen = h.releases
	}
	if l, ok := h.locked[gen]; ok {
		delete(h.locked, gen)
		h.samples = append(h.samples, l.Sub(t))
		h.early++
		return
	}
	h.unlocked[gen] = t
}

// result returns the handoffs paired so far, how many were early, and the
// Unlock latencies.
func (h *handoffs) result() (samples []time.Duration, early int, unlocks []time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.samples), h.early, slices.Clone(h.unlocks)
}
