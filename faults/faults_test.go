package faults_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdproc"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

var (
	flagDuration = flag.Duration("faults.duration", 210*time.Second, "how long TestFaults runs its workloads under faults (the soak: -faults.duration=10m)")
	flagProcs    = flag.Int("faults.procs", 5, "client processes of TestFaults")
	flagClients  = flag.Int("faults.clients", 2, "clients per workload in each client process")
	flagTTL      = flag.Int("faults.ttl", 3, "session TTL in seconds")
	flagReport   = flag.String("faults.report", "", "append the summary of each run to this file")
	flagOnly     = flag.String("faults.only", "", "TestFaults injects only the fault kinds whose names contain this text (to study one kind; the default run injects them all)")
	flagTags     = flag.String("faults.tags", "", "build tags of the worker, and so of the library it runs (concurrency_brokenjudge: a deliberately broken library, to show the checkers catch it)")
	flagOldEtcd  = flag.String("faults.oldetcd", "", "etcd 3.4 binary for TestOldServer (default: $FAULTS_OLD_ETCD, /usr/bin/etcd, etcd on PATH)")
)

// The binaries are built once per test binary, into a directory removed
// by TestMain.
var bins struct {
	once              sync.Once
	dir, etcd, worker string
	err               error
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// binaries builds the etcd server of the module graph and the worker.
// Under -race the worker is built with -race too, so that the library
// runs with the race detector in the client processes.
func binaries(t *testing.T) (etcd, worker string) {
	t.Helper()
	bins.once.Do(func() {
		if bins.dir, bins.err = os.MkdirTemp("", "faults-bin"); bins.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if bins.etcd, bins.err = etcdproc.Build(ctx, bins.dir); bins.err != nil {
			return
		}
		var flags []string
		if raceEnabled {
			flags = append(flags, "-race")
		}
		if *flagTags != "" {
			flags = append(flags, "-tags="+*flagTags)
		}
		bins.worker, bins.err = etcdproc.GoBuild(ctx, filepath.Join(bins.dir, "worker"),
			"github.com/seed-a9d410c6/concurrency/faults/worker", flags...)
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.etcd, bins.worker
}

// TestFaults runs every workload in several client processes against a
// 3-process cluster built from the module graph, while a nemesis cycles
// through every fault kind, and checks the histories. The default run is
// bounded for CI; -faults.duration=10m makes it the soak of RELIABILITY.md.
func TestFaults(t *testing.T) {
	pfx := etcdtest.Begin(t)
	etcd, worker := binaries(t)
	cfg := runConfig{
		etcd:      etcd,
		etcdArgs:  []string{"--unsafe-no-fsync"}, // see RELIABILITY.md: kill -9 loses no written page
		worker:    worker,
		duration:  *flagDuration,
		procs:     *flagProcs,
		clients:   *flagClients,
		ttl:       *flagTTL,
		workloads: []string{"txn", "fence", "unguarded", "election", "lead", "semaphore", "wsemaphore", "rwmutex", "cancel", "hold", "maxhold", "yield", "queue", "pqueue", "barrier", "dbarrier", "latch", "shards", "workq"},
		faults:    allFaults,
	}
	if *flagOnly != "" {
		cfg.faults = slices.DeleteFunc(slices.Clone(allFaults), func(f fault) bool { return !strings.Contains(f.name, *flagOnly) })
	}
	res := runWith(t, pfx, cfg)
	for _, f := range cfg.faults {
		if res.faults[f.name] == 0 {
			t.Errorf("fault %q was never injected: make -faults.duration longer", f.name)
		}
	}
	for _, wl := range cfg.workloads {
		f := "lock"
		switch {
		case wl == "election" || wl == "lead":
			f = "campaign"
		case queueWorkload(wl):
			f = "dequeue"
		case wl == "workq":
			f = "wqtake"
		case wl == "barrier":
			f = "bwait"
		case wl == "dbarrier":
			f = "dbenter"
		case wl == "latch":
			f = "lwait"
		}
		want := 10
		if wl == "hold" {
			want = 3 // each hold lasts until its key is deleted or -hold (20 s)
		}
		if n := res.ops[wl+": "+f+" ok"]; n < want {
			t.Errorf("workload %s: only %d acquisitions in %v", wl, n, res.elapsed)
		}
	}
}

// TestOldServer runs a short lock workload, with a leader kill and a
// client pause, against Debian's etcd 3.4 server: the oldest server this
// package is meant to work with. It fails, rather than skips, when the
// binary is missing: run faults/setup.sh first.
func TestOldServer(t *testing.T) {
	pfx := etcdtest.Begin(t)
	old := oldEtcd()
	if old == "" {
		t.Fatal("no etcd 3.4 server binary: run `sh faults/setup.sh` (installs Debian's etcd-server), or set FAULTS_OLD_ETCD or -faults.oldetcd")
	}
	out, err := exec.Command(old, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", old, err, out)
	}
	if !strings.Contains(string(out), "etcd Version: 3.4") {
		t.Fatalf("%s is not etcd 3.4:\n%s", old, out)
	}
	_, worker := binaries(t)
	res := runWith(t, pfx, runConfig{
		etcd:      old,
		worker:    worker,
		duration:  25 * time.Second,
		procs:     3,
		clients:   2,
		ttl:       *flagTTL,
		workloads: []string{"txn", "fence", "election", "semaphore", "rwmutex"},
		faults:    faultsNamed(t, "kill -9 leader + restart", "SIGSTOP client process > TTL"),
	})
	if !strings.HasPrefix(res.version, "3.4.") {
		t.Errorf("server version %q, want 3.4.x", res.version)
	}
	for _, wl := range []string{"txn", "fence"} {
		if n := res.ops[wl+": lock ok"]; n < 10 {
			t.Errorf("workload %s: only %d acquisitions on etcd %s", wl, n, res.version)
		}
	}
}

// faultsNamed returns the faults of allFaults with the given names.
func faultsNamed(t *testing.T, names ...string) []fault {
	t.Helper()
	var fs []fault
	for _, name := range names {
		i := slices.IndexFunc(allFaults, func(f fault) bool { return f.name == name })
		if i < 0 {
			t.Fatalf("no fault named %q", name)
		}
		fs = append(fs, allFaults[i])
	}
	return fs
}

// oldEtcd finds the etcd 3.4 binary, or returns "".
func oldEtcd() string {
	for _, p := range []string{*flagOldEtcd, os.Getenv("FAULTS_OLD_ETCD"), "/usr/bin/etcd"} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	return ""
}

// runWith runs cfg to the end, prints its summary, and fails the test on
// any violation of a guarded invariant, keeping the histories and logs
// for diagnosis.
func runWith(t *testing.T, pfx string, cfg runConfig) *result {
	t.Helper()
	if cfg.duration <= 0 || cfg.procs < 1 || cfg.clients < 1 || cfg.ttl < 1 || len(cfg.faults) == 0 {
		t.Fatalf("invalid run: -faults.duration=%v -faults.procs=%d -faults.clients=%d -faults.ttl=%d (all must be positive), %d faults",
			cfg.duration, cfg.procs, cfg.clients, cfg.ttl, len(cfg.faults))
	}
	r := startRun(t, pfx, cfg)
	start := time.Now()
	calm := max(10*time.Second, time.Duration(2*cfg.ttl+4)*time.Second)
	nem := startNemesis(r, start, 2*time.Second, calm)
	res := r.finish(nem, start)

	sum := res.summary()
	t.Logf("summary of %s:\n\n%s", t.Name(), sum)
	if *flagReport != "" {
		cmd := "go test -timeout 30m ./faults/ -run '^" + t.Name() + "$'"
		for _, a := range os.Args[1:] {
			if strings.HasPrefix(a, "-faults.") && !strings.HasPrefix(a, "-faults.report") {
				cmd += " " + a
			}
		}
		f, err := os.OpenFile(*flagReport, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			fmt.Fprintf(f, "## %s, %s\n\nCommand: `%s`\n\n%s\nFaults injected:\n\n", t.Name(), time.Now().Format(time.RFC3339), cmd, sum)
			for _, in := range res.injected {
				fmt.Fprintf(f, "- %s %s: %s (%v)\n", in.start.Format("15:04:05"), in.kind, in.what, in.end.Sub(in.start).Round(100*time.Millisecond))
			}
			fmt.Fprintln(f)
			f.Close()
		}
	}
	if n := res.report.Total(); n > 0 {
		keep, err := os.MkdirTemp("", "faults-failure-")
		if err == nil {
			exec.Command("cp", "-r", r.dir+"/.", keep).Run()
			if err := keepModelFailures(keep, res.models); err != nil {
				t.Logf("keeping porcupine's histories: %v", err)
			}
		}
		for _, inv := range hc.Guarded {
			vs := res.report.Violations[inv]
			for i, v := range vs {
				if i == 20 {
					t.Errorf("%s: %d more", inv, len(vs)-i)
					break
				}
				t.Errorf("%s: %s", inv, v)
			}
		}
		t.Errorf("%d violations of guarded invariants; histories and logs kept in %s", n, keep)
	}
	return res
}
