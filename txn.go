package concurrency

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// guardedTxn is the transaction of Mutex.Txn and Election.Txn: the caller's
// transaction nested inside one that first compares the create revision of
// the hold's key. Nesting, rather than adding the comparison to the
// caller's If, keeps the caller's Else from running when the hold is gone.
type guardedTxn struct {
	ctx    context.Context
	client *clientv3.Client // nil when there was no hold
	key    string
	rev    int64 // create revision of key during the hold

	cmps         []clientv3.Cmp
	thens, elses []clientv3.Op
}

// newGuardedTxn is the transaction of Mutex.Txn and Election.Txn: guarded
// by key having create revision rev if held, and failing with ErrLockLost
// otherwise.
func newGuardedTxn(ctx context.Context, s *Session, key string, rev int64, held bool) *guardedTxn {
	t := &guardedTxn{ctx: ctx, key: key}
	if held {
		t.client, t.rev = s.client, rev
	}
	return t
}

func (t *guardedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.cmps = append(t.cmps, cs...)
	return t
}

func (t *guardedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.thens = append(t.thens, ops...)
	return t
}

func (t *guardedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.elses = append(t.elses, ops...)
	return t
}

func (t *guardedTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.client == nil {
		return nil, fmt.Errorf("%w: not held", ErrLockLost)
	}
	resp, err := t.client.Txn(t.ctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)).
		Then(clientv3.OpTxn(t.cmps, t.thens, t.elses)).
		Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("%w: key %q no longer has create revision %d", ErrLockLost, t.key, t.rev)
	}
	inner := resp.Responses[0].GetResponseTxn()
	return &clientv3.TxnResponse{Header: resp.Header, Succeeded: inner.Succeeded, Responses: inner.Responses}, nil
}

// runHold runs fn for Mutex.Do and Election.Do: with a context that ends
// with ctx or with the hold (holdCtx), then releases the hold with a fresh
// context bounded by cleanupTimeout. The release is deferred, so that a
// panic in fn that the caller recovers (net/http recovers each request's)
// does not leave the lock held for the life of the session.
func runHold(ctx, holdCtx context.Context, fn func(context.Context) error, release func(context.Context) error) (err error) {
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(holdCtx, func() { cancel(context.Cause(holdCtx)) })
	defer func() {
		stop()
		cancel(nil)
		var lost error
		if holdCtx.Err() != nil {
			lost = context.Cause(holdCtx)
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer rcancel()
		err = errors.Join(err, lost, release(rctx))
	}()
	return fn(fctx)
}
