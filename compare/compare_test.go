package compare_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency/compare"
)

// TestSmoke starts every system's servers and, for each system, runs the
// contended speed workload for a second and the two safety workloads with
// three worker processes for a few seconds without faults, then this
// module's fenced variant and ZooKeeper's under a paused client. It fails,
// never skips, when a server cannot start (run sh setup.sh first).
func TestSmoke(t *testing.T) {
	env, err := compare.StartEnv(t.Context(), t.TempDir(), compare.Systems)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	for _, sys := range compare.Systems {
		t.Run(sys, func(t *testing.T) {
			sp, err := compare.RunSpeed(t.Context(), sys, env.ClientAddrs(sys), 2, "smoke-"+sys,
				compare.SpeedOpts{Duration: time.Second, TTL: 5 * time.Second, Retry: 2 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("2 sessions: %.0f acquisitions/s, handoff p50 %v p99 %v", sp.PerSec, sp.P50, sp.P99)
			r := env.RunSafety(t.Context(), compare.Variant{System: sys}, compare.NoFault, smokeOpts())
			check(t, r)
			if r.Overlaps != 0 || r.Lost != 0 {
				t.Errorf("without faults: %d overlaps, %d lost updates: %v", r.Overlaps, r.Lost, r.Events)
			}
		})
	}
	// The work queues: every item done once without crashes; with them,
	// this module's queue loses none, the others lose what crashed.
	for _, q := range compare.Queues {
		t.Run("queue/"+q, func(t *testing.T) {
			sys := compare.This
			if q == compare.QRedis {
				sys = compare.RedisLock
			}
			for _, crash := range []int{0, 3} {
				r, err := compare.RunQueue(t.Context(), q, env.ClientAddrs(sys), fmt.Sprintf("/smoke/%s-%d", q, crash), 4, 30, crash, 2*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("crash 1 in %d: %+v", crash, r)
				wantLost := 0
				if q != compare.QWorkQueue {
					wantLost = r.Crashes
				}
				if r.Lost != wantLost || r.Duplicated != 0 {
					t.Errorf("crash 1 in %d: %d lost (want %d), %d done twice", crash, r.Lost, wantLost, r.Duplicated)
				}
			}
		})
	}
	// The fenced variants must hold their guarantee through a pause.
	for _, v := range []compare.Variant{{System: compare.This, Fenced: true}, {System: compare.ZooKeeper, Fenced: true}} {
		t.Run(v.String()+"/paused", func(t *testing.T) {
			o := smokeOpts()
			o.Duration, o.Faults = 8*time.Second, 1
			r := env.RunSafety(t.Context(), v, compare.ClientPause, o)
			check(t, r)
			if r.Applied != 1 {
				t.Errorf("fault applied %d times, want 1", r.Applied)
			}
			if r.Overlaps != 0 || r.Lost != 0 {
				t.Errorf("fenced: %d overlaps, %d lost updates: %v", r.Overlaps, r.Lost, r.Events)
			}
		})
	}
}

func smokeOpts() compare.SafetyOpts {
	return compare.SafetyOpts{Duration: 3 * time.Second, Warmup: time.Second, FaultFor: 3 * time.Second,
		TTL: 2 * time.Second, Work: 10 * time.Millisecond, Retry: 2 * time.Millisecond}
}

func check(t *testing.T, r compare.Result) {
	t.Helper()
	t.Logf("%s / %s: %+v, %d events", r.Variant, r.Fault, r.Counts, len(r.Events))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Acquisitions == 0 || r.Stuck != 0 {
		t.Fatalf("%d acquisitions, %d stuck workers", r.Acquisitions, r.Stuck)
	}
}
