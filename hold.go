package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// hold is one tenure of a lock or of leadership, from the read that showed
// its key first until Unlock, Resign, loss of its key, or the end of its
// session. Its context is what Mutex.Ctx and Election.Ctx hand out.
//
// A hold costs nothing on the server until its context is asked for (Ctx,
// Do): then a goroutine watches the key, so that a deletion (by anyone, or
// by the server with the lease) ends the hold with ErrLockLost within
// milliseconds and makes the session check its lease at once, so that a
// revoked lease also ends the session. A hold whose context nobody asks for
// has nobody to tell; its session still ends at its next renewal if the
// lease is gone, and its guarded writes (Txn) fail. So a fleet of holders
// that only Lock and Unlock keeps no watcher on the server, as with etcd's
// package. The holder stops the watch before it deletes the key itself, so
// that only the next waiter hears of the delete.
type hold struct {
	s       *Session
	key     string
	rev     int64            // create revision of key: the fencing token
	lease   clientv3.LeaseID // the lease key is on: the session's, or its own with a max hold (see bound)
	delayed string           // the name's lock-delay record, once this hold wrote it (see delayGrant); "" if not
	seenRev int64            // the revision of the read that last saw key, 0 if unknown
	// mod is the mod revision of key as this hold last wrote or read it,
	// 0 if unknown: a value write (Proclaim) is applied only if the key
	// still has it (see Session.setIfRev). Set before the hold is shared,
	// then by Proclaim, which its Election serialises.
	mod   int64
	hdr   *pb.ResponseHeader // of the read that showed the key held (Mutex.Header); set before the hold is shared
	del   deletion           // of key (see deletionOf), from the key's operations; none: made by release
	since time.Time

	// ctx is cancelled with the cause that ended the hold (see context):
	// made on first use, so that a hold whose context nobody asks for
	// makes none (2 allocations per Lock, issue 52); until then, cause is
	// the cause that ended the hold, if it has ended.
	ctxMu  sync.Mutex // guards ctx, cancel and cause
	ctx    context.Context
	cancel context.CancelCauseFunc
	cause  error

	// Set by the acquisition before the hold is shared: the kind of lock
	// (for traces), and with metrics or traces what records the end (see
	// observe).
	kind    string
	obs     *holdObs
	stopObs func() bool

	mu sync.Mutex // guards unwatchFn, unpromoteFn, wanted, ended and releasing
	// unwatchFn stops the watch goroutine and waits for it; nil when none
	// runs.
	unwatchFn func()
	// unpromoteFn stops the promote goroutine and waits for it; nil when
	// none runs.
	unpromoteFn func()
	// wanted: the context was asked for, so the hold is watched.
	wanted bool
	// No watch starts once the hold has ended, or while its holder deletes
	// the key.
	ended, releasing bool
}

// endedCtx is the context of no hold: Mutex.Ctx before the first Lock.
var endedCtx = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrLockReleased)
	return ctx
}()

// holdContext is what Mutex.Ctx and Election.Ctx return for h, their
// current hold, or their last one once it ended, or nil before the first.
// It makes sure the hold is watched.
func holdContext(h *hold) context.Context {
	if h == nil {
		return endedCtx
	}
	h.mu.Lock()
	h.wanted = true
	h.mu.Unlock()
	h.watch()
	return h.context()
}

// newHold starts a hold of key, created at rev and last seen by a read at
// seenRev (0 if unknown). It is watched only once its context is asked for.
func newHold(s *Session, key string, rev, seenRev int64) *hold {
	return &hold{s: s, key: key, rev: rev, seenRev: seenRev, lease: s.id, since: time.Now()}
}

// context returns the hold's context, made on first use: cancelled with
// the cause that ends the hold or, if the session's life ends first, with
// the session's cause (wrapping ErrSessionExpired): an orphaned session's
// holds go on, and their watch tells when they end.
func (h *hold) context() context.Context {
	h.ctxMu.Lock()
	defer h.ctxMu.Unlock()
	if h.ctx != nil {
		return h.ctx
	}
	if h.cause == nil {
		h.ctx, h.cancel = context.WithCancelCause(h.s.life)
		return h.ctx
	}
	// Ended already: with the session's values, and the cause it ended
	// with.
	h.ctx, h.cancel = context.WithCancelCause(context.WithoutCancel(h.s.life))
	h.cancel(h.cause)
	return h.ctx
}

// bound limits the hold to d (see WithMaxHold): it grants a lease of its
// own with a TTL of d rounded up to whole seconds, moves the key to it
// (same create revision, value and place), and ends the hold with
// ErrMaxHold at the grant's send time plus d less a margin, before etcd
// can expire the lease. Whenever the hold ends, for whatever reason, the
// lease is revoked in the background, bounded by cleanupTimeout: that
// deletes the key if it is still on it. On error the hold has not begun:
// the caller ends it and deletes the key; a lease granted is revoked.
func (h *hold) bound(ctx context.Context, d time.Duration) error {
	s := h.s
	sent := time.Now()
	lease, err := s.grantFor(ctx, d)
	if err != nil {
		return err
	}
	if !s.startSettling() {
		s.revoke(lease) // Close has begun: nobody would wait for a goroutine
		return context.Cause(s.life)
	}
	context.AfterFunc(h.context(), func() {
		defer s.settling.Done()
		s.revoke(lease)
	})
	// Applied twice, the move puts the key on the same lease again; applied
	// after the hold ended, it finds the key gone or on a revoked lease.
	resp, _, err := h.ifHeld(ctx, "its max hold began", clientv3.OpPut(h.key, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease)))
	if err != nil {
		return err
	}
	h.lease, h.mod = lease, resp.Header.Revision
	at := sent.Add(d - min(d/10, time.Second))
	t := time.AfterFunc(time.Until(at), func() {
		h.finish(fmt.Errorf("%w: %v: key %q on lease %x", ErrMaxHold, d, h.key, int64(lease)))
	})
	context.AfterFunc(h.context(), func() { t.Stop() })
	return nil
}

// watch starts the goroutine that watches the key (and, WithYield, the
// one that watches for yield requests), if the context was asked for, unless it runs already, the hold has ended, or its holder is
// deleting the key.
func (h *hold) watch() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.wanted || h.unwatchFn != nil || h.ended || h.releasing {
		return
	}
	stopKey := h.start(h.watchKey)
	h.unwatchFn = stopKey
	if h.s.opts.yield {
		stopYield := h.start(h.watchYield)
		h.unwatchFn = func() {
			stopKey()
			stopYield()
		}
	}
}

// ifHeld applies ops in one transaction if the hold's key is still the
// one it holds (its create revision), asked as ask does (ops must be
// harmless applied twice, or late: after the hold ended, the comparison
// fails), and returns the response and the number of attempts sent. A
// key that is gone gives an error matching ErrSessionExpired that says it
// went before what.
func (h *hold) ifHeld(ctx context.Context, what string, ops ...clientv3.Op) (*clientv3.TxnResponse, int, error) {
	resp, sent, err := sessionAsk(ctx, h.s, request.Write, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return h.s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)).
			Then(ops...).
			Commit()
	})
	if err != nil {
		return nil, sent, err
	}
	if !resp.Succeeded {
		h.s.check()
		return nil, sent, fmt.Errorf("%w: key %q was deleted before %s", ErrSessionExpired, h.key, what)
	}
	return resp, sent, nil
}

// start runs fn in a goroutine of the hold, on a context that ends with
// the hold, and returns what stops it and waits for it.
func (h *hold) start(fn func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(h.context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// stopped takes the stop function in *fn (unwatchFn or unpromoteFn) and
// calls it, if there is one: the goroutine has stopped when it returns.
func (h *hold) stopped(fn *func()) {
	h.mu.Lock()
	stop := *fn
	*fn = nil
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// unwatch stops the watch goroutine, if it runs, and waits for it.
func (h *hold) unwatch() { h.stopped(&h.unwatchFn) }

func (h *hold) watchKey(ctx context.Context) {
	seenRev := h.seenRev
	var b backoff
	for ctx.Err() == nil {
		// waitDelete outlasts lost connections and leaderless members; it
		// fails only on a refusal (permission denied) that may yet pass:
		// try again, until the key goes or the hold ends. The session's
		// deadline bounds how long a hold can outlive a dead connection.
		if err := waitDelete(ctx, h.s, target{key: h.key, create: h.rev}, seenRev, &b); err == nil {
			if ctx.Err() == nil {
				h.lost()
			}
			return
		}
		if !request.SleepCtx(ctx, request.RetryInterval) {
			return
		}
		seenRev = 0
	}
}

// promote starts the goroutine that tells the waiter behind the key, which
// watches it (see target), that the key now holds after a wait: it gives
// the key a new revision without changing its value or lease. With limit
// > 1 that waiter may now be the first, whose turn comes with any holder's
// deletion rather than with this key's. The grant does not wait for it;
// it is retried, with a growing backoff, until it is applied or the hold
// ends (then the key's deletion wakes the waiter anyway), so that a failed
// attempt costs the waiter latency, never an unbounded wait. An attempt
// applied twice only wakes the waiter twice, which reads and waits again;
// applied after the hold ended, it finds the key gone or another's.
func (h *hold) promote() {
	stop := h.start(func(ctx context.Context) {
		var b backoff
		for {
			actx, cancel := context.WithTimeout(ctx, cleanupTimeout)
			_, err := h.s.client.Txn(actx).
				If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)).
				Then(clientv3.OpPut(h.key, "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())).
				Commit()
			cancel()
			if err == nil || !b.Sleep(ctx) {
				return
			}
		}
	})
	h.mu.Lock()
	h.unpromoteFn = stop
	h.mu.Unlock()
}

// unpromote stops the promote goroutine, if it runs, and waits for it.
func (h *hold) unpromote() { h.stopped(&h.unpromoteFn) }

// lost ends the hold with ErrLockLost after its key was deleted, and has
// the session check its lease. With metrics on, it first asks etcd, in one
// round trip bounded by 1 s, whether the key's lease (the session's, or
// the max hold's own) is still there, so that the cause (and the
// holds_ended_total label) says when the key went with its lease rather
// than by a delete; without, it ends the hold at once.
func (h *hold) lost() {
	cause := fmt.Errorf("%w: key %q was deleted", ErrLockLost, h.key)
	h.s.check()
	if h.s.ins == nil {
		h.finish(cause) // at once: nobody asks why
		return
	}
	// With metrics, the cause label says whether the lease went with the
	// key: one bounded lookup, before the context ends.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.context()), min(h.s.renewTimeout(), time.Second))
	resp, err := h.s.client.TimeToLive(ctx, h.lease)
	cancel()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) || err == nil && resp.TTL < 0 {
		cause = fmt.Errorf("%w: key %q was deleted with its lease: lease %x %w", ErrLockLost, h.key, int64(h.lease), errLeaseLost)
	}
	h.finish(cause)
}

// observe has obs, if not nil, record the end of the hold: at finish, or,
// if the session's end cancels the hold's context first, then.
func (h *hold) observe(obs *holdObs) {
	if obs == nil {
		return
	}
	h.obs = obs
	ctx := h.context()
	h.stopObs = context.AfterFunc(ctx, func() { obs.ended(time.Since(h.since), context.Cause(ctx)) })
}

// finish cancels the hold's context with cause (or, if none is made yet,
// keeps cause for it: see context) and, with metrics, records the end
// first, so that whoever sees the context end sees the metrics too. A
// hold that ends with its session instead is recorded by the function
// that stopObs stops. The first cause is kept.
func (h *hold) finish(cause error) {
	if h.stopObs != nil && h.stopObs() {
		if ctx := h.context(); ctx.Err() != nil {
			cause = context.Cause(ctx) // the session ended first
		}
		h.obs.ended(time.Since(h.since), cause)
	}
	h.ctxMu.Lock()
	defer h.ctxMu.Unlock()
	switch {
	case h.ctx != nil:
		h.cancel(cause)
	case h.cause != nil:
	case h.s.life.Err() != nil:
		h.cause = context.Cause(h.s.life) // the session ended first, as a context made from its life says
	default:
		h.cause = cause
	}
}

// release deletes the hold's key, if it is still this hold's, and ends the
// hold: with ErrLockReleased, or with ErrLockLost if the key was already
// gone. The delete is retried while etcd is unreachable or has no leader,
// until ctx ends; a key found gone after an attempt whose outcome is
// unknown was most likely deleted by that attempt, and ends the hold with
// ErrLockReleased. If it fails while the session lives, the hold goes on,
// watched again if it was, and release returns the error with ended false: the
// caller may retry. Once the session has ended, the hold ends anyway (its
// key goes with the lease) and the error is returned with ended true. The
// caller serialises calls to release.
func (h *hold) release(ctx context.Context) (ended bool, err error) {
	if span := h.s.ins.startRelease(ctx, h.kind, h.key, h.rev); span != nil {
		defer func() { endRelease(span, ended, err, context.Cause(h.context())) }()
	}
	h.mu.Lock()
	h.releasing = true
	h.mu.Unlock()
	h.unwatch()
	h.unpromote()
	d := h.del
	if also := append(h.markReleased(), h.unasked()...); len(also) > 0 || d.ops == nil {
		d = deletionOf(h.key, also...)
	}
	var deleted, unsure bool
	err = request.Retry(ctx, func() (err error) {
		deleted, err = h.s.deleteRev(ctx, d, h.rev)
		unsure = unsure || err != nil
		return err
	})
	switch {
	case err != nil && h.s.life.Err() == nil:
		h.mu.Lock()
		h.releasing = false
		h.mu.Unlock()
		h.watch()
		return false, err
	case err != nil:
		h.end(context.Cause(h.s.life))
	case deleted || unsure:
		h.end(ErrLockReleased)
	default:
		h.end(fmt.Errorf("%w: key %q was gone before the release", ErrLockLost, h.key))
	}
	return true, err
}

// end cancels the hold with cause and stops its watch.
func (h *hold) end(cause error) {
	h.finish(cause)
	h.mu.Lock()
	h.ended = true
	h.mu.Unlock()
	h.unwatch()
	h.unpromote()
}
