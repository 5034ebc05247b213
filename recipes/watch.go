package recipes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-a9d410c6/concurrency"
)

// WaitEvents waits, from revision rev, for the events evs on key, in that
// order (others in between are skipped), and returns the last one. It
// blocks until they have happened; see WaitEventsContext.
func WaitEvents(c *clientv3.Client, key string, rev int64, evs []mvccpb.Event_EventType) (*clientv3.Event, error) {
	return WaitEventsContext(context.Background(), c, key, rev, evs)
}

// WaitPrefixEvents is WaitEvents on every key with the prefix.
func WaitPrefixEvents(c *clientv3.Client, prefix string, rev int64, evs []mvccpb.Event_EventType) (*clientv3.Event, error) {
	return WaitPrefixEventsContext(context.Background(), c, prefix, rev, evs)
}

// WaitEventsContext is WaitEvents that returns ctx's error when ctx ends.
// A watch that the server ends (a member that lost its leader, a
// restart) is resumed from the revision after the last one seen, so no
// event is missed or taken twice; if that revision has been compacted, it
// returns an error matching rpctypes.ErrCompacted; other errors that end
// the watch (permissions, a closed client) are returned too. A watch
// that hears nothing for 5 s asks its stream for progress, and is resumed
// anew if no word comes within 5 s more (a half-open connection, which
// clientv3 without keepalive never notices). With no events it returns
// (nil, nil) at once.
func WaitEventsContext(ctx context.Context, c *clientv3.Client, key string, rev int64, evs []mvccpb.Event_EventType) (*clientv3.Event, error) {
	return waitEvents(ctx, c, key, rev, evs)
}

// WaitPrefixEventsContext is WaitEventsContext on every key with the
// prefix.
func WaitPrefixEventsContext(ctx context.Context, c *clientv3.Client, prefix string, rev int64, evs []mvccpb.Event_EventType) (*clientv3.Event, error) {
	return waitEvents(ctx, c, prefix, rev, evs, clientv3.WithPrefix())
}

// waitEvents is WaitEvents' watch loop: it watches key (with opts) from
// rev until evs have been seen in order, ctx ends, or the revision to
// resume from is compacted. It has no state to read, so a silent stream
// is found out by a progress request instead (see askProgress).
func waitEvents(ctx context.Context, c *clientv3.Client, key string, rev int64, evs []mvccpb.Event_EventType, opts ...clientv3.OpOption) (*clientv3.Event, error) {
	if c == nil {
		return nil, ErrNilClient
	}
	if len(evs) == 0 {
		return nil, nil
	}
	w := eventWait{c: c, evs: evs, rev: rev}
	backoff := 10 * time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		wc, cancel, g, ok := openWatch(ctx, c, key, append([]clientv3.OpOption{clientv3.WithRev(w.rev)}, opts...)...)
		if !ok {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			continue // on a new stream
		}
		ev, werr := w.watch(wc, g)
		cancel()
		if ev != nil {
			return ev, nil
		}
		if werr != nil && !errors.Is(werr, rpctypes.ErrNoLeader) {
			// Compacted, or refused (permissions): retrying cannot help.
			return nil, werr
		}
		if err := c.Ctx().Err(); err != nil {
			return nil, fmt.Errorf("recipes: %w: %w", concurrency.ErrClientClosed, err)
		}
		// The watch ended without the events: ctx ended, or the member
		// lost its leader. Resume after a short pause.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

// eventWait is what waitEvents keeps from one watch to the next: the
// events awaited, how many of them have been seen, and the revision to
// resume from.
type eventWait struct {
	c   *clientv3.Client
	evs []mvccpb.Event_EventType
	i   int   // evs[:i] have been seen, in order
	rev int64 // the revision after the last event seen
}

// watch is one watch of waitEvents, on wc, opened on stream g: it returns
// the last event once every event awaited has been seen, and otherwise
// (nil, err) when the watch ends: err is rpctypes.ErrCompacted if the
// revision to resume from was compacted, the watch's error if it failed,
// and nil if it closed or its stream went silent. A stream that says
// nothing for recheckInterval is asked for progress; if it says nothing
// for readTimeout more, it is taken for dead (a half-open connection) and
// moved on, so that the watch is resumed anew.
func (w *eventWait) watch(wc recipeWatch, g int64) (*clientv3.Event, error) {
	quiet := time.NewTimer(recheckInterval)
	defer quiet.Stop()
	asked := false
	for {
		select {
		case wr, ok := <-wc.ch:
			if !ok {
				return nil, nil
			}
			quiet.Reset(recheckInterval)
			asked = false
			if wr.CompactRevision != 0 {
				return nil, rpctypes.ErrCompacted
			}
			for _, ev := range wr.Events {
				w.rev = ev.Kv.ModRevision + 1
				if ev.Type == w.evs[w.i] {
					if w.i++; w.i == len(w.evs) {
						return ev, nil
					}
				}
			}
			if err := wr.Err(); err != nil {
				return nil, err
			}
		case <-quiet.C:
			if asked {
				streamGen.CompareAndSwap(g, g+1) // silent: watch on a new stream
				return nil, nil
			}
			asked = true
			askProgress(wc.ctx, w.c)
			quiet.Reset(readTimeout)
		}
	}
}

// The waits of the recipes (a Barrier's, a Dequeue's on an empty queue, a
// DoubleBarrier's) go through await: a read of the state waited for, then
// a watch from the revision after it, and the read again whenever the
// watch cannot say what happened. The read alone decides, so a wait ends
// when the thing it waits for has happened, however the watch fared:
//   - a watch that resumes into a compacted revision (the client lost its
//     connection while other keys were written and the history compacted)
//     reads again instead of failing;
//   - a key released and taken again while the watch was away is told from
//     the one first seen by its create revision, as the core's wait does;
//   - a watch whose connection went silent (half-open: bytes accepted,
//     nothing back, which clientv3 without keepalive never notices) is
//     backed by a read every recheckInterval, each with a deadline, which
//     the client may send to another endpoint.
//
// This is the one place where the recipes watch and re-read; it can move
// onto the core's liveness check of the watch stream when that is exported.

// recheckInterval is how often a wait reads again what it waits for while
// its watch delivers nothing. It bounds how long a wait can miss an event
// that a silent connection did not deliver: once an endpoint answers, the
// wait ends within recheckInterval plus a read.
const recheckInterval = 5 * time.Second

// readTimeout bounds each read of a wait, so that a read sent on a dead
// connection gives way to the next one.
const readTimeout = 5 * time.Second

// probe reads the state a wait waits for, and reports whether the wait is
// over, and the revision of the read: the watch starts after it.
type probe func(ctx context.Context) (over bool, rev int64, err error)

// await blocks until read reports the wait over, an event of the watch on
// key (with opts) makes wake report it over, or ctx ends; see the comment
// above. It returns ctx.Err() when ctx ends, a read's or a watch's error
// that waiting cannot fix (a closed client, permissions), or nil.
func await(ctx context.Context, c *clientv3.Client, key string, wake func(*clientv3.Event) bool, read probe, opts ...clientv3.OpOption) error {
	if c == nil {
		return ErrNilClient
	}
	var b retry
	for {
		over, rev, err := readOnce(ctx, c, read)
		if err != nil {
			if !retryable(ctx, c, err) {
				return waitErr(ctx, c, err)
			}
			if !b.sleep(ctx) {
				return ctx.Err()
			}
			continue
		}
		if over {
			return nil
		}
		over, err = watchFrom(ctx, c, key, rev, wake, read, opts)
		if over || err != nil {
			return err
		}
		// The watch ended without an answer: read again, after a pause if
		// the watch failed at once (no leader, no connection).
		if !b.sleep(ctx) {
			return ctx.Err()
		}
	}
}

// watchFrom watches key for what happened after revision seen, which
// read saw last, until an event makes wake report the wait over, or a
// read every recheckInterval does; it returns (false, nil) when the watch
// ends without either (compaction, no leader, a lost stream) or a read
// fails, for await to read and watch again.
//
// The watch starts at the server's current revision, not at seen+1, as
// the core's waits do: etcd answers a progress request only once every
// watch of a stream has reached its start revision, so a watch waiting
// for a revision not yet written would leave the core's liveness probes
// of a stream it shares unanswered. If the watch began past seen, what
// was written in between is read instead; events at or before seen (a
// member that lags replays them) are skipped.
func watchFrom(ctx context.Context, c *clientv3.Client, key string, seen int64, wake func(*clientv3.Event) bool, read probe, opts []clientv3.OpOption) (bool, error) {
	w, cancel, _, ok := openWatch(ctx, c, key, append([]clientv3.OpOption{clientv3.WithCreatedNotify()}, opts...)...)
	if !ok {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		return false, nil // await reads, and watches again on a new stream
	}
	defer cancel()
	wc := w.ch
	tick := time.NewTicker(recheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-tick.C:
			if over, err := reread(ctx, c, read); err != errGoOn {
				return over, err
			}
		case wr, ok := <-wc:
			if !ok {
				return false, nil
			}
			if wr.CompactRevision != 0 {
				return false, nil // the read tells what the watch cannot
			}
			if wr.Created && wr.Header.Revision > seen {
				if over, err := reread(ctx, c, read); err != errGoOn {
					return over, err
				}
			}
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision > seen && wake(ev) {
					return true, nil
				}
			}
			if err := wr.Err(); err != nil {
				if retryable(ctx, c, err) {
					return false, nil
				}
				return false, waitErr(ctx, c, err)
			}
		}
	}
}

// reread is a read of watchFrom: it reports whether read found the wait
// over, errGoOn if it did not, and (false, nil) if the read found no
// answer (a dead connection?), so that watchFrom's caller watches anew,
// which may go to another endpoint; or the error that waiting cannot fix.
func reread(ctx context.Context, c *clientv3.Client, read probe) (bool, error) {
	over, _, err := readOnce(ctx, c, read)
	if err != nil {
		if !retryable(ctx, c, err) {
			return false, waitErr(ctx, c, err)
		}
		return false, nil
	}
	if !over {
		return false, errGoOn
	}
	return true, nil
}

// streamGen numbers the gRPC stream that carries the recipes' watches
// (clientv3 puts every watch whose context has the same metadata on one
// stream, and keeps it, dead or not, while one of them lives): a watch
// that finds its stream silent moves it on, so that the next go on a new
// stream, which the balancer may place on another connection.
var streamGen atomic.Int64

// recipeWatch is an open watch and the context it runs on.
type recipeWatch struct {
	ch  clientv3.WatchChan
	ctx context.Context
}

// openWatch opens a watch of key on the current stream, requiring a
// leader. clientv3's Watch returns only once etcd has created the watch,
// on a silent stream never: openWatch waits readTimeout at most, and
// then moves the stream on and reports false. It returns what ends the
// watch and the stream's number.
func openWatch(ctx context.Context, c *clientv3.Client, key string, opts ...clientv3.OpOption) (recipeWatch, context.CancelFunc, int64, bool) {
	g := streamGen.Load()
	wctx := metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), "concurrency-recipes-stream", strconv.FormatInt(g, 10))
	wctx, cancel := context.WithCancel(wctx)
	t := time.AfterFunc(readTimeout, cancel)
	ch := c.Watch(wctx, key, opts...)
	if t.Stop() && wctx.Err() == nil {
		return recipeWatch{ch: ch, ctx: wctx}, cancel, g, true
	}
	cancel()
	if ctx.Err() == nil {
		streamGen.CompareAndSwap(g, g+1)
	}
	return recipeWatch{}, nil, g, false
}

// askProgress asks the watch stream of wctx for a progress notification,
// bounded by readTimeout: the answer (or any event) shows that the stream
// is alive. etcd answers only once every watch of the stream has reached
// its start revision, so a watch from a revision not yet written goes
// unanswered and is resumed anew every recheckInterval+readTimeout, which
// costs one watch request.
func askProgress(wctx context.Context, c *clientv3.Client) {
	pctx, cancel := context.WithTimeout(wctx, readTimeout)
	defer cancel()
	_ = c.RequestProgress(pctx) // no answer is what the caller watches for
}

// errGoOn says that a read inside watchFrom found the wait not over.
var errGoOn = errors.New("recipes: go on waiting")

// readOnce runs read with a deadline of readTimeout.
//
// Within it, each attempt waits half to all of readAttempt (at random, so
// that attempts do not keep step with the client's other requests) and
// one not answered is sent again: the client's round-robin balancer sends
// it to the next connection, so a read that went to a connection that
// went silent without a reset is answered by another within a second or
// two, not after readTimeout.
func readOnce(ctx context.Context, c *clientv3.Client, read probe) (bool, int64, error) {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	for {
		actx, cancelAttempt := context.WithTimeout(rctx, readAttempt/2+rand.N(readAttempt/2+1))
		over, rev, err := read(actx)
		late := actx.Err() != nil
		cancelAttempt()
		if err == nil || !late || rctx.Err() != nil || c.Ctx().Err() != nil {
			return over, rev, err
		}
	}
}

// readAttempt bounds one attempt of a read (see readOnce).
const readAttempt = time.Second

// retryable reports whether a wait that got err may go on: ctx and the
// client are alive, and err is a read's own deadline or a failure that
// etcd or the connection can recover from (no leader, unavailable).
func retryable(ctx context.Context, c *clientv3.Client, err error) bool {
	if ctx.Err() != nil || c.Ctx().Err() != nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrNoLeader) {
		return true // the read's own deadline, or a member without a leader
	}
	var ee rpctypes.EtcdError
	code := status.Code(err)
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	return code == codes.Unavailable || code == codes.ResourceExhausted
}

// waitErr is the error a wait returns for err: ctx's when ctx has ended,
// and one matching concurrency.ErrClientClosed and context.Canceled when
// the client was closed.
func waitErr(ctx context.Context, c *clientv3.Client, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if cerr := c.Ctx().Err(); cerr != nil {
		return fmt.Errorf("recipes: %w: %w", concurrency.ErrClientClosed, cerr)
	}
	return err
}

// retry is a pause between failed attempts of a wait, doubling from 10 ms
// to 1 s. The zero value is ready to use.
type retry struct{ d time.Duration }

// sleep waits for the pause or for ctx's end, and reports whether the
// pause passed.
func (r *retry) sleep(ctx context.Context) bool {
	r.d = min(max(2*r.d, 10*time.Millisecond), time.Second)
	t := time.NewTimer(r.d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// waitGone waits until key is deleted, or replaced by a key with another
// create revision than create (0: the one the first read finds). It
// returns at once if the key does not exist.
func waitGone(ctx context.Context, c *clientv3.Client, key string, create int64) error {
	return await(ctx, c, key,
		func(ev *clientv3.Event) bool { return ev.Type == mvccpb.DELETE },
		func(ctx context.Context) (bool, int64, error) {
			resp, err := c.Get(ctx, key)
			if err != nil {
				return false, 0, err
			}
			if len(resp.Kvs) == 0 {
				return true, resp.Header.Revision, nil
			}
			if create == 0 {
				create = resp.Kvs[0].CreateRevision
			}
			return resp.Kvs[0].CreateRevision != create, resp.Header.Revision, nil
		})
}
