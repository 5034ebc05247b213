package concurrency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds the first step of an acquisition: the enqueue, one
// transaction that writes the key at the end of its queue (or finds it
// there) and reads the keys ahead of it; settled in the background when
// its caller gives up, so that its key never outlives the call.

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

// enqueueSettle bounds how long the enqueue that settles a key whose
// caller has given up is awaited (see resettle), so that its outcome is
// known and its key deleted by revision; past it, the key is suspect (see
// Session.suspect).
const enqueueSettle = 10 * time.Second

// settleGrace is how long a call whose ctx has ended still waits for the
// settling of its key before it returns and leaves the rest to the
// background.
const settleGrace = time.Second

// settledEnqueue is enqueue, on the caller's goroutine, on a context that
// ends with ctx or with the session's life (a gone lease deletes the key
// anyway). A put that the caller gives up on may still be applied by
// etcd: when ctx ends before the answer, the enqueue is sent again in the
// background, on a context that the caller's cannot cancel (see
// resettle), so that the key's state is known and the key deleted by
// revision, and it is suspect (see Session.suspect) while the attempt cut
// short may still be applied; the call returns ctx.Err() after waiting up
// to settleGrace for that, so that in the usual case the key is deleted
// before it returns. On every error, the key has been handed back to the
// session: once its enqueue has settled, it is deleted if it was written;
// if the outcome stays unknown, it is deleted by lease now and again while
// it may still be applied.
//
// Until issue 52 the enqueue ran on a goroutine of its own, so that its
// first attempt was awaited, not cut, when ctx ended; that cost a
// goroutine, a channel and two hand-offs per Lock (about 5 allocations
// and most of the client CPU above etcd's package, BenchmarkLockUnlock).
func settledEnqueue(ctx context.Context, s *Session, r rule, e *keyOps) (queued, error) {
	ectx, cancel := context.WithCancel(ctx)
	stopLife := context.AfterFunc(s.life, cancel)
	q, err := enqueue(ectx, cancel, s, r, e)
	stopLife()
	cancel()
	if ctx.Err() != nil {
		if err != nil && s.life.Err() == nil {
			resettle(ctx, s, r, e) // cut short: the outcome is unknown
		} else {
			settle(ctx, s, e.key, q, err)
		}
		return queued{}, ctx.Err()
	}
	if err != nil {
		settle(ctx, s, e.key, q, err)
		if s.life.Err() != nil {
			// The session's end cuts the enqueue short (see stopLife),
			// and is the better reason.
			return queued{}, context.Cause(s.life)
		}
		return queued{}, err
	}
	return q, nil
}

// resettle settles the key of e, whose enqueue its caller's ctx cut short
// with its outcome unknown: it sends the enqueue again in the background,
// on a context that ctx cannot cancel, for enqueueSettle at most, and
// settles the key by its answer (the key found there, or written then, is
// deleted by revision; see settle). An attempt applied twice only finds
// the key. If the resend finds the key, the attempt cut short was applied
// and cannot be again; otherwise it may still be, after the key was
// deleted, and write it anew: the key is then suspect (see
// Session.suspect), and only then, so that a cut enqueue that had been
// applied costs its session's sweeper no reads. It waits up to
// settleGrace for the background's settling.
func resettle(ctx context.Context, s *Session, r rule, e *keyOps) {
	if !s.startSettling() {
		s.unuse(ctx, e.key, 0, keep) // Close has begun: its revoke deletes the key
		return
	}
	done := make(chan struct{})
	go func() {
		defer s.settling.Done()
		defer close(done)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), enqueueSettle)
		defer cancel()
		defer context.AfterFunc(s.life, cancel)()
		q, err := enqueue(sctx, cancel, s, r, e)
		if err == nil && !q.adopted {
			s.suspect(e.key) // written or refused now: the attempt cut short may still be applied
		}
		settle(ctx, s, e.key, q, err)
	}()
	t := time.NewTimer(settleGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
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

// enqueue puts e.key with value e.val on the session's lease at the end
// of the queue of r, unless the session has it already, in which case it
// keeps the key's place and value (adopted: the caller judges it, and
// sets the value if it must). It takes one transaction, made of e's,
// sent on ctx, which is the enqueue's own and ends with the session's
// life (see settledEnqueue), and which cancel cancels.
// A new key is written only if r's guard allows it; the transaction also
// reads the newest limit+1 keys of over older than it, which decide
// whether it holds (it is the newest key, so nothing can come between).
//
// Mutex.Lock and TryLock leave an adopted key's value as it is (etcd's
// Mutex writes "", etcdlock a description of its holder); Campaign sets
// it (see acquireAttempt.adopt), as etcd's does.
//
// A lease that no longer exists gives an error matching ErrSessionExpired
// and ErrLeaseNotFound, and ends the session's life.
func enqueue(ctx context.Context, cancel context.CancelFunc, s *Session, r rule, e *keyOps) (queued, error) {
	op := e.send
	if r.guard != nil {
		then := []clientv3.Op{r.guard(e.then, r.refused)}
		op = func(ctx context.Context) (*clientv3.TxnResponse, error) { return e.txn(ctx, then) }
	}
	// Asked as ask does: an attempt applied beside the one answered only
	// finds the key, as after a lost answer, and writes nothing (the
	// answer's key is adopted when the answered attempt was the later).
	// One applied later still, after the key was used and deleted, would
	// write it anew: the key is suspect (deleted by lease while nobody
	// uses it, see Session.suspect) for as long as that may happen.
	resp, sent, err := ownAsk(ctx, cancel, s, request.Write, op)
	if sent > 1 {
		s.suspect(e.key)
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return queued{}, s.leaseGone(err)
	}
	if err != nil {
		return queued{}, err
	}
	return r.placed(e.key, e.val, resp), nil
}

// keyOps are the operations on one key that stay the same from one
// acquisition of it to the next: the parts of its enqueue's transaction
// (the comparison that the key does not exist, its put, with its value on
// the session's lease, and the read of the newest keys of the rule's
// over; its read), and its deletion, for the release of a hold of it.
// clientv3 builds each anew with its options, and applies a read's
// options twice more to check them: 31 allocations and about 3.5 µs per
// Lock and Unlock (with the slices that If, Then and Else are given),
// which a Mutex, an RWMutex, a Semaphore and an Election make once for as
// long as their key, value and rule stay the same (see fits; issue 52).
// An Op and a Cmp only hold what they were made with, and each
// transaction copies what it sends, so one serves every transaction, and
// every attempt of one.
type keyOps struct {
	s        *Session
	key, val string
	// what the read of the newest keys was made for: the rule's over,
	// its limit, and whether it weighs (see newestKeys).
	over   string
	limit  int
	weighs bool

	absent []clientv3.Cmp // the key does not exist
	then   []clientv3.Op  // its put, and the read of the newest keys
	orElse []clientv3.Op  // its read
	del    deletion       // for the release of a hold of it

	// send sends the enqueue's transaction (see txn), for a rule without
	// a guard.
	send func(ctx context.Context) (*clientv3.TxnResponse, error)
}

// newKeyOps makes the operations on key of an acquisition by r with
// value val on session s.
func newKeyOps(s *Session, r rule, key, val string) *keyOps {
	e := &keyOps{
		s: s, key: key, val: val,
		over: r.over, limit: r.limit, weighs: r.weigh != nil,
		absent: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		then:   []clientv3.Op{clientv3.OpPut(key, val, clientv3.WithLease(s.id)), clientv3.OpGet(r.over, r.newestKeys()...)},
		orElse: []clientv3.Op{clientv3.OpGet(key)},
		del:    deletionOf(key),
	}
	e.send = func(ctx context.Context) (*clientv3.TxnResponse, error) { return e.txn(ctx, e.then) }
	return e
}

// txn sends the enqueue's transaction, with then for its put and read of
// the newest keys (e.then, or what r.guard made of it).
func (e *keyOps) txn(ctx context.Context, then []clientv3.Op) (*clientv3.TxnResponse, error) {
	return e.s.client.Txn(ctx).
		If(e.absent...).
		Then(then...).
		Else(e.orElse...).
		Commit()
}

// fits reports whether e (nil: none) are the operations on key of an
// acquisition by r with value val on session s.
func (e *keyOps) fits(s *Session, r rule, key, val string) bool {
	return e != nil && e.s == s && e.key == key && e.val == val &&
		e.over == r.over && e.limit == r.limit && e.weighs == (r.weigh != nil)
}

// newestKeys returns the options of the enqueue's read of the newest
// keys of r.over: limit+2 of them, the key itself, when it is in over, and
// limit+1 older keys (see olderKeys). Those of a rule of limit 1 that
// reads keys alone (every rule but a Semaphore's) are made once: making
// them cost four allocations per enqueue (issue 52).
func (r rule) newestKeys() []clientv3.OpOption {
	if r.limit == 1 && r.weigh == nil {
		return newestOfOne
	}
	return r.olderKeys(clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(int64(r.limit)+2))
}

// newestOfOne is newestKeys of a rule of limit 1 that reads keys alone.
// An OpOption only sets fields of the Op it is applied to, so one may
// serve every read.
var newestOfOne = mutexRule("").olderKeys(clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(3))

// placed reads where the enqueue of key, with value val, by rule r left
// the key, from its transaction's response: found there already
// (adopted), refused by r's guard or check (err), or written at the end
// of the queue, holding or waiting for what r.judge (or r.weigh) says.
func (r rule) placed(key, val string, resp *clientv3.TxnResponse) queued {
	q := queued{hdr: resp.Header, ahead: -1}
	if !resp.Succeeded {
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		q.rev, q.mod, q.val, q.adopted = kv.CreateRevision, kv.ModRevision, string(kv.Value), true
		return q
	}
	rs := resp.Responses
	if r.guard != nil {
		var ok bool
		if ok, rs = unnest(rs); !ok {
			q.err = r.refuse(rs)
			return q
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
		return q
	}
	q.holds, q.next = r.judge(older)
	if r.check != nil {
		q.err = r.check(older)
	}
	return q
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
