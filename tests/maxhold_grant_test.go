package concurrency_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// The answer of a max hold's LeaseGrant is lost after etcd granted it:
// Lock still succeeds or fails cleanly, the key ends on a lease whose TTL
// is the max hold's, Unlock leaves no key, and every lease the attempt
// granted expires by itself within the max hold (none is left unbounded).
func TestMaxHoldGrantAnswerLost(t *testing.T) {
	pfx := etcdtest.Begin(t)
	var armed atomic.Bool
	var lost atomic.Int64
	c := sharedClient(t, func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				err := invoker(ctx, method, req, reply, cc, opts...)
				if err == nil && method == "/etcdserverpb.Lease/LeaseGrant" && armed.CompareAndSwap(true, false) {
					lost.Store(reply.(interface{ GetID() int64 }).GetID())
					return status.Error(codes.Unavailable, "test: LeaseGrant answer lost")
				}
				return err
			}))
	})
	const d = 10 * time.Second
	s := newSession(t, c, concurrency.WithMaxHold(d))
	m := concurrency.NewMutex(s, pfx)
	armed.Store(true)
	err := m.Lock(t.Context())
	if armed.Load() {
		t.Fatal("no LeaseGrant during Lock")
	}
	t.Logf("Lock after a lost LeaseGrant answer: %v", err)
	if err == nil {
		kv := keyOf(t, c, m.Key())
		if len(kv.Kvs) != 1 || clientv3.LeaseID(kv.Kvs[0].Lease) == s.Lease() {
			t.Fatalf("key after Lock: %v, want it on a lease of its own", kv.Kvs)
		}
		ttl, err := c.TimeToLive(t.Context(), clientv3.LeaseID(kv.Kvs[0].Lease))
		if err != nil || ttl.GrantedTTL > int64(d/time.Second) {
			t.Fatalf("hold's lease: %v %v, want granted TTL ≤ %v", ttl, err, d)
		}
		if err := m.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left", n)
	}
	id := clientv3.LeaseID(lost.Load())
	ttl, err := c.TimeToLive(t.Context(), id, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL > int64(d/time.Second) || ttl.GrantedTTL > int64(d/time.Second) {
		t.Fatalf("the lease whose grant answer was lost: TTL %d granted %d, want within %v", ttl.TTL, ttl.GrantedTTL, d)
	}
	if len(ttl.Keys) != 0 {
		t.Fatalf("keys on the lost lease: %q", ttl.Keys)
	}
}
