// Package renew holds the concurrency package's renewals of leases that
// need none of its types: the LeaseKeepAlive streams that the sessions of
// one client renew on (Renewer), when a session renews and the
// conservative deadline an answer gives (In, DeadlineAfter), and the
// grant of a lease with an ID of its own (Grant). It stands on the request
// layer (internal/request), and uses none of the package's names: it
// takes a client and plain values.
package renew

// This file holds the stream that sessions renew their leases on: every
// session of one client sends its renewals on one LeaseKeepAlive stream,
// as etcd's package does, rather than opening a stream for each renewal
// (KeepAliveOnce). A renewal that a stream keeps waiting is sent again on
// a new stream, so that a silent connection or a slow stream holds up no
// session (see Renewer.renew).

import (
	"context"
	"fmt"
	"slices"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// Renewer sends the renewals of one client's sessions.
//
// An answer names its lease, and is matched to the oldest renewal of that
// lease sent on its stream and not yet answered. etcd's members answer a
// stream's renewals one at a time, in the order they came (the
// LeaseServer receives one, renews, answers, and only then receives the
// next), so a renewal's answer is always the answer to a request sent
// after the renewal began: the lease was renewed no earlier than that,
// which is what the session's deadline counts on. etcd's gRPC proxy
// (`etcd grpc-proxy`) answers the renewals of different leases in any
// order, each lease's in order, hence the match by lease.
type Renewer struct {
	client *clientv3.Client
	lc     pb.LeaseClient

	mu       sync.Mutex                // guards cur, streams, released and every stream's fields below kick
	cur      *renewStream              // where new renewals go; nil before the first, or once it failed
	streams  map[*renewStream]struct{} // the streams not yet ended
	released bool                      // its last session released it (see Shared): it opens no stream again
}

// renewStream is one LeaseKeepAlive stream of a Renewer.
type renewStream struct {
	cancel context.CancelFunc // ends the stream and its goroutines
	kick   chan struct{}      // wakes the sender; holds one token at most
	avoid  map[string]bool    // the addresses of streams that kept renewals waiting when it was opened

	addr string // the member's address, once the stream is open

	unsent  []*renewal // waiting for the sender, oldest first
	pending []*renewal // sent, not answered, oldest first
	waiting map[int64]int
	// waiting counts, by lease, the renewals in unsent or pending whose
	// caller still waits for them; live is their sum.
	live   int
	failed bool // the stream ended: nothing more is sent on it
}

// renewal is one renewal sent on a renewStream.
type renewal struct {
	id      int64
	waiting bool             // its caller still waits; guarded by Renewer.mu
	answer  chan renewAnswer // holds the answer (one at most)
}

// renewAnswer is the answer to a renewal: etcd's, or why there is none.
type renewAnswer struct {
	resp *pb.LeaseKeepAliveResponse
	err  error
}

// Shared is the Renewer of one client's sessions while any renews: the
// first session that renews creates it, the last one ends it (see Use).
// The zero value is ready to use; the package keeps one per client.
type Shared struct {
	mu    sync.Mutex
	r     *Renewer // nil while no session renews
	users int      // sessions that renew with r
}

// Use returns the client's Renewer and counts one more session that
// renews with it, until the returned function is called; with the last
// one, the Renewer ends its streams and opens none again. With no
// Renewer, when client has no gRPC connection of its own (see Grant),
// that function does nothing.
func (sh *Shared) Use(client *clientv3.Client) (*Renewer, func()) {
	conn := client.ActiveConnection()
	if conn == nil {
		return nil, func() {}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.r
	if r == nil {
		r = &Renewer{client: client, lc: pb.NewLeaseClient(conn), streams: make(map[*renewStream]struct{})}
		sh.r = r
	}
	sh.users++
	var once sync.Once
	return r, func() { once.Do(func() { sh.release(r) }) }
}

// release counts one session fewer, and with the last one ends r's
// streams and forgets r.
func (sh *Shared) release(r *Renewer) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.users--
	if sh.users > 0 {
		return
	}
	sh.r = nil
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released = true
	for s := range r.streams {
		r.fail(s, context.Canceled)
	}
}

// KeepAliveOnce renews lease id once, as client.KeepAliveOnce does: on
// r's stream, or, with no Renewer (r nil), on a stream of its own. again
// says that it is a second attempt of a renewal (see Renewer.renew).
func KeepAliveOnce(ctx context.Context, r *Renewer, client *clientv3.Client, id clientv3.LeaseID, again bool) (*clientv3.LeaseKeepAliveResponse, error) {
	if r == nil {
		return client.KeepAliveOnce(ctx, id)
	}
	resp, err := r.renew(ctx, int64(id), again)
	if err != nil {
		return nil, err
	}
	return &clientv3.LeaseKeepAliveResponse{ResponseHeader: resp.GetHeader(), ID: id, TTL: resp.TTL}, nil
}

// renew sends one renewal of lease id and waits for its answer or for ctx
// to end. It returns rpctypes.ErrLeaseNotFound if etcd no longer has the
// lease, and the stream's error, as clientv3 returns etcd's errors, if the
// stream ended first.
//
// It goes on the current stream, unless that stream has maxStreamDepth
// renewals not yet answered (etcd answers a stream's renewals one at a
// time, so a stream of a client with many sessions can fall behind a
// leader that is slow to answer each: the renewal goes on another
// stream, which becomes the current one: one kept open with nothing on it
// (see maxIdleStreams), or a new one), or this is a second attempt (again) of
// a renewal of a lease that already has one waiting on the stream:
// request.Ask has sent it again because its stream kept it waiting too
// long, so this one goes on a new stream, which becomes the current
// stream. (A session's next renewal, sent while the last still waits on
// a slow cluster, is no second attempt: it stays on the stream.) The new stream is opened on a connection to another member than
// the streams that keep renewals waiting, if the client has one (see
// openStream): renewals that all share a silent connection have no
// answer to show that it is silent (see request.Answers), so each would wait
// there until request.Ask gives it up. The stream left is closed once no caller
// waits for a renewal sent on it, unless it is kept for later with
// nothing on it (see closeIfIdle). A renewal whose caller
// stopped waiting stays on its stream until it is answered, and its
// answer is dropped.
func (r *Renewer) renew(ctx context.Context, id int64, again bool) (*pb.LeaseKeepAliveResponse, error) {
	rn := &renewal{id: id, waiting: true, answer: make(chan renewAnswer, 1)}
	r.mu.Lock()
	if r.released {
		// A late attempt of a renewal (request.Ask's, after its session ended and
		// released r): a stream opened now would outlive every session.
		r.mu.Unlock()
		return nil, context.Canceled
	}
	s := r.cur
	if s == nil || again && s.waiting[id] > 0 || s.depth() >= maxStreamDepth {
		old := r.cur
		if second := again && old != nil && old.waiting[id] > 0; second {
			s = r.open(true)
		} else if s = r.idleStream(); s == nil {
			s = r.open(false)
		}
		r.cur = s
		if old != nil {
			r.closeIfIdle(old)
		}
	}
	s.unsent = append(s.unsent, rn)
	s.waiting[id]++
	s.live++
	r.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}

	select {
	case a := <-rn.answer:
		return a.resp, a.err
	case <-ctx.Done():
		r.mu.Lock()
		if rn.waiting {
			r.forget(s, rn)
			r.closeIfIdle(s)
		}
		r.mu.Unlock()
		return nil, ctx.Err()
	}
}

// maxStreamDepth is how many renewals a stream may have sent and not
// answered, or waiting to be sent, before the next goes on another
// stream: a renewal waits behind at most that many on its stream.
const maxStreamDepth = 16

// maxIdleStreams is how many streams with nothing on them a Renewer keeps
// open besides its current one, for the next renewals that the current
// one has no room for. The sessions of a process renew together, on the
// 500 ms grid (see In), so a client with more than maxStreamDepth
// sessions due at one time needs more than one stream at that time; kept
// open, they are used again at the next (a client of 625 idle sessions at
// TTL 60 opened and closed 44 streams in 40 s when every stream left was
// closed at once: more than one a second, each a new gRPC stream and its
// goroutines on the client and the member, where etcd's package keeps
// one).
const maxIdleStreams = 16

// depth is how many renewals s has sent and not had answered, or has
// still to send; r.mu is held.
func (s *renewStream) depth() int { return len(s.unsent) + len(s.pending) }

// idleStream returns one of r's streams other than the current one that
// is open with nothing on it, or nil; r.mu is held. A stream with a
// renewal still on it that nobody waits for is no candidate: its caller
// gave up waiting, which may be the first sign of a silent connection.
func (r *Renewer) idleStream() *renewStream {
	for s := range r.streams {
		if r.spare(s) {
			return s
		}
	}
	return nil
}

// spare reports whether s is open, not current and has nothing on it;
// r.mu is held.
func (r *Renewer) spare(s *renewStream) bool {
	return s != r.cur && !s.failed && s.addr != "" && s.depth() == 0
}

// open starts a stream for r and returns it; r.mu is held. If avoid, the
// stream avoids the members of the streams open that keep renewals
// waiting.
func (r *Renewer) open(avoid bool) *renewStream {
	ctx, cancel := context.WithCancel(r.client.Ctx())
	s := &renewStream{cancel: cancel, kick: make(chan struct{}, 1), avoid: make(map[string]bool), waiting: make(map[int64]int)}
	for o := range r.streams {
		if avoid && o.live > 0 && o.addr != "" {
			s.avoid[o.addr] = true
		}
	}
	r.streams[s] = struct{}{}
	go r.send(ctx, s)
	return s
}

// openStream opens a LeaseKeepAlive stream on ctx, and returns it and its
// member's address. It waits for a connection that is ready, as
// clientv3's requests do. A stream that the client's balancer puts on a
// member in avoid is closed and another opened (the balancer picks round
// robin), up to once per endpoint of the client; the last is kept
// whatever its member.
func (r *Renewer) openStream(ctx context.Context, avoid map[string]bool) (pb.Lease_LeaseKeepAliveClient, string, error) {
	for tries := len(r.client.Endpoints()); ; tries-- {
		sctx, cancel := context.WithCancel(ctx)
		ks, err := r.lc.LeaseKeepAlive(sctx, grpc.WaitForReady(true))
		if err != nil {
			cancel()
			return nil, "", request.RPCErr(ctx, err)
		}
		var addr string
		if p, ok := peer.FromContext(ks.Context()); ok && p.Addr != nil {
			addr = p.Addr.String()
		}
		if !avoid[addr] || tries <= 1 {
			context.AfterFunc(ctx, cancel)
			return ks, addr, nil
		}
		cancel()
	}
}

// send opens s's gRPC stream (see openStream), starts its receiver, and
// sends s's renewals in order until the stream ends.
func (r *Renewer) send(ctx context.Context, s *renewStream) {
	ks, addr, err := r.openStream(ctx, s.avoid)
	r.mu.Lock()
	s.addr = addr
	if err != nil {
		r.fail(s, err)
	}
	r.mu.Unlock()
	if err != nil {
		return
	}
	go r.receive(ctx, s, ks)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		for {
			r.mu.Lock()
			if s.failed || len(s.unsent) == 0 {
				r.mu.Unlock()
				break
			}
			rn := s.unsent[0]
			s.unsent = s.unsent[1:]
			s.pending = append(s.pending, rn)
			r.mu.Unlock()
			// A failed Send ends the stream; receive gets its error.
			if ks.Send(&pb.LeaseKeepAliveRequest{ID: rn.id}) != nil {
				return
			}
		}
	}
}

// receive hands each answer on ks to the oldest renewal of its lease sent
// on s and not yet answered, until the stream ends; then it fails s with
// the stream's error. An answer for a lease with no renewal sent is a
// broken stream: it fails s.
func (r *Renewer) receive(ctx context.Context, s *renewStream, ks pb.Lease_LeaseKeepAliveClient) {
	for {
		resp, err := ks.Recv()
		r.mu.Lock()
		i := -1
		if err == nil {
			i = slices.IndexFunc(s.pending, func(rn *renewal) bool { return rn.id == resp.ID })
		}
		switch {
		case err != nil:
			r.fail(s, request.RPCErr(ctx, err))
		case i < 0:
			r.fail(s, fmt.Errorf("concurrency: keepalive answer for lease %x, which no renewal on the stream asked for", resp.ID))
		default:
			rn := s.pending[i]
			s.pending = slices.Delete(s.pending, i, i+1)
			a := renewAnswer{resp: resp}
			if resp.TTL <= 0 {
				a = renewAnswer{err: rpctypes.ErrLeaseNotFound}
			}
			r.answer(s, rn, a)
			r.closeIfIdle(s)
			r.mu.Unlock()
			continue
		}
		r.mu.Unlock()
		return
	}
}

// answer gives rn its answer, if its caller still waits; r.mu is held.
func (r *Renewer) answer(s *renewStream, rn *renewal, a renewAnswer) {
	if rn.waiting {
		r.forget(s, rn)
		rn.answer <- a
	}
}

// forget stops counting rn as waited for; r.mu is held.
func (r *Renewer) forget(s *renewStream, rn *renewal) {
	rn.waiting = false
	s.live--
	if s.waiting[rn.id]--; s.waiting[rn.id] == 0 {
		delete(s.waiting, rn.id)
	}
}

// fail ends s: its waiting renewals get err, and no renewal goes to it
// again; r.mu is held.
func (r *Renewer) fail(s *renewStream, err error) {
	if s.failed {
		return
	}
	s.failed = true
	s.cancel()
	delete(r.streams, s)
	if r.cur == s {
		r.cur = nil
	}
	for _, rn := range append(s.pending, s.unsent...) {
		r.answer(s, rn, renewAnswer{err: err})
	}
	s.pending, s.unsent = nil, nil
}

// closeIfIdle ends s if it is no longer current and nobody waits for a
// renewal sent on it, unless it has nothing on it and r keeps fewer than
// maxIdleStreams such streams (see idleStream); r.mu is held.
func (r *Renewer) closeIfIdle(s *renewStream) {
	if s == r.cur || s.live > 0 {
		return
	}
	if r.spare(s) {
		idle := 0
		for o := range r.streams {
			if o != s && r.spare(o) {
				idle++
			}
		}
		if idle < maxIdleStreams {
			return
		}
	}
	r.fail(s, context.Canceled)
}
