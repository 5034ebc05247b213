// Package etcdtest runs real etcd members for the tests, examples and tools
// of this module: a shared in-process cluster per test binary, dedicated
// clusters for tests that inject faults, and helpers that keep each test to
// its own key prefix and check that it leaks no goroutine.
package etcdtest

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/client/pkg/v3/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"
	"go.uber.org/zap"
)

var shared struct {
	once  sync.Once
	tb    testutil.TB
	close func()
	clus  *integration.Cluster
}

// Main runs the tests of a package against a shared 3-member cluster,
// started before the first test (so that the leak check of every test sees
// its goroutines as already running) and stopped when the tests end. Call it
// from TestMain. The shared members log through the standard logger, which
// Main silences unless ETCDTEST_LOG is set.
func Main(m *testing.M) {
	flag.Parse()
	if os.Getenv("ETCDTEST_LOG") == "" {
		log.SetOutput(io.Discard)
	}
	tb, closeTB := testutil.NewTestingTBProthesis("etcdtest")
	shared.tb, shared.close = tb, closeTB
	// The framework's clusters may only start inside a test context; the
	// shared one lives for the whole binary, and so does the context.
	integration.BeforeTest(tb, integration.WithoutGoLeakDetection(), integration.WithoutSkipInShort())
	Endpoints()
	code := m.Run()
	if shared.clus != nil {
		shared.clus.Terminate(nil)
	}
	closeTB()
	os.Exit(code)
}

// Endpoints returns the client URLs of the shared 3-member cluster.
func Endpoints() []string {
	shared.once.Do(func() {
		if shared.tb == nil {
			log.Fatal("etcdtest: Endpoints needs etcdtest.Main in TestMain")
		}
		shared.clus = integration.NewCluster(shared.tb, &integration.ClusterConfig{Size: 3, UseTCP: true, UseIP: true})
	})
	return shared.clus.Endpoints()
}

// NewCluster starts a dedicated cluster for one test and terminates it when
// the test ends. Use it for tests that stop members or cut connections
// (cfg.UseBridge).
func NewCluster(t testing.TB, cfg *integration.ClusterConfig) *integration.Cluster {
	t.Helper()
	c := integration.NewCluster(t, cfg)
	t.Cleanup(func() { c.Terminate(t) })
	// Tests make their own clients; the framework's would reconnect in the
	// middle of a test when a bridge drops connections, and look leaked.
	for i, m := range c.Members {
		if m.Client != nil {
			m.Client.Close()
			c.TakeClient(i)
		}
	}
	return c
}

// NewClient returns a client of endpoints that is closed when the test ends.
func NewClient(t testing.TB, endpoints []string, opts ...func(*clientv3.Config)) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcdtest: client of %v: %v", endpoints, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var seq atomic.Int64

// Begin starts a test that talks to etcd: it checks, when the test ends,
// that the test left no goroutine of its own running, and returns a key
// prefix that no other test (nor another run of this one) uses.
func Begin(t testing.TB) string {
	t.Helper()
	CheckLeaks(t)
	return fmt.Sprintf("/test/%s/%d-%d", t.Name(), time.Now().UnixNano(), seq.Add(1))
}

// Keys returns the keys under prefix pfx+"/", oldest first.
func Keys(t testing.TB, c *clientv3.Client, pfx string) []*mvccpb.KeyValue {
	t.Helper()
	// 20 s: a read has taken more than 5 s under -race on a loaded 2-core
	// machine, with the cluster's leader missing its heartbeats.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, pfx+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("etcdtest: get %s/: %v", pfx, err)
	}
	return resp.Kvs
}

// WaitKeys polls etcd until exactly n keys are under pfx+"/" and returns
// them, oldest first. It fails the test after 10 seconds.
func WaitKeys(t testing.TB, c *clientv3.Client, pfx string, n int) []*mvccpb.KeyValue {
	t.Helper()
	var kvs []*mvccpb.KeyValue
	Eventually(t, 10*time.Second, func() bool {
		kvs = Keys(t, c, pfx)
		return len(kvs) == n
	}, "want %d keys under %s/", n, pfx)
	return kvs
}

// Eventually polls cond every 5 ms until it holds, and fails the test with
// the message if it does not within d.
func Eventually(t testing.TB, d time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("etcdtest: after %v: "+format, append([]any{d}, args...)...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Cut makes member m of a cluster started with UseBridge unreachable to
// its clients until m.Bridge().Unblackhole() or the end of the test: every
// connection through its bridge is dropped, and the bridge answers new
// ones but carries nothing either way. The bridge's Blackhole alone is not enough for a
// test that needs the next request to fail: each of the bridge's copy
// goroutines checks it only between reads, so the chunk it is already
// waiting for (the next request, and its answer) still goes through. A
// request sent right after Blackhole succeeded that way, and failed a test
// now and then under load.
func Cut(t testing.TB, m *integration.Member) {
	m.Bridge().Blackhole()
	m.Bridge().DropConnections()
	t.Cleanup(m.Bridge().Unblackhole)
}
