package concurrency

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds the queue algorithm shared by Mutex and Election. A lock
// name pfx is a queue of keys pfx+hex(lease), ordered by create revision;
// the key with the smallest create revision holds the lock. A waiter watches
// only its predecessor, the newest key older than its own (so a delete wakes
// one waiter, not the whole queue), and its own key (so it returns as soon
// as its own key or lease is gone, etcd #19597).
//
// The watch on the predecessor starts at the server's current revision
// rather than at the revision of the read that found the key. etcd serves a
// watch that starts at or below its current revision from its "unsynced"
// set, on a 100 ms tick; that tick is most of the ~100 ms that etcd's
// package spends on each contended handoff. A watch from the current
// revision is synced at once; the revision in its created response tells
// whether anything could have happened between the read and the watch, and
// only then is the key read again. The watch on the waiter's own key (see
// hold), whose deletion is rare and off the handoff path, starts right
// after the read and never costs a read (see start).

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
// ErrSessionExpired when the session ends or the key is deleted (the hold's
// watch sees it). Without wait, a key that is not first gives ErrLocked.
// On every error, the key has been released: deleted, within a bounded
// time, unless another Mutex or Election of the session still uses it (see
// Session.unuse).
func acquire(ctx context.Context, s *Session, pfx, key, val string, update, wait bool, waiting func(rev int64)) (*hold, *pb.ResponseHeader, error) {
	if s.ctx.Err() != nil {
		return nil, nil, context.Cause(s.ctx)
	}
	s.use(key)
	q, err := enqueue(ctx, s, pfx, key, val, update)
	if err != nil {
		// The put may have been applied: delete the key if it is ours.
		s.unuse(ctx, key, 0, true)
		return nil, nil, err
	}
	if q.first {
		return newHold(s, key, q.rev, q.hdr.Revision, nil), q.hdr, nil
	}
	if !wait {
		s.unuse(ctx, key, q.rev, true)
		return nil, nil, ErrLocked
	}

	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.ctx, func() { cancel(context.Cause(s.ctx)) })
	defer stop()
	h := newHold(s, key, q.rev, q.hdr.Revision, cancel)
	if waiting != nil {
		waiting(q.rev)
	}
	hdr, err := waitDeletes(wctx, s, pfx, key, q.rev, q.pred, q.hdr.Revision)
	if err == nil {
		h.held()
		return h, hdr, nil
	}
	// Say why the wait ended: the caller's context first, so that
	// errors.Is(err, ctx.Err()) holds, then the session or the key.
	if ctx.Err() != nil {
		err = ctx.Err()
	} else if wctx.Err() != nil {
		err = context.Cause(wctx)
	}
	h.end(err)
	if waiting != nil {
		waiting(0)
	}
	s.unuse(ctx, key, q.rev, true)
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
// A lease that no longer exists gives an error matching ErrSessionExpired.
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
		s.check()
		return queued{}, fmt.Errorf("%w: lease %x: %w", ErrSessionExpired, int64(s.id), err)
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

// waitDeletes blocks until key, created at rev, is the oldest key under pfx,
// and returns the header of the read that showed it. pred is the newest key
// older than key as last read at revision seenRev, or nil if unknown. It
// watches only pred; the key's own deletion ends the wait through ctx (see
// hold), or is found by the read that follows each deletion of a
// predecessor (ErrSessionExpired). It leaves key in place: the caller
// cleans up.
func waitDeletes(ctx context.Context, s *Session, pfx, key string, rev int64, pred *mvccpb.KeyValue, seenRev int64) (*pb.ResponseHeader, error) {
	for {
		if pred != nil {
			if err := waitDelete(ctx, s.client, string(pred.Key), pred.CreateRevision, seenRev, fromNow); err != nil {
				return nil, err
			}
		}
		// One read re-checks both that key still exists and which key, if
		// any, is now its predecessor.
		resp, err := s.client.Txn(ctx).Then(
			clientv3.OpGet(key),
			clientv3.OpGet(pfx, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))...),
		).Commit()
		if err != nil {
			return nil, err
		}
		own := resp.Responses[0].GetResponseRange().Kvs
		if len(own) == 0 || own[0].CreateRevision != rev {
			s.check()
			return nil, fmt.Errorf("%w: key %q was deleted while waiting", ErrSessionExpired, key)
		}
		older := resp.Responses[1].GetResponseRange().Kvs
		if len(older) == 0 {
			return resp.Header, nil
		}
		pred, seenRev = older[0], resp.Header.Revision
	}
}

// start says where waitDelete starts its watch.
type start int

const (
	// fromNow starts the watch at the server's current revision, so that
	// etcd serves it from its synced set at once, and reads the key again
	// if the server has moved past the caller's read: the promptest notice,
	// at the cost of that read on a busy cluster.
	fromNow start = iota
	// fromSeen starts the watch right after the caller's read: never an
	// extra read, but if the server has moved past that read, etcd serves
	// the watch from its unsynced set, up to about 100 ms late. For keys
	// whose deletion is rare and off the handoff path.
	fromSeen
)

// waitDelete blocks until key, which had create revision createRev in a read
// at revision seenRev, is deleted or replaced (nil), ctx ends (ctx.Err()),
// or watching fails for a reason other than compaction. After compaction
// (the watch could not resume) it reads the key again and watches anew.
func waitDelete(ctx context.Context, client *clientv3.Client, key string, createRev, seenRev int64, from start) error {
	for {
		err := watchDelete(ctx, client, key, createRev, seenRev, from)
		if !errors.Is(err, rpctypes.ErrCompacted) {
			return err
		}
		resp, err := client.Get(ctx, key)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != createRev {
			return nil
		}
		seenRev = resp.Header.Revision
	}
}

// watchDelete is one watch of waitDelete.
func watchDelete(ctx context.Context, client *clientv3.Client, key string, createRev, seenRev int64, from start) error {
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify(), clientv3.WithFilterPut()}
	if from == fromSeen {
		opts = append(opts, clientv3.WithRev(seenRev+1))
	}
	return watchUntil(ctx, client, key, func(wr clientv3.WatchResponse) (bool, error) {
		if from == fromNow && wr.Created && wr.Header.Revision > seenRev {
			// Something was written between the read at seenRev and the
			// watch's start: read the key once more.
			resp, err := client.Get(ctx, key)
			if err != nil {
				return false, err
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != createRev {
				return true, nil
			}
		}
		for _, ev := range wr.Events {
			// A member that lags behind the read at seenRev may replay the
			// deletion of an older incarnation of the key: only a deletion
			// after createRev ends this one.
			if ev.Type == mvccpb.DELETE && ev.Kv.ModRevision > createRev {
				return true, nil
			}
		}
		return false, nil
	}, opts...)
}

// watchUntil watches key with opts until fn, called on each response in
// order, returns true or an error. It returns nil when fn returned true,
// fn's error, or the error that ended the watch (compaction, no leader,
// lost connection, ctx). The watch requires a leader: on a member without
// one it ends with an error instead of waiting for events that never come.
func watchUntil(ctx context.Context, client *clientv3.Client, key string, fn func(clientv3.WatchResponse) (bool, error), opts ...clientv3.OpOption) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range client.Watch(wctx, key, opts...) {
		if err := wr.Err(); err != nil {
			return err
		}
		if done, err := fn(wr); done || err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("concurrency: watch on %q closed", key)
}
