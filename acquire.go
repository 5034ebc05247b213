package concurrency

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// This file is the acquire pipeline shared by every primitive: how a session takes a
// place in a lock name's queue (enqueue) and turns it into a hold, at once
// or after a wait (acquire). A lock name is a queue of keys under its
// prefix, ordered by create revision. What differs from one primitive to
// another is a rule: which older keys count against a key, how many of
// them it may have and still hold, and which keys of the name forbid it.
// acquire runs it top to bottom: the enqueue (enqueue.go), the judgement
// of the key's place (judge.go), the wait (waitdeletes.go), then the grant here
// (lock-delay in lockdelay.go, max hold in hold.go) and the tenure that
// follows (hold.go).
//
// Two things hold on every path to a grant:
//   - The read that decides a grant is linearizable (see judge): a member
//     that lags never grants a key that is already gone at the leader.
//   - A key is used only once its state is known: a key the enqueue finds
//     already there (left by an earlier enqueue whose outcome was unknown,
//     or shared by two values on one session) is judged by the same read
//     and checks as a fresh one, and an enqueue whose caller gives up is
//     settled in the background and its key deleted by revision.

// acquireAttempt is one acquisition, as every step of the pipeline takes it:
// what the caller asked for, then what the steps learn of the key. The
// caller's goroutine keeps it (on its stack) for the whole call: of a
// step's responses it keeps only what a later step uses, so that a parked
// waiter keeps no more than the wait needs.
type acquireAttempt struct {
	s   *Session
	r   rule   // the rule of the queue
	key string // the key to queue
	val string // its value
	// update: an adopted key's value is set to val (Campaign); without,
	// it is kept (Lock, TryLock).
	update bool
	// wait: a key that does not hold waits for its turn; without, the
	// attempt misses with ErrLocked.
	wait bool
	// waiter, if not nil, is told the key's create revision when a wait
	// starts, and 0 when it fails.
	waiter waiter
	obs    *acquisition // the metrics and span of the acquisition; nil without
	// ops are the key's operations (see keyOps): the caller's from its
	// last acquisition, if any (the caller keeps none meanwhile); the
	// enqueue makes new ones if they do not fit, and leaves them here for
	// the hold and for the caller to keep for its next, unless the key
	// waits: a parked waiter keeps no more than the wait needs (about
	// 1.5 KB: a third of a waiter's heap), so only a key that held at
	// once keeps them.
	ops *keyOps

	// Learned by the steps.
	rev, mod int64 // the key's create and mod revisions, once queued
	// next is what a key that waits waits for first, as read at revision
	// seen: what the wait keeps of the enqueue (not its response header,
	// which would stay on the heap as long as the wait).
	next    target
	seen    int64
	existed bool // the key existed before the read that granted it (waited, or adopted)
	// behind is the create revision of the newest key older than the key
	// when it queued, for the lock-delay (0: none, the key held at once).
	behind int64
}

// A waiter is told when its key begins to wait in the queue (rev, the
// key's create revision) and when that wait fails (rev 0): a Mutex's
// holder and an Election show the key meanwhile.
type waiter interface {
	waitingAt(key string, rev int64)
}

// acquire takes a place for at.key, with value at.val, in the queue of
// at.r (see enqueue) and, if at.wait, waits until the key holds (see
// waitDeletes). It returns the hold, and the header of the read that
// showed the key hold.
//
// The wait ends with ctx.Err() when ctx ends, and with an error matching
// ErrSessionExpired when the session ends or the key is found deleted; it
// outlasts a cluster without a leader and lost connections, keeping its
// place. Without wait, a key that does not hold gives ErrLocked. On every
// error, the key has been released: deleted, within a bounded time, unless
// another user of the session still uses it (see Session.unuse). A grant
// is never returned once ctx or the session has ended.
func acquire(ctx context.Context, at *acquireAttempt) (*hold, *pb.ResponseHeader, error) {
	if at.s.ins == nil {
		return acquireKey(ctx, at)
	}
	ctx, at.obs = at.s.ins.startAcquire(ctx, at.r.kind, lockName(at.r.pfx), at.key, at.wait)
	h, hdr, err := acquireKey(ctx, at)
	if h == nil {
		at.obs.done(at.key, 0, err)
		return nil, nil, err
	}
	h.observe(at.obs.done(at.key, h.rev, nil))
	return h, hdr, nil
}

// acquireKey is acquire, reporting to at.obs (if not nil) where the key
// was queued and when it begins to wait: the pipeline, top to bottom.
func acquireKey(ctx context.Context, at *acquireAttempt) (*hold, *pb.ResponseHeader, error) {
	s := at.s
	if s.life.Err() != nil {
		return nil, nil, context.Cause(s.life)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err // write nothing: the enqueue would outlive ctx
	}
	if err := s.use(ctx, at.key, true); err != nil {
		return nil, nil, err
	}
	// The enqueue, and the judgement of the key's place: a key that holds
	// is granted at once; one that does not misses, or waits.
	h, hdr, waits, err := at.queue(ctx)
	if !waits {
		return h, hdr, err
	}
	// The wait, and the grant.
	return at.waitTurn(ctx)
}

// queue enqueues the key (see enqueue) and grants it if it holds. A key
// that does not hold misses with ErrLocked without at.wait; with it,
// queue reports waits, with what to wait for in at.next and at.seen. Its
// frame is gone before the wait begins, so that the goroutine of a parked
// waiter keeps none of it. On error, the key has been handed back to the
// session.
func (at *acquireAttempt) queue(ctx context.Context) (h *hold, hdr *pb.ResponseHeader, waits bool, err error) {
	q, err := at.enqueue(ctx)
	if err != nil {
		return nil, nil, false, err // the key was handed back (see settle)
	}
	if q.holds {
		// An adopted key may have waiters behind it that watch it: tell
		// them (see promote), as after a wait.
		at.existed = q.adopted
		h, hdr, err := at.grant(ctx, q.hdr)
		return h, hdr, false, err
	}
	if !at.wait {
		settle(ctx, at.s, at.key, q, nil)
		return nil, nil, false, ErrLocked
	}
	at.next, at.seen, at.ops = q.next, q.hdr.Revision, nil
	return nil, nil, true, nil
}

// enqueue takes the key's place in its queue (see settledEnqueue) and
// says whether it holds. A key found there already (adopted: left by an
// earlier enqueue whose outcome was unknown, or shared by two values on
// one session) is judged by the same read and checks as a fresh one,
// before it is used (see adopt). It sets at.rev and at.mod. On error, the
// key has been handed back to the session (see settle).
func (at *acquireAttempt) enqueue(ctx context.Context) (queued, error) {
	if !at.ops.fits(at.s, at.r, at.key, at.val) {
		at.ops = newKeyOps(at.s, at.r, at.key, at.val)
	}
	// settledEnqueue takes copies of the attempt's fields, not the
	// attempt: the goroutine that settles a key whose caller gave up may
	// outlive the call, and would move the attempt to the heap.
	q, err := settledEnqueue(ctx, at.s, at.r, at.ops)
	if err != nil {
		return q, err
	}
	at.obs.enqueued(q.rev, q.ahead)
	if q.err == nil && q.adopted {
		q.err = at.adopt(ctx, &q)
	}
	if q.err != nil {
		settle(ctx, at.s, at.key, q, nil)
		return q, q.err
	}
	at.rev, at.mod = q.rev, q.mod
	return q, nil
}

// adopt readies a key that the enqueue q found there already: with
// at.update (Campaign), it sets the key's value with the caller's ctx, as
// etcd's Campaign proclaims, never by the enqueue, which may be applied
// after its caller has given up (it would overwrite the value of a later
// leadership of the key); then it judges the key as a fresh one is judged.
func (at *acquireAttempt) adopt(ctx context.Context, q *queued) error {
	if at.update && q.val != at.val {
		mod, err := putIfRev(ctx, at.s, at.key, q.rev, q.mod, at.val)
		if err != nil {
			return err
		}
		q.mod = mod
	}
	j, err := judge(ctx, at.s, at.r, at.key, q.rev)
	if err != nil {
		return err
	}
	q.holds, q.next, q.hdr = j.holds, j.next, j.hdr
	return nil
}

// waitTurn waits until the queued key holds (see waitDeletes), at.next
// being what to wait for first, as read at revision at.seen, and grants
// it. The wait ends with ctx, or with the session's life. On error, the
// key has been released.
func (at *acquireAttempt) waitTurn(ctx context.Context) (*hold, *pb.ResponseHeader, error) {
	s := at.s
	if at.waiter != nil {
		at.waiter.waitingAt(at.key, at.rev)
	}
	at.obs.wait()
	hdr, err := waitDeletes(ctx, s, at.r, at.key, at.rev, at.next, at.seen)
	if err == nil {
		at.existed, at.behind = true, at.next.create // the newest key older than this one when it queued
		if at.next.key == "" {
			at.behind = behindUnknown
		}
		h, hdr, err := at.grant(ctx, hdr)
		if err != nil && at.waiter != nil {
			at.waiter.waitingAt(at.key, 0)
		}
		return h, hdr, err
	}
	// Say why the wait ended: the caller's context first, so that
	// errors.Is(err, ctx.Err()) holds, then the session.
	if werr := s.waitErr(ctx); werr != nil {
		err = werr
	}
	if at.waiter != nil {
		at.waiter.waitingAt(at.key, 0)
	}
	s.unuse(ctx, at.key, at.rev, deleteNow)
	return nil, nil, err
}

// grant turns a read (whose header is hdr) that showed the key holding
// into a hold, unless ctx or the session's life ended meanwhile (then the
// key is deleted and the error returned): the session ends at its
// conservative deadline, before the server can expire the lease, so a
// grant that finds the session alive after its linearizable read has
// returned holds at that moment too. The wait's own cancellation by the
// session's end comes a goroutine later; this check does not wait for
// it. A Semaphore's hold whose key existed before the read that granted
// it (at.existed: waited, or adopted) tells the waiter behind it (see
// promote), without delaying the grant. With a lock-delay
// (WithLockDelay), a Mutex's grant may first wait for one (see
// hold.delayGrant), or without at.wait miss (ErrLocked). With a max hold
// (WithMaxHold), the key is then moved to a lease of its own (see
// hold.bound), so that the max hold begins after the delay. If either
// fails, the key is deleted and the error returned.
func (at *acquireAttempt) grant(ctx context.Context, hdr *pb.ResponseHeader) (*hold, *pb.ResponseHeader, error) {
	s, r := at.s, &at.r
	err := ctx.Err()
	if s.life.Err() != nil {
		err = context.Cause(s.life)
	}
	if err != nil {
		s.unuse(ctx, at.key, at.rev, deleteNow)
		return nil, nil, err
	}
	h := newHold(s, at.key, at.rev, hdr.Revision)
	h.mod, h.kind = at.mod, r.kind
	if at.ops != nil {
		h.del = at.ops.del
	}
	// The lock-delay comes first: while it runs the key stays on the
	// session's lease, so that a max hold shorter than the delay cannot
	// remove it (and let a waiter of etcd's package in) within the delay.
	if d := s.opts.lockDelay; d > 0 && r.kind == kindMutex {
		if err := h.delayGrant(ctx, r.pfx, at.behind, d, at.wait); err != nil {
			return nil, nil, abandon(ctx, s, h, err)
		}
	}
	if d := s.opts.maxHold; d > 0 {
		if err := h.bound(ctx, d); err != nil {
			return nil, nil, abandon(ctx, s, h, err)
		}
	}
	if at.existed && (r.limit > 1 || r.weigh != nil) {
		h.promote()
	}
	return h, hdr, nil
}

// abandon gives up the hold h that grant could not complete with err:
// it releases h (which marks a lock-delay record it wrote, and revokes a
// max hold's lease), or, if that fails, ends it and has the session
// delete its key. It returns the error for the caller: ctx's, if ctx
// ended.
func abandon(ctx context.Context, s *Session, h *hold, err error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	ended, rerr := h.release(rctx)
	cancel()
	then := keep
	if !ended || rerr != nil {
		h.end(err)
		then = deleteNow
	}
	s.unuse(ctx, h.key, h.rev, then)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
