package concurrency

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// hold is one tenure of a lock or of leadership, from the moment its key
// joins the queue: while Lock or Campaign waits (pending), then from the
// read that showed the key first until Unlock, Resign, loss of its key, or
// the end of its session. Its context is what Mutex.Ctx and Election.Ctx
// hand out.
//
// A goroutine watches the key: a deletion (by anyone, or by the server with
// the lease) makes the session check its lease at once, so that a revoked
// lease ends the session within milliseconds rather than at its next
// renewal; while pending, it ends the wait with ErrSessionExpired (etcd
// #19597); once held, it ends the hold with ErrLockLost. A waiter's watch
// starts when it joins the queue, and is long in place when its turn comes.
// The watch of a hold held at once starts after watchDelay, or at the first
// call of Ctx: a short critical section (the common uncontended Lock and
// Unlock) is over before a watch could tell it anything, and pays nothing.
// The holder stops the watch before it deletes the key itself, so that only
// the next waiter hears of the delete.
type hold struct {
	s       *Session
	key     string
	rev     int64 // create revision of key: the fencing token
	seenRev int64 // the revision of the read that last saw key, 0 if unknown

	ctx    context.Context // cancelled with the cause that ended the hold
	cancel context.CancelCauseFunc
	timer  *time.Timer // starts the watch of a hold held at once, after watchDelay

	mu sync.Mutex // guards unwatchFn, ended, releasing, wait and deleted
	// unwatchFn stops the watch goroutine and waits for it; nil when none
	// runs.
	unwatchFn func()
	// No watch starts once the hold has ended, or while its holder deletes
	// the key.
	ended, releasing bool
	// wait, while the hold is pending, ends the wait.
	wait context.CancelCauseFunc
	// deleted records that the watch saw the key deleted.
	deleted bool
}

// endedCtx is the context of no hold: Mutex.Ctx before the first Lock.
var endedCtx = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrLockReleased)
	return ctx
}()

// watchDelay is how long a hold held at once goes unwatched, unless its
// context is asked for.
const watchDelay = 20 * time.Millisecond

// holdContext is what Mutex.Ctx and Election.Ctx return for h, their
// current hold, or their last one once it ended, or nil before the first.
// It makes sure the hold is watched.
func holdContext(h *hold) context.Context {
	if h == nil {
		return endedCtx
	}
	h.watch(fromNow)
	return h.ctx
}

// newHold starts a hold of key, created at rev and last seen by a read at
// seenRev (0 if unknown). A pending hold (wait not nil) is watched at once,
// from seenRev without an extra read (fromSeen): by the time its turn comes,
// the watch has long been in place. A hold held at once is watched after
// watchDelay or on demand, promptly (fromNow).
func newHold(s *Session, key string, rev, seenRev int64, wait context.CancelCauseFunc) *hold {
	h := lazyHold(s, key, rev, seenRev)
	h.wait = wait
	if wait != nil {
		h.watch(fromSeen)
	} else {
		h.timer = time.AfterFunc(watchDelay, func() { h.watch(fromNow) })
	}
	return h
}

// lazyHold is a hold that is watched only on demand (holdContext): a
// resumed leadership that nobody may ever use costs nothing until it is.
func lazyHold(s *Session, key string, rev, seenRev int64) *hold {
	// The session's cause (wrapping ErrSessionExpired) passes to the hold.
	// An orphaned session's holds go on: their watch tells when they end.
	ctx, cancel := context.WithCancelCause(s.life)
	return &hold{s: s, key: key, rev: rev, seenRev: seenRev, ctx: ctx, cancel: cancel}
}

// watch starts the goroutine that watches the key, unless it runs already,
// the hold has ended, or its holder is deleting the key.
func (h *hold) watch(from start) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unwatchFn != nil || h.ended || h.releasing {
		return
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	h.unwatchFn = func() {
		cancel()
		<-done
	}
	go h.watchKey(ctx, from, done)
}

// unwatch stops the watch goroutine, if it runs, and waits for it.
func (h *hold) unwatch() {
	h.mu.Lock()
	stop := h.unwatchFn
	h.unwatchFn = nil
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (h *hold) watchKey(ctx context.Context, from start, done chan<- struct{}) {
	defer close(done)
	seenRev := h.seenRev
	for ctx.Err() == nil {
		// waitDelete outlasts lost connections and leaderless members; it
		// fails only on a refusal (permission denied) that may yet pass:
		// try again, until the key goes or the hold ends. The session's
		// deadline bounds how long a hold can outlive a dead connection.
		err := waitDelete(ctx, h.s.client, h.key, h.rev, seenRev, from)
		if err == nil {
			h.lost()
			return
		}
		if !sleepCtx(ctx, retryInterval) {
			return
		}
		seenRev, from = 0, fromNow
	}
}

// lost reacts to the deletion of the hold's key: it ends the wait of a
// pending hold, or ends a held one with ErrLockLost, and has the session
// check its lease.
func (h *hold) lost() {
	h.s.check()
	h.mu.Lock()
	h.deleted = true
	wait := h.wait
	h.mu.Unlock()
	if wait != nil {
		wait(fmt.Errorf("%w: key %q was deleted while waiting", ErrSessionExpired, h.key))
		return
	}
	h.cancel(fmt.Errorf("%w: key %q was deleted", ErrLockLost, h.key))
}

// held turns a pending hold into a held one, after the read that showed
// its key first. A deletion seen meanwhile ends it at once.
func (h *hold) held() {
	h.mu.Lock()
	h.wait = nil
	deleted := h.deleted
	h.mu.Unlock()
	if deleted {
		h.cancel(fmt.Errorf("%w: key %q was deleted", ErrLockLost, h.key))
	}
}

// release deletes the hold's key, if it is still this hold's, and ends the
// hold: with ErrLockReleased, or with ErrLockLost if the key was already
// gone. The delete is retried while etcd is unreachable or has no leader,
// until ctx ends. If it fails while the session lives, the hold goes on,
// watched again, and release returns the error with ended false: the
// caller may retry. Once the session has ended, the hold ends anyway (its
// key goes with the lease) and the error is returned with ended true. The
// caller serialises calls to release.
func (h *hold) release(ctx context.Context) (ended bool, err error) {
	h.mu.Lock()
	h.releasing = true
	h.mu.Unlock()
	h.unwatch()
	var deleted bool
	err = retry(ctx, func() (err error) {
		deleted, err = deleteRev(ctx, h.s.client, h.key, h.rev)
		return err
	})
	switch {
	case err != nil && h.s.life.Err() == nil:
		h.mu.Lock()
		h.releasing = false
		h.mu.Unlock()
		h.watch(fromNow)
		return false, err
	case err != nil:
		h.end(context.Cause(h.s.life))
	case deleted:
		h.end(ErrLockReleased)
	default:
		h.end(fmt.Errorf("%w: key %q was gone before the release", ErrLockLost, h.key))
	}
	return true, err
}

// end cancels the hold with cause and stops its watch.
func (h *hold) end(cause error) {
	h.cancel(cause)
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Lock()
	h.ended = true
	h.mu.Unlock()
	h.unwatch()
}
