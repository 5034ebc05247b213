package recipes

import (
	"context"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// CountDownLatch is a Barrier released by count CountDowns rather than one
// Release: its key holds the remaining count, and the last CountDown
// deletes it. Waiting is a Barrier's: each waiter watches only the key.
// etcd's recipes have no latch. Like a Barrier's, the key has no lease: a
// latch whose counters die stays closed.
type CountDownLatch struct {
	b Barrier
}

// NewCountDownLatch returns a CountDownLatch on key. It does not talk to
// etcd.
func NewCountDownLatch(client *clientv3.Client, key string) *CountDownLatch {
	return &CountDownLatch{b: Barrier{client: client, key: key}}
}

// Start closes the latch with count CountDowns to go: it writes the key if
// it does not exist, and returns ErrKeyExists if it does. A count of 0 or
// less leaves the latch open and writes nothing. If ctx ends while the
// write is in flight, it waits for etcd's answer as Barrier.HoldContext
// does, and returns nil if the latch was closed.
func (l *CountDownLatch) Start(ctx context.Context, count int) error {
	if count <= 0 {
		return nil
	}
	if l.b.client == nil {
		return ErrNilClient
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	wctx, stop := settling(ctx)
	defer stop()
	_, err := putNew(wctx, l.b.client, l.b.key, strconv.Itoa(count), clientv3.NoLease)
	return writeErr(ctx, err)
}

// CountDown takes one from the count, and opens the latch (deletes the
// key) when it reaches 0. On an open latch it does nothing. Concurrent
// CountDowns each count once: each is a write guarded by the revision it
// read, retried on conflict. If ctx ends while the write is in flight, it
// waits for etcd's answer as Barrier.HoldContext does, and returns nil if
// it counted; if the connection fails during the write, it may or may not
// have counted.
func (l *CountDownLatch) CountDown(ctx context.Context) error {
	if l.b.client == nil {
		return ErrNilClient
	}
	for {
		resp, err := l.b.client.Get(ctx, l.b.key)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		kv := resp.Kvs[0]
		n, err := strconv.Atoi(string(kv.Value))
		if err != nil {
			return fmt.Errorf("recipes: latch %q holds %q, not a count: %w", l.b.key, kv.Value, err)
		}
		op := clientv3.OpPut(l.b.key, strconv.Itoa(n-1))
		if n <= 1 {
			op = clientv3.OpDelete(l.b.key)
		}
		wctx, stop := settling(ctx)
		tresp, err := l.b.client.Txn(wctx).
			If(clientv3.Compare(clientv3.ModRevision(l.b.key), "=", kv.ModRevision)).
			Then(op).Commit()
		stop()
		if err != nil {
			return writeErr(ctx, err)
		}
		if tresp.Succeeded {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// Count returns how many CountDowns are left: 0 if the latch is open.
func (l *CountDownLatch) Count(ctx context.Context) (int, error) {
	if l.b.client == nil {
		return 0, ErrNilClient
	}
	resp, err := l.b.client.Get(ctx, l.b.key)
	if err != nil || len(resp.Kvs) == 0 {
		return 0, err
	}
	return strconv.Atoi(string(resp.Kvs[0].Value))
}

// Wait blocks until the latch is open, or ctx ends, as
// Barrier.WaitContext: a latch opened and closed again (a new Start)
// while the wait's watch was away still counts as opened.
func (l *CountDownLatch) Wait(ctx context.Context) error { return l.b.WaitContext(ctx) }
