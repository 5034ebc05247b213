package concurrency_test

import (
	"context"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/seed-a9d410c6/concurrency"
)

// sortedReads records the reads by create revision that a client's
// transactions carry: the reads that place a key in its queue.
type sortedReads struct {
	mu    sync.Mutex
	reads []*pb.RangeRequest // guarded by mu
}

func (s *sortedReads) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if txn, ok := req.(*pb.TxnRequest); ok {
		s.mu.Lock()
		s.add(txn)
		s.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (s *sortedReads) add(txn *pb.TxnRequest) {
	for _, op := range append(append([]*pb.RequestOp(nil), txn.Success...), txn.Failure...) {
		if r := op.GetRequestRange(); r != nil && r.SortTarget == pb.RangeRequest_CREATE {
			s.reads = append(s.reads, r)
		}
		if t := op.GetRequestTxn(); t != nil {
			s.add(t)
		}
	}
}

// take returns the reads recorded since the last take.
func (s *sortedReads) take() []*pb.RangeRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reads
	s.reads = nil
	return r
}

// The reads of a queue that a Mutex's enqueue and a waiter's judgement
// send ask for keys alone, which etcd v3.7 serves from its index instead of
// reading every queued key's value (issue 42); a Semaphore's, which weigh
// the values, ask for them.
func TestQueueReadsKeysOnly(t *testing.T) {
	var rec sortedReads
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(rec.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := testContext(t)
	pfx := "/test/" + t.Name() + "/"

	m1 := concurrency.NewMutex(newSession(t, c), pfx+"m")
	m2 := concurrency.NewMutex(newSession(t, c), pfx+"m")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	locked := make(chan error, 1)
	go func() { locked <- m2.Lock(ctx) }()
	waitKeys(t, c, pfx+"m", 2)
	if err := m1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	if err := m2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	reads := rec.take()
	// Two enqueues, and at least the waiter's judgement after the handoff.
	if len(reads) < 3 {
		t.Fatalf("%d reads by create revision for two enqueues and a handoff, want at least 3", len(reads))
	}
	for i, r := range reads {
		if !r.KeysOnly {
			t.Errorf("Mutex: read %d of %q by create revision asks for values", i, r.Key)
		}
	}

	sem := concurrency.NewSemaphore(newSession(t, c), pfx+"s", 2)
	if err := sem.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sem.Release(ctx); err != nil {
		t.Fatal(err)
	}
	reads = rec.take()
	if len(reads) == 0 {
		t.Fatal("Semaphore: no read by create revision")
	}
	for i, r := range reads {
		if r.KeysOnly {
			t.Errorf("Semaphore: read %d of %q asks for keys alone; its weights are in the values", i, r.Key)
		}
	}
}
