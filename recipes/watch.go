package recipes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// WaitEvents waits, from revision rev, for the events evs on key, in that
// order (others in between are skipped), and returns the last one. It
// blocks until they have happened; see WaitEventsContext.
func WaitEvents(c *clientv3.Client, key string, rev int64, evs []mvccpb.Event_EventType) (*clientv3.Event, error) {
	return WaitEventsContext(context.Background(), c, key, rev, evs)
}

// WaitPrefixEvents is WaitEvents on every key with the prefix.
func WaitPrefixEvents(c *clientv3.Client, prefix string, rev int64, evs []mvccpb.Event_EventType) (*clientv3.Event, error) {
	return WaitPrefixEventsContext(context.Background(), c, prefix, rev, evs)
}

// WaitEventsContext is WaitEvents that returns ctx's error when ctx ends.
// A watch that the server ends (a member that lost its leader, a
// restart) is resumed from the revision after the last one seen, so no
// event is missed or taken twice; if that revision has been compacted, it
// returns an error matching rpctypes.ErrCompacted; other errors that end
// the watch (permissions, a closed client) are returned too. With no
// events it returns (nil, nil) at once.
func WaitEventsContext(ctx context.Context, c *clientv3.Client, key string, rev int64, evs []mvccpb.Event_EventType) (*clientv3.Event, error) {
	return waitEvents(ctx, c, key, rev, evs)
}

// WaitPrefixEventsContext is WaitEventsContext on every key with the
// prefix.
func WaitPrefixEventsContext(ctx context.Context, c *clientv3.Client, prefix string, rev int64, evs []mvccpb.Event_EventType) (*clientv3.Event, error) {
	return waitEvents(ctx, c, prefix, rev, evs, clientv3.WithPrefix())
}

// waitEvents is the one watch loop of the package: it watches key (with
// opts) from rev until evs have been seen in order, ctx ends, or the
// revision to resume from is compacted.
func waitEvents(ctx context.Context, c *clientv3.Client, key string, rev int64, evs []mvccpb.Event_EventType, opts ...clientv3.OpOption) (*clientv3.Event, error) {
	if c == nil {
		return nil, ErrNilClient
	}
	if len(evs) == 0 {
		return nil, nil
	}
	i := 0
	backoff := 10 * time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wc := c.Watch(wctx, key, append([]clientv3.OpOption{clientv3.WithRev(rev)}, opts...)...)
		var werr error
		for wr := range wc {
			if wr.CompactRevision != 0 {
				werr = rpctypes.ErrCompacted
				break
			}
			for _, ev := range wr.Events {
				rev = ev.Kv.ModRevision + 1
				if ev.Type == evs[i] {
					if i++; i == len(evs) {
						cancel()
						return ev, nil
					}
				}
			}
			if err := wr.Err(); err != nil {
				werr = err
				break
			}
		}
		cancel()
		if werr != nil && !errors.Is(werr, rpctypes.ErrNoLeader) {
			// Compacted, or refused (permissions): retrying cannot help.
			return nil, werr
		}
		if err := c.Ctx().Err(); err != nil {
			return nil, fmt.Errorf("recipes: client closed: %w", err)
		}
		// The watch ended without the events: ctx ended, or the member
		// lost its leader. Resume after a short pause.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

// waitDelete waits, from revision rev, until key is deleted. If rev has
// been compacted, it reads the key again: its absence is the deletion.
func waitDelete(ctx context.Context, c *clientv3.Client, key string, rev int64) error {
	for {
		_, err := waitEvents(ctx, c, key, rev, []mvccpb.Event_EventType{mvccpb.DELETE})
		if !errors.Is(err, rpctypes.ErrCompacted) {
			return err
		}
		resp, err := c.Get(ctx, key)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		rev = resp.Header.Revision + 1
	}
}
