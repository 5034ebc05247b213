package lockbench

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/embedetcd"
)

// startCluster starts an embedded cluster of members and n clients of it,
// each configured by opts, all closed when the test ends.
func startCluster(ctx context.Context, t testing.TB, members, n int, opts ...func(*clientv3.Config)) (*embedetcd.Cluster, []*clientv3.Client) {
	t.Helper()
	clus, err := embedetcd.Start(ctx, members)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(clus.Close)
	var cs []*clientv3.Client
	for range n {
		cfg := clientv3.Config{Endpoints: clus.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
		for _, opt := range opts {
			opt(&cfg)
		}
		c, err := clientv3.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return clus, cs
}
