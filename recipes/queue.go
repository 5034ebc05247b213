package recipes

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Queue is a FIFO queue of strings on etcd. Each element is a key under
// the queue's prefix, named as etcd's recipe names them ("/" and the time
// in nanoseconds), without a lease; the order is the create revision. A
// Queue of this package and one of etcd's on the same prefix share their
// elements.
//
// A Dequeue that finds the queue empty watches the whole prefix, because
// any new element is for it: every waiting Dequeue wakes on each Enqueue
// and one takes the element. The herd is as large as the number of
// waiting consumers; the queue's contract (any consumer takes any
// element) allows no less.
type Queue struct {
	client    *clientv3.Client
	keyPrefix string
}

// NewQueue returns a Queue on keyPrefix. It does not talk to etcd.
func NewQueue(client *clientv3.Client, keyPrefix string) *Queue {
	return &Queue{client: client, keyPrefix: keyPrefix}
}

// Enqueue adds val, as EnqueueContext with context.Background().
func (q *Queue) Enqueue(val string) error { return q.EnqueueContext(context.Background(), val) }

// EnqueueContext adds val at the end of the queue. If ctx ends while the
// write is in flight, it waits for etcd's answer (up to 3 s more) and
// returns nil if the element was added, so a caller that retries after an
// error does not add it twice. Only if etcd does not answer in that time,
// or the connection fails during the write, may the element have been
// added after an error, as with any etcd write whose reply is lost.
func (q *Queue) EnqueueContext(ctx context.Context, val string) error {
	if q.client == nil {
		return ErrNilClient
	}
	return enqueue(ctx, q.client, q.keyPrefix, val)
}

// enqueue writes val as a new element under prefix, settled as
// EnqueueContext says.
func enqueue(ctx context.Context, c *clientv3.Client, prefix, val string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	wctx, stop := settling(ctx)
	defer stop()
	_, _, err := putUnique(wctx, c, prefix, val, clientv3.NoLease)
	return writeErr(ctx, err)
}

// Dequeue removes and returns the oldest element, as DequeueContext with
// context.Background(): it blocks until there is one, forever if the
// server cannot be reached.
func (q *Queue) Dequeue() (string, error) { return q.DequeueContext(context.Background()) }

// DequeueContext removes and returns the oldest element (by create
// revision), blocking until there is one or ctx ends.
//
// An element is taken by a delete guarded by its mod revision, so two
// Dequeues never return one element. That delete is sent with a context
// that ctx does not cancel (bounded to 5 s): if ctx ends while it is in
// flight, DequeueContext waits for the reply, and returns the element
// with a nil error if it was taken. When ctx ends at any other time, it
// returns an error matching ctx.Err() and no element has been taken.
//
// If the reply to that delete is lost (the connection fails during it),
// DequeueContext settles the outcome: it rewrites the element unchanged
// under the same guard, which leaves it in the queue, at its place, and
// makes the lost delete fail if it arrives later. Only if the element is
// already gone, taken by this call or by another one, does it return
// ErrClaimUnknown, with the element's value: never lost, at worst (a
// connection failure during the delete, and a racing Dequeue) returned
// twice, and then said so.
func (q *Queue) DequeueContext(ctx context.Context) (string, error) {
	if q.client == nil {
		return "", ErrNilClient
	}
	return dequeue(ctx, q.client, q.keyPrefix, func(ctx context.Context) (*mvccpb.KeyValue, int64, error) {
		resp, err := q.client.Get(ctx, q.keyPrefix, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
		if err != nil {
			return nil, 0, err
		}
		if len(resp.Kvs) == 0 {
			return nil, resp.Header.Revision, nil
		}
		return resp.Kvs[0], resp.Header.Revision, nil
	})
}

// dequeue takes the element that first returns, waiting on prefix for a
// new one while there is none. The wait is await's: a new key wakes it,
// and first reads again whenever the watch cannot tell (a compacted
// revision to resume from, a lost leader) and every recheckInterval, so
// an element that is there is found, however the watch fared.
func dequeue(ctx context.Context, c *clientv3.Client, prefix string, first func(context.Context) (*mvccpb.KeyValue, int64, error)) (string, error) {
	for {
		var kv *mvccpb.KeyValue
		err := await(ctx, c, prefix,
			func(ev *clientv3.Event) bool { return ev.Type == mvccpb.PUT },
			func(ctx context.Context) (bool, int64, error) {
				var rev int64
				var err error
				kv, rev, err = first(ctx)
				return kv != nil, rev, err
			}, clientv3.WithPrefix())
		if err != nil {
			return "", err
		}
		if kv == nil {
			continue // woken by a new key: read again
		}
		taken, err := take(ctx, c, kv)
		if errors.Is(err, ErrClaimUnknown) {
			return string(kv.Value), err
		}
		if err != nil {
			return "", err
		}
		if taken {
			return string(kv.Value), nil
		}
		if err := ctx.Err(); err != nil {
			return "", err
		}
	}
}

// take deletes kv if it is unchanged, and reports whether it did. See
// Queue.DequeueContext for why the delete is not cancelled with ctx and
// how a lost reply is settled.
func take(ctx context.Context, c *clientv3.Client, kv *mvccpb.KeyValue) (bool, error) {
	key := string(kv.Key)
	unchanged := clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)
	dctx, cancel := cleanup(ctx)
	resp, err := c.Txn(dctx).If(unchanged).Then(clientv3.OpDelete(key)).Commit()
	cancel()
	if err == nil {
		return resp.Succeeded, nil
	}
	// The delete may or may not have been applied, or may still be. A
	// rewrite under the same guard (same value, same lease, a new mod
	// revision) decides: if it succeeds, the delete has not been applied
	// and never will be.
	sctx, cancel := cleanup(ctx)
	defer cancel()
	sresp, serr := c.Txn(sctx).If(unchanged).
		Then(clientv3.OpPut(key, "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if serr != nil {
		return false, fmt.Errorf("%w: %q: %w", ErrClaimUnknown, key, err)
	}
	if sresp.Succeeded || len(sresp.Responses[0].GetResponseRange().Kvs) > 0 {
		// Left in the queue (or changed by someone else: the delete's
		// guard can no longer hold).
		return false, nil
	}
	return false, fmt.Errorf("%w: %q: %w", ErrClaimUnknown, key, err)
}
