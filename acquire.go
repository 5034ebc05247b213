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

// acquire takes a place for key, with value val, in the queue of r (see
// enqueue) and, if wait, waits until key holds (see waitDeletes). It
// returns the hold, and the header of the read that showed the key hold.
// waiting, if not nil, is called with the key's create revision when a
// wait starts, and with 0 when it fails.
//
// The wait ends with ctx.Err() when ctx ends, and with an error matching
// ErrSessionExpired when the session ends or the key is found deleted; it
// outlasts a cluster without a leader and lost connections, keeping its
// place. Without wait, a key that does not hold gives ErrLocked. On every
// error, the key has been released: deleted, within a bounded time, unless
// another user of the session still uses it (see Session.unuse). A grant
// is never returned once ctx or the session has ended.
func acquire(ctx context.Context, s *Session, r rule, key, val string, update, wait bool, waiting func(rev int64)) (*hold, *pb.ResponseHeader, error) {
	if s.ins == nil {
		return acquireKey(ctx, s, r, key, val, update, wait, waiting, nil)
	}
	ctx, a := s.ins.startAcquire(ctx, r.kind, lockName(r.pfx), key, wait)
	h, hdr, err := acquireKey(ctx, s, r, key, val, update, wait, waiting, a)
	if h == nil {
		a.done(key, 0, err)
		return nil, nil, err
	}
	h.observe(a.done(key, h.rev, nil))
	return h, hdr, nil
}

// acquireKey is acquire, reporting to a (if not nil) where the key was
// queued and when it begins to wait.
func acquireKey(ctx context.Context, s *Session, r rule, key, val string, update, wait bool, waiting func(rev int64), a *acquisition) (*hold, *pb.ResponseHeader, error) {
	if s.life.Err() != nil {
		return nil, nil, context.Cause(s.life)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err // write nothing: the enqueue would outlive ctx
	}
	if err := s.use(ctx, key, true); err != nil {
		return nil, nil, err
	}
	q, err := settledEnqueue(ctx, s, r, key, val)
	if err != nil {
		return nil, nil, err // the key was handed back (see settle)
	}
	a.enqueued(q.rev, q.ahead)
	if q.err != nil {
		settle(ctx, s, key, q, nil)
		return nil, nil, q.err
	}
	if q.adopted {
		// The key was there already. With update (Campaign), its value is
		// set with the caller's ctx, as etcd's Campaign proclaims, never by
		// the enqueue, which may be applied after its caller has given up
		// (it would overwrite the value of a later leadership of the key).
		if update && q.val != val {
			mod, err := putIfRev(ctx, s, key, q.rev, q.mod, val)
			if err != nil {
				settle(ctx, s, key, q, nil)
				return nil, nil, err
			}
			q.mod = mod
		}
		// Judge it as a fresh one is judged, before it is used.
		j, err := judge(ctx, s, r, key, q.rev)
		if err != nil {
			settle(ctx, s, key, q, nil)
			return nil, nil, err
		}
		q.holds, q.next, q.hdr = j.holds, j.next, j.hdr
	}
	if q.holds {
		// An adopted key may have waiters behind it that watch it: tell
		// them (see promote), as after a wait.
		return granted(ctx, s, r, key, q.rev, q.mod, q.hdr, q.adopted, wait, 0)
	}
	if !wait {
		settle(ctx, s, key, q, nil)
		return nil, nil, ErrLocked
	}

	// The wait keeps of the enqueue only what it uses: not its response
	// header (q.hdr), which would stay on the heap as long as the wait.
	rev, mod, next, seen := q.rev, q.mod, q.next, q.hdr.Revision

	// The wait ends with ctx, or with the session's life (see
	// waitDeletes).
	if waiting != nil {
		waiting(rev)
	}
	a.wait()
	hdr, err := waitDeletes(ctx, s, r, key, rev, next, seen)
	if err == nil {
		behind := next.create // the newest key older than this one when it queued
		if next.key == "" {
			behind = behindUnknown
		}
		h, hdr, err := granted(ctx, s, r, key, rev, mod, hdr, true, wait, behind)
		if err != nil && waiting != nil {
			waiting(0)
		}
		return h, hdr, err
	}
	// Say why the wait ended: the caller's context first, so that
	// errors.Is(err, ctx.Err()) holds, then the session.
	if werr := s.waitErr(ctx); werr != nil {
		err = werr
	}
	if waiting != nil {
		waiting(0)
	}
	s.unuse(ctx, key, rev, deleteNow)
	return nil, nil, err
}

// granted turns a read that showed key holding into a hold, unless ctx or
// the session's life ended meanwhile (then the key is deleted and the
// error returned): the session ends at its conservative deadline, before
// the server can expire the lease, so a grant that finds the session alive
// after its linearizable read has returned holds at that moment too. The
// wait's own cancellation by the session's end comes a goroutine later;
// this check does not wait for it. A Semaphore's hold whose key existed
// before the read that granted it (waited, or adopted) tells the waiter
// behind it (see promote), without delaying the grant. With a lock-delay
// (WithLockDelay), a Mutex's grant may first wait for one (see
// hold.delayGrant), or with !wait miss (ErrLocked); behind is the create
// revision of the newest key older than key when it queued (0: none).
// With a max hold (WithMaxHold), the key is then moved to a lease of its
// own (see hold.bound), so that the max hold begins after the delay. If
// either fails, the key is deleted and the error returned.
func granted(ctx context.Context, s *Session, r rule, key string, rev, mod int64, hdr *pb.ResponseHeader, existed, wait bool, behind int64) (*hold, *pb.ResponseHeader, error) {
	err := ctx.Err()
	if s.life.Err() != nil {
		err = context.Cause(s.life)
	}
	if err != nil {
		s.unuse(ctx, key, rev, deleteNow)
		return nil, nil, err
	}
	h := newHold(s, key, rev, hdr.Revision)
	h.mod, h.kind = mod, r.kind
	// The lock-delay comes first: while it runs the key stays on the
	// session's lease, so that a max hold shorter than the delay cannot
	// remove it (and let a waiter of etcd's package in) within the delay.
	if d := s.opts.lockDelay; d > 0 && r.kind == kindMutex {
		if err := h.delayGrant(ctx, r.pfx, behind, d, wait); err != nil {
			return nil, nil, abandon(ctx, s, h, err)
		}
	}
	if d := s.opts.maxHold; d > 0 {
		if err := h.bound(ctx, d); err != nil {
			return nil, nil, abandon(ctx, s, h, err)
		}
	}
	if existed && (r.limit > 1 || r.weigh != nil) {
		h.promote()
	}
	return h, hdr, nil
}

// abandon gives up the hold h that granted could not complete with err:
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
