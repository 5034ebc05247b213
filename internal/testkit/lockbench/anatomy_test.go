package lockbench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// The anatomy of a contended handoff, for both packages, on a real
// 3-member cluster: handoffs are traced, their segments add up to their
// cycles, this package reads once after the event and etcd's twice, and
// the CPU times are known (the members run in this process, which is
// both client and server here).
func TestAnatomy(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var tracer Tracer
	_, cs := startCluster(ctx, t, 3, 2, tracer.Option)
	for _, x := range []struct {
		impl  Impl
		reads int
	}{{Ours, 1}, {Etcd, 2}} {
		t.Run(x.impl.Name, func(t *testing.T) {
			pfx := fmt.Sprintf("/anatomy-test/%s", x.impl.Name)
			r, err := Anatomy(ctx, Env{Clients: cs}, &tracer, x.impl, pfx, 2, os.Getpid(), Limits{Duration: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if r.Ops < 2 || r.Handoffs != r.Ops-1 || r.Traced()+r.NoEvent != r.Handoffs {
				t.Fatalf("%d acquisitions, %d handoffs, %d traced, %d without an event", r.Ops, r.Handoffs, r.Traced(), r.NoEvent)
			}
			if r.Traced() == 0 {
				t.Fatalf("no handoff traced whole of %d", r.Handoffs)
			}
			for i, cycle := range r.Cycles {
				var sum time.Duration
				for s := range NumSegments {
					sum += r.Segments[s][i]
				}
				if sum != cycle {
					t.Fatalf("handoff %d: segments add up to %v, cycle %v", i, sum, cycle)
				}
				if r.Segments[SegRead][i] <= 0 || r.Segments[SegDelete][i] <= 0 {
					t.Fatalf("handoff %d: read %v, delete %v: want both positive", i, r.Segments[SegRead][i], r.Segments[SegDelete][i])
				}
			}
			// Each traced handoff reads at least as its package does after
			// the event. A few may read once more: a waiter whose watch
			// began just after the delete reads its predecessor again
			// (see missed in wait.go) before it judges, while the
			// harness saw the delete's event on its client's stream (in a
			// CI run, 238 reads in 237 handoffs). The mean, which the
			// report shows, stays within 5 % of the package's count.
			if least := x.reads * r.Traced(); r.Reads < least || r.Reads > least+r.Traced()/20 {
				t.Errorf("%d reads after the event in %d traced handoffs, want %d each (at most 5 %% more in all)", r.Reads, r.Traced(), x.reads)
			}
			if r.ClientCPU <= 0 || r.ServerCPU <= 0 {
				t.Errorf("CPU client %v, server %v: want both measured", r.ClientCPU, r.ServerCPU)
			}
		})
	}
}
