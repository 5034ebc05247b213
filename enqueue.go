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
// it (see acquireAttempt.adopt), as etcd's does.
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
	resp, sent, err := sessionAsk(ctx, s, request.Write, func(ctx context.Context) (*clientv3.TxnResponse, error) {
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
	return r.placed(key, val, resp), nil
}

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
