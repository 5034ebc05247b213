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
// A goroutine watches the key from the start: a deletion (by anyone, or by
// the server with the lease) makes the session check its lease at once, so
// that a revoked lease ends the session within milliseconds rather than at
// its next renewal; while pending, it ends the wait with ErrSessionExpired
// (etcd #19597); once held, it ends the hold with ErrLockLost. A waiter's
// watch is established long before its turn comes, so a hold costs no
// watch of its own.
type hold struct {
	s   *Session
	key string
	rev int64 // create revision of key: the fencing token

	ctx    context.Context // cancelled with the cause that ended the hold
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the watch goroutine returns

	mu sync.Mutex // guards wait, releasing and deleted
	// wait, while the hold is pending, ends the wait.
	wait context.CancelCauseFunc
	// releasing is set while the holder itself deletes the key (Unlock,
	// Resign): a deletion that the watch sees meanwhile may be the release's
	// own, so the watch only records it in deleted, and the release decides.
	releasing, deleted bool
}

// endedCtx is the context of no hold: Mutex.Ctx before the first Lock.
var endedCtx = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrLockReleased)
	return ctx
}()

// holdContext is what Mutex.Ctx and Election.Ctx return for h, their
// current hold, or their last one once it ended, or nil before the first.
func holdContext(h *hold) context.Context {
	if h == nil {
		return endedCtx
	}
	return h.ctx
}

// newHold starts a hold of key, created at rev and last seen by a read at
// seenRev (0 if unknown), and the goroutine that watches the key. A pending
// hold (wait not nil) watches from seenRev without an extra read (fromSeen):
// by the time its turn comes, the watch has long been in place. A hold that
// is held at once watches promptly (fromNow).
func newHold(s *Session, key string, rev, seenRev int64, wait context.CancelCauseFunc) *hold {
	// The session's cause (wrapping ErrSessionExpired) passes to the hold.
	ctx, cancel := context.WithCancelCause(s.ctx)
	h := &hold{s: s, key: key, rev: rev, ctx: ctx, cancel: cancel, done: make(chan struct{}), wait: wait}
	from := fromNow
	if wait != nil && seenRev > 0 {
		from = fromSeen
	}
	go h.watch(seenRev, from)
	return h
}

func (h *hold) watch(seenRev int64, from start) {
	defer close(h.done)
	for h.ctx.Err() == nil {
		err := waitDelete(h.ctx, h.s.client, h.key, h.rev, seenRev, from)
		if err == nil {
			h.lost()
			return
		}
		// Watching failed (no leader, connection lost): try again until the
		// key goes or the hold ends; the session's deadline bounds how long
		// a hold can outlive a dead connection.
		if !sleepCtx(h.ctx, retryInterval) {
			return
		}
		resp, err := h.s.client.Get(h.ctx, h.key)
		if err == nil {
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != h.rev {
				h.lost()
				return
			}
			seenRev, from = resp.Header.Revision, fromSeen
		}
	}
}

// lost reacts to the deletion of the hold's key: it ends the wait of a
// pending hold, or ends a held one with ErrLockLost, and has the session
// check its lease. During a release it only records the deletion.
func (h *hold) lost() {
	h.s.check()
	h.mu.Lock()
	h.deleted = true
	wait, releasing := h.wait, h.releasing
	h.mu.Unlock()
	switch {
	case wait != nil:
		wait(fmt.Errorf("%w: key %q was deleted while waiting", ErrSessionExpired, h.key))
	case !releasing:
		h.cancel(fmt.Errorf("%w: key %q was deleted", ErrLockLost, h.key))
	}
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
// gone. If the delete fails, the hold goes on (the caller may retry)
// unless the watch saw the key go meanwhile, and the error is returned.
// The caller serialises calls to release.
func (h *hold) release(ctx context.Context) error {
	h.mu.Lock()
	h.releasing = true
	h.mu.Unlock()
	deleted, err := deleteRev(ctx, h.s.client, h.key, h.rev)
	if err != nil {
		h.mu.Lock()
		h.releasing = false
		seen := h.deleted
		h.mu.Unlock()
		if seen {
			h.cancel(fmt.Errorf("%w: key %q was deleted", ErrLockLost, h.key))
		}
		return err
	}
	if deleted {
		h.end(ErrLockReleased)
	} else {
		h.end(fmt.Errorf("%w: key %q was gone before the release", ErrLockLost, h.key))
	}
	return nil
}

// end cancels the hold with cause and waits for its watch to stop.
func (h *hold) end(cause error) {
	h.cancel(cause)
	<-h.done
}

// sleepCtx waits for d or for ctx to end, and reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
