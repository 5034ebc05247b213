package concurrency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Election is a leader election on etcd: the drop-in counterpart of etcd's
// concurrency.Election, with the same keys and values, so that this
// package, etcd's package and `etcdctl elect` take part in the same
// election on the same name.
//
// An election is a lock whose key carries a value. Candidates queue exactly
// as the holders of a Mutex do, with the same code (waitdeletes.go): the
// key with the smallest create revision is the leader, and its value is
// what the leader proclaims. Like a Mutex, the candidacy belongs to the
// Session: two Elections on the same session and name share one key.
//
// A leader stays leader until Resign, until its key is deleted, or until
// its session ends; the end of the context given to Campaign does not end
// a leadership already won. Ctx tells when the leadership ends or may have
// ended, Rev is a fencing token, and Txn writes only while the leadership
// lasts.
//
// An Election is safe for use by several goroutines: Campaign calls on one
// Election run one at a time, and Proclaim, Resign and the accessors may be
// called from any goroutine at any time (etcd's Election had data races
// here, etcd #7547). It differs from etcd's where etcd's was a bug:
//
//   - Campaign returns nil only after a read showed its own key first in
//     the queue, and a candidate returns an error matching
//     ErrSessionExpired as soon as its session ends, or its own key is found
//     gone, rather than waiting for the older candidates and then claiming
//     to lead (etcd #11007, #19597);
//   - Campaign deletes its key on every failure, not only on cancellation,
//     within a bounded time (#21128, #18082);
//   - a Resign that fails keeps the leadership, so that it can be retried
//     (#22123), and Resign deletes only the incarnation of the key that won;
//   - ResumeElection uses the same key prefix as NewElection, so that the
//     resumed Election's Leader and Observe see only its own election
//     (#10297, #13469);
//   - Observe reports, with each value, the revision at which it was the
//     leader's value, even when several writes reach it at once (#18163),
//     and carries on through compaction and lost connections instead of
//     closing its channel;
//   - Rev and Txn are those of a leader only once Campaign has won, and Rev
//     is 0 when the Election is not the leader.
type Election struct {
	s   *Session
	pfx string // the election name followed by "/"
	key string // pfx and the session's lease ID in hex: the key Campaign writes
	err error  // invalid ResumeElection arguments, returned by every method

	gate gate    // entered while a goroutine runs Campaign
	ops  *keyOps // of the last Campaign's key, for the next (see acquireAttempt.ops); guarded by the gate

	// opMu serialises Proclaim and Resign, and is held for their round
	// trips, so that mu, which the getters take, never is.
	opMu sync.Mutex

	mu        sync.Mutex // guards leaderKey, rev, leader, hdr, hold and counted; never held over network I/O
	leaderKey string     // the key while Campaign waits or while leader; "" otherwise
	rev       int64      // create revision of leaderKey while Campaign waits or while leader; 0 otherwise
	leader    bool
	hdr       *pb.ResponseHeader
	hold      *hold // the current leadership, or the last one once it ended; nil before the first
	// counted: the session counts this Election as a user of leaderKey.
	// A resumed leadership is counted only once it is used (see adopt).
	counted bool
}

// NewElection returns an Election named pfx on session s. It does not talk
// to etcd. Its keys are pfx, "/" and a lease ID in hex, as in etcd's
// package (so an Election named "a/" has keys "a//…"). A nil session or an
// empty name is reported by the Election's methods, with ErrNilSession or
// ErrInvalidPrefix.
func NewElection(s *Session, pfx string) *Election {
	e := &Election{s: s}
	if s != nil {
		e.pfx, e.key = prefixedKey(pfx, s.Lease())
	} else {
		e.pfx = prefix(pfx)
	}
	created(s, e.pfx, kindElection)
	return e
}

// ResumeElection returns an Election named pfx on session s that is
// already the leader with leaderKey, created at revision leaderRev: for
// example the Key and Rev of a Campaign won before a restart, with s
// adopting the old lease through WithLease. It does not talk to etcd: the
// first Proclaim, Resign, Txn or watch of Ctx finds out whether the
// leadership is still there.
//
// The name is turned into a key prefix as NewElection does it; etcd's
// ResumeElection dropped the "/", so that Leader and Observe of a resumed
// Election also read the keys of other elections whose names begin with
// pfx (etcd #10297, #13469). A leaderKey that is not a key of the election,
// or a leaderRev that is not positive, makes Campaign, Proclaim and Resign
// return an error matching ErrElectionNotLeader (Txn's Commit one matching
// ErrLockLost, and Ctx an ended context); Leader and Observe read the
// election as usual.
//
// Nothing is watched or counted until the leadership is first used (Ctx,
// Proclaim or Resign): a resumed Election that is dropped unused leaves
// nothing behind. Once Ctx was called, its watch runs until the leadership
// ends (Resign, loss of the key, end of the session).
func ResumeElection(s *Session, pfx string, leaderKey string, leaderRev int64) *Election {
	e := NewElection(s, pfx)
	if !strings.HasPrefix(leaderKey, e.pfx) || len(leaderKey) == len(e.pfx) || leaderRev <= 0 {
		e.err = fmt.Errorf("%w: ResumeElection(%q, %q, %d): not a key of the election and its create revision", ErrElectionNotLeader, pfx, leaderKey, leaderRev)
		return e
	}
	if validate(s, e.pfx) != nil {
		return e // reported by the methods
	}
	// Nothing starts until the leadership is used (see adopt): a resumed
	// Election that the caller drops leaves nothing behind.
	e.leaderKey, e.rev, e.leader = leaderKey, leaderRev, true
	e.hold = newHold(s, leaderKey, leaderRev, 0)
	e.hold.kind = kindElection
	return e
}

// adopt makes the session count a resumed leadership as a user of its key,
// the first time it is used, so that a failed Campaign of another Election
// on the session does not delete the key. The caller holds e.mu.
func (e *Election) adopt() {
	if e.leader && !e.counted {
		e.s.use(context.Background(), e.leaderKey, false)
		e.counted = true
	}
}

// validate reports a bad session, name, or ResumeElection argument.
func (e *Election) validate() error {
	if err := validate(e.s, e.pfx); err != nil {
		return err
	}
	return e.err
}

// Campaign makes the session a candidate with value val and blocks until it
// is the leader, ctx ends, or the session ends. Uncontended, it takes one
// round trip. Candidates win in the order of their keys' create revisions,
// each watching only the one before it.
//
// If the session is already a candidate on this election (another Election
// on the same session and name, or a restarted process that adopted its
// lease with WithLease), Campaign keeps that key and its place in the queue
// and sets its value to val, as etcd's does. If this Election is already the
// leader, Campaign only proclaims val: an error then is Proclaim's, and
// leaves the Election the leader unless it matches ErrElectionNotLeader, in
// which case Campaign runs for the leadership again.
//
// If ctx ends first, Campaign returns an error matching ctx.Err(); if the
// session ends or the key is deleted first, an error matching
// ErrSessionExpired. On every error (but those of a leader's Proclaim) the
// Election is not the leader and its key has been deleted, unless another
// Election of the session still uses it. The delete is bounded in time
// even if etcd cannot be reached, and then retried by the session once etcd
// answers again.
func (e *Election) Campaign(ctx context.Context, val string) error {
	if err := e.validate(); err != nil {
		return err
	}
	if _, err := e.gate.enter(ctx, true); err != nil {
		return err
	}
	defer e.gate.leave()

	e.mu.Lock()
	leader := e.leader
	e.mu.Unlock()
	if leader {
		err := e.Proclaim(ctx, val)
		if !errors.Is(err, ErrElectionNotLeader) {
			return err
		}
		// The leadership was lost meanwhile: run for it again.
	}

	r := mutexRule(e.pfx)
	r.kind = kindElection
	at := &acquireAttempt{s: e.s, r: r, key: e.key, val: val, update: true, wait: true, waiter: e, ops: e.ops}
	e.ops = nil // the attempt has them (see acquireAttempt.ops)
	h, hdr, err := acquire(ctx, at)
	e.ops = at.ops
	if err != nil {
		return err
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	e.leaderKey, e.rev, e.leader, e.hdr, e.hold, e.counted = e.key, h.rev, true, hdr, h, true
	return nil
}

// waitingAt shows key, created at rev, as the candidacy's while it waits;
// rev 0: the wait failed (see waiter).
func (e *Election) waitingAt(key string, rev int64) {
	e.mu.Lock()
	e.leaderKey, e.rev = key, rev
	if rev == 0 {
		e.leaderKey = ""
	}
	e.mu.Unlock()
}

// Proclaim sets the leader's value to val without a new election. It takes
// one round trip: a transaction that writes only if the leader key still
// has the create revision it won with, and the mod revision it last had
// here, so that a Proclaim whose answer was lost and that etcd applies
// late never sets an older value over a newer one. (A leadership resumed
// with ResumeElection reads the key first; a key whose value someone else
// changed is read and written again.)
//
// It returns an error matching ErrElectionNotLeader, and writes nothing, if
// the Election is not the leader: Campaign has not won (or still waits),
// Resign was called, or the key is gone, in which case the leadership ends
// here (Ctx is cancelled with ErrLockLost). On any other error (ctx ended,
// etcd unreachable) the value may or may not have been written, and the
// Election is still the leader.
func (e *Election) Proclaim(ctx context.Context, val string) error {
	if err := e.validate(); err != nil {
		return err
	}
	e.opMu.Lock()
	defer e.opMu.Unlock()
	e.mu.Lock()
	if !e.leader {
		e.mu.Unlock()
		return ErrElectionNotLeader
	}
	e.adopt()
	key, rev, hd := e.leaderKey, e.rev, e.hold
	e.mu.Unlock()
	mod, hdr, ok, err := e.s.setIfRev(ctx, key, rev, hd.mod, val, hd.lease)
	if err != nil {
		return err
	}
	if !ok {
		gone := fmt.Errorf("key %q no longer has create revision %d", key, rev)
		hd.end(fmt.Errorf("%w: %w", ErrLockLost, gone))
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.hold == hd {
			e.forget(ctx, keep)
		}
		return fmt.Errorf("%w: %w", ErrElectionNotLeader, gone)
	}
	hd.mod = mod
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hdr = hdr
	return nil
}

// Resign ends the leadership: it deletes the leader key if, and only if,
// it is still the incarnation this Election won with, so that the next
// candidate is elected, and it cancels Ctx with cause ErrLockReleased (or
// ErrLockLost if the key was already gone). A key that is already gone is
// not an error. It takes one round trip. Resign returns nil at once if the
// Election is not the leader, including while a Campaign still waits: to
// give up a campaign, end its context.
//
// If the delete fails (ctx ended, etcd unreachable), Resign returns the
// error and the Election stays the leader, so that Resign can be retried
// (etcd's forgot the leadership and left the key, etcd #22123). Once the
// session has ended, the leadership is released locally anyway, and the key
// goes with the lease. Header is not changed.
func (e *Election) Resign(ctx context.Context) error {
	if err := e.validate(); err != nil {
		return err
	}
	e.opMu.Lock()
	defer e.opMu.Unlock()
	e.mu.Lock()
	if !e.leader {
		e.mu.Unlock()
		return nil
	}
	hd := e.hold
	e.mu.Unlock()
	// While the delete is retried, the getters see the leadership as it is.
	ended, err := hd.release(ctx)
	if !ended {
		return err // still the leader: Resign may be retried
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hold == hd {
		e.forget(ctx, keep)
	}
	return err
}

// forget drops the state of a leadership whose hold has ended, and hands
// the key to the session as then says. The caller holds e.mu.
func (e *Election) forget(ctx context.Context, then cleanup) {
	if e.counted {
		e.s.unuse(ctx, e.leaderKey, e.rev, then)
	}
	e.leaderKey, e.rev, e.leader, e.counted = "", 0, false, false
}

// release is Do's Resign: if the delete fails, the leadership is given up
// here all the same, and the session deletes the key in the background
// once etcd answers.
func (e *Election) release(ctx context.Context) error {
	err := e.Resign(ctx)
	if err == nil {
		return nil
	}
	e.opMu.Lock()
	defer e.opMu.Unlock()
	e.mu.Lock()
	hd := e.hold
	leader := e.leader
	e.mu.Unlock()
	if leader {
		hd.end(fmt.Errorf("%w: resigned here; the key is deleted in the background: %w", ErrLockReleased, err))
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.hold == hd {
			e.forget(ctx, deleteLater)
		}
	}
	return err
}

// Key returns the leader key while the Election is the leader or Campaign
// waits, and "" otherwise.
func (e *Election) Key() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leaderKey
}

// Rev returns the create revision of the leader key while the Election is
// the leader, and 0 otherwise. It is a fencing token, as Mutex.Token is:
// it strictly increases from one leader of an election to the next,
// whether the leaders use this package, etcd's or `etcdctl elect`. (etcd's
// Rev was also set while Campaign waited, and after Resign; a resource that
// accepted it as a token would then refuse the real leader.)
func (e *Election) Rev() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.leader {
		return 0
	}
	return e.rev
}

// Header is the response header of the read that showed this Election the
// leader or of its last Proclaim, whichever came last, or nil before
// either.
func (e *Election) Header() *pb.ResponseHeader {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hdr
}

// Ctx returns a context for the current leadership. It is cancelled as
// soon as the leadership ends or may have ended: Resign (cause
// ErrLockReleased, the cause Mutex.Unlock gives), deletion of the leader
// key by anyone, including the server when the lease is revoked or expires
// (ErrLockLost), or the end of the session, including its conservative
// deadline passing without a renewal (ErrSessionExpired). context.Cause
// tells which. When the Election is not the leader it returns an already
// cancelled context.
//
// A leadership is watched as a Mutex's hold is (see Mutex.Ctx).
func (e *Election) Ctx() context.Context {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return endedCtx
	}
	e.adopt()
	return holdContext(e.hold)
}

// Txn returns a transaction that commits only while this Election is the
// leader, as Mutex.Txn does for a hold: its If, Then and Else run as usual
// inside a transaction that first checks that the leader key still has the
// create revision it won with. If the leadership is gone when it reaches
// etcd, or the Election was not the leader when Txn was called, Commit
// returns an error matching ErrLockLost and nothing is written. The guard
// is fixed when Txn is called.
func (e *Election) Txn(ctx context.Context) clientv3.Txn {
	e.mu.Lock()
	defer e.mu.Unlock()
	return newGuardedTxn(ctx, e.s, e.leaderKey, e.rev, e.leader)
}

// Do campaigns with val, runs fn as the leader with a context that ends
// when ctx ends or the leadership does, and resigns, also when fn panics
// (the panic then goes on). The resignation uses a fresh context bounded by
// cleanupTimeout, so it runs even if ctx has ended. Do returns Campaign's
// error if it did not win; otherwise fn's error, joined with an error
// matching ErrLockLost or ErrSessionExpired if the leadership ended before
// fn returned and with Resign's error if it failed. Even then the Election
// is no longer the leader when Do returns: the session deletes the key in
// the background once etcd answers.
func (e *Election) Do(ctx context.Context, val string, fn func(ctx context.Context) error) error {
	if err := e.Campaign(ctx, val); err != nil {
		return err
	}
	return runHold(ctx, e.Ctx(), fn, e.release)
}
