package concurrency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file is the queue shared by every primitive: how a session takes a
// place in a lock name's queue (enqueue) and turns it into a hold, at once
// or after a wait (acquire). A lock name is a queue of keys under its
// prefix, ordered by create revision. What differs from one primitive to
// another is a rule: which older keys count against a key, how many of
// them it may have and still hold, and which keys of the name forbid it.
// The wait is in waitdeletes.go, the tenure that follows in hold.go.
//
// Two things hold on every path to a grant:
//   - The read that decides a grant is linearizable (see judge): a member
//     that lags never grants a key that is already gone at the leader.
//   - A key is used only once its state is known: a key the enqueue finds
//     already there (left by an earlier enqueue whose outcome was unknown,
//     or shared by two values on one session) is judged by the same read
//     and checks as a fresh one, and an enqueue whose caller gives up is
//     settled in the background and its key deleted by revision.

// rule says when a key of a queue holds.
type rule struct {
	pfx string // the queue: every key of the lock name is under it
	// over is the part of the queue whose older keys count against a key:
	// pfx for a Mutex, an Election, a Semaphore and an RWMutex writer; only
	// the writers for an RWMutex reader.
	over string
	// limit is how many keys of over may be older than a key that holds:
	// 1 for everything but a Semaphore.
	limit int
	// check, if not nil, vets the older keys that a read returned (the kind
	// of lock and its limit): an error ends the acquisition, leaving no key.
	check func(older []*mvccpb.KeyValue) error
	// foreign, if not "", ends the range [pfx, foreign) of keys of other
	// kinds of lock that over does not take in: a key older than this one
	// in that range refuses it, with ErrLockKind.
	foreign string
	// guard, if not nil, makes the write of a new key conditional on the
	// name's other keys allowing it (their kind, their limit): it returns
	// one operation that applies then if they do, and else refused, whose
	// reads refuse turns into the error. So a key that would be refused is
	// never written, and cannot stand in the way of the name's rightful
	// users while it waits to be deleted (or, if its process died, for the
	// rest of its lease).
	guard   func(then, refused []clientv3.Op) clientv3.Op
	refused []clientv3.Op
	refuse  func(rs []*pb.ResponseOp) error
	kind    string // for metrics and traces: kindMutex, kindElection...
	// weigh, if not nil, replaces judge and check for a Semaphore, whose
	// keys carry their weight and the name's limit in their values (see
	// semaphore.go): from own, the value of the key, and the newest keys
	// of over older than it (newest first), whether the key holds and if
	// not what it waits for. truncated says that the read stopped at its
	// limit, so older keys may exist beyond those given; more asks for
	// them (the name's limit grew past the one read with: see
	// Semaphore.SetLimit).
	weigh func(own []byte, older []*mvccpb.KeyValue, truncated bool) (holds bool, next target, more bool, err error)
}

// olderKeys returns opts for a read of the keys of over that judge a key,
// asking for their keys alone unless r weighs their values (a Semaphore).
// etcd sorts such a read by reading every key of the range (issue 42: a
// queue of N costs each enqueue and each handoff O(N) on the server, for
// etcd's package too); without values, etcd v3.7 serves it from its
// in-memory index instead of its backend, 2.4 to 3.9 times faster with
// 10,000 keys queued (BenchmarkSortedRead in internal/lockbench). Older
// servers read the values all the same and do not send them.
func (r rule) olderKeys(opts ...clientv3.OpOption) []clientv3.OpOption {
	if r.weigh == nil {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	return opts
}

// mutexRule is the rule of a Mutex named by prefix pfx, and the base of
// the others.
func mutexRule(pfx string) rule { return rule{pfx: pfx, over: pfx, limit: 1, kind: kindMutex} }

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
	ctx, a := s.ins.startAcquire(ctx, r, key, wait)
	h, hdr, err := acquireKey(ctx, s, r, key, val, update, wait, waiting, a)
	a.done(h, err)
	return h, hdr, err
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
	a.enqueued(q)
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
	h.mod = mod
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

// queued is where enqueue left a key in its queue.
type queued struct {
	rev     int64              // the key's create revision
	mod     int64              // the key's mod revision, as written or found
	holds   bool               // fewer than limit keys of over are older: the key holds
	next    target             // what to wait for, when known and the key does not hold
	err     error              // the rule refused the key; if written is false, nothing was written
	written bool               // the key was created by this enqueue
	adopted bool               // the key was there already: to be judged before use
	val     string             // the value of an adopted key
	ahead   int64              // keys of over older than the key when it was created; -1 if unknown
	hdr     *pb.ResponseHeader // of the transaction
}

// enqueueSettle bounds how long an enqueue whose caller has given up is
// still awaited, so that its outcome is known and its key deleted by
// revision; past it, the key is suspect (see Session.suspect).
const enqueueSettle = 10 * time.Second

// settleGrace is how long a call whose ctx has ended still waits for its
// enqueue's answer before it returns and leaves the rest to the
// background.
const settleGrace = time.Second

// settledEnqueue is enqueue on a context that the caller's cannot cancel:
// a put that the caller gives up on may still be applied by etcd, so it is
// awaited in the background (for enqueueSettle at most) and its key is
// deleted by revision once written. When ctx ends, it returns ctx.Err()
// after waiting up to settleGrace for the enqueue's answer, so that in the
// usual case the key is deleted before it returns. On every error, the key
// has been handed back to the session: once the enqueue has settled, it is
// deleted if it was written; if the outcome stays unknown, it is deleted by
// lease now and again while it may still be applied (see Session.suspect).
func settledEnqueue(ctx context.Context, s *Session, r rule, key, val string) (queued, error) {
	if !s.startSettling() {
		s.unuse(ctx, key, 0, keep)
		return queued{}, context.Cause(s.life)
	}
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopLife := context.AfterFunc(s.life, cancel) // a gone lease deletes the key anyway
	p := &pendingEnqueue{ready: make(chan struct{})}
	go func() {
		defer s.settling.Done()
		defer stopLife()
		defer cancel()
		q, err := enqueue(ectx, s, r, key, val)
		p.mu.Lock()
		p.q, p.err = q, err
		abandoned := p.abandoned
		close(p.ready)
		p.mu.Unlock()
		if abandoned {
			settle(ctx, s, key, q, err)
		}
	}()
	select {
	case <-p.ready:
	case <-ctx.Done():
		// Most enqueues answer within milliseconds: wait that long, so
		// that the key is gone when the call returns, as it is after a
		// wait that ends. Past settleGrace, return and settle later.
		t := time.NewTimer(settleGrace)
		select {
		case <-p.ready:
		case <-t.C:
		}
		t.Stop()
		p.mu.Lock()
		select {
		case <-p.ready:
			p.mu.Unlock()
		default:
			p.abandoned = true
			p.mu.Unlock()
			time.AfterFunc(enqueueSettle, cancel)
			return queued{}, ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		settle(ctx, s, key, p.q, p.err)
		return queued{}, err
	}
	if p.err != nil {
		settle(ctx, s, key, p.q, p.err)
		if s.life.Err() != nil {
			// The session's end cuts the enqueue short (see stopLife),
			// and is the better reason.
			return queued{}, context.Cause(s.life)
		}
		return queued{}, p.err
	}
	return p.q, nil
}

// pendingEnqueue is an enqueue running in the background for
// settledEnqueue.
type pendingEnqueue struct {
	ready     chan struct{} // closed once q and err are set
	mu        sync.Mutex    // guards q, err and abandoned
	q         queued
	err       error
	abandoned bool // the caller gave up: the enqueue's goroutine settles
}

// settle hands back to the session a key whose enqueue ended with q and
// err but will not be used: it deletes the key if the enqueue wrote it
// (by revision) or may have (by lease, now and while a late write may
// still land), and leaves a key it found (another user of the session may
// hold it) or that it did not write.
func settle(ctx context.Context, s *Session, key string, q queued, err error) {
	switch {
	case s.life.Err() != nil && err != nil:
		s.unuse(ctx, key, 0, keep) // the key, if written, goes with the lease
	case errors.Is(err, ErrLeaseNotFound):
		s.unuse(ctx, key, 0, keep) // refused whole: nothing was written
	case err != nil:
		s.suspect(key)
		s.unuse(ctx, key, 0, deleteNow)
	case q.written:
		s.unuse(ctx, key, q.rev, deleteNow)
	case q.adopted:
		s.unuse(ctx, key, q.rev, deleteNow)
	default:
		s.unuse(ctx, key, 0, keep) // the guard refused it: nothing was written
	}
}

// enqueue puts key with value val on the session's lease at the end of the
// queue of r, unless the session has it already, in which case it keeps
// the key's place and value (adopted: the caller judges it, and sets the
// value if it must). It takes one transaction. A new key is
// written only if r's guard allows it; the transaction also reads the
// newest limit+1 keys of over older than it, which decide whether it holds
// (it is the newest key, so nothing can come between).
//
// Mutex.Lock and TryLock leave an adopted key's value as it is (etcd's
// Mutex writes "", etcdlock a description of its holder); Campaign sets
// it (see acquireKey), as etcd's does.
//
// A lease that no longer exists gives an error matching ErrSessionExpired
// and ErrLeaseNotFound, and ends the session's life.
func enqueue(ctx context.Context, s *Session, r rule, key, val string) (queued, error) {
	// limit+2: the key itself, when it is in over, and limit+1 older keys.
	newest := clientv3.OpGet(r.over, r.olderKeys(clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(int64(r.limit)+2))...)
	then := []clientv3.Op{clientv3.OpPut(key, val, clientv3.WithLease(s.id)), newest}
	if r.guard != nil {
		then = []clientv3.Op{r.guard(then, r.refused)}
	}
	orElse := []clientv3.Op{clientv3.OpGet(key)}
	// Asked as ask does: an attempt applied beside the one answered only
	// finds the key, as after a lost answer, and writes nothing (the
	// answer's key is adopted when the answered attempt was the later).
	// One applied later still, after the key was used and deleted, would
	// write it anew: the key is suspect (deleted by lease while nobody
	// uses it, see Session.suspect) for as long as that may happen.
	resp, sent, err := sessionAsk(ctx, s, classWrite, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(then...).
			Else(orElse...).
			Commit()
	})
	if sent > 1 {
		s.suspect(key)
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return queued{}, s.leaseGone(err)
	}
	if err != nil {
		return queued{}, err
	}
	q := queued{hdr: resp.Header, ahead: -1}
	if !resp.Succeeded {
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		q.rev, q.mod, q.val, q.adopted = kv.CreateRevision, kv.ModRevision, string(kv.Value), true
		return q, nil
	}
	rs := resp.Responses
	if r.guard != nil {
		var ok bool
		if ok, rs = unnest(rs); !ok {
			q.err = r.refuse(rs)
			return q, nil
		}
	}
	// Every key but this one is older: it was created last.
	q.rev, q.mod, q.written = resp.Header.Revision, resp.Header.Revision, true
	q.ahead = rs[1].GetResponseRange().Count
	var older []*mvccpb.KeyValue
	for _, kv := range rs[1].GetResponseRange().Kvs {
		if kv.CreateRevision != q.rev && len(older) <= r.limit {
			older = append(older, kv)
		}
	}
	if strings.HasPrefix(key, r.over) {
		q.ahead-- // the key itself
	}
	if r.weigh != nil {
		// The guard made the name's limit r.limit: limit+1 older keys
		// are all that can count.
		q.holds, q.next, _, q.err = r.weigh([]byte(val), older, len(older) > r.limit)
		return q, nil
	}
	q.holds, q.next = r.judge(older)
	if r.check != nil {
		q.err = r.check(older)
	}
	return q, nil
}

// putIfRev sets the value of key, on the session's lease, if key still has
// create revision rev (and mod revision mod, see Session.setIfRev), and
// returns the key's mod revision with it; if the key is gone, it returns
// an error matching ErrSessionExpired.
func putIfRev(ctx context.Context, s *Session, key string, rev, mod int64, val string) (int64, error) {
	mod, _, ok, err := s.setIfRev(ctx, key, rev, mod, val, s.id)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%w: key %q was deleted", ErrSessionExpired, key)
	}
	return mod, nil
}

// unnest follows the responses of a guard's nested transactions to the
// branch that applied: it returns the responses of then and true, or those
// of refused and false.
func unnest(rs []*pb.ResponseOp) (bool, []*pb.ResponseOp) {
	for len(rs) == 1 {
		t := rs[0].GetResponseTxn()
		if t == nil {
			break
		}
		if t.Succeeded {
			return true, t.Responses
		}
		rs = t.Responses
	}
	return false, rs
}

// judge says, from the newest keys of over older than a key (newest first,
// at most limit+1 of them), whether the key holds, and if not what it
// waits for: the newest older key or, when exactly limit keys are older
// and limit > 1, any deletion in over (see target).
func (r rule) judge(older []*mvccpb.KeyValue) (holds bool, next target) {
	switch {
	case len(older) < r.limit:
		return true, target{}
	case len(older) == r.limit && r.limit > 1:
		return false, target{over: r.over}
	default:
		return false, target{key: string(older[0].Key), create: older[0].CreateRevision, mod: older[0].ModRevision, onPut: r.limit > 1}
	}
}

// judgement is what judge read of a key's place.
type judgement struct {
	holds bool
	next  target             // what to wait for, if the key does not hold
	hdr   *pb.ResponseHeader // of the read: the key space at hdr.Revision
}

// judge reads linearizably, in one transaction, key and the keys older
// than it that r counts, and says whether key, created at rev, holds. A
// linearizable read reflects every write the cluster had applied when the
// read began, so a key it shows holding has not been deleted by then,
// whichever member answers (a serializable read of a member that lags
// could show a key that the leader has already deleted, and so grant it
// beside the next holder). It returns an error matching ErrSessionExpired
// if the key is gone or was replaced, and r's check's error if the older
// keys refuse it.
func judge(ctx context.Context, s *Session, r rule, key string, rev int64) (judgement, error) {
	j, more, err := judgeOnce(ctx, s, r, key, rev, int64(r.limit)+1)
	if more {
		// The name's limit grew past the one read with: read every older
		// key (a read without a limit is never truncated).
		j, _, err = judgeOnce(ctx, s, r, key, rev, 0)
	}
	return j, err
}

// skipJudge makes judge ignore the older keys it read, so that every
// waiter holds at once: a deliberately broken library, set only by the
// build tag concurrency_brokenjudge (brokenjudge.go), which the fault
// tests use to show that their checkers catch it (issue 40).
var skipJudge = false

// judgeOnce is one read of judge, of at most limit older keys (0: all of
// them). more says that r.weigh asks for every older key.
func judgeOnce(ctx context.Context, s *Session, r rule, key string, rev, limit int64) (judgement, bool, error) {
	older := r.olderKeys(clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithLimit(limit), clientv3.WithMaxCreateRev(rev-1))
	ops := []clientv3.Op{clientv3.OpGet(key), clientv3.OpGet(r.over, older...)}
	if r.foreign != "" {
		ops = append(ops, clientv3.OpGet(r.pfx, clientv3.WithRange(r.foreign), clientv3.WithMaxCreateRev(rev-1), clientv3.WithLimit(1), clientv3.WithKeysOnly()))
	}
	resp, _, err := sessionAsk(ctx, s, classRead, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.client.Txn(ctx).Then(ops...).Commit()
	})
	if err != nil {
		return judgement{}, false, err
	}
	own := resp.Responses[0].GetResponseRange().Kvs
	if len(own) == 0 || own[0].CreateRevision != rev {
		s.check()
		return judgement{}, false, fmt.Errorf("%w: key %q was deleted while waiting", ErrSessionExpired, key)
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if skipJudge {
		kvs = nil
	}
	j := judgement{hdr: resp.Header}
	if r.weigh != nil {
		holds, next, more, err := r.weigh(own[0].Value, kvs, limit > 0 && int64(len(kvs)) == limit)
		if err != nil || more {
			return judgement{}, more && err == nil, err
		}
		j.holds, j.next = holds, next
		return j, false, nil
	}
	if r.check != nil {
		if err := r.check(kvs); err != nil {
			return judgement{}, false, err
		}
	}
	if r.foreign != "" {
		if f := resp.Responses[2].GetResponseRange().Kvs; len(f) > 0 {
			return judgement{}, false, fmt.Errorf("%w: %q", ErrLockKind, f[0].Key)
		}
	}
	j.holds, j.next = r.judge(kvs)
	return j, false, nil
}
