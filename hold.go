package concurrency

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// hold is one tenure of a lock or of leadership: from the moment it was
// acquired until Unlock, Resign, loss of its key, or the end of its session.
// Its context is what Mutex.Ctx and Election.Ctx hand out.
type hold struct {
	s   *Session
	key string
	rev int64 // create revision of key: the fencing token
	// seenRev is the revision of the read that showed key held.
	seenRev int64

	ctx    context.Context // cancelled with the cause that ended the hold
	cancel context.CancelCauseFunc

	once  sync.Once     // starts the watch on key, on first use of ctx
	mu    sync.Mutex    // guards done, ended, releasing and deleted
	done  chan struct{} // closed when the watch goroutine returns; nil if never started
	ended bool          // set by end: no watch may start after it
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
// current hold if held, else their last one, or nil before the first.
func holdContext(h *hold, held bool) context.Context {
	switch {
	case h == nil:
		return endedCtx
	case !held:
		return h.ctx
	}
	return h.context()
}

func newHold(s *Session, key string, rev, seenRev int64) *hold {
	// The session's cause (wrapping ErrSessionExpired) passes to the hold.
	ctx, cancel := context.WithCancelCause(s.ctx)
	return &hold{s: s, key: key, rev: rev, seenRev: seenRev, ctx: ctx, cancel: cancel}
}

// context returns the hold's context, first starting the watch that cancels
// it with ErrLockLost as soon as the key is deleted. The watch is started
// lazily so that a caller who never asks pays nothing for it.
func (h *hold) context() context.Context {
	h.once.Do(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.ended {
			return
		}
		h.done = make(chan struct{})
		go h.watch()
	})
	return h.ctx
}

func (h *hold) watch() {
	defer close(h.done)
	for h.ctx.Err() == nil {
		err := waitDelete(h.ctx, h.s.client, h.key, h.rev, h.seenRev, fromNow)
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
			h.seenRev = resp.Header.Revision
		}
	}
}

// lost ends the hold with ErrLockLost because its key was deleted: by
// someone, or by the server with the lease (the lease check tells the
// session whether it should end too). During a release it only records the
// deletion.
func (h *hold) lost() {
	h.mu.Lock()
	if h.releasing {
		h.deleted = true
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.cancel(fmt.Errorf("%w: key %q was deleted", ErrLockLost, h.key))
	h.s.check()
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
			h.lost()
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
	h.mu.Lock()
	h.ended = true
	done := h.done
	h.mu.Unlock()
	if done != nil {
		<-done
	}
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
