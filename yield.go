package concurrency

import (
	"context"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds yield requests (Curator's revocable locks, Kubernetes'
// coordinated leader election): anyone may ask the holders of a lock name
// to let go (RequestYield), and a hold whose session opted in (WithYield)
// ends with ErrYieldRequested when asked. A request is one key beside the
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

// yieldAttempts bounds how often RequestYield reads the holders again when
// they changed between its read and its write.
const yieldAttempts = 3

// RequestYield asks the holders of the lock or election name to let go:
// the holder of a Mutex, an Election's leader, every holder of a Semaphore
// or the holders of an RWMutex, as Inspect finds them. It writes one key
// per holder (see YieldPrefix), in one transaction that applies only if
// every one of those holds is still the same (their keys' create
// revisions), and returns the holders it asked. A hold whose session was
// created WithYield (and Lead WithLeadYield) ends, with ErrYieldRequested
// as the cause of its Ctx, within milliseconds once its Ctx has been
// asked for; a hold without it, and the holders of etcd's package and
// `etcdctl lock`, keep the lock: RequestYield cannot tell them apart, so
// its result says whom it asked, not who will yield. After a Semaphore's
// limit shrank, holders beyond the new limit, which Inspect shows as
// waiting (it judges by the current limit), are not asked.
//
// It blocks for Inspect's round trips and one transaction; if the holders
// changed in between, it reads again, three times at most. It returns an
// error matching ErrNotHeld if nobody holds the name, ErrNilClient and
// ErrInvalidPrefix for bad input, and ctx.Err() when ctx ends. On error
// nothing was written, unless the transaction's answer was lost (ctx
// ended while it was in flight, or the connection failed on its last
// attempt): then it may have applied, and the holders may yield. (A holder
// that asks on the context of its own hold sees just that: its hold ends
// as the request applies, and the request's answer is lost with it.)
func RequestYield(ctx context.Context, c *clientv3.Client, name string) ([]QueueKey, error) {
	for attempt := 1; ; attempt++ {
		q, err := Inspect(ctx, c, name)
		if err != nil {
			return nil, err
		}
		hs := q.Holders()
		if len(hs) == 0 {
			return nil, fmt.Errorf("%w: %q", ErrNotHeld, name)
		}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for _, h := range hs {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(h.Key), "=", h.CreateRevision))
			var opts []clientv3.OpOption
			if h.Lease != clientv3.NoLease {
				opts = append(opts, clientv3.WithLease(h.Lease))
			}
			ops = append(ops, clientv3.OpPut(yieldKey(h.Key), strconv.FormatInt(h.CreateRevision, 10), opts...))
		}
		resp, err := c.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			// A lease that expired since the read fails the put: read
			// again, as for a holder that changed.
			if ctx.Err() != nil || attempt == yieldAttempts {
				return nil, fmt.Errorf("concurrency: RequestYield %q: %w", name, err)
			}
			continue
		}
		if resp.Succeeded {
			return hs, nil
		}
		if attempt == yieldAttempts {
			return nil, fmt.Errorf("concurrency: RequestYield %q: the holders changed %d times while asking", name, yieldAttempts)
		}
	}
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
		if missed(wr, seen) {
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

// WithYield makes every hold taken on the session (Mutex, Semaphore,
// RWMutex, Campaign) let go when RequestYield asks it to: its Ctx is
// cancelled with cause ErrYieldRequested, and the holder then releases it
// as after a loss (Do does). The key stays until the holder releases it,
// or its session ends; the release (Unlock, Resign, Release, Do) deletes
// the request in the same transaction as the key. A request for a hold
// that ended otherwise stays on its lease until the session ends. A hold
// watches for requests only once its Ctx was
// asked for, as it watches its key: one more watch per hold, on the same
// stream. The default is off: requests are ignored.
func WithYield() SessionOption {
	return func(o *sessionOptions) { o.yield = true }
}

// WithLeadYield makes Lead's leadership yield to RequestYield: the term's
// context is cancelled with cause ErrYieldRequested, and once fn has
// returned Lead closes the term's session (which deletes its key, so that
// the next candidate is elected) and campaigns again, behind the
// candidates already waiting.
func WithLeadYield() LeadOption {
	return func(o *leadOptions) { o.sessionOpts = append(o.sessionOpts, WithYield()) }
}
