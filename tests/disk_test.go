package concurrency_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/lockbench"
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

// TestDiskKeysOnlyRange measures what issue 43's proposal would save: the
// enqueue's range of the newest keys under a lock name (a write Txn, so
// applied on every member) and the judge's range of the older keys (a
// linearizable read), each sorted by create revision, so that the server
// reads every key of the name, with and without WithKeysOnly. 128 keys
// stand under the name, with values of 0 and 1024 bytes; the two forms
// alternate in rounds. The Txns have the shapes of the package's (see
// enqueue.go and judge.go) but are built here, so that one build compares both. It runs
// only with LOCKBENCH_DISK=1 and reports, from this process's registry
// (the three members' apply loops together), the mean apply time of a Txn
// and the client's mean latency of each form.
func TestDiskKeysOnlyRange(t *testing.T) {
	if os.Getenv("LOCKBENCH_DISK") == "" {
		t.Skip("a benchmark: set LOCKBENCH_DISK=1 to run it")
	}
	const keys, ops, rounds = 128, 300, 3
	clus := etcdtest.NewCluster(t, &integration.ClusterConfig{Size: 3, UseTCP: true, UseIP: true})
	c := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	ctx := t.Context()
	var out strings.Builder
	fmt.Fprintf(&out, "\n| value | form | Txn apply, mean (3 members) | enqueue Txn, client mean | judge read, client mean |\n|---|---|---|---|---|\n")
	for _, size := range []int{0, 1024} {
		pfx := fmt.Sprintf("/test/%s/%d-%d/", t.Name(), time.Now().UnixNano(), size)
		val := strings.Repeat("v", size)
		for i := 0; i < keys; i++ {
			if _, err := c.Put(ctx, fmt.Sprintf("%sother-%03d", pfx, i), val); err != nil {
				t.Fatal(err)
			}
		}
		type sums struct{ apply, applies, enq, judge time.Duration }
		var got [2]sums
		for round := 0; round < rounds; round++ {
			for form := range 2 {
				extra := []clientv3.OpOption{}
				if form == 1 {
					extra = append(extra, clientv3.WithKeysOnly())
				}
				s0, n0 := applied(t, "Txn")
				for i := 0; i < ops; i++ {
					key := pfx + "me"
					newest := append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(3)}, extra...)
					var resp *clientv3.TxnResponse
					t0 := time.Now()
					again(t, func() (err error) {
						resp, err = c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
							Then(clientv3.OpPut(key, ""), clientv3.OpGet(pfx, newest...)).Else(clientv3.OpGet(key)).Commit()
						return err
					})
					got[form].enq += time.Since(t0)
					rev := resp.Header.Revision
					older := append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2), clientv3.WithMaxCreateRev(rev - 1)}, extra...)
					t0 = time.Now()
					again(t, func() error {
						_, err := c.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(pfx, older...)).Commit()
						return err
					})
					got[form].judge += time.Since(t0)
					again(t, func() error { _, err := c.Delete(ctx, key); return err })
				}
				s1, n1 := applied(t, "Txn")
				got[form].apply += s1 - s0
				got[form].applies += time.Duration(n1 - n0)
			}
		}
		for form, name := range []string{"values", "keys only"} {
			g := got[form]
			n := time.Duration(rounds * ops)
			fmt.Fprintf(&out, "| %d B | %s | %v | %v | %v |\n", size, name, (g.apply / g.applies).Round(time.Microsecond), (g.enq / n).Round(time.Microsecond), (g.judge / n).Round(time.Microsecond))
		}
	}
	t.Log(out.String())
}

// again calls op until it succeeds, at most 10 times: the integration
// framework's members, which elect after 100 ms of silence, change leader
// on a loaded machine, and a request then fails once. Every op here may
// be sent twice (a Txn that puts only an absent key, a read, a delete).
func again(t *testing.T, op func() error) {
	t.Helper()
	var err error
	for range 10 {
		if err = op(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal(err)
}

// applied returns the sum and count of etcd_server_apply_duration_seconds
// for op, over every member in this process.
func applied(t *testing.T, op string) (time.Duration, uint64) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() != "etcd_server_apply_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					sum += m.GetHistogram().GetSampleSum()
					n += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return time.Duration(sum * float64(time.Second)), n
}
