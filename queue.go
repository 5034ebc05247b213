package concurrency

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file is the queue shared by Mutex and Election: how a session takes
// a place in a lock name's queue (enqueue) and turns it into a hold, at
// once or after a wait (acquire). A lock name pfx is a queue of keys
// pfx+hex(lease), ordered by create revision; the key with the smallest
// create revision holds the lock. The wait is in waitdeletes.go, the
// tenure that follows in hold.go.

// lastTwo selects the two newest keys under a prefix: in the transaction that
// creates a waiter's key, its own key and its predecessor.
var lastTwo = append(clientv3.WithLastCreate(), clientv3.WithLimit(2))

// acquire takes a place for key, with value val, in the queue pfx (see
// enqueue) and, if wait, waits until key is first (see waitDeletes). It
// returns the hold, and the header of the read that showed the key first.
// waiting, if not nil, is called with the key's create revision when a
// wait starts, and with 0 when it fails.
//
// The wait ends with ctx.Err() when ctx ends, and with an error matching
// ErrSessionExpired when the session ends or the key is found deleted; it
// outlasts a cluster without a leader and lost
// connections, keeping its place. Without wait, a key that is not first
// gives ErrLocked. On every error, the key has been released: deleted,
// within a bounded time, unless another Mutex or Election of the session
// still uses it (see Session.unuse).
//
// An enqueue that fails may still be applied by etcd later (the request
// timed out on the client, not on the server). Its key is deleted at once
// by lease, and the session deletes it again after each renewal for a
// while (lateApplyWindow) whenever nobody uses it, so that a late write
// cannot leave a key in the queue for the life of the session.
func acquire(ctx context.Context, s *Session, pfx, key, val string, update, wait bool, waiting func(rev int64)) (*hold, *pb.ResponseHeader, error) {
	if s.life.Err() != nil {
		return nil, nil, context.Cause(s.life)
	}
	if err := s.use(ctx, key, true); err != nil {
		return nil, nil, err
	}
	q, err := enqueue(ctx, s, pfx, key, val, update)
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
	if q.first {
		return newHold(s, key, q.rev, q.hdr.Revision), q.hdr, nil
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
	hdr, err := waitDeletes(wctx, s, pfx, key, q.rev, q.pred, q.hdr.Revision)
	if err == nil {
		return newHold(s, key, q.rev, hdr.Revision), hdr, nil
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

// queued is where enqueue left a key in its queue.
type queued struct {
	rev   int64              // the key's create revision
	first bool               // the key is the oldest in the queue: it holds the lock
	pred  *mvccpb.KeyValue   // the newest older key, when known and not first
	hdr   *pb.ResponseHeader // of the transaction
}

// enqueue puts key with value val on the session's lease at the end of the
// queue pfx, unless the session has it already, in which case it keeps the
// key's place and sets its value to val if it differs. It takes one
// transaction, which also reads what decides ownership: when the key is
// created it is the newest, so the two newest keys are it and its
// predecessor; when it exists, the oldest key tells whether it is first.
//
// Mutex.Lock and TryLock enqueue with update false: a lock key's value is
// left as it is (etcd's Mutex writes "", etcdlock a description of its
// holder). Election.Campaign enqueues with update true, as etcd's does.
//
// A lease that no longer exists gives an error matching ErrSessionExpired
// and ErrLeaseNotFound, and ends the session's life.
func enqueue(ctx context.Context, s *Session, pfx, key, val string, update bool) (queued, error) {
	orElse := []clientv3.Op{clientv3.OpGet(key), clientv3.OpGet(pfx, clientv3.WithFirstCreate()...)}
	if update {
		orElse = append(orElse, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "!=", val)},
			[]clientv3.Op{clientv3.OpPut(key, val, clientv3.WithLease(s.id))},
			nil))
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val, clientv3.WithLease(s.id)), clientv3.OpGet(pfx, lastTwo...)).
		Else(orElse...).
		Commit()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return queued{}, s.leaseGone(err)
	}
	if err != nil {
		return queued{}, err
	}
	q := queued{hdr: resp.Header}
	if resp.Succeeded {
		q.rev = resp.Header.Revision
		kvs := resp.Responses[1].GetResponseRange().Kvs
		q.first = len(kvs) < 2
		if !q.first {
			q.pred = kvs[1]
		}
		return q, nil
	}
	q.rev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
	first := resp.Responses[1].GetResponseRange().Kvs
	q.first = len(first) == 0 || first[0].CreateRevision == q.rev
	return q, nil
}
