package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/embedetcd"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdproc"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/lockbench"
)

// The interleaved comparison (-interleave, issue 42): uncontended
// Lock+Unlock and many independent locks, the two packages in alternating
// windows (ABBA) on the same cluster and the same open sessions, with the
// ratio of each pair of windows as one sample of the ratio, and a 95 %
// interval for it.

// ilRow is one row of the interleaved comparison.
type ilRow struct {
	name     string
	sessions int
	pairs    []lockbench.Pair
}

// cluster is where a mode runs: its endpoints, the server processes (none
// when the members run in this process or elsewhere), and what it is, for
// the report.
type cluster struct {
	endpoints []string
	pids      []int
	where     string
	close     func()
}

// startCluster starts the cluster of a mode: -endpoints if given, else 3
// etcd server processes (procs; see etcdproc) or an embedded cluster in
// this process.
func startCluster(ctx context.Context, cfg config, procs bool) (*cluster, error) {
	switch {
	case len(cfg.endpoints) > 0:
		return &cluster{endpoints: cfg.endpoints, where: strings.Join(cfg.endpoints, ","), close: func() {}}, nil
	case !procs:
		progress("starting an embedded %d-member cluster", cfg.members)
		clus, err := embedetcd.StartWith(ctx, cfg.members, embedetcd.Options{})
		if err != nil {
			return nil, err
		}
		return &cluster{endpoints: clus.Endpoints, close: clus.Close,
			where: fmt.Sprintf("embedded %d-member cluster in this process (loopback, fsync on): CPU and allocations are this process's, clients and members together", cfg.members)}, nil
	}
	dir, err := os.MkdirTemp("", "lockbench-procs-")
	if err != nil {
		return nil, err
	}
	bin := cfg.etcdBinary
	if bin == "" {
		progress("building the etcd server (%s) into %s", etcdproc.ServerPackage, dir)
		if bin, err = etcdproc.Build(ctx, dir); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%w (run from the repository, or give -etcd-binary)", err)
		}
	}
	progress("starting %d etcd server processes, data in %s", cfg.members, dir)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	clus, err := etcdproc.Start(sctx, etcdproc.Config{Binary: bin, Dir: dir, Size: cfg.members})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &cluster{endpoints: clus.Endpoints(), close: func() { clus.Close(); os.RemoveAll(dir) },
		where: fmt.Sprintf("%d etcd server processes (%s, etcd's default flags, fsync on, data in %s): this process runs only the clients", cfg.members, etcdproc.ServerPackage, dir)}
	for _, m := range clus.Members {
		c.pids = append(c.pids, m.Pid())
	}
	return c, nil
}

// runInterleave runs the interleaved comparison and writes its report to w.
func runInterleave(ctx context.Context, cfg config, w io.Writer) (err error) {
	start, load0 := time.Now(), loadavg()
	clus, err := startCluster(ctx, cfg, cfg.ilProcs)
	if err != nil {
		return err
	}
	defer clus.close()
	var counter lockbench.Counter
	var kinds lockbench.Kinds
	cs, closeClients, err := newClients(clus.endpoints, cfg.clients, counter.Option, kinds.Option)
	if err != nil {
		return err
	}
	defer closeClients()
	root := cfg.prefix
	if root == "" {
		root = fmt.Sprintf("/lockbench/%d", time.Now().UnixNano())
	}
	defer func() { err = errors.Join(err, checkEmpty(ctx, cs[0], root)) }()
	probe := lockbench.Probe{ServerPIDs: clus.pids, Kinds: &kinds}
	lim := lockbench.Limits{Duration: cfg.ilWindow, MaxOps: cfg.maxOps}

	var rows []ilRow
	for _, n := range append([]int{1}, cfg.ilMany...) {
		name := fmt.Sprintf("many locks, %d sessions", n)
		if n == 1 {
			name = "uncontended Lock+Unlock"
		}
		env := lockbench.Env{Clients: cs[:min(n, len(cs))], Counter: &counter}
		sets := map[string]*lockbench.CycleSet{}
		for _, impl := range []lockbench.Impl{ours, etcd} {
			progress("%s: opening %d sessions of %s", name, n, impl.Name)
			s, err := lockbench.OpenCycleSet(ctx, env, impl, fmt.Sprintf("%s/il-%d/%s", root, n, impl.Name), n)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, s.Close(ctx)) }()
			sets[impl.Name] = s
		}
		// One window of each, not counted: the first window after the
		// sessions open runs on cold connections and caches.
		for _, impl := range []lockbench.Impl{ours, etcd} {
			if _, err := lockbench.Cycle(ctx, env, probe, impl, sets[impl.Name].Mutexes, lim); err != nil {
				return fmt.Errorf("%s: warm-up: %w", name, err)
			}
		}
		pairs, err := lockbench.Interleave(ctx, cfg.ilPairs, ours, etcd, func(ctx context.Context, impl lockbench.Impl, i int) (lockbench.Window, error) {
			w, err := lockbench.Cycle(ctx, env, probe, impl, sets[impl.Name].Mutexes, lim)
			progress("%s, pair %d/%d, %s: %.0f ops/s", name, i+1, cfg.ilPairs, impl.Name, w.PerSec())
			return w, err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, ilRow{name, n, pairs})
	}
	ilReport(w, cfg, clus, rows, time.Since(start), load0, loadavg())
	return nil
}

// ilReport writes the interleaved comparison's report.
func ilReport(w io.Writer, cfg config, clus *cluster, rows []ilRow, took time.Duration, load0, load1 string) {
	fmt.Fprintf(w, "# lockbench -interleave: ours ÷ etcd's package in alternating windows\n\n")
	fmt.Fprintf(w, "- machine: %s\n- cluster: %s\n", machine(), clus.where)
	fmt.Fprintf(w, "- %d pairs of %v windows per row, ours first in even pairs and etcd's first in odd ones (ABBA), on the same sessions, opened before a warm-up window of each, not counted; %d clients, sessions round robin\n", cfg.ilPairs, cfg.ilWindow, cfg.clients)
	fmt.Fprintf(w, "- took %v; load average %s at the start, %s at the end\n\n", took.Round(time.Second), load0, load1)
	fmt.Fprintf(w, "The ratio is the geometric mean of the per-pair ratios ours ÷ etcd of ops/s, with its 95 %% interval by Student's t on the logarithms of the ratios and by a bootstrap over the pairs (10,000 resamples).\n\n")
	t := newTable("row", "pairs", "ours ops/s", "etcd ops/s", "ratio", "95 % t", "95 % bootstrap", "per-pair min–max")
	for _, r := range rows {
		x := lockbench.Ratios(r.pairs, lockbench.Window.PerSec)
		o, e := ilMedian(r.pairs, func(p lockbench.Pair) float64 { return p.Ours.PerSec() }), ilMedian(r.pairs, func(p lockbench.Pair) float64 { return p.Etcd.PerSec() })
		t.add(r.name, fmt.Sprint(x.N), fmt.Sprintf("%.0f", o), fmt.Sprintf("%.0f", e),
			fmt.Sprintf("%.3f×", x.Geo), fmt.Sprintf("%.3f–%.3f", x.Lo, x.Hi), fmt.Sprintf("%.3f–%.3f", x.BootLo, x.BootHi), fmt.Sprintf("%.3f–%.3f", x.Min, x.Max))
	}
	t.write(w)
	fmt.Fprintf(w, "\nops/s columns: the median window of each side.\n\n")

	fmt.Fprintf(w, "## Where a cycle's cost goes\n\nPer Lock+Unlock cycle, summed over all windows of a side. CPU: ")
	if len(clus.pids) > 0 {
		fmt.Fprintf(w, "\"client\" is this process (clients only), \"server\" the %d server processes together (/proc/<pid>/stat, 10 ms ticks). ", len(clus.pids))
	} else {
		fmt.Fprintf(w, "this process's, members and clients together (the members run in it). ")
	}
	fmt.Fprintf(w, "Allocations: heap objects this process allocated (runtime.MemStats.Mallocs).\n\n")
	t = newTable("row", "package", "RPCs", "watch reqs", "events", "client CPU µs", "server CPU µs", "allocs")
	for _, r := range rows {
		for _, side := range ilSides {
			s := ilSum(r.pairs, side.get)
			server := "-"
			if s.ServerCPU >= 0 {
				server = fmt.Sprintf("%.0f", s.Per(float64(s.ServerCPU.Microseconds())))
			}
			t.add(r.name, side.name, fmt.Sprintf("%.2f", s.Per(float64(s.Counts.Unary))), fmt.Sprintf("%.3f", s.Per(float64(s.Counts.WatchReqs))),
				fmt.Sprintf("%.3f", s.Per(float64(s.Counts.Events))), fmt.Sprintf("%.0f", s.Per(float64(s.CPU.Microseconds()))), server,
				fmt.Sprintf("%.0f", s.Per(float64(s.Mallocs))))
		}
	}
	t.write(w)
	fmt.Fprintf(w, "\nRequests per cycle by kind:\n\n")
	for _, r := range rows {
		for _, side := range ilSides {
			s := ilSum(r.pairs, side.get)
			var parts []string
			keys := make([]string, 0, len(s.Kinds))
			for k := range s.Kinds {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if v := s.Per(float64(s.Kinds[k])); v >= 0.005 {
					parts = append(parts, fmt.Sprintf("%s %.2f", k, v))
				}
			}
			fmt.Fprintf(w, "- %s, %s: %s\n", r.name, side.name, strings.Join(parts, "; "))
		}
	}
	fmt.Fprintf(w, "\n## Windows\n\n")
	for _, r := range rows {
		fmt.Fprintf(w, "%s (ops/s, first side first):\n\n```\n", r.name)
		for i, p := range r.pairs {
			first := "ours→etcd"
			if !p.OursFirst {
				first = "etcd→ours"
			}
			fmt.Fprintf(w, "%2d %s  ours %7.0f  etcd %7.0f  ratio %.3f\n", i+1, first, p.Ours.PerSec(), p.Etcd.PerSec(), p.Ours.PerSec()/p.Etcd.PerSec())
		}
		fmt.Fprintf(w, "```\n\n")
	}
}

// ilSides picks each package's window of a pair, for the report.
var ilSides = []struct {
	name string
	get  func(lockbench.Pair) lockbench.Window
}{{"ours", func(p lockbench.Pair) lockbench.Window { return p.Ours }}, {"etcd", func(p lockbench.Pair) lockbench.Window { return p.Etcd }}}

// ilMedian is the median of f over ps.
func ilMedian(ps []lockbench.Pair, f func(lockbench.Pair) float64) float64 {
	if len(ps) == 0 {
		return 0
	}
	var xs []float64
	for _, p := range ps {
		xs = append(xs, f(p))
	}
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// ilSum adds up the windows get picks of ps.
func ilSum(ps []lockbench.Pair, get func(lockbench.Pair) lockbench.Window) lockbench.Window {
	var s lockbench.Window
	for _, p := range ps {
		w := get(p)
		s.Ops += w.Ops
		s.Elapsed += w.Elapsed
		s.Counts = s.Counts.Add(w.Counts)
		s.CPU += w.CPU
		s.Mallocs += w.Mallocs
		if w.ServerCPU < 0 || s.ServerCPU < 0 {
			s.ServerCPU = -1
		} else {
			s.ServerCPU += w.ServerCPU
		}
		if s.Kinds == nil {
			s.Kinds = map[string]int64{}
		}
		for k, v := range w.Kinds {
			s.Kinds[k] += v
		}
	}
	return s
}
