package recipes_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// TestMain shares one 3-member in-process cluster among the tests of this
// package (the recipes' examples are beside the code, in recipes/).
func TestMain(m *testing.M) { etcdtest.Main(m) }

// sharedClient returns a new client of the shared cluster.
func sharedClient(t testing.TB) *clientv3.Client {
	return etcdtest.NewClient(t, etcdtest.Endpoints())
}

// bridgeCluster starts a dedicated 3-member cluster whose client
// connections go through bridges that can be blackholed.
func bridgeCluster(t testing.TB) *integration.Cluster {
	return etcdtest.NewCluster(t, &integration.ClusterConfig{Size: 3, UseBridge: true})
}

// newSession opens a session that is closed when the test ends.
func newSession(t testing.TB, c *clientv3.Client) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// async runs f in a goroutine and returns its result's channel; the test
// waits for it before it ends.
func async(t testing.TB, f func() error) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		errc <- f()
	}()
	t.Cleanup(func() { <-done })
	return errc
}

// within returns what errc yields, and fails the test if nothing comes
// within d.
func within(t testing.TB, d time.Duration, errc <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
		return nil
	}
}

// notYet fails the test if errc yields within a short while: the call
// still blocks. It polls rather than proving a negative for long.
func notYet(t testing.TB, errc <-chan error, what string) {
	t.Helper()
	select {
	case err := <-errc:
		t.Fatalf("%s returned while it should block: %v", what, err)
	case <-time.After(200 * time.Millisecond):
	}
}

// bounded returns a context that ends after d, cancelled when the test ends.
func bounded(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// compactNow writes n keys under pfx+"/other" through c and compacts the
// history up to the last of them, physically: a watch that has to resume
// from before that revision then fails with ErrCompacted.
func compactNow(t testing.TB, c *clientv3.Client, pfx string, n int) {
	t.Helper()
	var rev int64
	for i := range n {
		resp, err := c.Put(t.Context(), fmt.Sprintf("%s/other/%d", pfx, i), "x")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := c.Compact(t.Context(), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
}
