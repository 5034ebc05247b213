// Package slowwrite makes a client's writes slow while its reads stay
// fast: the model of an etcd cluster whose commits wait for a slow disk,
// seen from one client, for the tests, the fault soak's workers and
// lockbench.
package slowwrite

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// Writes makes a client's writes slow while its reads, watches and
// keepalives stay fast: the model of a cluster whose commits wait for a
// slow disk, seen from one client. A write (Put, DeleteRange, a Txn that
// writes, LeaseGrant, LeaseRevoke) is sent to etcd only after the delay
// in force when it was made, and answered then; if its caller gives up
// first, the call returns its context's error at once, and the write is
// still sent and applied later, as etcd applies a proposal already in its
// log. Install it with Option; Wait waits for the writes still held back.
type Writes struct {
	delay atomic.Int64 // time.Duration for every write; 0: none
	// delayFor, if set, picks the delay of each write by its method and
	// the number of writes of that method so far (from 1); it overrides
	// delay.
	mu       sync.Mutex
	delayFor func(method string, n int) time.Duration
	counts   map[string]int
	slowed   int        // writes made while delayed
	held     int        // writes held back, not yet answered
	idle     *sync.Cond // on mu: held fell to 0
}

// New returns a Writes that delays nothing yet.
func New() *Writes {
	sw := &Writes{counts: make(map[string]int)}
	sw.idle = sync.NewCond(&sw.mu)
	return sw
}

// Set delays every write by d from now on (0: none).
func (sw *Writes) Set(d time.Duration) { sw.delay.Store(int64(d)) }

// SetFunc picks the delay of each write from now on with f, given the
// write's gRPC method (e.g. "/etcdserverpb.Lease/LeaseGrant") and how many
// writes of that method were made, this one included; nil goes back to Set's.
func (sw *Writes) SetFunc(f func(method string, n int) time.Duration) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.delayFor = f
}

// Count is how many writes of method the client has made (every attempt).
func (sw *Writes) Count(method string) int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.counts[method]
}

// Total is how many writes the client has made, of every method.
func (sw *Writes) Total() int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	n := 0
	for _, c := range sw.counts {
		n += c
	}
	return n
}

// Slowed is how many writes the client has made while they were delayed.
func (sw *Writes) Slowed() int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.slowed
}

// Wait waits for every write held back to have been sent and answered,
// those made while it waits too (a write that an answer sets off, as a
// cleanup does): it returns once none is held back.
func (sw *Writes) Wait() {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	for sw.held > 0 {
		sw.idle.Wait()
	}
}

// Option installs sw on a client's configuration.
func (sw *Writes) Option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(sw.intercept))
}

func (sw *Writes) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !isWrite(req) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if n, ok := ctx.Value(counterKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
	sw.mu.Lock()
	sw.counts[method]++
	d := time.Duration(sw.delay.Load())
	if sw.delayFor != nil {
		d = sw.delayFor(method, sw.counts[method])
	}
	if d > 0 {
		sw.slowed++
		sw.held++
	}
	sw.mu.Unlock()
	if d <= 0 {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	done := make(chan error, 1)
	go func() {
		time.Sleep(d)
		// Sent whatever became of the caller, within a bound of its own.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := invoker(actx, method, req, reply, cc, opts...)
		cancel()
		// No longer held back before anyone learns the answer: a write
		// the answer sets off is counted after this one is not.
		sw.mu.Lock()
		if sw.held--; sw.held == 0 {
			sw.idle.Broadcast()
		}
		sw.mu.Unlock()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// counterKey is the context key of Counting's counter.
type counterKey struct{}

// Counting returns ctx with a counter of the writes (every attempt) made
// on contexts derived from it, through any Writes: the writes of one
// operation, among others in flight on the client.
func Counting(ctx context.Context) (context.Context, *atomic.Int64) {
	n := new(atomic.Int64)
	return context.WithValue(ctx, counterKey{}, n), n
}

// isWrite reports whether req goes through etcd's log.
func isWrite(req any) bool {
	switch r := req.(type) {
	case *pb.PutRequest, *pb.DeleteRangeRequest, *pb.LeaseGrantRequest, *pb.LeaseRevokeRequest:
		return true
	case *pb.TxnRequest:
		return txnWrites(r)
	}
	return false
}

func txnWrites(t *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			switch {
			case op.GetRequestPut() != nil, op.GetRequestDeleteRange() != nil:
				return true
			case op.GetRequestTxn() != nil && txnWrites(op.GetRequestTxn()):
				return true
			}
		}
	}
	return false
}
