package concurrency

import (
	"context"
	"errors"
	"fmt"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file is the queue shared by every primitive: how a session takes a
// place in a lock name's queue (enqueue) and turns it into a hold, at once
// or after a wait (acquire). A lock name is a queue of keys under its
// prefix, ordered by create revision. What differs from one primitive to
// another is a rule: which older keys count against a key, and how many of
// them it may have and still hold. The wait is in waitdeletes.go, the
// tenure that follows in hold.go.

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
	// kinds of lock that over does not take in: enqueue refuses the name,
	// with ErrLockKind, if the range holds a key.
	foreign string
	kind    string // for metrics and traces: kindMutex, kindElection...
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
// another user of the session still uses it (see Session.unuse).
//
// An enqueue that fails may still be applied by etcd later (the request
// timed out on the client, not on the server). Its key is deleted at once
// by lease, and the session deletes it again after each renewal for a
// while (lateApplyWindow) whenever nobody uses it, so that a late write
// cannot leave a key in the queue for the life of the session.
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
	if err := s.use(ctx, key, true); err != nil {
		return nil, nil, err
	}
	q, err := enqueue(ctx, s, r, key, val, update)
	if errors.Is(err, ErrLeaseNotFound) {
		// The transaction was refused whole: nothing was written.
		s.unuse(ctx, key, 0, keep)
		return nil, nil, err
	}
	if err != nil {
		// The put may have been applied, or may be yet: delete the key if
		// it is ours, now and for a while.
		s.suspect(key)
		s.unuse(ctx, key, 0, deleteNow)
		return nil, nil, err
	}
	a.enqueued(q)
	if q.err != nil {
		s.unuse(ctx, key, q.rev, deleteNow)
		return nil, nil, q.err
	}
	if q.holds {
		return granted(ctx, s, key, q.rev, q.hdr)
	}
	if !wait {
		s.unuse(ctx, key, q.rev, deleteNow)
		return nil, nil, ErrLocked
	}

	// The wait ends with ctx, or with the session's life.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.life, func() { cancel(context.Cause(s.life)) })
	defer stop()
	if waiting != nil {
		waiting(q.rev)
	}
	a.wait()
	hdr, err := waitDeletes(wctx, s, r, key, q.rev, q.next, q.hdr.Revision)
	if err == nil && s.life.Err() == nil {
		if r.limit > 1 {
			promote(ctx, s, key, q.rev)
		}
		return newHold(s, key, q.rev, hdr.Revision), hdr, nil
	}
	if err == nil {
		err = context.Cause(s.life) // see granted
	}
	// Say why the wait ended: the caller's context first, so that
	// errors.Is(err, ctx.Err()) holds, then the session.
	if ctx.Err() != nil {
		err = ctx.Err()
	} else if wctx.Err() != nil {
		err = context.Cause(wctx)
	}
	if waiting != nil {
		waiting(0)
	}
	s.unuse(ctx, key, q.rev, deleteNow)
	return nil, nil, err
}

// granted turns a read that showed key holding into a hold, unless the
// session's life ended meanwhile: the session ends at its conservative
// deadline, before the server can expire the lease, so a grant that finds
// the session alive when the read has returned holds at that moment too,
// however old the read (a member that lagged). The wait's own cancellation
// by the session's end comes a goroutine later; this check does not wait
// for it.
func granted(ctx context.Context, s *Session, key string, rev int64, hdr *pb.ResponseHeader) (*hold, *pb.ResponseHeader, error) {
	if s.life.Err() != nil {
		s.unuse(ctx, key, rev, deleteNow)
		return nil, nil, context.Cause(s.life)
	}
	return newHold(s, key, rev, hdr.Revision), hdr, nil
}

// queued is where enqueue left a key in its queue.
type queued struct {
	rev   int64              // the key's create revision
	holds bool               // fewer than limit keys of over are older: the key holds
	next  target             // what to wait for, when known and the key does not hold
	err   error              // the rule's check refused the older keys
	ahead int64              // keys of over older than the key when it was created; -1 if it existed
	hdr   *pb.ResponseHeader // of the transaction
}

// enqueue puts key with value val on the session's lease at the end of the
// queue of r, unless the session has it already, in which case it keeps
// the key's place and sets its value to val if it differs. It takes one
// transaction, which also reads what decides whether the key holds: when
// the key is created it is the newest, so the newest limit+1 keys of over
// are what counts; when it exists, the oldest limit keys of over tell.
//
// Mutex.Lock and TryLock enqueue with update false: a lock key's value is
// left as it is (etcd's Mutex writes "", etcdlock a description of its
// holder). Election.Campaign enqueues with update true, as etcd's does.
//
// A lease that no longer exists gives an error matching ErrSessionExpired
// and ErrLeaseNotFound, and ends the session's life.
func enqueue(ctx context.Context, s *Session, r rule, key, val string, update bool) (queued, error) {
	newest := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(int64(r.limit) + 1)}
	oldest := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(int64(r.limit))}
	orElse := []clientv3.Op{clientv3.OpGet(key), clientv3.OpGet(r.over, oldest...)}
	if update {
		orElse = append(orElse, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "!=", val)},
			[]clientv3.Op{clientv3.OpPut(key, val, clientv3.WithLease(s.id))},
			nil))
	}
	then := []clientv3.Op{clientv3.OpPut(key, val, clientv3.WithLease(s.id)), clientv3.OpGet(r.over, newest...)}
	if r.foreign != "" {
		then = append(then, clientv3.OpGet(r.pfx, clientv3.WithRange(r.foreign), clientv3.WithLimit(1), clientv3.WithKeysOnly()))
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(then...).
		Else(orElse...).
		Commit()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return queued{}, s.leaseGone(err)
	}
	if err != nil {
		return queued{}, err
	}
	q := queued{hdr: resp.Header, ahead: -1}
	if resp.Succeeded {
		// Every key but this one is older: it was created last.
		q.rev = resp.Header.Revision
		q.ahead = resp.Responses[1].GetResponseRange().Count
		if strings.HasPrefix(key, r.over) {
			q.ahead-- // the key itself
		}
		var older []*mvccpb.KeyValue
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			if kv.CreateRevision != q.rev {
				older = append(older, kv)
			}
		}
		q.holds, q.next = r.judge(older, q.rev)
		if r.check != nil {
			q.err = r.check(older)
		}
		if r.foreign != "" {
			if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 && q.err == nil {
				q.err = fmt.Errorf("%w: %q", ErrLockKind, kvs[0].Key)
			}
		}
		return q, nil
	}
	q.rev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
	n := 0
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if kv.CreateRevision < q.rev {
			n++
		}
	}
	// The wait reads which key to wait for.
	q.holds = n < r.limit
	return q, nil
}

// judge says, from the newest keys of over older than a key created at
// rev (newest first, at most limit+1 of them), whether the key holds, and
// if not what it waits for: the newest older key or, when exactly limit
// keys are older and limit > 1, any deletion in over (see target).
func (r rule) judge(older []*mvccpb.KeyValue, rev int64) (holds bool, next target) {
	switch {
	case len(older) < r.limit:
		return true, target{}
	case len(older) == r.limit && r.limit > 1:
		return false, target{over: r.over}
	default:
		return false, target{key: string(older[0].Key), create: older[0].CreateRevision, mod: older[0].ModRevision, onPut: r.limit > 1}
	}
}

// promote tells the waiter behind key, which watches it (see target), that
// key now holds after a wait, by giving key a new revision without
// changing its value or lease: with limit > 1 that waiter may now be the
// first, whose turn comes with any holder's deletion rather than with
// key's. It is a hint: if it fails, that waiter still moves up when key is
// deleted, and every waiter re-reads the queue before it holds.
func promote(ctx context.Context, s *Session, key string, rev int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	retry(ctx, func() error {
		_, err := s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())).
			Commit()
		return err
	})
}
