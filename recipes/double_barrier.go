package recipes

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// DoubleBarrier lets count processes enter a section together and leave
// it together. Each entrant has a key under key+"/waiters/" on its
// session's lease; the one that completes the count writes key+"/ready"
// (on its lease too), which the others watch, and with it touches their
// keys (a new mod revision, value and lease unchanged; in the ready key's
// transaction, and in transactions before it beyond 64 entrants), so
// that a waiter that missed the ready key (its writer died and its lease
// took the key while the waiter's watch was away and the history was
// compacted) finds its release on its own key. To leave, each watches one
// key: the oldest entrant waits for the newest to go, every other deletes
// its key and waits for the oldest. An entrant whose session ends counts
// as gone, so the others are not blocked by a dead process.
//
// A DoubleBarrier value is one entrant: make one per process and round;
// it is not for use by several goroutines at once.
type DoubleBarrier struct {
	s     *concurrency.Session
	key   string
	count int

	myKey string // this entrant's key, "" before Enter and after Leave
	myRev int64  // myKey's create revision
}

// NewDoubleBarrier returns a DoubleBarrier of count entrants on key, on
// session s. It does not talk to etcd.
func NewDoubleBarrier(s *concurrency.Session, key string, count int) *DoubleBarrier {
	return &DoubleBarrier{s: s, key: key, count: count}
}

// Enter enters, as EnterContext with context.Background().
func (b *DoubleBarrier) Enter() error { return b.EnterContext(context.Background()) }

// EnterContext writes this entrant's key and blocks until count entrants
// have entered, or ctx ends. It returns ErrTooManyClients, leaving no
// key, if count entrants are already in. On any error, its key has been
// deleted (if the delete itself fails, the session's lease removes it).
//
// The writes are never cut short by ctx (etcd may apply a write whose
// caller gave up): if ctx ends while one is in flight, EnterContext waits
// for etcd's answer, up to 3 s more. If the key was written, it is deleted
// by its create revision and the error matches ctx.Err(), so a cancelled
// Enter never leaves an entrant behind to complete someone else's count.
// If the write that completes the count was applied, the others are
// released and EnterContext returns nil: this entrant is in. Only if etcd
// gives no answer in that time may the key be written after EnterContext
// has returned; it is then deleted as soon as it appears, for as long as
// the session lives (a goroutine watches for it until the session ends),
// so that a late entrant never completes someone else's count.
func (b *DoubleBarrier) EnterContext(ctx context.Context) error {
	if err := sessionOK(b.s); err != nil {
		return err
	}
	cli := b.s.Client()
	if resp, err := b.entrants(ctx); err != nil {
		return err
	} else if len(resp.Kvs) >= b.count {
		return ErrTooManyClients
	}
	if err := ctx.Err(); err != nil {
		return err // write nothing
	}
	wctx, stop := settling(ctx)
	key, rev, err := putUnique(wctx, cli, b.key+"/waiters", "", b.s.Lease())
	stop()
	if err != nil {
		// The outcome is unknown: delete the key by name, in case. A
		// delete that reaches the member after the put is applied after
		// it. Bounded by a second: the call has waited long enough. A put
		// applied later still is swept for the session's life.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		cli.Delete(dctx, key)
		cancel()
		sweepLate(b.s, key, "")
		return writeErr(ctx, err)
	}
	b.myKey, b.myRev = key, rev
	if err := ctx.Err(); err != nil {
		b.drop(ctx, key, rev)
		return err
	}
	resp, err := b.entrants(ctx)
	if err != nil {
		b.drop(ctx, key, rev)
		return err
	}
	if len(resp.Kvs) >= b.count {
		switch last := resp.Kvs[b.count-1].CreateRevision; {
		case rev > last:
			b.drop(ctx, key, rev)
			return ErrTooManyClients
		case rev == last:
			// This entrant completes the count: release the others.
			if err := b.release(ctx, resp.Kvs[:b.count-1]); err != nil {
				b.drop(ctx, key, rev)
				return err
			}
			return nil
		}
	}
	if err := b.waitReady(ctx, rev); err != nil {
		b.drop(ctx, key, rev)
		return err
	}
	return nil
}

// releaseOps is how many entrants' keys one transaction of release
// touches, well inside etcd's default limit of 128 operations.
const releaseOps = 64

// release writes the ready key and touches the keys of the entrants
// before this one (see DoubleBarrier), each only if it is still the key
// that was read. It sends the touches in transactions of releaseOps, the
// last with the ready key, so that whoever sees the ready key finds every
// waiter's key touched. Its writes are settled as EnterContext says.
func (b *DoubleBarrier) release(ctx context.Context, waiting []*mvccpb.KeyValue) error {
	wctx, stop := settling(ctx)
	defer stop()
	for {
		n := min(len(waiting), releaseOps)
		var ops []clientv3.Op
		for _, kv := range waiting[:n] {
			k := string(kv.Key)
			ops = append(ops, clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", kv.CreateRevision)},
				[]clientv3.Op{clientv3.OpPut(k, "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())},
				nil))
		}
		waiting = waiting[n:]
		if len(waiting) == 0 {
			ops = append(ops, clientv3.OpPut(b.key+"/ready", "", clientv3.WithLease(b.s.Lease())))
		}
		if _, err := b.s.Client().Txn(wctx).Then(ops...).Commit(); err != nil {
			return writeErr(ctx, err)
		}
		if len(waiting) == 0 {
			return nil
		}
	}
}

// waitReady waits until the count is complete: a write of the ready key
// at or after rev, or a touch of this entrant's key (see DoubleBarrier).
// It returns an error matching concurrency.ErrSessionExpired if this
// entrant's key is gone (its session's lease expired).
func (b *DoubleBarrier) waitReady(ctx context.Context, rev int64) error {
	cli := b.s.Client()
	ready, mine := b.key+"/ready", b.myKey
	var gone error
	err := await(ctx, cli, ready,
		func(ev *clientv3.Event) bool { return ev.Type == mvccpb.PUT && ev.Kv.ModRevision >= rev },
		func(ctx context.Context) (bool, int64, error) {
			resp, err := cli.Txn(ctx).Then(clientv3.OpGet(ready), clientv3.OpGet(mine)).Commit()
			if err != nil {
				return false, 0, err
			}
			r, m := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
			switch {
			case len(r) > 0 && r[0].ModRevision >= rev:
				return true, resp.Header.Revision, nil
			case len(m) == 0 || m[0].CreateRevision != b.myRev:
				gone = fmt.Errorf("%w: entrant key %q was deleted while waiting", concurrency.ErrSessionExpired, mine)
				return true, resp.Header.Revision, nil
			default:
				return m[0].ModRevision != m[0].CreateRevision, resp.Header.Revision, nil
			}
		})
	if err != nil {
		return err
	}
	return gone
}

// entrants reads the entrants' keys, oldest first.
func (b *DoubleBarrier) entrants(ctx context.Context) (*clientv3.GetResponse, error) {
	return b.s.Client().Get(ctx, b.key+"/waiters/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
}

// drop deletes this entrant's key, created at rev (0: unknown, delete by
// name), on a context that ctx's end does not cancel.
func (b *DoubleBarrier) drop(ctx context.Context, key string, rev int64) {
	if key == "" {
		return
	}
	if err := deleteRev(ctx, b.s.Client(), key, rev); err == nil && key == b.myKey {
		b.myKey, b.myRev = "", 0
	}
}

// Leave leaves, as LeaveContext with context.Background().
func (b *DoubleBarrier) Leave() error { return b.LeaveContext(context.Background()) }

// LeaveContext deletes this entrant's key and blocks until every entrant
// has left (or its session has ended), or ctx ends. The last to leave
// deletes the ready key. If ctx ends, this entrant's key is deleted
// before it returns, so the others go on as if its process had died.
// Its writes are settled as EnterContext's: a delete that ctx's end
// interrupts is awaited, and only this entrant's own key is ever deleted
// by a late write.
func (b *DoubleBarrier) LeaveContext(ctx context.Context) error {
	if err := sessionOK(b.s); err != nil {
		return err
	}
	err := b.leave(ctx)
	if err != nil {
		b.drop(ctx, b.myKey, b.myRev)
	}
	return err
}

func (b *DoubleBarrier) leave(ctx context.Context) error {
	cli := b.s.Client()
	for {
		resp, err := b.entrants(ctx)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			b.myKey, b.myRev = "", 0
			return nil
		}
		lowest, highest := resp.Kvs[0], resp.Kvs[len(resp.Kvs)-1]
		isLowest := string(lowest.Key) == b.myKey
		if len(resp.Kvs) == 1 && isLowest {
			// The last one out: the ready key and its own go together,
			// if its own is still there (a late apply of this delete, after
			// the key went, must not take a later round's ready key).
			if err := b.deleteMine(ctx, clientv3.OpDelete(b.key+"/ready")); err != nil {
				return err
			}
			b.myKey, b.myRev = "", 0
			return nil
		}
		wait := lowest
		if isLowest {
			wait = highest
		} else if b.myKey != "" {
			if err := b.deleteMine(ctx); err != nil {
				return err
			}
			b.myKey, b.myRev = "", 0
		}
		if err := waitGone(ctx, cli, string(wait.Key), wait.CreateRevision); err != nil {
			return err
		}
	}
}

// deleteMine deletes this entrant's key, and does also, if the key is
// still the one Enter wrote, in one transaction settled as EnterContext's
// writes are.
func (b *DoubleBarrier) deleteMine(ctx context.Context, also ...clientv3.Op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	wctx, stop := settling(ctx)
	defer stop()
	_, err := b.s.Client().Txn(wctx).
		If(clientv3.Compare(clientv3.CreateRevision(b.myKey), "=", b.myRev)).
		Then(append(also, clientv3.OpDelete(b.myKey))...).Commit()
	return writeErr(ctx, err)
}
