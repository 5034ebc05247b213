package concurrency_test

import (
	"context"
	"os"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// TestMain shares one 3-member in-process cluster among the tests and
// examples of this package.
func TestMain(m *testing.M) {
	if os.Getenv(semKeyChild) != "" {
		semKeyMain()
		return
	}
	etcdtest.Main(m)
}

// session and mutex are what this package and etcd's have in common, so
// that a scenario can run against both: a regression test shows that it
// passes here and fails on etcd's package.
type session interface {
	Close() error
	Orphan()
	Lease() clientv3.LeaseID
	Done() <-chan struct{}
}

type mutex interface {
	Lock(context.Context) error
	TryLock(context.Context) error
	Unlock(context.Context) error
	Key() string
	IsOwner() clientv3.Cmp
}

type impl struct {
	name       string
	newSession func(c *clientv3.Client, ttl int) (session, error)
	newMutex   func(s session, pfx string) mutex
	// sessionEnded is the error a waiter gets when its own session is gone.
	sessionEnded error
}

var (
	ours = impl{
		name: "ours",
		newSession: func(c *clientv3.Client, ttl int) (session, error) {
			return concurrency.NewSession(c, concurrency.WithTTL(ttl))
		},
		newMutex:     func(s session, pfx string) mutex { return concurrency.NewMutex(s.(*concurrency.Session), pfx) },
		sessionEnded: concurrency.ErrSessionExpired,
	}
	etcds = impl{
		name: "etcd",
		newSession: func(c *clientv3.Client, ttl int) (session, error) {
			return etcdconc.NewSession(c, etcdconc.WithTTL(ttl))
		},
		newMutex:     func(s session, pfx string) mutex { return etcdconc.NewMutex(s.(*etcdconc.Session), pfx) },
		sessionEnded: etcdconc.ErrSessionExpired,
	}
)

// mustSession opens a session that is closed when the test ends.
func (i impl) mustSession(t testing.TB, c *clientv3.Client, ttl int) session {
	t.Helper()
	s, err := i.newSession(c, ttl)
	if err != nil {
		t.Fatalf("%s: NewSession: %v", i.name, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newSession opens a session of this package that is closed when the test
// ends.
func newSession(t testing.TB, c *clientv3.Client, opts ...concurrency.SessionOption) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(c, opts...)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newEtcdSession is newSession for etcd's own package, closed when the
// test ends.
func newEtcdSession(t testing.TB, c *clientv3.Client) *etcdconc.Session {
	t.Helper()
	s, err := etcdconc.NewSession(c)
	if err != nil {
		t.Fatalf("etcd's NewSession: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sharedClient returns a new client of the shared cluster.
func sharedClient(t testing.TB, opts ...func(*clientv3.Config)) *clientv3.Client {
	return etcdtest.NewClient(t, etcdtest.Endpoints(), opts...)
}

// bridgeCluster starts a dedicated 3-member cluster whose client
// connections go through bridges that can be dropped or blackholed.
func bridgeCluster(t testing.TB) *integration.Cluster {
	return etcdtest.NewCluster(t, &integration.ClusterConfig{Size: 3, UseBridge: true})
}

// endpoints are the shared cluster's client URLs, for the examples.
func endpoints() []string { return etcdtest.Endpoints() }
