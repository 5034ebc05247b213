package concurrency

import (
	"context"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/watch"
)

// This file holds the hold's side of yield requests (Curator's revocable
// locks, Kubernetes' coordinated leader election): anyone may ask the
// holders of a lock name to let go (RequestYield, an operators' call, in
// requestyield.go), and a hold whose session opted in (WithYield) ends
// with ErrYieldRequested when asked. A request is one key beside the
// lock key, outside the lock's prefix so that no queue ever sees it:
// YieldPrefix followed by the lock key, whose value is the token (create
// revision) of the hold it asks, and which is attached to the hold's own
// lease, so that it goes with the hold's session. A request for an earlier
// hold of the same key (a session that locks the name again) is ignored.

// YieldPrefix is the prefix of the keys by which RequestYield asks a hold
// to let go: YieldPrefix followed by the lock key. Each is attached to the
// lease of the key it asks, so it goes with that key's session.
const YieldPrefix = "/_concurrency/yield/"

// yieldKey is the key that asks the hold of lock key key to yield.
func yieldKey(key string) string { return YieldPrefix + key }

// asks reports whether kvs, a read of the yield key of a hold with token
// rev, holds a request for that hold.
func asks(kvs []*mvccpb.KeyValue, rev int64) bool {
	if len(kvs) == 0 {
		return false
	}
	tok, err := strconv.ParseInt(string(kvs[0].Value), 10, 64)
	return err == nil && tok == rev
}

// watchYield ends the hold with ErrYieldRequested once its yield key asks
// it to (see asks). It reads the key, then watches it from the server's
// current revision, with the package's liveness checks (see watchUntil);
// after a failed read or watch it waits (a growing backoff) and reads
// again, until ctx ends.
func (h *hold) watchYield(ctx context.Context) {
	key := yieldKey(h.key)
	var b backoff
	for ctx.Err() == nil {
		asked, err := h.waitYield(ctx, key, &b)
		if asked {
			if ctx.Err() == nil {
				h.finish(fmt.Errorf("%w: %q asks the hold of %q (token %d) to let go", ErrYieldRequested, key, h.key, h.rev))
			}
			return
		}
		if err != nil && !b.Sleep(ctx) {
			return
		}
	}
}

// waitYield is one read and watch of watchYield: it reports whether the
// hold was asked to yield, or the error that ended the watch.
func (h *hold) waitYield(ctx context.Context, key string, b *backoff) (bool, error) {
	resp, err := h.s.get(ctx, key)
	if err != nil {
		return false, err
	}
	if asks(resp.Kvs, h.rev) {
		return true, nil
	}
	seen := resp.Header.Revision
	asked := false
	err = watchUntil(ctx, nil, h.s.client, h.s.live(), key, b, func(wr clientv3.WatchResponse) (bool, error) {
		if watch.Missed(wr, seen) {
			// Written between the read and the watch's start, perhaps.
			resp, err := h.s.get(ctx, key)
			if err != nil {
				return false, err
			}
			asked = asks(resp.Kvs, h.rev)
			seen = resp.Header.Revision
			return asked, nil
		}
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision > seen && asks([]*mvccpb.KeyValue{ev.Kv}, h.rev) {
				asked = true
				return true, nil
			}
		}
		return false, nil
	}, clientv3.WithFilterDelete())
	return asked, err
}

// unasked is what a release of h adds to its delete on a session
// WithYield: the deletion of the yield request that asks h, if there is
// one, so that a session that holds many names in turn does not keep one
// request per name until it ends.
func (h *hold) unasked() []clientv3.Op {
	if !h.s.opts.yield {
		return nil
	}
	yk := yieldKey(h.key)
	return []clientv3.Op{clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(yk), "=", strconv.FormatInt(h.rev, 10))},
		[]clientv3.Op{clientv3.OpDelete(yk)}, nil)}
}
