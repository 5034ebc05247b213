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
// flight, it waits for etcd's answer (up to 3 s more) and returns nil if
// the barrier was raised: it never reports a failure for a write that
// etcd applies. Only if etcd does not answer in that time may the
// barrier be held after an error, which then matches ctx.Err().
func (b *Barrier) HoldContext(ctx context.Context) error {
	if b.client == nil {
		return ErrNilClient
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	wctx, stop := settling(ctx)
	defer stop()
	_, err := putNew(wctx, b.client, b.key, "", clientv3.NoLease)
	return writeErr(ctx, err)
}

// Release lowers the barrier, as ReleaseContext with context.Background().
func (b *Barrier) Release() error { return b.ReleaseContext(context.Background()) }

// ReleaseContext lowers the barrier, whoever raised it: it deletes the
// key, and the waiters return. Releasing a barrier that is not held does
// nothing. If ctx ends while the delete is in flight, it waits for etcd's
// answer as HoldContext does, and returns nil if the barrier was lowered.
func (b *Barrier) ReleaseContext(ctx context.Context) error {
	if b.client == nil {
		return ErrNilClient
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	wctx, stop := settling(ctx)
	defer stop()
	_, err := b.client.Delete(wctx, b.key)
	return writeErr(ctx, err)
}

// Wait blocks until the barrier is not held, as WaitContext with
// context.Background(): forever if the server cannot be reached.
func (b *Barrier) Wait() error { return b.WaitContext(context.Background()) }

// WaitContext blocks until the barrier is not held, or ctx ends. It
// returns at once if the barrier is not held now. It watches only the
// barrier's key and reads it again when the watch cannot tell (a watch
// that resumes into a compacted revision, a member restart, a lost
// leader) and every few seconds (a silent connection): a release is never
// missed, also when the barrier was held again meanwhile, since the key
// is told from the one first seen by its create revision. It leaves
// nothing behind. On ctx's end it returns an error matching ctx.Err().
func (b *Barrier) WaitContext(ctx context.Context) error {
	if b.client == nil {
		return ErrNilClient
	}
	return waitGone(ctx, b.client, b.key, 0)
}
