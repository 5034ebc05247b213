package lockbench

import (
	"context"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

const watchMethod = "/etcdserverpb.Watch/Watch"

// Counter counts what clients send to etcd and what their watches receive,
// through gRPC client interceptors. Lease keepalive streams are left out:
// their traffic depends on time and TTL, not on lock operations.
//
// A Counter is safe for use by several goroutines and may be attached to
// several clients.
type Counter struct {
	unary, watchReqs, events, created atomic.Int64
}

// Counts is a snapshot of a Counter.
type Counts struct {
	// Unary is the number of unary RPCs (Range, Txn, DeleteRange, ...).
	Unary int64
	// WatchReqs is the number of watch streams opened and of requests sent
	// on them: a watch created, a watch cancelled. (A client multiplexes its
	// watches on one stream, and closes the stream with its last watch
	// instead of sending a cancel.)
	WatchReqs int64
	// Events is the number of watch events received.
	Events int64
	// Created is the number of watch-created responses received.
	Created int64
}

// Sub returns c minus d.
func (c Counts) Sub(d Counts) Counts {
	return Counts{c.Unary - d.Unary, c.WatchReqs - d.WatchReqs, c.Events - d.Events, c.Created - d.Created}
}

// Add returns c plus d.
func (c Counts) Add(d Counts) Counts {
	return Counts{c.Unary + d.Unary, c.WatchReqs + d.WatchReqs, c.Events + d.Events, c.Created + d.Created}
}

// Snapshot returns the counts so far. A nil Counter counts nothing.
func (c *Counter) Snapshot() Counts {
	if c == nil {
		return Counts{}
	}
	return Counts{c.unary.Load(), c.watchReqs.Load(), c.events.Load(), c.created.Load()}
}

// Option adds the Counter's interceptors to a client configuration.
func (c *Counter) Option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions,
		grpc.WithChainUnaryInterceptor(c.intercept),
		grpc.WithChainStreamInterceptor(c.interceptStream))
}

func (c *Counter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.unary.Add(1)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *Counter) interceptStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != watchMethod {
		return s, err
	}
	c.watchReqs.Add(1)
	return &watchStream{ClientStream: s, c: c}, nil
}

// watchStream counts the requests and events of one watch stream; a client
// multiplexes all its watches on one.
type watchStream struct {
	grpc.ClientStream
	c *Counter
}

func (s *watchStream) SendMsg(m any) error {
	s.c.watchReqs.Add(1)
	return s.ClientStream.SendMsg(m)
}

func (s *watchStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if wr, ok := m.(*pb.WatchResponse); ok && err == nil {
		s.c.events.Add(int64(len(wr.Events)))
		if wr.Created {
			s.c.created.Add(1)
		}
	}
	return err
}
