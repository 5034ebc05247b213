package recipes

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// This file holds WorkQueue.Take: how a consumer finds and claims an item,
// and how consumers wait without a herd.
//
// Waiting consumers stand in a line of keys (name/wait/..., on their
// sessions' leases, ordered by create revision). Only the first watches the
// queue: a new item, a claim that ends (an expired lease, a Nack) or a new
// delayed item wakes it alone, and its timer the earliest delayed item's
// due time. Every other waiter watches the key of the one before it, so
// that when the first leaves (it took an item) the next becomes first: a
// delivery wakes two waiters, however many wait. A consumer that takes an
// item and sees another one ready leaves the line before claiming, so a
// burst is handed down the line at the speed of one read each. Every
// waiter also reads, every recheckInterval, whether an item is ready (the
// recipes' guard against a silent watch), so a first waiter that died
// holds the line up for that long at most, not for its lease's TTL.

// Take claims the next ready item (lowest priority number, then oldest;
// among the 32 oldest of that priority, at random, once it has lost a race
// for one to another consumer: see pick) on session s and returns its
// Delivery, blocking until there is one, ctx ends (an error matching
// ctx.Err()), or s ends (ErrSessionExpired of the root package; with
// ErrClientClosed too if its client was closed). The claim is a key on s's lease (or on a lease of its own
// under WithProcessingLimit): the item is not delivered to anyone else
// while it lives, and is delivered again once it ends without an Ack.
//
// An item already delivered WithMaxDeliveries times is moved to the dead
// letters instead, and Take goes on. Delayed items whose time has come by
// this consumer's clock are made ready on the way. If ctx ends while the
// claim is in flight, Take waits for its answer (up to 3 s more) and
// returns the Delivery if it was applied; a claim whose outcome stays
// unknown is deleted if it turns up later (each claim carries a nonce of
// its own, so no other claim of the item is taken for it). Take leaves no
// waiting key behind. A key under the queue's item or delay prefixes that
// does not parse (another primitive's or queue's under this name, one
// written by hand or by another version) makes Take return ErrNameInUse
// naming the key, rather than deliver around it: an operator removes it
// (etcdctl del) or renames one of the two.
func (q *WorkQueue) Take(ctx context.Context, s *concurrency.Session) (*Delivery, error) {
	if err := sessionOK(s); err != nil {
		return nil, err
	}
	if err := q.checkName(ctx); err != nil {
		return nil, err
	}
	// The wait ends with the session too: claims on an ended lease fail.
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.Ctx(), func() { cancel(sessionEnded(s)) })
	defer stop()
	w := waiter{q: q, s: s}
	defer w.leave(ctx)
	var b retry
	for {
		if tctx.Err() != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("recipes: take: %w", context.Cause(tctx))
		}
		d, due, err := q.tryTake(tctx, s, &w)
		if d != nil {
			return d, nil
		}
		if err == nil {
			err = w.wait(tctx, due)
		}
		// A lost leader or connection does not end a Take: it reads again
		// once etcd answers, as the recipes' waits do.
		if err != nil && tctx.Err() == nil {
			if !retryable(tctx, q.client, err) {
				return nil, waitErr(tctx, q.client, err)
			}
			b.sleep(tctx)
		}
	}
}

// item is an item key read from etcd.
type item struct {
	id    string // PPPPP/ID
	prio  uint16
	kv    *mvccpb.KeyValue
	rec   record
	count int // deliveries so far
}

// tryTake makes due delayed items ready, and claims the first ready item
// for s. It returns no Delivery and the earliest due time of the delayed
// items left (zero if none) when no item is ready.
func (q *WorkQueue) tryTake(ctx context.Context, s *concurrency.Session, w *waiter) (*Delivery, time.Time, error) {
	for spread := 1; ; spread = min(2*spread, maxSpread) {
		free, delayed, err := q.ready(ctx, max(spread, 2))
		if err != nil {
			return nil, time.Time{}, err
		}
		due, moved, err := q.promote(ctx, delayed)
		if err != nil || moved {
			if err != nil {
				return nil, time.Time{}, err
			}
			continue // read the items made ready
		}
		if len(free) == 0 {
			return nil, due, nil
		}
		if len(free) > 1 {
			w.leave(ctx) // the next waiter may take the second
		}
		it := pick(free, spread)
		if q.opts.maxDeliveries > 0 && it.count >= q.opts.maxDeliveries {
			if err := q.bury(ctx, it); err != nil {
				return nil, due, err
			}
			continue
		}
		d, err := q.claim(ctx, s, it)
		if d != nil || err != nil {
			return d, due, err
		}
		// Another consumer took it first: read again.
	}
}

// maxSpread bounds how many of the oldest ready items a Take that lost
// races picks from.
const maxSpread = 32

// pick returns the first of free, or, after lost races (spread > 1), one
// at random among the first spread of the first one's priority: consumers
// that all reach for the oldest item collide, and each collision costs a
// read and a transaction (etcd's recipe Queue has the same herd). Order
// within a priority is so FIFO while consumers do not collide, and within
// a window of spread items while they do.
func pick(free []item, spread int) item {
	n := 1
	for n < min(spread, len(free)) && free[n].prio == free[0].prio {
		n++
	}
	return free[rand.IntN(n)]
}

// ready returns up to n ready items (not claimed), in order, and the
// first delayed items, read in one transaction: the claims, as many items
// as there were claims last time plus n (claims are of items, so that many
// hold n ready ones, unless claims were added since: then it reads again
// with the new count), and up to promoteBatch delayed items.
func (q *WorkQueue) ready(ctx context.Context, n int) ([]item, []*mvccpb.KeyValue, error) {
	for {
		lim := q.claims.Load() + int64(n)
		resp, err := q.client.Txn(ctx).Then(
			clientv3.OpGet(q.pfx+"claim/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
			clientv3.OpGet(q.pfx+"item/", clientv3.WithPrefix(), clientv3.WithLimit(lim)),
			clientv3.OpGet(q.pfx+"delay/", clientv3.WithPrefix(), clientv3.WithLimit(promoteBatch))).Commit()
		if err != nil {
			return nil, nil, err
		}
		claims, items := resp.Responses[0].GetResponseRange(), resp.Responses[1].GetResponseRange()
		q.claims.Store(int64(len(claims.Kvs)))
		claimed := make(map[string]bool, len(claims.Kvs))
		for _, kv := range claims.Kvs {
			claimed[strings.TrimPrefix(string(kv.Key), q.pfx+"claim/")] = true
		}
		var free []item
		for _, kv := range items.Kvs {
			it, err := q.parseItem(kv, "item/")
			if err != nil {
				return nil, nil, err
			}
			if !claimed[it.id] && len(free) < n {
				free = append(free, it)
			}
		}
		if len(free) == n || !items.More || int64(len(claims.Kvs)+n) <= lim {
			return free, resp.Responses[2].GetResponseRange().Kvs, nil
		}
	}
}

// parseItem parses an item, delayed item or dead letter key of kind k.
func (q *WorkQueue) parseItem(kv *mvccpb.KeyValue, k string) (item, error) {
	id, prio, err := q.idOf(kv.Key, k)
	if err != nil {
		return item{}, err
	}
	rec, err := parseRecord(kv.Value)
	if err != nil {
		return item{}, fmt.Errorf("%w (key %q)", err, kv.Key)
	}
	return item{id: id, prio: prio, kv: kv, rec: rec, count: rec.base + int(kv.Version) - 1}, nil
}

// claim claims it for s, and returns the Delivery, or nil if the item
// changed or was claimed since it was read. See Take for a claim cut
// short by ctx.
func (q *WorkQueue) claim(ctx context.Context, s *concurrency.Session, it item) (*Delivery, error) {
	lease, own, err := q.claimLease(ctx, s)
	if err != nil {
		return nil, err
	}
	ik, ck := q.itemKey(it.id), q.claimKey(it.id)
	// The claim's value is the session's lease and a nonce: this attempt's
	// alone, so that an attempt whose answer is lost is told from another
	// claim of the item on the same session (settleClaim, sweepLate).
	val := fmt.Sprintf("%x %016x", int64(s.Lease()), rand.Uint64())
	wctx, stop := settling(ctx)
	defer stop()
	resp, err := q.client.Txn(wctx).
		If(clientv3.Compare(clientv3.ModRevision(ik), "=", it.kv.ModRevision),
			clientv3.Compare(clientv3.CreateRevision(ck), "=", 0)).
		Then(clientv3.OpPut(ck, val, clientv3.WithLease(lease)),
			clientv3.OpPut(ik, "", clientv3.WithIgnoreValue())).
		Commit()
	var token int64
	switch {
	case err == nil && resp.Succeeded:
		token = resp.Header.Revision
	case err != nil:
		token = q.settleClaim(ctx, s, ck, val, own)
	}
	if token == 0 {
		if own {
			revoke(ctx, q.client, lease)
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				// The processing limit's lease ended before the claim
				// was applied (commits slower than the limit): nothing
				// was written, and the session lives; read again.
				return nil, nil
			}
		}
		return nil, leaseGone(writeErr(ctx, err))
	}
	it.count++
	return newDelivery(q, s, it, token, lease, own), nil
}

// claimLease returns the lease a claim goes on: s's, or a new one of the
// processing limit's TTL, never renewed.
func (q *WorkQueue) claimLease(ctx context.Context, s *concurrency.Session) (clientv3.LeaseID, bool, error) {
	if q.opts.procLimit == 0 {
		return s.Lease(), false, nil
	}
	ttl := int64(math.Ceil(q.opts.procLimit.Seconds()))
	resp, err := q.client.Grant(ctx, ttl)
	if err != nil {
		return 0, false, err
	}
	return resp.ID, true, nil
}

// settleClaim reads, after a claim whose reply was lost, whether the claim
// of value val is there, and returns its revision, or 0 if it is not; a
// claim of that value that turns up later on s's lease is deleted then
// (sweepLate; one on its own lease goes with that lease, which the caller
// revokes).
func (q *WorkQueue) settleClaim(ctx context.Context, s *concurrency.Session, ck, val string, own bool) int64 {
	rctx, cancel := cleanup(ctx)
	defer cancel()
	resp, err := q.client.Get(rctx, ck)
	if err == nil && len(resp.Kvs) > 0 && string(resp.Kvs[0].Value) == val {
		return resp.Kvs[0].CreateRevision
	}
	if !own {
		sweepLate(s, ck, val)
	}
	return 0
}

// leaseGone adds the root package's ErrSessionExpired and
// ErrLeaseNotFound to err if etcd refused a key on the session's lease
// because the lease is gone (nothing was written then).
func leaseGone(err error) error {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("%w: %w: %w", concurrency.ErrSessionExpired, concurrency.ErrLeaseNotFound, err)
	}
	return err
}

// revoke revokes lease, bounded as cleanup.
func revoke(ctx context.Context, c *clientv3.Client, lease clientv3.LeaseID) {
	rctx, cancel := cleanup(ctx)
	defer cancel()
	_, _ = c.Revoke(rctx, lease) // it ends with its TTL otherwise
}

// bury moves it, if still unclaimed and unchanged, to the dead letters.
func (q *WorkQueue) bury(ctx context.Context, it item) error {
	ik := q.itemKey(it.id)
	rec := it.rec
	rec.base = it.count
	wctx, stop := settling(ctx)
	defer stop()
	_, err := q.client.Txn(wctx).
		If(clientv3.Compare(clientv3.ModRevision(ik), "=", it.kv.ModRevision),
			clientv3.Compare(clientv3.CreateRevision(q.claimKey(it.id)), "=", 0)).
		Then(clientv3.OpDelete(ik), clientv3.OpPut(q.deadKey(it.id), rec.encode())).
		Commit()
	return writeErr(ctx, err)
}

// promote makes the delayed items of kvs (the first ones, in due order)
// whose due time has passed, by this process's clock, ready. It reports
// whether it moved any, and the due time of the first one left (zero if
// none).
func (q *WorkQueue) promote(ctx context.Context, kvs []*mvccpb.KeyValue) (time.Time, bool, error) {
	moved := false
	for _, kv := range kvs {
		due, err := q.dueOf(kv.Key)
		if err != nil {
			return time.Time{}, moved, err
		}
		if due.After(time.Now()) {
			return due, moved, nil
		}
		it, err := q.parseItem(kv, "delay/")
		if err != nil {
			return time.Time{}, moved, err
		}
		wctx, stop := settling(ctx)
		_, err = q.client.Txn(wctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(string(kv.Key)), clientv3.OpPut(q.itemKey(it.id), string(kv.Value))).Commit()
		stop()
		if err != nil {
			return time.Time{}, moved, writeErr(ctx, err)
		}
		moved = true
	}
	return time.Time{}, moved, nil
}

// dueOf parses the due time of a delayed item's key.
func (q *WorkQueue) dueOf(key []byte) (time.Time, error) {
	rest := strings.TrimPrefix(string(key), q.pfx+"delay/")
	d, _, _ := strings.Cut(rest, "/")
	n, err := strconv.ParseInt(d, 10, 64)
	if err != nil || len(d) != 20 {
		return time.Time{}, fmt.Errorf("%w: %q is not a work queue's key", ErrNameInUse, key)
	}
	return time.Unix(0, n), nil
}

// waiter is a consumer's place in the waiting line.
type waiter struct {
	q   *WorkQueue
	s   *concurrency.Session
	key string // "" when not in the line
	rev int64  // key's create revision
}

// wait waits in the line for something a Take should look at; see the
// comment at the top of this file. due is the earliest delayed item's due
// time (zero if none). It returns nil when the Take should read again.
func (w *waiter) wait(ctx context.Context, due time.Time) error {
	q := w.q
	if err := w.join(ctx); err != nil {
		return err
	}
	resp, err := q.client.Get(ctx, q.pfx+"wait/", clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithMaxCreateRev(w.rev-1), clientv3.WithLimit(1))
	if err != nil {
		return err
	}
	if len(resp.Kvs) > 0 { // watch the one before
		pred := string(resp.Kvs[0].Key)
		return await(ctx, q.client, pred, func(ev *clientv3.Event) bool { return ev.Type == mvccpb.DELETE },
			func(ctx context.Context) (bool, int64, error) { return q.anyReady(ctx, pred) })
	}
	wctx := ctx
	if !due.IsZero() {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, due)
		defer cancel()
	}
	err = await(wctx, q.client, q.pfx, q.wakesFirst,
		func(ctx context.Context) (bool, int64, error) { return q.anyReady(ctx, "") }, clientv3.WithPrefix())
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil // a delayed item is due
	}
	return err
}

// wakesFirst reports whether ev may make an item ready: a new item, an
// ended claim, a new delayed item.
func (q *WorkQueue) wakesFirst(ev *clientv3.Event) bool {
	k := string(ev.Kv.Key)
	switch {
	case strings.HasPrefix(k, q.pfx+"item/"):
		return ev.Type == mvccpb.PUT && ev.Kv.Version == 1
	case strings.HasPrefix(k, q.pfx+"claim/"):
		return ev.Type == mvccpb.DELETE
	case strings.HasPrefix(k, q.pfx+"delay/"):
		return ev.Type == mvccpb.PUT
	}
	return false
}

// anyReady reads, in one transaction, whether an item is ready or a
// delayed item due (by this process's clock), or key, unless "", is gone.
func (q *WorkQueue) anyReady(ctx context.Context, key string) (bool, int64, error) {
	ops := []clientv3.Op{
		clientv3.OpGet(q.pfx+"item/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(q.pfx+"claim/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(q.pfx+"delay/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1)),
	}
	if key != "" {
		ops = append(ops, clientv3.OpGet(key, clientv3.WithCountOnly()))
	}
	resp, err := q.client.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return false, 0, err
	}
	r := resp.Responses
	over := r[0].GetResponseRange().Count > r[1].GetResponseRange().Count
	if kvs := r[2].GetResponseRange().Kvs; len(kvs) > 0 {
		due, err := q.dueOf(kvs[0].Key)
		if err != nil {
			return false, 0, err
		}
		over = over || !due.After(time.Now())
	}
	if key != "" && r[3].GetResponseRange().Count == 0 {
		over = true
	}
	return over, resp.Header.Revision, nil
}

// join puts the waiter's key, on its session's lease, unless it is in the
// line already. A key whose put's outcome stays unknown is deleted if it
// turns up (sweepLate).
func (w *waiter) join(ctx context.Context) error {
	if w.key != "" {
		return nil
	}
	key := fmt.Sprintf("%swait/%x/%08x", w.q.pfx, int64(w.s.Lease()), rand.Uint32())
	wctx, stop := settling(ctx)
	defer stop()
	rev, err := putNew(wctx, w.q.client, key, "", w.s.Lease())
	if err != nil {
		if !errors.Is(err, ErrKeyExists) {
			sweepLate(w.s, key, "")
		}
		return leaseGone(writeErr(ctx, err))
	}
	w.key, w.rev = key, rev
	return nil
}

// leave deletes the waiter's key, if it is in the line, on a context
// bounded as cleanup's; its successor wakes.
func (w *waiter) leave(ctx context.Context) {
	if w.key == "" {
		return
	}
	// A closed client can send nothing (its retries would only wait out
	// the cleanup's bound); else the key goes with the lease anyway.
	if w.q.client.Ctx().Err() == nil {
		_ = deleteRev(ctx, w.q.client, w.key, w.rev)
	}
	w.key = ""
}

// sessionEnded is why s ended, matching ErrSessionExpired, and also
// ErrClientClosed when its client was closed (the session's cause says
// so).
func sessionEnded(s *concurrency.Session) error {
	if cause := context.Cause(s.Ctx()); errors.Is(cause, concurrency.ErrSessionExpired) {
		return cause
	} else if cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("%w: %w", concurrency.ErrSessionExpired, cause)
	}
	return concurrency.ErrSessionExpired
}
