// Command compare runs the comparison of issue 16 and prints its tables
// as Markdown on stdout (progress goes to stderr): the speed workloads and
// the safety workloads under faults, for this module's Mutex, etcd's
// package, bsm/redislock, go-redsync on 3 and 5 servers, and go-zookeeper's
// lock recipe, each on real server processes on 127.0.0.1.
//
//	sh setup.sh                                # once: redis-server, zookeeper
//	go run ./cmd/compare -full > /tmp/cmp.md   # about 13 minutes
//
// Without -full it runs a short version (seconds per cell) for a look.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/seed-a9d410c6/concurrency/compare"
)

var (
	full    = flag.Bool("full", false, "the full comparison (about 13 minutes); else a short one")
	systems = flag.String("systems", strings.Join(compare.Systems, ","), "systems to run")
	faults  = flag.String("faults", strings.Join(compare.Faults, ","), "faults to run")
	queues  = flag.Bool("queues", false, "only the work queues side by side (issue 53, queues.go), about 2 minutes")
)

func main() {
	flag.Parse()
	do := run
	if *queues {
		do = runQueues
	}
	if err := do(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	t0 := time.Now()
	load0 := loadavg()
	sys := strings.Split(*systems, ",")
	dir, err := os.MkdirTemp("", "compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logf("starting servers in %s", dir)
	env, err := compare.StartEnv(ctx, dir, sys)
	if err != nil {
		return err
	}
	defer env.Close()

	sp := compare.SpeedOpts{Duration: time.Second, TTL: 10 * time.Second, Retry: 2 * time.Millisecond}
	so := compare.SafetyOpts{Workers: 3, Duration: 8 * time.Second, Warmup: 1500 * time.Millisecond,
		FaultFor: 4 * time.Second, Faults: 1, TTL: 2 * time.Second, Work: 20 * time.Millisecond, Retry: 2 * time.Millisecond}
	if *full {
		sp.Duration = 3 * time.Second
		so.Duration, so.Faults = 14*time.Second, 2
	}

	// Speed.
	type row struct {
		sys string
		s   [3]compare.Speed
		err error
	}
	var rows []row
	for _, s := range sys {
		r := row{sys: s}
		for i, n := range []int{1, 2, 32} {
			logf("speed: %s, %d sessions", s, n)
			r.s[i], err = compare.RunSpeed(ctx, s, env.ClientAddrs(s), n, fmt.Sprintf("speed-%s-%d", s, n), sp)
			if err != nil {
				r.err = err
			}
		}
		rows = append(rows, r)
	}

	// Safety.
	var results []compare.Result
	for _, v := range compare.Variants {
		if !contains(sys, v.System) {
			continue
		}
		for _, f := range strings.Split(*faults, ",") {
			logf("safety: %s, %s", v, f)
			r := env.RunSafety(ctx, v, f, so)
			logf("  %+v applied=%d stuck=%d err=%v", r.Counts, r.Applied, r.Stuck, r.Err)
			results = append(results, r)
		}
	}
	load1 := loadavg()

	// Report.
	fmt.Fprintf(out, "Run of `go run ./cmd/compare%s` (in compare/) on %s, %d cores, %s; %s in all.\n", flagsUsed(), time.Now().UTC().Format("2006-01-02 15:04 MST"),
		runtime.NumCPU(), runtime.Version(), time.Since(t0).Round(time.Second))
	fmt.Fprintf(out, "Load average (1, 5, 15 min) before: %s; after: %s.\n\n", load0, load1)
	fmt.Fprintf(out, "Versions: %s; %s; %s (built from the module graph).\n", redisVersion(), zkVersion(env), etcdVersion(env))
	fmt.Fprintf(out, "Go modules: %s.\n\n", strings.Join([]string{
		"go.etcd.io/etcd/client/v3 " + modVersion("go.etcd.io/etcd/client/v3"),
		"github.com/bsm/redislock " + modVersion("github.com/bsm/redislock"),
		"github.com/go-redsync/redsync/v4 " + modVersion("github.com/go-redsync/redsync/v4"),
		"github.com/redis/go-redis/v9 " + modVersion("github.com/redis/go-redis/v9"),
		"github.com/go-zookeeper/zk " + modVersion("github.com/go-zookeeper/zk"),
	}, ", "))

	fmt.Fprintf(out, "### Speed (%v per cell, one lock name, clients in one process, servers direct)\n\n", sp.Duration)
	fmt.Fprintln(out, "| system | uncontended cycles/s | cycle p50 | cycle p99 | 2 sessions acq/s | handoff p50 | handoff p99 | 32 sessions acq/s | handoff p50 | handoff p99 |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(out, "| %s |", compare.Label(r.sys))
		for _, s := range r.s {
			fmt.Fprintf(out, " %.0f | %s | %s |", s.PerSec, ms(s.P50), ms(s.P99))
		}
		fmt.Fprintln(out)
	}
	for _, r := range rows {
		for _, s := range r.s {
			if s.Errors > 0 {
				fmt.Fprintf(out, "\n%s, %d sessions: %d acquire or release errors.", compare.Label(r.sys), s.Sessions, s.Errors)
			}
		}
		if r.err != nil {
			fmt.Fprintf(out, "\n%s: %v", compare.Label(r.sys), r.err)
		}
	}
	fmt.Fprintln(out)

	fmt.Fprintf(out, "\n### Safety (%d worker processes, %v each, lock TTL %v, %d×%v fault per cell)\n\n",
		so.Workers, so.Duration, so.TTL, so.Faults, so.FaultFor)
	fmt.Fprintln(out, "Each cell: overlapping holds per 1,000 acquisitions · lost updates per 1,000 acquisitions (raw: overlaps · lost updates / acquisitions).")
	fmt.Fprintln(out)
	fs := strings.Split(*faults, ",")
	fmt.Fprintf(out, "| variant | %s |\n|---|%s\n", strings.Join(fs, " | "), strings.Repeat("---:|", len(fs)))
	byVariant := map[string][]compare.Result{}
	var order []string
	for _, r := range results {
		k := r.Variant.String()
		if _, ok := byVariant[k]; !ok {
			order = append(order, k)
		}
		byVariant[k] = append(byVariant[k], r)
	}
	for _, k := range order {
		fmt.Fprintf(out, "| %s |", k)
		for _, r := range byVariant[k] {
			mark := ""
			if r.Err != nil || r.Stuck > 0 || (r.Fault != compare.NoFault && r.Applied < so.Faults) {
				mark = " †"
			}
			fmt.Fprintf(out, " %.1f · %.1f (%d · %d / %d)%s |", r.Per1000(r.Overlaps), r.Per1000(r.Lost), r.Overlaps, r.Lost, r.Acquisitions, mark)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out, "\n† see the notes below.")
	fmt.Fprintln(out, "\n### Notes and violations, cell by cell")
	for _, r := range results {
		var notes []string
		if r.Err != nil {
			notes = append(notes, "error: "+r.Err.Error())
		}
		if r.Stuck > 0 {
			notes = append(notes, fmt.Sprintf("%d worker(s) killed after their grace", r.Stuck))
		}
		if r.Fault != compare.NoFault && r.Applied < so.Faults {
			notes = append(notes, fmt.Sprintf("fault applied %d of %d times", r.Applied, so.Faults))
		}
		if r.Refused > 0 {
			notes = append(notes, fmt.Sprintf("%d operations refused by the fence or the guarded Txn", r.Refused))
		}
		if len(notes) == 0 && len(r.Events) == 0 {
			continue
		}
		fmt.Fprintf(out, "\n**%s / %s**: %s\n", r.Variant, r.Fault, strings.Join(notes, "; "))
		for i, e := range r.Events {
			if i == 8 {
				fmt.Fprintf(out, "- … %d more\n", len(r.Events)-i)
				break
			}
			fmt.Fprintf(out, "- %s\n", e)
		}
	}
	logf("done in %v", time.Since(t0).Round(time.Second))
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func ms(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func flagsUsed() string {
	var b strings.Builder
	flag.Visit(func(f *flag.Flag) { fmt.Fprintf(&b, " -%s=%s", f.Name, f.Value) })
	return b.String()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

func redisVersion() string {
	b, err := exec.Command(compare.RedisServer(), "--version").Output()
	if err != nil {
		return "redis-server: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}

func zkVersion(env *compare.Env) string {
	if env.ZK == nil {
		return "ZooKeeper not run"
	}
	return "ZooKeeper " + env.ZK.ZooKeeperVersion()
}

func modVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "?"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			return d.Version
		}
	}
	return "?"
}

func etcdVersion(env *compare.Env) string {
	if env.EtcdBin == "" {
		return "etcd not run"
	}
	b, err := exec.Command(env.EtcdBin, "--version").Output()
	if err != nil {
		return "etcd: " + err.Error()
	}
	return "etcd server " + strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "etcd Version: ")
}
