package concurrency

import (
	"context"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds the watches for processes that do not take part:
// WatchLeader follows an election's leader without campaigning, and
// WatchShards follows a Shards group's members and owners without
// joining.

// WatchLeader calls fn with the leader of the election name each time it
// changes, for a process that does not campaign: first with the leader
// when it starts, then with each new leader or proclaimed value, and with
// the zero LeaderInfo whenever the election has no leader (which
// Election.Observe and etcd's Observe never report). It is what Lead's
// WithLeaderChanges reports, for anyone: the same goroutine-free loop runs
// in the caller's goroutine, reading the candidates once and following
// them with a watch, so that it reports each leader of each revision in
// order; after a failed watch (no leader in etcd, a lost connection,
// compaction) it reads again after a backoff of 100 ms doubling to 5 s,
// and may then skip a leader that came and went meanwhile, never the
// latest.
//
// It blocks until ctx ends, and returns ctx.Err(), or, within a second
// of the client's Close, an error matching ErrClientClosed. fn is called from the caller's goroutine, one call at
// a time, and none after WatchLeader returns. A nil client, an empty name
// and a nil fn give ErrNilClient, ErrInvalidPrefix and ErrNilFunc at once.
//
// etcd's client naming and endpoints manager (client/v3/naming) is not
// used: it publishes endpoints under a prefix, with no order among them,
// where an election's leader is its oldest key.
func WatchLeader(ctx context.Context, cli *clientv3.Client, name string, fn func(LeaderInfo)) error {
	switch {
	case cli == nil:
		return ErrNilClient
	case name == "":
		return ErrInvalidPrefix
	case fn == nil:
		return ErrNilFunc
	}
	// fin never ends: the watch stops only with ctx.
	watchLeaders(ctx, context.Background(), cli, livenessFor(defaultSessionTTL*time.Second), prefix(name), fn)
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("concurrency: WatchLeader %q: %w", name, clientClosed(cli))
}

// WatchShards calls fn with the group of n shards, as InspectShards
// returns it (without owner records: Owner is nil), each time its members
// or its shards' owners change, for a process that does not join: first
// when it starts, then after each change. It reads the group once and
// then watches its keys, reading it again after each batch of events
// (one linearizable read each), so a change that is undone within one
// batch may not be reported; after a failed watch it reads again after a
// backoff. Changes of waiters alone are not reported.
//
// It blocks until ctx ends, and returns ctx.Err(), or, within a second
// of the client's Close, an error matching ErrClientClosed. fn is called from the caller's goroutine, one call at
// a time, and none after WatchShards returns. A nil client, an empty
// group, n outside [1, MaxShardCount] and a nil fn give ErrNilClient,
// ErrInvalidPrefix, ErrInvalidShardCount and ErrNilFunc at once. Member
// keys are read as InspectShards reads them: no value makes it panic.
func WatchShards(ctx context.Context, cli *clientv3.Client, group string, n int, fn func(*ShardGroup)) error {
	if err := validGroup(cli, group, n); err != nil {
		return err
	}
	if fn == nil {
		return ErrNilFunc
	}
	var last *ShardGroup
	report := func() (int64, error) {
		g, err := readGroup(ctx, cli, group, n)
		if err != nil {
			return 0, err
		}
		if last == nil || !sameGroup(last, g) {
			last = g
			fn(g)
		}
		return g.Revision, nil
	}
	var b backoff
	for ctx.Err() == nil && cli.Ctx().Err() == nil {
		rev, err := report()
		if err == nil {
			b.Reset()
			wch := cli.Watch(clientv3.WithRequireLeader(ctx), group+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
			for wr := range wch {
				if wr.Err() != nil {
					break
				}
				if len(wr.Events) > 0 {
					if _, err := report(); err != nil {
						break
					}
				}
			}
		}
		if !b.Pause(ctx, cli) {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("concurrency: WatchShards %q: %w", group, clientClosed(cli))
}

// sameGroup reports whether a and b have the same members (lease, weight,
// shards owned) and the same owner (lease, token) of every shard.
func sameGroup(a, b *ShardGroup) bool {
	return slices.EqualFunc(a.Members, b.Members, func(x, y ShardMember) bool {
		return x.Lease == y.Lease && x.Weight == y.Weight && slices.Equal(x.Owned, y.Owned)
	}) && slices.EqualFunc(a.Shards, b.Shards, func(x, y ShardOwner) bool {
		return x.Lease == y.Lease && x.Token == y.Token
	})
}
