package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// holder is what Mutex, Semaphore and RWMutex have in common: one value
// that holds at most one key of a queue at a time, acquired with a rule
// (acquire.go) and held as a hold (hold.go). It excludes the goroutines of
// its process as sync.Mutex does: while one holds or is acquiring, another
// waits (or TryLock misses) without talking to etcd.
type holder struct {
	s   *Session
	pfx string // the lock name followed by "/"

	gate gate    // entered while a goroutine holds or is acquiring
	ops  *keyOps // of the last acquisition's key, for the next (see acquireAttempt.ops); guarded by the gate

	// relMu serialises releases; it is held for their round trips, so that
	// mu, which the getters take, never is.
	relMu sync.Mutex

	mu   sync.Mutex // guards key, rev, held and hold; never held over network I/O
	key  string     // the key while waiting or held; "" otherwise
	rev  int64      // create revision of key while waiting or held; 0 otherwise
	held bool
	hold *hold // the current hold, or the last one once it ended; nil before the first
}

func newHolder(s *Session, pfx string) holder {
	return holder{s: s, pfx: prefix(pfx)}
}

// gate lets one goroutine at a time in, as a sync.Mutex does, but one
// that waits can give up when its ctx ends. It is a channel of one token,
// made on first use: its senders wait in turn, and a leave hands the token
// to the first of them, so a goroutine that loops on Lock and Unlock never
// starves another of the same Mutex (TestWaitGateStarvation). The
// zero value is open.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

// enter lets the goroutine in, waiting while another is in if wait (until
// ctx ends: then it returns ctx.Err()), and otherwise reporting false at
// once.
func (g *gate) enter(ctx context.Context, wait bool) (bool, error) {
	g.once.Do(func() { g.ch = make(chan struct{}, 1) })
	if !wait {
		select {
		case g.ch <- struct{}{}:
			return true, nil
		default:
			return false, nil
		}
	}
	select {
	case g.ch <- struct{}{}:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// leave lets the next goroutine in; the caller is in.
func (g *gate) leave() { <-g.ch }

// lock acquires key, with value val, by rule r, waiting if wait, else
// giving up with ErrLocked; it first waits for (or with !wait, misses on)
// another goroutine that holds or is acquiring h. valid is the first error
// of bad input, reported before anything else.
func (h *holder) lock(ctx context.Context, r rule, key, val string, wait bool, valid error) error {
	if valid != nil {
		return valid
	}
	if in, err := h.gate.enter(ctx, wait); err != nil {
		return err
	} else if !in {
		h.s.ins.missed(r.kind, lockName(r.pfx))
		return ErrLocked
	}
	at := &acquireAttempt{s: h.s, r: r, key: key, val: val, wait: wait, waiter: h, ops: h.ops}
	h.ops = nil // the attempt has them (see acquireAttempt.ops)
	hd, hdr, err := acquire(ctx, at)
	h.ops = at.ops
	if err != nil {
		h.gate.leave()
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	hd.hdr = hdr
	h.key, h.rev, h.held, h.hold = key, hd.rev, true, hd
	return nil
}

// waitingAt shows key, created at rev, as h's while it waits; rev 0: the
// wait failed (see waiter).
func (h *holder) waitingAt(key string, rev int64) {
	h.mu.Lock()
	h.key, h.rev = key, rev
	if rev == 0 {
		h.key = ""
	}
	h.mu.Unlock()
}

// unlock releases the key held (see hold.release): ErrLockReleased if none
// is; if the delete fails while the session lives, the key stays held, so
// that unlock can be retried.
func (h *holder) unlock(ctx context.Context) error { return h.unlockIf(ctx, nil) }

// unlockIf is unlock, for a held key that is must accept (if not nil).
func (h *holder) unlockIf(ctx context.Context, is func(key string) bool) error {
	h.relMu.Lock()
	defer h.relMu.Unlock()
	h.mu.Lock()
	if !h.held || is != nil && !is(h.key) {
		h.mu.Unlock()
		return ErrLockReleased
	}
	hd := h.hold
	h.mu.Unlock()
	// While the delete is retried, the getters see the hold as it is.
	ended, err := hd.release(ctx)
	if !ended {
		return err // still held: may be retried
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forget(ctx, keep)
	return err
}

// forget drops the state of a hold that has ended, and hands the key to
// the session as then says. The caller holds h.mu.
func (h *holder) forget(ctx context.Context, then cleanup) {
	h.s.unuse(ctx, h.key, h.rev, then)
	h.key, h.rev, h.held = "", 0, false
	h.gate.leave()
}

// release is Do's unlock: if the delete fails, the hold is released here
// all the same, and the session deletes the key in the background once etcd
// answers, so that a failed release never leaves h held for the next Do.
func (h *holder) release(ctx context.Context) error {
	err := h.unlock(ctx)
	if err == nil || errors.Is(err, ErrLockReleased) {
		return err
	}
	h.relMu.Lock()
	defer h.relMu.Unlock()
	h.mu.Lock()
	held, hd := h.held, h.hold
	h.mu.Unlock()
	if held {
		hd.end(fmt.Errorf("%w: released here; the key is deleted in the background: %w", ErrLockReleased, err))
		h.mu.Lock()
		defer h.mu.Unlock()
		h.forget(ctx, deleteLater)
	}
	return err
}

// do acquires with lock, runs fn under the hold, and releases (see
// runHold).
func (h *holder) do(ctx context.Context, lock func(context.Context) error, fn func(ctx context.Context) error) error {
	if err := lock(ctx); err != nil {
		return err
	}
	return runHold(ctx, h.ctx(), fn, h.release)
}

// isOwner is a comparison that holds only while h holds its key with the
// create revision it acquired; never otherwise.
func (h *holder) isOwner() clientv3.Cmp {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.held {
		// No key has a create revision of -1.
		return clientv3.Compare(clientv3.CreateRevision(h.pfx), "=", -1)
	}
	return clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)
}

// keyNow is the key while waiting or held, "" otherwise.
func (h *holder) keyNow() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.key
}

func (h *holder) header() *pb.ResponseHeader {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hold == nil {
		return nil
	}
	return h.hold.hdr
}

// token is the fencing token of the current hold, 0 when not held.
func (h *holder) token() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.held {
		return 0
	}
	return h.rev
}

func (h *holder) ctx() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	return holdContext(h.hold)
}

func (h *holder) txn(ctx context.Context) clientv3.Txn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return newGuardedTxn(ctx, h.s, h.key, h.rev, h.held)
}
