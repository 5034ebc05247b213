package watch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds the gRPC streams that carry the package's watches, and
// the probe of each: how a watch learns that its stream has gone silent.

// Streams numbers the gRPC streams that carry the package's watches on
// one client, and holds those that have watches: one per client (the
// package keeps it in the client's state). clientv3 multiplexes every
// watch of a client whose context has the same outgoing metadata onto one
// stream, and keeps that stream, dead or not, while any of its watches
// lives. When a stream is found silent (by its probe, or a watch that etcd
// did not create in time) the number moves on (moveOn), so that the
// watches opened after it on that client go on a new stream, which the
// balancer places on a connection of its choosing; the probe ends the
// watches left on the silent one, and their waits open them anew.
type Streams struct {
	client *clientv3.Client
	n      atomic.Int64 // the current stream's number

	mu      sync.Mutex // guards streams and, in each stream, what its comment says
	streams map[streamKey]*stream
}

// NewStreams returns the Streams of client, with none open yet.
func NewStreams(client *clientv3.Client) *Streams { return &Streams{client: client} }

// moveOn moves the client's stream on from number n, unless that was done
// already.
func (g *Streams) moveOn(n int64) { g.n.CompareAndSwap(n, n+1) }

// watchStreamKey is the metadata key that carries a stream's number. etcd
// ignores it; clientv3 picks a watch's stream by its context's metadata.
const watchStreamKey = "concurrency-watch-stream"

// streamKey names one stream of a client: its number and, for watches
// whose context carries outgoing metadata of the caller's (which clientv3
// puts on a stream of their own), that metadata as clientv3 keys it.
type streamKey struct {
	n  int64
	md string // "" if the caller's context has no outgoing metadata
}

// stream is one gRPC stream of the package's watches on a client, and the
// probe that keeps them from trusting it once it is silent.
type stream struct {
	g   *Streams
	key streamKey
	// md is the outgoing metadata of the stream's watches: a leader
	// required (see Until), the stream's number, and the caller's
	// own metadata if any. It is made once per stream and shared by its
	// watches, which neither gRPC nor clientv3 write to (a map per watch
	// cost about 550 bytes per waiter).
	md      metadata.MD
	heardAt atomic.Int64 // when a watch of the stream last heard from it (UnixNano); 0 if none has

	// Guarded by g.mu:
	users   int                 // watches open or being opened on the stream; forgotten at 0
	watches map[*Watch]struct{} // the open watches
	confirm string              // the key of a watch etcd created on the stream, for the probe's confirming watch
	// l is the shortest liveness of the watches opened on the stream since
	// it last had none: the probe serves the most demanding.
	l      Liveness
	p      *probe // while the stream has open watches; nil otherwise
	silent error  // the probe found the stream silent: why; nil if not
	// creating are the watches etcd is creating on the stream; expiry
	// gives up those past their deadline (see create), armed for
	// expiresAt (UnixNano; 0: not armed).
	creating  map[*Watch]struct{}
	expiry    *time.Timer
	expiresAt int64
}

// join returns the client's current stream for ctx's outgoing metadata,
// counting one more watch being opened on it (see leave), and ctx with the
// stream's metadata.
func (g *Streams) join(ctx context.Context) (*stream, context.Context) {
	own, hasOwn := metadata.FromOutgoingContext(ctx) // a copy
	g.mu.Lock()
	defer g.mu.Unlock()
	key := streamKey{n: g.n.Load()}
	if hasOwn {
		own.Set(rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader)
		own.Set(watchStreamKey, strconv.FormatInt(key.n, 10))
		key.md = fmt.Sprintf("%+v", map[string][]string(own))
	}
	st := g.streams[key]
	if st == nil {
		md := own
		if !hasOwn {
			md = metadata.Pairs(rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader, watchStreamKey, strconv.FormatInt(key.n, 10))
		}
		st = &stream{g: g, key: key, md: md}
		if g.streams == nil {
			g.streams = make(map[streamKey]*stream)
		}
		g.streams[key] = st
	}
	st.users++
	// The stream's metadata replaces any of ctx's, which it includes.
	return st, metadata.NewOutgoingContext(ctx, st.md)
}

// leaveLocked undoes join for a watch that was not opened, or has been
// dropped. The caller holds g.mu.
func (st *stream) leaveLocked() {
	st.users--
	if st.users == 0 && st.g.streams[st.key] == st {
		delete(st.g.streams, st.key)
	}
}

// leave is leaveLocked for a caller that does not hold g.mu.
func (st *stream) leave() {
	st.g.mu.Lock()
	defer st.g.mu.Unlock()
	st.leaveLocked()
}

// create opens w, a watch of key with opts on wctx, which w.cancel ends,
// and reports whether etcd created it within wait; if not, it has ended
// wctx. clientv3's Watch returns only once etcd has created the watch or
// wctx has ended. One timer of the stream gives up the creations in
// progress on it (see expire), not a timer per creation (a stopped timer
// lingers in the runtime's heap of timers until it is cleaned).
func (st *stream) create(w *Watch, wctx context.Context, wait time.Duration, key string, opts ...clientv3.OpOption) (clientv3.WatchChan, bool) {
	st.pend(w, wait)
	ch := st.g.client.Watch(wctx, key, opts...)
	return ch, st.unpend(w) && wctx.Err() == nil
}

// pend lists w among the watches being created, to be given up after
// wait.
func (st *stream) pend(w *Watch, wait time.Duration) {
	st.g.mu.Lock()
	defer st.g.mu.Unlock()
	w.deadline = time.Now().Add(wait).UnixNano()
	if st.creating == nil {
		st.creating = make(map[*Watch]struct{})
	}
	st.creating[w] = struct{}{}
	switch {
	case st.expiry == nil:
		st.expiry = time.AfterFunc(wait, st.expire)
	case st.expiresAt == 0 || w.deadline < st.expiresAt:
		st.expiry.Reset(wait)
	default:
		return
	}
	st.expiresAt = w.deadline
}

// unpend takes w off the watches being created, and reports whether its
// creation was not given up.
func (st *stream) unpend(w *Watch) bool {
	st.g.mu.Lock()
	defer st.g.mu.Unlock()
	delete(st.creating, w)
	inTime := w.deadline != 0
	w.deadline = 0
	if len(st.creating) == 0 && st.expiresAt != 0 {
		st.expiry.Stop()
		st.expiresAt = 0
	}
	return inTime
}

// expire is the stream's timer of creations: it gives up those past their
// deadline (their Watch returns) and waits for the next deadline.
func (st *stream) expire() {
	st.g.mu.Lock()
	defer st.g.mu.Unlock()
	now := time.Now().UnixNano()
	next := int64(0)
	for w := range st.creating {
		switch {
		case w.deadline == 0:
		case w.deadline <= now:
			w.deadline = 0
			w.cancel()
		case next == 0 || w.deadline < next:
			next = w.deadline
		}
	}
	st.expiresAt = next
	if next != 0 {
		st.expiry.Reset(time.Duration(next - now))
	}
}

// heard records that a watch heard from the stream.
func (st *stream) heard() { st.heardAt.Store(time.Now().UnixNano()) }

// heardWithin reports whether a watch of the stream heard from it within
// the last d: the stream is alive, if busy.
func (st *stream) heardWithin(d time.Duration) bool {
	at := st.heardAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < d
}

// silence is why the probe ended the stream's watches, nil if it did not.
func (st *stream) silence() error {
	st.g.mu.Lock()
	defer st.g.mu.Unlock()
	return st.silent
}

// add lists w, which etcd has just created on the stream as a watch of
// key, for a wait with liveness l, and starts the stream's probe if w is
// its first open watch.
func (st *stream) add(w *Watch, key string, l Liveness) {
	st.heard()
	st.g.mu.Lock()
	defer st.g.mu.Unlock()
	w.st = st
	if st.watches == nil {
		st.watches = make(map[*Watch]struct{})
	}
	st.watches[w] = struct{}{}
	st.confirm = key
	switch {
	case st.silent != nil:
		// Created as the probe gave the stream up: end it too, for its
		// wait to watch anew on the client's next stream. No probe
		// starts on a silent stream.
		w.cancel()
		return
	case st.p == nil:
		st.l = l
		st.p = newProbe(st)
	case l.Idle < st.l.Idle || l.Wait < st.l.Wait:
		// The probe's next run comes as soon as the new liveness asks:
		// with a progress request out, once the new wait is over, not the
		// old (TestWaitShorterLivenessJoinsAsked). A run in
		// progress reschedules itself with it.
		st.l = Liveness{Idle: min(l.Idle, st.l.Idle), Wait: min(l.Wait, st.l.Wait)}
		switch p := st.p; {
		case p.running != nil:
		case p.asked.IsZero():
			p.t.Reset(p.untilAsk())
		default:
			p.t.Reset(time.Until(p.asked.Add(st.l.Wait)))
		}
	}
}

// drop takes w off the stream's watches. If it was the last, it stops the
// probe and waits for a run of it in progress to end, so that the probe
// never sends a request on a stream without watches (clientv3 would open
// the stream anew for it, and keep it until the client closes).
func (st *stream) drop(w *Watch) {
	st.g.mu.Lock()
	delete(st.watches, w)
	var running chan struct{}
	if len(st.watches) == 0 && st.p != nil {
		running = st.p.halt()
		st.p = nil
	}
	st.leaveLocked()
	st.g.mu.Unlock()
	if running != nil {
		<-running
	}
}

// probe keeps the watches of a stream from trusting it once it is silent.
// It is the stream's, from its first open watch to the close of its last
// (one per stream, not per watch: a probe per watch, with its timer and a
// second channel in each watch's wait, cost about 460 bytes per waiter).
// Every response a watch of the stream receives shows the stream alive
// (heard). Once the stream has said nothing for idle to 1.5 idle (at
// random), the probe asks it for progress: etcd answers on the stream, and
// clientv3 hands the answer (a progress notification) to every watch of
// it. So an idle stream costs about one progress request per idle,
// whatever its number of watches.
//
// etcd leaves a progress request unanswered on a live stream too: while
// one of its watches catches up on old events or waits for a revision not
// yet written (it answers only when every watch of the stream has reached
// its start revision; the package opens no such watch, see missed, but
// clientv3 resumes the watches of a stream that reconnects from the
// revision after the last event it heard), and always behind etcd's gRPC
// proxy, which drops progress requests. So if no answer comes within
// wait, the probe makes sure: it opens a watch on the stream, which etcd
// and the proxy create at once on a live stream, and closes it. Only if
// that goes unanswered within wait too, and nothing else was heard on the
// stream since the request (clientv3 creates the probe's watch behind
// those it is creating already), is the stream silent: the probe
// moves the client's stream on and ends every watch of the stream, whose
// waits then see request.ErrNoAnswer (see Watch.Closed), read again and watch
// anew. A silent stream is given up within 1.5 idle + 2 wait of the last
// word heard on it. A watch that etcd is slow to create behind many
// others is not a member until created (see Open): creation is not
// silence.
//
// The probe runs on a timer of its own (time.AfterFunc), one run at a
// time; its owner is the stream, whose last watch stops it and waits for
// a run in progress (see drop), each run bounded by wait.
type probe struct {
	st   *stream
	ctx  context.Context // the stream's metadata; ended by stop
	stop context.CancelFunc
	t    *time.Timer
	// Guarded by st.g.mu:
	asked   time.Time     // when a progress request went out, unanswered yet; zero if none
	running chan struct{} // closed when the run in progress ends; nil if none runs
}

// newProbe starts the probe of st, which has just had its first watch
// created. The caller holds st.g.mu.
func newProbe(st *stream) *probe {
	ctx, stop := context.WithCancel(metadata.NewOutgoingContext(st.g.client.Ctx(), st.md))
	p := &probe{st: st, ctx: ctx, stop: stop}
	p.t = time.AfterFunc(p.untilAsk(), p.run)
	return p
}

// untilAsk is how long from now the probe waits before it asks: until the
// stream has said nothing for idle to 1.5 idle (at random), counted from
// the last word heard on it. The caller holds st.g.mu.
func (p *probe) untilAsk() time.Duration {
	l := p.st.l
	return time.Until(time.Unix(0, p.st.heardAt.Load()).Add(l.Idle + rand.N(l.Idle/2)))
}

// halt stops p's timer and ends its requests, and returns the channel
// that a run in progress closes when it ends (nil if none runs). The
// caller holds st.g.mu.
func (p *probe) halt() chan struct{} {
	p.t.Stop()
	p.stop()
	return p.running
}

// run is the probe's timer: it sends a progress request if none is out,
// and otherwise makes sure the stream is alive (see probe). A stream
// heard from lately (since the request, if one is out) needs neither.
func (p *probe) run() {
	st := p.st
	g := st.g
	g.mu.Lock()
	if st.p != p || p.running != nil {
		g.mu.Unlock()
		return
	}
	l := st.l
	asked := !p.asked.IsZero()
	if asked && st.heardAt.Load() > p.asked.UnixNano() || !asked && st.heardWithin(l.Idle) {
		p.asked = time.Time{}
		p.t.Reset(p.untilAsk())
		g.mu.Unlock()
		return
	}
	if !asked {
		p.asked = time.Now()
	}
	running := make(chan struct{})
	p.running = running
	key := st.confirm
	g.mu.Unlock()

	alive := p.ask(asked, l, key)

	g.mu.Lock()
	defer g.mu.Unlock()
	p.running = nil
	close(running)
	p.settle(asked, alive, l)
}

// ask sends a progress request on the stream if none is out (asked), and
// otherwise opens a watch of key on it, to make sure; it reports whether
// the stream answered within l.Wait. Its requests end with the probe.
func (p *probe) ask(asked bool, l Liveness, key string) (alive bool) {
	st := p.st
	if !asked {
		rctx, cancel := context.WithTimeout(p.ctx, l.Wait)
		err := st.g.client.RequestProgress(rctx)
		cancel()
		// An error with p.ctx alive: the request could not even be
		// queued on the stream.
		return err == nil
	}
	cctx, cancel := context.WithCancel(p.ctx)
	_, alive = st.create(&Watch{cancel: cancel}, cctx, l.Wait, key, clientv3.WithCreatedNotify())
	cancel()
	if alive {
		st.heard()
	}
	return alive
}

// settle schedules the probe's next run after one that asked (a progress
// request if !asked, else a confirming watch) and saw the stream alive or
// not, or, for a silent stream, moves the client's stream on and ends
// every watch of it. The caller holds st.g.mu.
//
// A stream heard from since the request is alive, whatever became of the
// probe's own watch: clientv3 creates it behind the stream's other
// creations, one at a time, and those may take longer than wait in all
// while etcd answers each (TestWaitProbeBehindCreations).
func (p *probe) settle(asked, alive bool, l Liveness) {
	st := p.st
	alive = alive || st.heardAt.Load() > p.asked.UnixNano()
	switch {
	case st.p != p || p.ctx.Err() != nil:
		// Stopped: the stream has no watch left.
	case alive && !asked:
		p.t.Reset(time.Until(p.asked.Add(st.l.Wait)))
	case alive:
		p.asked = time.Time{}
		p.t.Reset(p.untilAsk())
	default:
		st.g.moveOn(st.key.n)
		st.silent = fmt.Errorf("%w: the watch stream said nothing for %v", request.ErrNoAnswer, l.Idle+2*l.Wait)
		for w := range st.watches {
			w.cancel()
		}
	}
}
