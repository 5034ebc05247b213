package recipes

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// DoubleBarrier lets count processes enter a section together and leave
// it together. Each entrant has a key under key+"/waiters/" on its
// session's lease; the one that completes the count writes key+"/ready"
// (on its lease too), which the others watch. To leave, each watches one
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
	key, rev, err := putUnique(ctx, cli, b.key+"/waiters", "", b.s.Lease())
	if err != nil {
		b.drop(ctx, key)
		return err
	}
	b.myKey = key
	resp, err := b.entrants(ctx)
	if err != nil {
		b.drop(ctx, key)
		return err
	}
	if len(resp.Kvs) >= b.count {
		switch last := resp.Kvs[b.count-1].CreateRevision; {
		case rev > last:
			b.drop(ctx, key)
			return ErrTooManyClients
		case rev == last:
			// This entrant completes the count: release the others.
			if _, err := cli.Put(ctx, b.key+"/ready", "", clientv3.WithLease(b.s.Lease())); err != nil {
				b.drop(ctx, key)
				return err
			}
			return nil
		}
	}
	if err := b.waitReady(ctx, rev); err != nil {
		b.drop(ctx, key)
		return err
	}
	return nil
}

// waitReady waits for a write of the ready key at or after rev.
func (b *DoubleBarrier) waitReady(ctx context.Context, rev int64) error {
	ready := b.key + "/ready"
	for {
		_, err := waitEvents(ctx, b.s.Client(), ready, rev, []mvccpb.Event_EventType{mvccpb.PUT})
		if !errors.Is(err, rpctypes.ErrCompacted) {
			return err
		}
		resp, err := b.s.Client().Get(ctx, ready)
		if err != nil {
			return err
		}
		if len(resp.Kvs) > 0 && resp.Kvs[0].ModRevision >= rev {
			return nil
		}
		rev = resp.Header.Revision + 1
	}
}

// entrants reads the entrants' keys, oldest first.
func (b *DoubleBarrier) entrants(ctx context.Context) (*clientv3.GetResponse, error) {
	return b.s.Client().Get(ctx, b.key+"/waiters/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
}

// drop deletes this entrant's key, on a context that ctx's end does not
// cancel.
func (b *DoubleBarrier) drop(ctx context.Context, key string) {
	if key == "" {
		return
	}
	cctx, cancel := cleanup(ctx)
	defer cancel()
	if _, err := b.s.Client().Delete(cctx, key); err == nil && key == b.myKey {
		b.myKey = ""
	}
}

// Leave leaves, as LeaveContext with context.Background().
func (b *DoubleBarrier) Leave() error { return b.LeaveContext(context.Background()) }

// LeaveContext deletes this entrant's key and blocks until every entrant
// has left (or its session has ended), or ctx ends. The last to leave
// deletes the ready key. If ctx ends, this entrant's key is deleted
// before it returns, so the others go on as if its process had died.
func (b *DoubleBarrier) LeaveContext(ctx context.Context) error {
	if err := sessionOK(b.s); err != nil {
		return err
	}
	err := b.leave(ctx)
	if err != nil {
		b.drop(ctx, b.myKey)
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
			b.myKey = ""
			return nil
		}
		lowest, highest := resp.Kvs[0], resp.Kvs[len(resp.Kvs)-1]
		isLowest := string(lowest.Key) == b.myKey
		if len(resp.Kvs) == 1 && isLowest {
			// The last one out: the ready key and its own go together.
			if _, err := cli.Txn(ctx).Then(clientv3.OpDelete(b.key+"/ready"), clientv3.OpDelete(b.myKey)).Commit(); err != nil {
				return err
			}
			b.myKey = ""
			return nil
		}
		wait := lowest
		if isLowest {
			wait = highest
		} else if b.myKey != "" {
			if _, err := cli.Delete(ctx, b.myKey); err != nil {
				return err
			}
			b.myKey = ""
		}
		if err := waitDelete(ctx, cli, string(wait.Key), resp.Header.Revision+1); err != nil {
			return err
		}
	}
}
