package recipes

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Barrier blocks the processes that Wait on it while one of them Holds
// it. It is one key, without a lease: a holder that dies leaves the
// barrier held until someone Releases it. Each waiter watches only that
// key.
type Barrier struct {
	client *clientv3.Client
	key    string
}

// NewBarrier returns a Barrier on key. It does not talk to etcd.
func NewBarrier(client *clientv3.Client, key string) *Barrier {
	return &Barrier{client: client, key: key}
}

// Hold raises the barrier, as HoldContext with context.Background().
func (b *Barrier) Hold() error { return b.HoldContext(context.Background()) }

// HoldContext raises the barrier: it writes the key if it does not exist,
// and returns ErrKeyExists if it does. If ctx ends while the write is in
// flight, the barrier may or may not be held.
func (b *Barrier) HoldContext(ctx context.Context) error {
	if b.client == nil {
		return ErrNilClient
	}
	_, err := putNew(ctx, b.client, b.key, "", clientv3.NoLease)
	return err
}

// Release lowers the barrier, as ReleaseContext with context.Background().
func (b *Barrier) Release() error { return b.ReleaseContext(context.Background()) }

// ReleaseContext lowers the barrier, whoever raised it: it deletes the
// key, and the waiters return. Releasing a barrier that is not held does
// nothing.
func (b *Barrier) ReleaseContext(ctx context.Context) error {
	if b.client == nil {
		return ErrNilClient
	}
	_, err := b.client.Delete(ctx, b.key)
	return err
}

// Wait blocks until the barrier is not held, as WaitContext with
// context.Background(): forever if the server cannot be reached.
func (b *Barrier) Wait() error { return b.WaitContext(context.Background()) }

// WaitContext blocks until the barrier is not held, or ctx ends. It
// returns at once if the barrier is not held now. It watches only the
// barrier's key, and resumes the watch after a member restart or a lost
// leader; it leaves nothing behind. On ctx's end it returns an error
// matching ctx.Err().
func (b *Barrier) WaitContext(ctx context.Context) error {
	if b.client == nil {
		return ErrNilClient
	}
	resp, err := b.client.Get(ctx, b.key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return waitDelete(ctx, b.client, b.key, resp.Header.Revision+1)
}
