package recipes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
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

// settleTimeout bounds how long a write is still awaited after its
// caller's ctx has ended. Most answers take milliseconds; a write that
// has none by then is stuck on a dead connection or a cluster that
// commits nothing.
const settleTimeout = 3 * time.Second

// settling returns the context for a write of this package. etcd may
// apply a write after its caller has given up on it, so a write is never
// cut short by ctx: its context ends settleTimeout after ctx ends, and
// the call waits for the answer, which says whether the write was applied
// (the core's enqueue settles its put the same way). Only when etcd gives
// no answer in that time is the outcome unknown. The caller calls stop
// once the answer is in.
func settling(ctx context.Context) (wctx context.Context, stop func()) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu      sync.Mutex  // guards t and stopped
		t       *time.Timer // ends wctx, once ctx has ended
		stopped bool
	)
	unhook := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t = time.AfterFunc(settleTimeout, cancel)
		}
	})
	return wctx, func() {
		unhook()
		mu.Lock()
		stopped = true
		if t != nil {
			t.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// writeErr is the error of a write on a context from settling that
// returned err: err itself, and also ctx's error when ctx has ended and
// the write failed without a definite answer (it may still be applied).
func writeErr(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ErrKeyExists) {
		return err
	}
	return fmt.Errorf("%w: the write's outcome is unknown: %w", ctx.Err(), err)
}

// deleteRev deletes key if it still has create revision rev (by name if
// rev is 0), on a context bounded as cleanup's: a key that another call
// has since written under the same name is left alone.
func deleteRev(ctx context.Context, kv clientv3.KV, key string, rev int64) error {
	cctx, cancel := cleanup(ctx)
	defer cancel()
	if rev == 0 {
		_, err := kv.Delete(cctx, key)
		return err
	}
	_, err := kv.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Commit()
	return err
}

// sessionOK reports a nil session.
func sessionOK(s *concurrency.Session) error {
	if s == nil {
		return ErrNilSession
	}
	return nil
}

// sweepLate deletes key, which a put on s's lease whose outcome is unknown
// may still write, if that put is applied late: a goroutine waits, until
// the session ends (Ctx), for the key to appear on the session's lease,
// and deletes it by its create revision. The session's end ends the
// goroutine, and the lease's end the key.
//
// With a value, only a key of that value is the late put's (a put that
// writes a value no other put writes, such as a WorkQueue claim's nonce):
// another put of key on the same lease is left alone, and ends the sweep,
// for the caller's put was guarded so that it cannot apply after another.
func sweepLate(s *concurrency.Session, key, value string) {
	go func() {
		ctx, c := s.Ctx(), s.Client()
		var rev int64
		// seen reports whether kv ends the sweep, and notes its create
		// revision if it is the late put's.
		seen := func(kv *mvccpb.KeyValue) bool {
			if kv == nil || clientv3.LeaseID(kv.Lease) != s.Lease() {
				return value != "" && kv != nil
			}
			if value == "" || string(kv.Value) == value {
				rev = kv.CreateRevision
			}
			return true
		}
		err := await(ctx, c, key,
			func(ev *clientv3.Event) bool { return ev.Type == mvccpb.PUT && seen(ev.Kv) },
			func(ctx context.Context) (bool, int64, error) {
				resp, err := c.Get(ctx, key)
				if err != nil {
					return false, 0, err
				}
				return len(resp.Kvs) > 0 && seen(resp.Kvs[0]), resp.Header.Revision, nil
			})
		if err == nil && rev != 0 {
			deleteRev(ctx, c, key, rev)
		}
	}()
}
