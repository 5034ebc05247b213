package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/lockbench"
	concurrencyprom "github.com/seed-a9d410c6/concurrency/prometheus"
)

// overhead is the cost of the package's metrics: the same workloads with
// metrics off (ours) and on (ours+metrics), in interleaved rounds.
type overhead struct {
	uncontended pair // ours: off, etcd: on
	contended   pair
	counted     float64 // acquisitions the metrics counted, as a check that they ran
}

// measureOverhead runs uncontended Lock+Unlock and contended Lock+Unlock on
// cfg.metricsSessions sessions, with metrics off and on, alternating which
// goes first in each round so that drift falls on both alike.
func measureOverhead(ctx context.Context, cfg config, env func(int) lockbench.Env, root string) (*overhead, error) {
	reg := prometheus.NewRegistry()
	m, err := concurrencyprom.New(reg)
	if err != nil {
		return nil, err
	}
	off, on := ours, lockbench.OursWithMetrics(m)
	lim := lockbench.Limits{Duration: cfg.duration / time.Duration(cfg.rounds), MaxOps: cfg.maxOps}
	n := cfg.metricsSessions
	var o overhead
	o.contended.sessions = n
	for round := 0; round < cfg.rounds; round++ {
		progress("round %d/%d: metrics overhead, uncontended and contended (%d sessions), off and on", round+1, cfg.rounds, n)
		impls := []lockbench.Impl{off, on}
		into := []struct{ un, co *lockbench.Result }{{&o.uncontended.ours, &o.contended.ours}, {&o.uncontended.etcd, &o.contended.etcd}}
		if round%2 == 1 {
			impls[0], impls[1] = impls[1], impls[0]
			into[0], into[1] = into[1], into[0]
		}
		for i, impl := range impls {
			r, err := lockbench.Uncontended(ctx, env(1), impl, fmt.Sprintf("%s/overhead/uncontended/%s", root, impl.Name), lim)
			if err != nil {
				return nil, err
			}
			into[i].un.Merge(r)
		}
		for i, impl := range impls {
			r, err := lockbench.Contended(ctx, env(n), impl, fmt.Sprintf("%s/overhead/contended-%d/%s", root, n, impl.Name), n, lim)
			if err != nil {
				return nil, err
			}
			into[i].co.Merge(r)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	for _, mf := range mfs {
		if mf.GetName() == "concurrency_lock_acquisitions_total" {
			for _, s := range mf.GetMetric() {
				o.counted += s.GetCounter().GetValue()
			}
		}
	}
	return &o, nil
}

// reportOverhead writes the metrics overhead section.
func reportOverhead(w io.Writer, o *overhead) {
	fmt.Fprintf(w, "\n## Metrics overhead\n\n")
	fmt.Fprintf(w, "The same workloads with metrics off (ours) and on (ours+metrics: WithMetrics on a fresh registry), in interleaved rounds. The metrics counted %.0f acquisitions. Ratios are on ÷ off; the target is ≤ 1.05× for latency (≥ 1 ÷ 1.05 for ops/s).\n\n", o.counted)
	t := newTable("workload", "metrics", "n", "mean", "p50", "p99", "ops/s")
	for _, p := range []pair{o.uncontended, o.contended} {
		for _, r := range []lockbench.Result{p.ours, p.etcd} {
			st := r.Stats()
			t.add(r.Workload, r.Impl, fmt.Sprint(st.N), dur(st.Mean), dur(st.P50), dur(st.P99), num(st.PerSec))
		}
		off, on := p.ours.Stats(), p.etcd.Stats()
		t.add(p.ours.Workload, "on ÷ off", "", onOff(on.Mean, off.Mean), onOff(on.P50, off.P50), onOff(on.P99, off.P99), fmt.Sprintf("%.3f×", on.PerSec/off.PerSec))
	}
	t.write(w)
	un, co := o.uncontended, o.contended
	uo, un2 := un.ours.Stats(), un.etcd.Stats()
	cOff, cOn := co.ours.Stats(), co.etcd.Stats()
	fmt.Fprintf(w, "\n- uncontended Lock+Unlock, mean with metrics ≤ 1.05× without: %s (%s)\n", onOff(un2.Mean, uo.Mean), verdict(un2.Mean.Seconds() <= 1.05*uo.Mean.Seconds()))
	fmt.Fprintf(w, "- contended, %d sessions, ops/s with metrics ≥ without ÷ 1.05: %.3f× (%s)\n", co.sessions, cOn.PerSec/cOff.PerSec, verdict(cOn.PerSec*1.05 >= cOff.PerSec))
}

func onOff(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f×", a.Seconds()/b.Seconds())
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}
