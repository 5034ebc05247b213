package concurrency

import (
	"context"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds WatchShards, the watch of a Shards group for processes
// that do not join: it follows the group's members and owners. (The watch
// of an election's leader, WatchLeader, is beside Lead, in
// leaderwatch.go.)

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
	return fmt.Errorf("concurrency: WatchShards %q: %w", group, request.ClientClosed(cli))
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
