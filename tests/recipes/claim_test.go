package recipes_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// lossyKV loses the reply of the next transaction that deletes: before
// sending it (applied false) or after etcd applied it (applied true).
type lossyKV struct {
	clientv3.KV
	armed   atomic.Bool
	applied bool
}

func (k *lossyKV) Txn(ctx context.Context) clientv3.Txn {
	return &lossyTxn{Txn: k.KV.Txn(ctx), kv: k}
}

type lossyTxn struct {
	clientv3.Txn
	kv      *lossyKV
	deletes bool
}

func (t *lossyTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *lossyTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *lossyTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.deletes = t.deletes || op.IsDelete()
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

var errLost = errors.New("reply lost")

func (t *lossyTxn) Commit() (*clientv3.TxnResponse, error) {
	if !t.deletes || !t.kv.armed.CompareAndSwap(true, false) {
		return t.Txn.Commit()
	}
	if t.kv.applied {
		t.Txn.Commit()
	}
	return nil, errLost
}

// TestDequeueLostReply: the reply to the delete that takes an element is
// lost. If etcd never applied the delete, Dequeue settles it by rewriting
// the element, and returns it (once); if etcd applied it, Dequeue cannot
// tell whether it or another took it: it returns the element with
// ErrClaimUnknown wrapping the request's error, so nothing is lost.
func TestDequeueLostReply(t *testing.T) {
	for _, applied := range []bool{false, true} {
		t.Run(map[bool]string{false: "not applied", true: "applied"}[applied], func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			lossy := &lossyKV{KV: c.KV, applied: applied}
			c.KV = lossy
			q := recipes.NewQueue(c, pfx)
			for _, v := range []string{"a", "b"} {
				if err := q.Enqueue(v); err != nil {
					t.Fatal(err)
				}
			}
			lossy.armed.Store(true)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			v, err := q.DequeueContext(ctx)
			if lossy.armed.Load() {
				t.Fatal("no delete was sent")
			}
			if !applied {
				if err != nil || v != "a" {
					t.Fatalf("Dequeue = %q, %v, want a", v, err)
				}
			} else if !errors.Is(err, recipes.ErrClaimUnknown) || !errors.Is(err, errLost) || v != "a" {
				t.Fatalf("Dequeue = %q, %v, want a with ErrClaimUnknown wrapping the lost reply", v, err)
			}
			// Nothing taken twice, the rest in order.
			if v, err := q.DequeueContext(ctx); err != nil || v != "b" {
				t.Fatalf("next Dequeue = %q, %v, want b", v, err)
			}
			if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
				t.Fatalf("%d keys left", len(kvs))
			}
		})
	}
}
