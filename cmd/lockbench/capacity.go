package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdproc"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/lockbench"
)

// The capacity run (-capacity, issue 42): for each scenario of
// lockbench.CapScenarios, each N of -cap-n and each package, a fresh
// cluster of etcd server processes (so that a member's memory is its own
// and starts from the same place), the scenario built on it, measured
// idle for -cap-window, drained if it is a queue, and torn down. Each row
// is printed as soon as it is measured, so that a run cut short keeps
// what it measured.

// runCapacity runs the capacity scenarios and writes their table to w.
func runCapacity(ctx context.Context, cfg config, w io.Writer) error {
	start, load0 := time.Now(), loadavg()
	bin := cfg.etcdBinary
	if bin == "" {
		dir, err := os.MkdirTemp("", "lockbench-etcd-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		progress("building the etcd server (%s) into %s", etcdproc.ServerPackage, dir)
		if bin, err = etcdproc.Build(ctx, dir); err != nil {
			return fmt.Errorf("%w (run from the repository, or give -etcd-binary)", err)
		}
	}
	cfg.etcdBinary = bin
	fmt.Fprintf(w, "# lockbench -capacity: what N idle sessions, holds and waiters cost\n\n")
	fmt.Fprintf(w, "- machine: %s\n- cluster: a fresh cluster of %d etcd server processes per row (%s, etcd's default flags, fsync on, data in the system's temporary directory); this process runs only the clients: %d of them, sessions round robin, holders' sessions first\n", machine(), cfg.members, etcdproc.ServerPackage, cfg.clients)
	fmt.Fprintf(w, "- session TTL %d s; idle window %v per row; setup and drain bounded by %v each; waiters call Lock %s\n- load average at the start: %s\n\n", lockbench.SessionTTL, cfg.capWindow, cfg.capBound, startRate(cfg.capRate), load0)
	fmt.Fprintf(w, "Client: this process's live heap (after a full GC), goroutine stacks (`runtime.MemStats.StackInuse`) and goroutines above the baseline taken with the clients connected, before the first session. Server: the members' `%s` and `%s` above the fresh cluster's, summed over the members, and the largest member's; CPU over the idle window, summed over the members (`%s`), and this process's (the clients'), as a share of one core. Watchers and watch streams: `%s` and `%s` summed over the members. Requests per minute: what the clients sent over the idle window, by method (keepalives are the messages on the keepalive stream; progress requests are watch requests), scaled to a minute.\n\n",
		lockbench.MetricRSS, lockbench.MetricHeap, lockbench.MetricCPU, lockbench.WatcherMetric, lockbench.WatchStreamMetric)
	t := newTable("scenario", "N", "pkg", "sessions", "setup", "client heap", "stacks", "goroutines", "watchers", "streams", "server RSS Σ / max", "server heap Σ", "server CPU", "client CPU", "keepalive/min", "progress/min", "other/min", "first handoff", "drain", "gap early / late")
	t.write(w) // the header now, each row as it comes
	t.rows = nil
	var impls []lockbench.Impl
	for _, name := range cfg.capImpls {
		impl, _ := lockbench.Named(name)
		impls = append(impls, impl)
	}
	for _, n := range cfg.capN {
		for _, sc := range cfg.capScenarios {
			for _, impl := range impls {
				r, err := capacityRow(ctx, cfg, impl, sc, n)
				if err != nil {
					if r.End != nil {
						capRow(w, r) // what was measured before it failed
					}
					fmt.Fprintf(w, "| %s | %d | %s | failed: %s |\n", sc, n, impl.Name, strings.ReplaceAll(err.Error(), "\n", "; "))
					progress("%s of %d, %s: %v", sc, n, impl.Name, err)
					continue
				}
				capRow(w, r)
			}
		}
	}
	fmt.Fprintf(w, "\nTook %v; load average at the end: %s.\n", time.Since(start).Round(time.Second), loadavg())
	return nil
}

// capacityRow measures one scenario of n for impl on a fresh cluster.
func capacityRow(ctx context.Context, cfg config, impl lockbench.Impl, sc string, n int) (r lockbench.CapResult, err error) {
	dir, err := os.MkdirTemp("", "lockbench-cap-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	clus, err := etcdproc.Start(sctx, etcdproc.Config{Binary: cfg.etcdBinary, Dir: dir, Size: cfg.members})
	cancel()
	if err != nil {
		return r, err
	}
	defer clus.Close()
	var members []lockbench.Member
	for _, ep := range clus.Endpoints() {
		members = append(members, lockbench.Member{Endpoint: ep})
	}
	var traffic lockbench.Traffic
	cs, closeClients, err := newClients(clus.Endpoints(), cfg.clients, traffic.Option)
	if err != nil {
		return r, err
	}
	defer closeClients()
	progress("%s of %d, %s: building", sc, n, impl.Name)
	r, err = lockbench.Capacity(ctx, lockbench.Env{Clients: cs}, &traffic, members, impl, sc, "/lockbench/capacity", n, cfg.capWindow, cfg.capBound, cfg.capRate)
	if err == nil {
		progress("%s of %d, %s: setup %v, drain %v", sc, n, impl.Name, r.Setup.Round(time.Millisecond), r.Drain.Round(time.Millisecond))
	}
	return r, err
}

// capRow writes one row of the capacity table.
func capRow(w io.Writer, r lockbench.CapResult) {
	mb := func(x float64) string { return fmt.Sprintf("%.1f MB", x/1e6) }
	cpu := lockbench.MemberSum(r.End, lockbench.MetricCPU) - lockbench.MemberSum(r.Loaded, lockbench.MetricCPU)
	ka := float64(r.Traffic.Sent["LeaseKeepAlive"])
	progressReqs := float64(r.Traffic.Progress)
	other := float64(r.Traffic.Total()) - ka - progressReqs
	dur := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return d.Round(time.Millisecond).String()
	}
	gap := "-"
	if r.EarlyGap > 0 {
		gap = fmt.Sprintf("%v / %v", r.EarlyGap.Round(10*time.Microsecond), r.LateGap.Round(10*time.Microsecond))
	}
	t := newTable()
	t.add(r.Scenario, fmt.Sprint(r.N), r.Impl, fmt.Sprint(r.Sessions), dur(r.Setup),
		mb(float64(r.HeapBytes)), mb(float64(r.StackBytes)), fmt.Sprint(r.Goroutines),
		fmt.Sprintf("%.0f", lockbench.MemberSum(r.Loaded, lockbench.WatcherMetric)-lockbench.MemberSum(r.Base, lockbench.WatcherMetric)),
		fmt.Sprintf("%.0f", lockbench.MemberSum(r.Loaded, lockbench.WatchStreamMetric)-lockbench.MemberSum(r.Base, lockbench.WatchStreamMetric)),
		mb(lockbench.MemberSum(r.Loaded, lockbench.MetricRSS)-lockbench.MemberSum(r.Base, lockbench.MetricRSS))+" / "+mb(lockbench.MemberMax(r.Base, r.Loaded, lockbench.MetricRSS)),
		mb(lockbench.MemberSum(r.Loaded, lockbench.MetricHeap)-lockbench.MemberSum(r.Base, lockbench.MetricHeap)),
		fmt.Sprintf("%.0f %%", 100*cpu/r.Window.Seconds()), fmt.Sprintf("%.0f %%", 100*r.ClientCPU.Seconds()/r.Window.Seconds()),
		fmt.Sprintf("%.0f", r.PerMinute(ka)), fmt.Sprintf("%.0f", r.PerMinute(progressReqs)), fmt.Sprintf("%.0f", r.PerMinute(other)),
		dur(r.FirstHandoff), dur(r.Drain), gap)
	// Only the row: the header was written once.
	for _, row := range t.rows {
		fmt.Fprint(w, "|")
		for _, c := range row {
			fmt.Fprintf(w, " %s |", c)
		}
		fmt.Fprintln(w)
	}
}

// startRate says how the waiters of a row start.
func startRate(rate int) string {
	if rate <= 0 {
		return "all at once"
	}
	return fmt.Sprintf("at %d a second", rate)
}
