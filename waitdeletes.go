package concurrency

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// This file holds the wait shared by every primitive on the queue (see
// queue.go). A waiter watches only its predecessor, the newest key older
// than its own, so that a delete wakes one waiter, not the whole queue: one
// watch per waiter, as in etcd's package. Its own key's deletion is found
// by the read that follows each deletion of a predecessor, and the end of
// its session ends the wait at once (etcd #19597).
//
// The watch on the predecessor starts at the server's current revision
// rather than at the revision of the read that found the key. etcd serves a
// watch that starts at or below its current revision from its "unsynced"
// set, on a 100 ms tick; that tick is most of the ~100 ms that etcd's
// package spends on each contended handoff. A watch from the current
// revision is synced at once; the revision in its created response tells
// whether anything could have happened between the read and the watch, and
// only then is the key read again.
//
// A wait ends with its caller's ctx or with its session's life, at once
// (etcd #19597), but keeps no context of its own for that while it
// waits: a context for the whole wait, with its map of children and its
// done channel, cost about 460 bytes per waiter. Each read, sleep and
// watch creation of the wait runs on a context made for that step (see
// Session.during), and the session's end ends its open watches (see
// Session.endWatches).
//
// After each wake-up the waiter judges its place again with one
// linearizable read (judge, in queue.go): its own key and the older keys
// that count. The read that decides a grant is never a serializable one:
// a member that lags could still show the waiter's key after it was
// deleted at the leader (its lease revoked, a force-unlock), and grant it
// beside the next waiter (issue 21).

// target is what a waiter waits for: the deletion of one key (the newest
// older key that counts against it), or also a new value of that key (when
// a Semaphore waiter ahead of it became a holder: see promote), or any
// deletion in a range. Only the first waiter of a Semaphore, whose turn
// comes when any one of limit holders goes (a release or a lease that
// expires), watches a range; every other waiter of every primitive
// watches one key.
type target struct {
	key         string
	create, mod int64 // the key's create and mod revisions when last read
	onPut       bool  // a new value ends the wait too
	over        string
	// wake, with over, is a key (the waiter's own) whose new value ends
	// the range wait too: a Semaphore's resize rewrites every key of the
	// name (see Semaphore.SetLimit), and a larger limit may let the
	// first waiter in with no deletion.
	wake string
}

// waitDeletes blocks until key, created at rev, holds by rule r, and
// returns the header of the read that showed it: at the header's revision,
// key existed and held. next is what to wait for
// first, as last read at revision seenRev, or the zero target if unknown.
// The key's own deletion is found by the read that follows each wake-up
// (ErrSessionExpired). When ctx ends it returns ctx.Err(); when the session's
// life ends, its cause. A cluster without a leader or a lost connection does not
// end the wait: it reads again once etcd answers, and keeps its place
// (etcd's package also kept waiting). It leaves key in place: the caller
// cleans up.
func waitDeletes(ctx context.Context, s *Session, r rule, key string, rev int64, next target, seenRev int64) (*pb.ResponseHeader, error) {
	var b backoff  // between failed reads
	var wb backoff // between watches that failed
	for {
		var err error
		var j judgement
		judged := false // the range watch judged already, with its watch open
		switch {
		case next.over != "":
			over := next.over
			judged, err = waitRange(ctx, s, over, next.wake, seenRev, &wb, func() (bool, int64, error) {
				var err error
				if j, err = judgeDuring(ctx, s, r, key, rev); err != nil {
					return false, 0, err
				}
				// Go on watching only while the key is still the first
				// waiter, waiting for any deletion in the range.
				return j.holds || j.next.over != over, j.hdr.Revision, nil
			})
		case next.key != "":
			err = waitDelete(ctx, s, next, seenRev, &wb)
		}
		if err != nil {
			return nil, err
		}
		if !judged {
			j, err = judgeDuring(ctx, s, r, key, rev)
			if transient(err) {
				if !s.sleep(ctx, &b) {
					return nil, s.waitErr(ctx)
				}
				next = target{} // read again, at once
				continue
			}
			if err != nil {
				return nil, err
			}
		}
		b.reset()
		if j.holds {
			return j.hdr, nil
		}
		// What the read showed is the key space at its revision: wait for
		// what happened after it.
		next, seenRev = j.next, j.hdr.Revision
	}
}

// waitDelete blocks until t.key, which had create revision t.create (and
// mod revision t.mod) in a read at revision seenRev, is deleted or
// replaced, or with t.onPut has a new value. It returns
// ctx.Err() when ctx ends, the cause of the session's life when that ends,
// and the error when watching fails for a reason
// that waiting cannot fix. After compaction (the watch could not resume), a
// member without a leader, or a lost connection, it reads the key again,
// retrying while etcd does not answer, and watches anew.
func waitDelete(ctx context.Context, s *Session, t target, seenRev int64, b *backoff) error {
	for {
		err := watchDelete(ctx, s, t, seenRev, b)
		if werr := s.waitErr(ctx); err == nil || werr != nil {
			return werr
		}
		if !errors.Is(err, rpctypes.ErrCompacted) {
			if !transient(err) && !errors.Is(err, errWatchClosed) {
				return err
			}
			// Grows while watches keep failing; a watch that starts
			// resets it.
			if !s.sleep(ctx, b) {
				return s.waitErr(ctx)
			}
		}
		resp, err := s.getDuring(ctx, t.key)
		if transient(err) {
			continue // watch again: the key is read once more
		}
		if err != nil {
			if werr := s.waitErr(ctx); werr != nil {
				return werr
			}
			return err
		}
		if t.changed(resp.Kvs) {
			return nil
		}
		seenRev = resp.Header.Revision
	}
}

// changed reports whether a read of t.key that returned kvs shows the end
// of the wait for t.
func (t target) changed(kvs []*mvccpb.KeyValue) bool {
	return len(kvs) == 0 || kvs[0].CreateRevision != t.create || t.onPut && kvs[0].ModRevision != t.mod
}

// watchDelete is one watch of waitDelete, from the server's current
// revision.
func watchDelete(ctx context.Context, s *Session, t target, seenRev int64, b *backoff) error {
	var opts []clientv3.OpOption
	if !t.onPut {
		opts = append(opts, clientv3.WithFilterPut())
	}
	return watchUntil(ctx, s, s.client, s.live(), t.key, b, func(wr clientv3.WatchResponse) (bool, error) {
		if missed(wr, seenRev) {
			// Something was written between the read at seenRev and the
			// watch's start: read the key once more.
			resp, err := s.getDuring(ctx, t.key)
			if err != nil {
				return false, err
			}
			if t.changed(resp.Kvs) {
				return true, nil
			}
		}
		for _, ev := range wr.Events {
			// A member that lags behind the read at seenRev may replay
			// older events: only one after the read ends the wait.
			if ev.Kv.ModRevision > max(seenRev, t.create) && (ev.Type == mvccpb.DELETE || t.onPut) {
				return true, nil
			}
		}
		return false, nil
	}, opts...)
}

// waitRange blocks until a key under prefix over is deleted after revision
// seenRev, or key wake (if not "") is written after it. Like watchDelete it watches from the server's current revision,
// which etcd serves at once (a watch from an older revision is served from
// etcd's "unsynced" set, up to 100 ms late). If that revision is past
// seenRev, a deletion in between may have been missed: with the watch
// open, it calls check, which reads the queue again and says whether the
// wait is over (stop) and the revision its read saw; from then on only a
// deletion after that revision ends the wait. So a busy name never makes
// it read in a loop, and no deletion is missed. It reports whether check
// ended the wait (false: a deletion did, or a failed watch that the caller
// reads after). It returns ctx.Err() when ctx ends, the cause of the
// session's life when that ends, and the error of check
// or of the watch when waiting cannot fix it; after a transient failure of
// either it waits (b) and returns, for the caller to read again.
func waitRange(ctx context.Context, s *Session, over, wake string, seenRev int64, b *backoff, check func() (stop bool, seen int64, err error)) (checked bool, err error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if wake == "" {
		opts = append(opts, clientv3.WithFilterPut())
	}
	err = watchUntil(ctx, s, s.client, s.live(), over, b, func(wr clientv3.WatchResponse) (bool, error) {
		if missed(wr, seenRev) {
			stop, seen, err := check()
			if err != nil || stop {
				checked = err == nil
				return true, err
			}
			seenRev = seen
		}
		for _, ev := range wr.Events {
			// A member behind the read at seenRev replays what the read
			// already showed: only a deletion (or a write of wake) after
			// it counts.
			if ev.Kv.ModRevision > seenRev && (ev.Type == mvccpb.DELETE || string(ev.Kv.Key) == wake) {
				return true, nil
			}
		}
		return false, nil
	}, opts...)
	werr := s.waitErr(ctx)
	switch {
	case err == nil || werr != nil:
		return checked, werr
	case errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, errWatchClosed) || transient(err):
		if errors.Is(err, rpctypes.ErrCompacted) || s.sleep(ctx, b) {
			return false, nil
		}
		return false, s.waitErr(ctx)
	default:
		return false, err
	}
}

// missed reports whether wr is the created response of a watch that began
// after revision rev, which a read saw last: something written in between
// may have been missed, and the caller reads again. The package's watches
// start at the server's current revision rather than at rev+1: etcd
// answers a progress request (see probe) only once every watch of the
// stream has reached its start revision, so one watch waiting for a
// revision not yet written would leave every other watch of the stream
// without an answer while the cluster is idle.
func missed(wr clientv3.WatchResponse, rev int64) bool {
	return wr.Created && wr.Header.Revision > rev
}

// watchAfter is watchUntil for a caller that needs every event after
// revision rev, which its read saw last (Observe posts every value). It
// watches from the server's current revision and, only if that watch
// began past rev (see missed), watches again from rev+1, a revision etcd
// has written by then: so it never opens a watch at a revision not yet
// written, which would leave the stream's progress requests unanswered.
func watchAfter(ctx context.Context, client *clientv3.Client, l liveness, key string, rev int64, fn func(clientv3.WatchResponse) (bool, error), opts ...clientv3.OpOption) error {
	replay := false
	err := watchUntil(ctx, nil, client, l, key, nil, func(wr clientv3.WatchResponse) (bool, error) {
		if missed(wr, rev) {
			replay = true
			return true, nil
		}
		return fn(wr)
	}, opts...)
	if err != nil || !replay {
		return err
	}
	return watchUntil(ctx, nil, client, l, key, nil, fn, append(opts, clientv3.WithRev(rev+1))...)
}

// watchUntil watches key with opts until fn, called on each response in
// order, returns true or an error. It returns nil when fn returned true,
// fn's error, or the error that ended the watch (compaction, no leader,
// lost connection, ctx). If s is not nil (the watch is a wait's), the end
// of the session's life ends the watch too, with its cause (see
// Session.endWatches). The watch requires a leader: on a member without
// one it ends with an error instead of waiting for events that never
// come. A watch that starts resets b, the backoff between failed watches.
//
// No part of it trusts a silent stream (see openWatch and probe): if etcd
// does not create the watch in time, or the stream stops answering, it
// returns an error matching errNoAnswer, for the caller to read again and
// watch anew, on a new stream.
//
// Whatever else ends the watch (ctx, the session's end, the stream's
// probe) cancels the watch's context, and the wait ends then, on that
// context's done channel, not when clientv3 closes the watch's channel:
// clientv3 closes it from its stream's goroutine, which sends each new
// watch request on the stream itself and so may be stuck on a connection
// that accepts nothing more. (Waiting on the channel alone would save a
// runtime wait record, 112 bytes, per waiter; it would also trust the
// silent stream.)
func watchUntil(ctx context.Context, s *Session, client *clientv3.Client, l liveness, key string, b *backoff, fn func(clientv3.WatchResponse) (bool, error), opts ...clientv3.OpOption) error {
	w, err := openWatch(ctx, s, client, l, key, opts...)
	if err != nil {
		return err
	}
	defer w.close(s)
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case wr, ok = <-w.ch:
		case <-w.done:
		}
		if !ok {
			return w.closed(ctx, s, key)
		}
		w.st.heard()
		if err := wr.Err(); err != nil {
			return err
		}
		if wr.Created {
			b.reset()
		}
		if done, err := fn(wr); done || err != nil {
			return err
		}
	}
}

// watch is an open watch of the package, listed by its stream (whose probe
// ends it if the stream goes silent) and, if it is a wait's, by its
// session (whose end ends it). It is all a waiter keeps of the package's
// liveness checks: the probe and its timer are the stream's.
type watch struct {
	ch     clientv3.WatchChan
	cancel context.CancelFunc // ends the watch: clientv3 closes ch
	done   <-chan struct{}    // closed once the watch has ended (see watchUntil)
	st     *stream
	// inStream links the watches of st that etcd is creating, then its
	// open watches; guarded by st.g.mu.
	inStream links
	// inSession links the open watches of the session whose end ends the
	// watch (see Session.addWatch); guarded by its watchMu.
	inSession links
	// deadline is when the creation of the watch is given up (UnixNano),
	// while etcd creates it; 0 once given up (see stream.create).
	// Guarded by st.g.mu.
	deadline int64
}

// links are a watch's place in a list of watches.
type links struct{ prev, next *watch }

// streamLinks and sessionLinks are w's links in its stream's lists and in
// its session's.
func streamLinks(w *watch) *links  { return &w.inStream }
func sessionLinks(w *watch) *links { return &w.inSession }

// push puts w first in the list that begins at *first, linked through
// the links of its that at returns.
func push(first **watch, w *watch, at func(*watch) *links) {
	at(w).next = *first
	if *first != nil {
		at(*first).prev = w
	}
	*first = w
}

// unlink takes w out of the list that begins at *first, linked through
// the links of its that at returns.
func unlink(first **watch, w *watch, at func(*watch) *links) {
	l := at(w)
	if l.prev != nil {
		at(l.prev).next = l.next
	} else {
		*first = l.next
	}
	if l.next != nil {
		at(l.next).prev = l.prev
	}
	*l = links{}
}

// closed is the error of a watch whose channel has closed: ctx's, the
// cause of the end of s (the session whose wait it is, if not nil),
// errNoAnswer if the stream's probe found it silent, else errWatchClosed.
func (w *watch) closed(ctx context.Context, s *Session, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s != nil && s.life.Err() != nil {
		return context.Cause(s.life)
	}
	if err := w.st.silence(); err != nil {
		return err
	}
	return fmt.Errorf("%w: %q", errWatchClosed, key)
}

// close ends the watch and takes it off its lists (that of s, the session
// it was opened for, if not nil). A nil w is left alone.
func (w *watch) close(s *Session) {
	if w == nil {
		return
	}
	if s != nil {
		s.dropWatch(w)
	}
	w.st.drop(w)
	w.cancel()
}

// requestProgress asks the watch's stream for progress, on ctx.
func (w *watch) requestProgress(ctx context.Context) {
	w.st.g.client.RequestProgress(metadata.NewOutgoingContext(ctx, w.st.md))
}

// openWatch opens a watch of key with opts (and WithCreatedNotify) on the
// client's current stream of the package (see joinStream). clientv3's Watch
// returns only once etcd has created the watch (or its context ended): on
// a silent stream, never. So openWatch waits l.wait at most; if etcd has
// not answered by then, and nobody heard from the stream within l.wait
// either, the stream is silent: it moves the client's stream on and
// returns an error matching errNoAnswer. If s is not nil, the end of the
// session's life ends the wait for the creation too, with its cause, and
// the open watch is listed by the session (see Session.endWatches).
func openWatch(ctx context.Context, s *Session, client *clientv3.Client, l liveness, key string, opts ...clientv3.OpOption) (*watch, error) {
	opts = append(opts, clientv3.WithCreatedNotify())
	for {
		st, sctx := joinStream(ctx, client)
		wctx, cancel := context.WithCancel(sctx)
		unbind := func() bool { return true }
		if s != nil {
			unbind = context.AfterFunc(s.life, cancel)
		}
		w := &watch{cancel: cancel, done: wctx.Done()}
		ch, ok := st.create(w, wctx, l.wait, key, opts...)
		ended := !unbind()
		if ok && !ended {
			w.ch = ch
			if s == nil || s.addWatch(w) {
				st.add(w, key, l)
				return w, nil
			}
			ended = true
		}
		cancel()
		err := ctx.Err()
		switch {
		case err != nil:
		case ended:
			err = context.Cause(s.life)
		case !st.heardWithin(l.wait):
			// clientv3 creates a stream's watches one at a time: behind
			// many others, a watch may wait longer than l.wait on a
			// stream that answers them. Only a stream nobody heard from
			// is silent.
			st.g.moveOn(st.key.n)
			err = fmt.Errorf("%w: etcd did not create a watch of %q within %v", errNoAnswer, key, l.wait)
		}
		st.leave()
		if err != nil {
			return nil, err
		}
	}
}

// errWatchClosed is the error of a watch whose channel closed without an
// error: the client lost its stream, and a new watch may succeed.
var errWatchClosed = errors.New("concurrency: watch closed")

// during returns a context for one step of a wait on ctx (a read, a
// sleep): it ends with ctx, or with the session's life, with its cause.
// stop releases it.
func (s *Session) during(ctx context.Context) (c context.Context, stop func()) {
	c, cancel := context.WithCancelCause(ctx)
	unbind := context.AfterFunc(s.life, func() { cancel(context.Cause(s.life)) })
	return c, func() {
		unbind()
		cancel(nil)
	}
}

// waitErr is the error that ends a wait on ctx: ctx's, then the cause of
// the session's life; nil while both go on.
func (s *Session) waitErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.life.Err() != nil {
		return context.Cause(s.life)
	}
	return nil
}

// sleep is b.sleep for a wait on ctx, cut short by the session's end too.
func (s *Session) sleep(ctx context.Context, b *backoff) bool {
	c, stop := s.during(ctx)
	defer stop()
	return b.sleep(c)
}

// getDuring is s.get for a wait on ctx, cut short by the session's end
// too.
func (s *Session) getDuring(ctx context.Context, key string) (*clientv3.GetResponse, error) {
	c, stop := s.during(ctx)
	defer stop()
	return s.get(c, key)
}

// judgeDuring is judge for a wait on ctx, cut short by the session's end
// too.
func judgeDuring(ctx context.Context, s *Session, r rule, key string, rev int64) (judgement, error) {
	c, stop := s.during(ctx)
	defer stop()
	return judge(c, s, r, key, rev)
}

// liveness is how long the package trusts a connection to etcd that says
// nothing. A connection can go silent without a reset (a NAT or firewall
// that drops its state, a host that stops answering): bytes are accepted
// and nothing comes back. clientv3's default configuration has no gRPC
// keepalive, and its round-robin balancer keeps sending every other
// request to such a connection, while the session's renewals, each
// bounded, go on succeeding through the others. So no request waits for
// more than wait without a second attempt beside it (see ask), and no
// watch trusts a stream that has said nothing for idle and then did not
// answer a progress request within wait (see probe).
type liveness struct {
	idle time.Duration // a watch that heard nothing for this long asks for progress
	wait time.Duration // how long an answer may take: a progress request's, or a request's before a second attempt (see ask)
}

// livenessFor is the liveness of a session with the given TTL: idle a
// third of it (when the session renews its lease), between 1 s and 20 s;
// wait a sixth, between 1 s and 5 s. A watch on a silent stream gives it
// up within 1.5 idle plus 2 wait (see probe): five sixths of the TTL, and
// 40 s. A session that knows no TTL (WithLease on a missing lease) counts
// the default.
func livenessFor(ttl time.Duration) liveness {
	if ttl <= 0 {
		ttl = defaultSessionTTL * time.Second
	}
	return liveness{idle: min(max(ttl/3, time.Second), 20*time.Second), wait: min(max(ttl/6, time.Second), 5*time.Second)}
}

// streamGen numbers the gRPC streams that carry the package's watches on
// one client, and holds those that have watches. clientv3 multiplexes
// every watch of a client whose context has the same outgoing metadata
// onto one stream, and keeps that stream, dead or not, while any of its
// watches lives. When a stream is found silent (by its probe, or a watch
// that etcd did not create in time) the number moves on (moveOn), so that
// the watches opened after it on that client go on a new stream, which the
// balancer places on a connection of its choosing; the probe ends the
// watches left on the silent one, and their waits open them anew.
type streamGen struct {
	client *clientv3.Client
	n      atomic.Int64 // the current stream's number

	mu      sync.Mutex // guards streams and, in each stream, what its comment says
	streams map[streamKey]*stream
}

// streamGens holds the streamGen of each client with watches of the
// package, until the client is closed.
var streamGens sync.Map // *clientv3.Client → *streamGen

// genOf returns client's streamGen.
func genOf(client *clientv3.Client) *streamGen {
	if g, ok := streamGens.Load(client); ok {
		return g.(*streamGen)
	}
	g, loaded := streamGens.LoadOrStore(client, &streamGen{client: client})
	if !loaded {
		context.AfterFunc(client.Ctx(), func() { streamGens.Delete(client) })
	}
	return g.(*streamGen)
}

// moveOn moves the client's stream on from number n, unless that was done
// already.
func (g *streamGen) moveOn(n int64) { g.n.CompareAndSwap(n, n+1) }

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
	g   *streamGen
	key streamKey
	// md is the outgoing metadata of the stream's watches: a leader
	// required (see watchUntil), the stream's number, and the caller's
	// own metadata if any. It is made once per stream and shared by its
	// watches, which neither gRPC nor clientv3 write to (a map per watch
	// cost about 550 bytes per waiter).
	md      metadata.MD
	mdCtx   context.Context // md alone, over context.Background (see streamContext)
	heardAt atomic.Int64    // when a watch of the stream last heard from it (UnixNano); 0 if none has

	// Guarded by g.mu:
	users   int    // watches open or being opened on the stream; forgotten at 0
	watches *watch // the open watches, linked by inStream
	confirm string // the key of a watch etcd created on the stream, for the probe's confirming watch
	// l is the shortest liveness of the watches opened on the stream since
	// it last had none: the probe serves the most demanding.
	l      liveness
	p      *probe // while the stream has open watches; nil otherwise
	silent error  // the probe found the stream silent: why; nil if not
	// creating are the watches etcd is creating on the stream, linked by
	// inStream; expiry gives up those past their deadline (see
	// create), armed for expiresAt (UnixNano; 0: not armed).
	creating  *watch
	expiry    *time.Timer
	expiresAt int64
}

// joinStream returns the client's current stream for ctx's outgoing metadata,
// counting one more watch being opened on it (see leave), and ctx with the
// stream's metadata.
func joinStream(ctx context.Context, client *clientv3.Client) (*stream, context.Context) {
	g := genOf(client)
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
		st = &stream{g: g, key: key, md: md, mdCtx: metadata.NewOutgoingContext(context.Background(), md)}
		if g.streams == nil {
			g.streams = make(map[streamKey]*stream)
		}
		g.streams[key] = st
	}
	st.users++
	return st, streamContext{Context: ctx, md: st.mdCtx}
}

// streamContext is ctx with the outgoing metadata of a stream of the
// package: Value answers from md, a context of that metadata alone, then
// from ctx; the rest is ctx's, so that a context derived from it is ctx's
// child as any other. It costs one small value per watch, where
// metadata.NewOutgoingContext costs a context and a wrapper of the
// metadata (80 bytes per waiter). The metadata replaces any of ctx's,
// which a stream's own includes (see joinStream).
type streamContext struct {
	context.Context
	md context.Context
}

func (c streamContext) Value(key any) any {
	if v := c.md.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// leaveLocked undoes joinStream for a watch that was not opened, or has been
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
func (st *stream) create(w *watch, wctx context.Context, wait time.Duration, key string, opts ...clientv3.OpOption) (clientv3.WatchChan, bool) {
	st.pend(w, wait)
	ch := st.g.client.Watch(wctx, key, opts...)
	return ch, st.unpend(w) && wctx.Err() == nil
}

// pend lists w among the watches being created, to be given up after
// wait.
func (st *stream) pend(w *watch, wait time.Duration) {
	st.g.mu.Lock()
	defer st.g.mu.Unlock()
	w.deadline = time.Now().Add(wait).UnixNano()
	push(&st.creating, w, streamLinks)
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
func (st *stream) unpend(w *watch) bool {
	st.g.mu.Lock()
	defer st.g.mu.Unlock()
	unlink(&st.creating, w, streamLinks)
	inTime := w.deadline != 0
	w.deadline = 0
	if st.creating == nil && st.expiresAt != 0 {
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
	for w := st.creating; w != nil; w = w.inStream.next {
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
func (st *stream) add(w *watch, key string, l liveness) {
	st.heard()
	st.g.mu.Lock()
	defer st.g.mu.Unlock()
	w.st = st
	push(&st.watches, w, streamLinks)
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
	case l.idle < st.l.idle || l.wait < st.l.wait:
		// The probe's next run comes as soon as the new liveness asks:
		// with a progress request out, once the new wait is over, not the
		// old (TestReviewWaitShorterLivenessJoinsAsked). A run in
		// progress reschedules itself with it.
		st.l = liveness{idle: min(l.idle, st.l.idle), wait: min(l.wait, st.l.wait)}
		switch p := st.p; {
		case p.running != nil:
		case p.asked.IsZero():
			p.t.Reset(p.untilAsk())
		default:
			p.t.Reset(time.Until(p.asked.Add(st.l.wait)))
		}
	}
}

// drop takes w off the stream's watches. If it was the last, it stops the
// probe and waits for a run of it in progress to end, so that the probe
// never sends a request on a stream without watches (clientv3 would open
// the stream anew for it, and keep it until the client closes).
func (st *stream) drop(w *watch) {
	st.g.mu.Lock()
	unlink(&st.watches, w, streamLinks)
	var running chan struct{}
	if st.watches == nil && st.p != nil {
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
// waits then see errNoAnswer (see watch.closed), read again and watch
// anew. A silent stream is given up within 1.5 idle + 2 wait of the last
// word heard on it. A watch that etcd is slow to create behind many
// others is not a member until created (see openWatch): creation is not
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
	return time.Until(time.Unix(0, p.st.heardAt.Load()).Add(l.idle + rand.N(l.idle/2)))
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
	if asked && st.heardAt.Load() > p.asked.UnixNano() || !asked && st.heardWithin(l.idle) {
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

	alive := false
	if !asked {
		rctx, cancel := context.WithTimeout(p.ctx, l.wait)
		err := g.client.RequestProgress(rctx)
		cancel()
		// An error with p.ctx alive: the request could not even be
		// queued on the stream.
		alive = err == nil
	} else {
		cctx, cancel := context.WithCancel(p.ctx)
		_, alive = st.create(&watch{cancel: cancel}, cctx, l.wait, key, clientv3.WithCreatedNotify())
		cancel()
		if alive {
			st.heard()
		}
	}

	// A stream heard from since the request is alive, whatever became of
	// the probe's own watch: clientv3 creates it behind the stream's other
	// creations, one at a time, and those may take longer than wait in all
	// while etcd answers each (TestReviewWaitProbeBehindCreations).
	g.mu.Lock()
	defer g.mu.Unlock()
	alive = alive || st.heardAt.Load() > p.asked.UnixNano()
	p.running = nil
	close(running)
	switch {
	case st.p != p || p.ctx.Err() != nil:
		// Stopped: the stream has no watch left.
	case alive && !asked:
		p.t.Reset(time.Until(p.asked.Add(st.l.wait)))
	case alive:
		p.asked = time.Time{}
		p.t.Reset(p.untilAsk())
	default:
		g.moveOn(st.key.n)
		st.silent = fmt.Errorf("%w: the watch stream said nothing for %v", errNoAnswer, l.idle+2*l.wait)
		for w := st.watches; w != nil; w = w.inStream.next {
			w.cancel()
		}
	}
}
