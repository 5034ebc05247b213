package concurrency_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy"
	"google.golang.org/grpc"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// Issue 42: a client's sessions renew their leases on one LeaseKeepAlive
// stream, as etcd's package does, not on a stream per renewal.

// keepAliveCounter counts, for a client, the LeaseKeepAlive streams it
// opens, the renewals it sends on them and the answers it receives.
type keepAliveCounter struct{ streams, sent, answered atomic.Int64 }

func (kc *keepAliveCounter) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions,
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || method != "/etcdserverpb.Lease/LeaseKeepAlive" {
				return cs, err
			}
			kc.streams.Add(1)
			return keepAliveCounting{cs, kc}, nil
		}))
}

type keepAliveCounting struct {
	grpc.ClientStream
	kc *keepAliveCounter
}

func (s keepAliveCounting) SendMsg(m any) error {
	if _, ok := m.(*pb.LeaseKeepAliveRequest); ok {
		s.kc.sent.Add(1)
	}
	return s.ClientStream.SendMsg(m)
}

func (s keepAliveCounting) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		s.kc.answered.Add(1)
	}
	return err
}

// renewingSessions opens n sessions of TTL ttl seconds on c, closed when
// the test ends.
func renewingSessions(t *testing.T, c *clientv3.Client, n, ttl int) []*concurrency.Session {
	t.Helper()
	var ss []*concurrency.Session
	for range n {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ss = append(ss, s)
	}
	return ss
}

// renewUntil waits up to within until kc has seen want answers, and fails
// the test as soon as one of ss ends.
func (kc *keepAliveCounter) renewUntil(t *testing.T, within time.Duration, ss []*concurrency.Session, want int64) {
	t.Helper()
	etcdtest.Eventually(t, within, func() bool {
		for _, s := range ss {
			select {
			case <-s.Done():
				t.Fatalf("session %x ended: %v (%d renewals answered on %d streams)", s.Lease(), context.Cause(s.Ctx()), kc.answered.Load(), kc.streams.Load())
			default:
			}
		}
		return kc.answered.Load() >= want
	}, "%d renewals answered, want %d", kc.answered.Load(), want)
}

// checkAlive fails the test unless every session of ss lives, and etcd
// (asked through c) still has its lease.
func checkAlive(t *testing.T, c *clientv3.Client, ss []*concurrency.Session) {
	t.Helper()
	for _, s := range ss {
		select {
		case <-s.Done():
			t.Fatalf("session %x ended: %v", s.Lease(), context.Cause(s.Ctx()))
		default:
		}
		ttl, err := c.TimeToLive(t.Context(), s.Lease())
		if err != nil || ttl.TTL <= 0 {
			t.Fatalf("lease %x: TTL %v, %v: want it alive", s.Lease(), ttl, err)
		}
	}
}

// Ten sessions of TTL 3 s renew every second; after 60 renewals (about 6
// each), the client has opened one stream for them, or a few if a renewal
// had to be sent again (a loaded machine), never one per renewal; every
// session is alive, its lease too. Once they are closed, the stream ends
// (the leak check), and a new session opens another.
func TestSessionsShareRenewalStream(t *testing.T) {
	etcdtest.Begin(t)
	var kc keepAliveCounter
	c := sharedClient(t, kc.option)

	const n = 10
	ss := renewingSessions(t, c, n, 3)
	etcdtest.Eventually(t, 30*time.Second, func() bool { return kc.answered.Load() >= 6*n },
		"the sessions renewed %d times, want %d", kc.answered.Load(), 6*n)
	if st := kc.streams.Load(); st > 3 {
		t.Fatalf("%d renewals answered on %d LeaseKeepAlive streams, want one stream (a few at most)", kc.answered.Load(), st)
	}
	checkAlive(t, c, ss)
	for _, s := range ss {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}

	opened, answered := kc.streams.Load(), kc.answered.Load()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(3))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	etcdtest.Eventually(t, 20*time.Second, func() bool { return kc.answered.Load() >= answered+2 },
		"the new session did not renew")
	if kc.streams.Load() == opened {
		t.Fatalf("the new session renewed on the closed sessions' stream")
	}
}

// A client's sessions renew together, on the 500 ms grid: a hundred
// sessions of TTL 9 s (a renewal every 2.1 s or so, on the grid) put more
// renewals on a stream at one tick than the maxStreamDepth of 16 it takes,
// so each tick needs more than one stream, up to four at the busiest.
// The streams left with nothing on them are kept and used again at the
// next tick (issue 52): once every session has renewed three times (the
// streams the busiest tick needs are open then), three renewals more
// each open 2 streams at most (for renewals sent again on a loaded
// machine), where a stream closed as soon as it was drained made a new
// one nearly every tick (15 in the same window).
func TestSessionsReuseRenewalStreams(t *testing.T) {
	etcdtest.Begin(t)
	var kc keepAliveCounter
	c := sharedClient(t, kc.option)

	const n = 100
	ss := renewingSessions(t, c, n, 9)
	kc.renewUntil(t, 60*time.Second, ss, 3*n)
	opened, answered := kc.streams.Load(), kc.answered.Load()
	kc.renewUntil(t, 60*time.Second, ss, answered+3*n)
	if more := kc.streams.Load() - opened; more > 2 {
		t.Fatalf("%d renewals answered on %d LeaseKeepAlive streams opened meanwhile, want 2 at most (%d before)", kc.answered.Load()-answered, more, opened)
	}
	t.Logf("%d renewals answered on %d streams opened before, %d after", kc.answered.Load()-answered, opened, kc.streams.Load()-opened)
	checkAlive(t, c, ss)
}

// A client's sessions whose shared renewal stream sits on a connection
// that goes silent (clientv3's default configuration, no gRPC keepalive)
// keep their leases: each renewal left waiting there is sent again on a
// new stream, which the balancer puts on the other member, and the
// stream after stays there. Synchronised on renewals answered after the
// silence: four per session, more than a TTL's worth, with no session
// ended.
func TestSessionsRenewOffSilentStream(t *testing.T) {
	etcdtest.Begin(t)
	var kc keepAliveCounter
	c, silence := halfOpenClient(t, kc.option)

	const n = 5
	ss := renewingSessions(t, c, n, halfOpenTTL)
	// The stream is opened, on the first member's connection, with the
	// first renewals.
	etcdtest.Eventually(t, 30*time.Second, func() bool { return kc.answered.Load() >= n },
		"no renewal answered before the silence")
	silence()
	answered := kc.answered.Load()
	kc.renewUntil(t, 60*time.Second, ss, answered+4*n)
}

// slowKeepAlives makes each answer on a client's LeaseKeepAlive streams
// arrive d after the one before it on the same stream, as a leader too
// busy to answer a stream's renewals faster would (etcd answers a
// stream's renewals one at a time).
func slowKeepAlives(d time.Duration) func(*clientv3.Config) {
	return func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions,
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil || method != "/etcdserverpb.Lease/LeaseKeepAlive" {
					return cs, err
				}
				return slowStream{cs, d}, nil
			}))
	}
}

type slowStream struct {
	grpc.ClientStream
	d time.Duration
}

func (s slowStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		select {
		case <-time.After(s.d):
		case <-s.Context().Done():
		}
	}
	return err
}

// A stream answers renewals one at a time, so one stream can fall behind
// a client's sessions: here each stream answers one renewal each 50 ms
// (20 a second), and 120 sessions of TTL 6 s need 60 a second. The
// renewals must spread over more streams, and every session live after
// each has renewed five times (more than a TTL's worth).
func TestSessionsRenewalsOutgrowOneStream(t *testing.T) {
	etcdtest.Begin(t)
	var kc keepAliveCounter
	c := sharedClient(t, kc.option, slowKeepAlives(50*time.Millisecond))

	const n = 120
	ss := renewingSessions(t, c, n, 6)
	answered := kc.answered.Load()
	kc.renewUntil(t, 90*time.Second, ss, answered+5*n)
	t.Logf("%d renewals answered on %d streams", kc.answered.Load(), kc.streams.Load())
}

// grpcProxy serves etcd's gRPC proxy (its KV and lease servers, as `etcd
// grpc-proxy start` does) on a loopback port in front of the shared
// cluster, and returns its address. The proxy renews each lease with its
// own client's KeepAlive and answers a stream's renewals of different
// leases in whatever order those answers come back.
func grpcProxy(t *testing.T) string {
	t.Helper()
	backend := sharedClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	kvp, _ := grpcproxy.NewKvProxy(backend) // its done channel is closed already
	lp, leaseDone := grpcproxy.NewLeaseProxy(ctx, backend)
	srv := grpc.NewServer()
	pb.RegisterKVServer(srv, kvp)
	pb.RegisterLeaseServer(srv, lp)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
		cancel()
		<-leaseDone
	})
	return l.Addr().String()
}

// Sessions renewing through etcd's gRPC proxy keep their leases. The
// proxy answers the renewals of one stream per lease, so the answers of
// different leases come back in any order: each must reach its own
// lease's renewal (matched in the order sent, the sessions expired within
// 6 s). Twenty sessions of TTL 6 s renew every 2 s; after 8 renewals each
// (more than two TTLs), every session and its lease are alive.
func TestSessionsRenewThroughGRPCProxy(t *testing.T) {
	etcdtest.Begin(t)
	addr := grpcProxy(t)
	var kc keepAliveCounter
	c := etcdtest.NewClient(t, []string{addr}, kc.option)

	const n = 20
	ss := renewingSessions(t, c, n, 6)
	kc.renewUntil(t, 60*time.Second, ss, 8*n)
	checkAlive(t, sharedClient(t), ss)
	t.Logf("%d renewals answered on %d LeaseKeepAlive streams", kc.answered.Load(), kc.streams.Load())
}
