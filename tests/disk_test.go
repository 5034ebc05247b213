package concurrency_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
	"github.com/seed-a9d410c6/concurrency/internal/lockbench"
)

// TestDiskBoundIntegration is issue 43's comparison as the issue ran it:
// a 3-member cluster of etcd's integration framework, whose members write
// their WAL to a temporary directory with fsync on (the framework leaves
// UnsafeNoFsync false) and tick every 10 ms; each package's sessions
// spread round robin over one client per member, each looping Lock and
// Unlock on one name until LOCKBENCH_DISK_ACQ acquisitions (400) are
// done; the packages alternate first from round to round; raw Put from
// one client before and after each pair. cmd/lockbench -disk measures the
// same on server processes, with the members' metrics; this test is the
// framework's side of it. It runs only with LOCKBENCH_DISK=1 (about two
// minutes), and reports; it asserts nothing but that the workloads ran.
func TestDiskBoundIntegration(t *testing.T) {
	if os.Getenv("LOCKBENCH_DISK") == "" {
		t.Skip("a benchmark: set LOCKBENCH_DISK=1 to run it")
	}
	acq := 400
	if s := os.Getenv("LOCKBENCH_DISK_ACQ"); s != "" {
		fmt.Sscan(s, &acq)
	}
	rounds := 2
	if s := os.Getenv("LOCKBENCH_DISK_ROUNDS"); s != "" {
		fmt.Sscan(s, &rounds)
	}
	clus := etcdtest.NewCluster(t, &integration.ClusterConfig{Size: 3, UseTCP: true, UseIP: true})
	var kinds lockbench.Kinds
	env := lockbench.Env{Counter: new(lockbench.Counter)}
	for _, m := range clus.Members {
		env.Clients = append(env.Clients, etcdtest.NewClient(t, []string{m.GRPCURL}, env.Counter.Option, kinds.Option))
	}
	putEnv := lockbench.Env{Clients: env.Clients[:1]}
	ctx := t.Context()
	pfx := fmt.Sprintf("/test/%s/%d", t.Name(), time.Now().UnixNano())
	putLim := lockbench.Limits{Duration: time.Second, MaxOps: 100000}
	var out strings.Builder
	fmt.Fprintf(&out, "\n| sessions | round | load | raw Put/s | ours acq/s | etcd acq/s | ours ÷ etcd | ours commits+reads/acq | etcd commits+reads/acq |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range []int{2, 32, 128} {
		var bestO, bestE []float64
		for round := 0; round < rounds; round++ {
			load := loadAvg()
			put, err := lockbench.RawPut(ctx, putEnv, fmt.Sprintf("%s/put-%d-%d", pfx, n, round), putLim)
			if err != nil {
				t.Fatal(err)
			}
			order := []lockbench.Impl{lockbench.Ours, lockbench.Etcd}
			if round%2 == 1 {
				slices.Reverse(order)
			}
			rate := map[string]float64{}
			cost := map[string]string{}
			for _, impl := range order {
				// The requests of the measured window alone.
				var k0, k1 map[string]int64
				lim := lockbench.Limits{Duration: 3 * time.Minute, MaxOps: acq,
					OnStart: func() { k0 = kinds.Snapshot() }, OnStop: func() { k1 = kinds.Snapshot() }}
				r, err := lockbench.Contended(ctx, env, impl, fmt.Sprintf("%s/%d-%d/%s", pfx, n, round, impl.Name), n, lim)
				if err != nil {
					t.Fatal(err)
				}
				if r.Ops < acq {
					t.Fatalf("%s, %d sessions: %d acquisitions, want %d", impl.Name, n, r.Ops, acq)
				}
				k := lockbench.SubKinds(k1, k0)
				commits := k[lockbench.KindWriteTxn] + k[lockbench.KindPut] + k[lockbench.KindDelete]
				reads := k[lockbench.KindReadTxn] + k[lockbench.KindRange]
				rate[impl.Name] = r.Stats().PerSec
				cost[impl.Name] = fmt.Sprintf("%.2f + %.2f", float64(commits)/float64(r.Ops), float64(reads)/float64(r.Ops))
			}
			put2, err := lockbench.RawPut(ctx, putEnv, fmt.Sprintf("%s/put2-%d-%d", pfx, n, round), putLim)
			if err != nil {
				t.Fatal(err)
			}
			put.Merge(put2)
			o, e := rate["ours"], rate["etcd"]
			bestO, bestE = append(bestO, o), append(bestE, e)
			fmt.Fprintf(&out, "| %d | %d | %s | %.0f | %.1f | %.1f | %.2f× | %s | %s |\n", n, round+1, load, put.Stats().PerSec, o, e, o/e, cost["ours"], cost["etcd"])
		}
		fmt.Fprintf(&out, "| %d | best | | | %.1f | %.1f | **%.2f×** | | |\n", n, slices.Max(bestO), slices.Max(bestE), slices.Max(bestO)/slices.Max(bestE))
	}
	t.Log(out.String())
}

// loadAvg is the machine's load average over one minute.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
