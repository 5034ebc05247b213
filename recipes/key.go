package recipes

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// RemoteKV is a key this package wrote, with the revision that wrote it.
// It is kept for etcd's API: nothing here returns one.
type RemoteKV struct {
	kv  clientv3.KV
	key string
	rev int64
	val string
}

// Key returns the key.
func (rk *RemoteKV) Key() string { return rk.key }

// Revision returns the revision that wrote the key.
func (rk *RemoteKV) Revision() int64 { return rk.rev }

// Value returns the value written.
func (rk *RemoteKV) Value() string { return rk.val }

// Delete deletes the key, once; later calls do nothing.
func (rk *RemoteKV) Delete() error {
	if rk.kv == nil {
		return nil
	}
	_, err := rk.kv.Delete(context.Background(), rk.key)
	rk.kv = nil
	return err
}

// Put writes val to the key.
func (rk *RemoteKV) Put(val string) error {
	_, err := rk.kv.Put(context.Background(), rk.key, val)
	return err
}

// EphemeralKV is a RemoteKV on a session's lease. It is kept for etcd's
// API: nothing here returns one.
type EphemeralKV struct{ RemoteKV }

// putNew writes key if it does not exist, and returns the revision of the
// write, or ErrKeyExists.
func putNew(ctx context.Context, kv clientv3.KV, key, val string, lease clientv3.LeaseID) (int64, error) {
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val, clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, ErrKeyExists
	}
	return resp.Header.Revision, nil
}

// putUnique writes a new key under prefix, named "/" and the time in
// nanoseconds as etcd's recipes name theirs (so a Queue of either package
// reads the other's elements), and returns it with its revision.
func putUnique(ctx context.Context, kv clientv3.KV, prefix, val string, lease clientv3.LeaseID) (string, int64, error) {
	for {
		key := fmt.Sprintf("%s/%v", prefix, time.Now().UnixNano())
		rev, err := putNew(ctx, kv, key, val, lease)
		if !errors.Is(err, ErrKeyExists) {
			return key, rev, err
		}
	}
}

// cleanup returns a context for deleting what a call leaves when its ctx
// has ended: not cancelled with ctx, but bounded.
func cleanup(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// cleanupTimeout bounds the requests that clean up or settle after ctx
// has ended.
const cleanupTimeout = 5 * time.Second

// sessionOK reports a nil session.
func sessionOK(s *concurrency.Session) error {
	if s == nil {
		return ErrNilSession
	}
	return nil
}
