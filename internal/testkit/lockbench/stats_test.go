package lockbench

import (
	"slices"
	"testing"
	"time"
)

func TestStatsPercentiles(t *testing.T) {
	var r Result
	for i := 100; i >= 1; i-- { // unsorted on purpose
		r.Samples = append(r.Samples, time.Duration(i)*time.Millisecond)
	}
	r.Ops, r.Elapsed = 100, 2*time.Second
	r.Counts = Counts{Unary: 300, WatchReqs: 50, Events: 100}
	st := r.Stats()
	want := Stats{
		N: 100, Mean: 50500 * time.Microsecond,
		P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond,
		PerSec: 50, RPC: 3, WatchReqs: 0.5, Events: 1,
	}
	if st != want {
		t.Fatalf("Stats = %+v, want %+v", st, want)
	}
	if one := (Result{Samples: []time.Duration{7}}).Stats(); one.P50 != 7 || one.P99 != 7 || one.Mean != 7 {
		t.Fatalf("Stats of one sample = %+v", one)
	}
	if empty := (Result{}).Stats(); empty != (Stats{}) {
		t.Fatalf("Stats of nothing = %+v", empty)
	}
}

// Handoffs pair each Unlock with the next Lock, whichever returns first.
func TestHandoffsPairing(t *testing.T) {
	h := newHandoffs()
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	g1 := h.acquired(at(0))
	h.released(g1, at(1), at(3))  // Unlock returns at 3
	g2 := h.acquired(at(5))       // handoff 2 ms
	g3 := h.acquired(at(9))       // next Lock returns before g2's Unlock...
	h.released(g2, at(8), at(10)) // ...which returns at 10: -1 ms, early
	h.released(g3, at(11), at(12))

	samples, early, unlocks := h.result()
	if want := []time.Duration{2 * time.Millisecond, -time.Millisecond}; !slices.Equal(samples, want) {
		t.Fatalf("samples = %v, want %v", samples, want)
	}
	if early != 1 {
		t.Fatalf("early = %d, want 1", early)
	}
	if want := []time.Duration{2 * time.Millisecond, 2 * time.Millisecond, time.Millisecond}; !slices.Equal(unlocks, want) {
		t.Fatalf("unlocks = %v, want %v", unlocks, want)
	}
}

// With limit permits, acquisition a takes the permit of the (a−limit)-th
// release, in the order the releases returned.
func TestPermitHandoffsPairing(t *testing.T) {
	h := newPermitHandoffs(2)
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	g1 := h.acquired(at(0))
	g2 := h.acquired(at(1))       // two permits: neither took one over
	h.released(g2, at(2), at(3))  // release 1
	g3 := h.acquired(at(4))       // takes release 1's permit: 1 ms
	g4 := h.acquired(at(6))       // returns before release 2...
	h.released(g1, at(6), at(7))  // ...which returns at 7: -1 ms, early
	h.released(g3, at(8), at(9))  // release 3, not taken over
	h.released(g4, at(9), at(10)) // release 4, not taken over

	samples, early, unlocks := h.result()
	if want := []time.Duration{time.Millisecond, -time.Millisecond}; !slices.Equal(samples, want) {
		t.Fatalf("samples = %v, want %v", samples, want)
	}
	if early != 1 || len(unlocks) != 4 {
		t.Fatalf("early = %d, unlocks = %v; want 1 and four", early, unlocks)
	}
}

func TestMerge(t *testing.T) {
	var r Result
	r.Merge(Result{Workload: "w", Impl: "ours", Samples: []time.Duration{1}, Ops: 1, Elapsed: time.Second, Counts: Counts{Unary: 2}})
	r.Merge(Result{Workload: "w", Impl: "ours", Samples: []time.Duration{3}, Ops: 1, Elapsed: time.Second, Counts: Counts{Unary: 2}})
	if r.Workload != "w" || r.Impl != "ours" || r.Ops != 2 || r.Elapsed != 2*time.Second || r.Counts.Unary != 4 || len(r.Samples) != 2 {
		t.Fatalf("merged = %+v", r)
	}
}
