package slowwrite

import (
	"context"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// keepAliveMethod is the gRPC method of etcd's lease renewals.
const keepAliveMethod = "/etcdserverpb.Lease/LeaseKeepAlive"

// Renewals makes the answers to a client's lease renewals late while
// everything else stays fast: the model of a busy leader, or a congested
// link, seen from one client. Each renewal is sent at once, so etcd
// renews the lease when it receives it, as it would; its answer is handed
// to the client the delay after it arrived (the delay in force then),
// each answer on its own clock, in order. Every LeaseKeepAlive stream of
// the client is so delayed, etcd's package's and this package's alike.
// Install it with Option.
type Renewals struct {
	delay    atomic.Int64 // time.Duration; 0: none
	answered atomic.Int64 // answers received from etcd
}

// NewRenewals returns a Renewals that delays nothing yet.
func NewRenewals() *Renewals { return &Renewals{} }

// Set delays every answer that arrives from now on by d (0: none).
func (r *Renewals) Set(d time.Duration) { r.delay.Store(int64(d)) }

// Answered is how many renewals etcd has answered to the client.
func (r *Renewals) Answered() int64 { return r.answered.Load() }

// Option installs r on a client's configuration.
func (r *Renewals) Option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainStreamInterceptor(r.intercept))
}

func (r *Renewals) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != keepAliveMethod {
		return cs, err
	}
	ls := &lateStream{ClientStream: cs, r: r, answers: make(chan lateAnswer, 1024)}
	go ls.read()
	return ls, nil
}

// lateStream is a LeaseKeepAlive stream whose answers are handed over
// late. Its reader receives them as they come, and RecvMsg hands each
// over once its time has come.
type lateStream struct {
	grpc.ClientStream
	r       *Renewals
	answers chan lateAnswer // closed when the stream ends
}

type lateAnswer struct {
	resp *pb.LeaseKeepAliveResponse
	due  time.Time
	err  error
}

// read receives the stream's answers until it ends, stamping each with
// when it is due.
func (ls *lateStream) read() {
	defer close(ls.answers)
	for {
		resp := new(pb.LeaseKeepAliveResponse)
		err := ls.ClientStream.RecvMsg(resp)
		a := lateAnswer{resp: resp, due: time.Now().Add(time.Duration(ls.r.delay.Load())), err: err}
		if err == nil {
			ls.r.answered.Add(1)
		}
		select {
		case ls.answers <- a:
		case <-ls.Context().Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (ls *lateStream) RecvMsg(m any) error {
	a, ok := <-ls.answers
	if !ok {
		return ls.Context().Err()
	}
	if a.err != nil {
		return a.err
	}
	t := time.NewTimer(time.Until(a.due))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ls.Context().Done():
		return ls.Context().Err()
	}
	dst := m.(*pb.LeaseKeepAliveResponse)
	dst.Header, dst.ID, dst.TTL = a.resp.Header, a.resp.ID, a.resp.TTL
	return nil
}
