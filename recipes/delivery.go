package recipes

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// This file holds a Delivery: an item claimed by Take, and how its claim
// ends (Ack, AckTxn, Nack). Every write that ends a claim is guarded by the
// claim key's mod revision, which is the claim's revision (its token)
// unless a lost reply was settled (see settle).

// Delivery is an item taken from a WorkQueue, held by its claim until Ack,
// AckTxn or Nack, or until the claim ends without them (the session's lease
// ends, or the processing limit passes), when the item is delivered again.
// Its methods are safe for one goroutine at a time.
type Delivery struct {
	q     *WorkQueue
	it    item // count is this delivery's number
	token int64
	mod   int64 // the claim key's mod revision: the guard of the writes
	lease clientv3.LeaseID
	own   bool // lease is a processing limit's, revoked when the claim ends

	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func() bool // unhooks ctx from the session's
}

func newDelivery(q *WorkQueue, s *concurrency.Session, it item, token int64, lease clientv3.LeaseID, own bool) *Delivery {
	d := &Delivery{q: q, it: it, token: token, mod: token, lease: lease, own: own}
	d.ctx, d.cancel = context.WithCancelCause(context.Background())
	d.stop = context.AfterFunc(s.Ctx(), func() { d.cancel(fmt.Errorf("%w: %w", ErrClaimLost, context.Cause(s.Ctx()))) })
	if q.opts.procLimit > 0 {
		t := time.AfterFunc(q.opts.procLimit, func() { d.cancel(fmt.Errorf("%w: processing limit passed", ErrClaimLost)) })
		unhook := d.stop
		d.stop = func() bool { t.Stop(); return unhook() }
	}
	return d
}

// Value returns the item's value.
func (d *Delivery) Value() string { return d.it.rec.value }

// ID returns the item's id, which stays the same across its deliveries
// and in the dead letters.
func (d *Delivery) ID() string { return d.it.id }

// Priority returns the item's priority.
func (d *Delivery) Priority() uint16 { return d.it.prio }

// Count returns the number of this delivery: 1 the first time the item is
// delivered, 2 after one Nack or one claim that ended without an Ack, and
// so on (Requeue starts it again).
func (d *Delivery) Count() int { return d.it.count }

// PutTime returns when the item was put, by its producer's clock.
func (d *Delivery) PutTime() time.Time { return time.Unix(0, d.it.rec.putNanos) }

// Token returns the claim's revision, a fencing token: it grows with
// every delivery of every item of the queue, so a store that keeps the
// highest token it accepted per item (see the root package's Fence)
// refuses a write of an earlier delivery whose consumer did not know its
// claim had ended.
func (d *Delivery) Token() int64 { return d.token }

// Ctx returns a context that ends when the claim is known to be over here:
// Ack or Nack returned, the session ended, or the processing limit passed
// by this process's clock (context.Cause says which, ErrClaimLost for the
// last two). It may end later than the claim did at etcd (an expired
// lease is noticed when the session is); writes to etcd are fenced by
// AckTxn, not by Ctx.
func (d *Delivery) Ctx() context.Context { return d.ctx }

// Ack acknowledges the delivery: the item is deleted, with its
// deduplication id. See AckTxn.
func (d *Delivery) Ack(ctx context.Context) error {
	_, err := d.AckTxn(ctx)
	return err
}

// AckTxn acknowledges the delivery and applies ops in one transaction,
// only if the claim still holds: the consumer's effects stored in etcd
// happen exactly once per item, however often it is delivered (see
// docs/semantics.md). ops must not touch the queue's own keys. It returns
// etcd's response, whose Responses are the ops' (after the queue's own:
// the claim's, the item's and the dedup key's deletes, in that order).
//
// If the claim is gone it returns ErrClaimLost and changes nothing. If ctx
// ends while the write is in flight, it waits for the answer (up to 3 s
// more). If the answer is lost, it settles: it returns the write's error
// if the write was not applied and cannot be any more (the call may be
// retried), or ErrAckUnknown if the item is gone.
func (d *Delivery) AckTxn(ctx context.Context, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	own := []clientv3.Op{clientv3.OpDelete(d.q.claimKey(d.it.id)), clientv3.OpDelete(d.q.itemKey(d.it.id))}
	if d.it.rec.dedup != "" {
		own = append(own, clientv3.OpDelete(d.q.pfx+"dedup/"+d.it.rec.dedup))
	}
	resp, err := d.end(ctx, append(own, ops...), "acknowledged")
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// Nack gives the item back: it is ready again after delay (by this
// process's clock against the consumers'; 0: at once), or moved to the
// dead letters if this was its WithMaxDeliveries-th delivery. A negative
// delay, or one over MaxDelay, returns ErrInvalidDelay and changes
// nothing. Errors and ctx are as
// AckTxn's.
func (d *Delivery) Nack(ctx context.Context, delay time.Duration) error {
	if err := validDelay(delay); err != nil {
		return err
	}
	q, it := d.q, d.it
	ops := []clientv3.Op{clientv3.OpDelete(q.claimKey(it.id))}
	rec := it.rec
	rec.base = it.count
	switch {
	case q.opts.maxDeliveries > 0 && it.count >= q.opts.maxDeliveries:
		ops = append(ops, clientv3.OpDelete(q.itemKey(it.id)), clientv3.OpPut(q.deadKey(it.id), rec.encode()))
	case delay > 0:
		ops = append(ops, clientv3.OpDelete(q.itemKey(it.id)),
			clientv3.OpPut(q.delayKey(time.Now().Add(delay), it.id), rec.encode()))
	}
	_, err := d.end(ctx, ops, "given back")
	return err
}

// end commits ops if the claim holds, and then ends the delivery's Ctx
// and revokes a processing limit's lease.
func (d *Delivery) end(ctx context.Context, ops []clientv3.Op, how string) (*clientv3.TxnResponse, error) {
	ck := d.q.claimKey(d.it.id)
	wctx, stop := settling(ctx)
	guard := clientv3.Compare(clientv3.ModRevision(ck), "=", d.mod)
	if unguardedAck {
		guard = clientv3.Compare(clientv3.ModRevision(ck), ">", -1)
	}
	resp, err := d.q.client.Txn(wctx).If(guard).Then(ops...).Commit()
	stop()
	if err != nil {
		return nil, d.settle(ctx, err)
	}
	if !resp.Succeeded {
		err := fmt.Errorf("%w: item %s, token %d", ErrClaimLost, d.it.id, d.token)
		d.finish(ctx, err)
		return nil, err
	}
	d.finish(ctx, fmt.Errorf("recipes: delivery %s", how))
	return resp, nil
}

// settle decides the outcome of a write of end whose answer was lost: a
// rewrite of the claim under the same guard, if it succeeds, means the
// write was not applied, and makes it fail if it arrives late.
func (d *Delivery) settle(ctx context.Context, werr error) error {
	ck := d.q.claimKey(d.it.id)
	sctx, cancel := cleanup(ctx)
	defer cancel()
	resp, err := d.q.client.Txn(sctx).If(clientv3.Compare(clientv3.ModRevision(ck), "=", d.mod)).
		Then(clientv3.OpPut(ck, "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())).
		Else(clientv3.OpGet(d.q.itemKey(d.it.id), clientv3.WithCountOnly())).
		Commit()
	switch {
	case err != nil:
		return fmt.Errorf("%w: item %s: %w", ErrAckUnknown, d.it.id, werr)
	case resp.Succeeded:
		d.mod = resp.Header.Revision
		return writeErr(ctx, werr)
	case resp.Responses[0].GetResponseRange().Count > 0:
		err := fmt.Errorf("%w: item %s, token %d", ErrClaimLost, d.it.id, d.token)
		d.finish(ctx, err)
		return err
	}
	err = fmt.Errorf("%w: item %s: %w", ErrAckUnknown, d.it.id, werr)
	d.finish(ctx, err)
	return err
}

// unguardedAck is set only by the deliberately broken build of
// brokenack.go, for the fault tests' control.
var unguardedAck = false

// finish ends the delivery's Ctx with cause and revokes its own lease.
func (d *Delivery) finish(ctx context.Context, cause error) {
	d.stop()
	d.cancel(cause)
	if d.own {
		revoke(ctx, d.q.client, d.lease)
	}
}
