package concurrency

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds InspectShards, the operators' reader of a Shards group:
// the group as its members plan from it (readGroup, in shardplan.go), with
// the members' owner records.

// InspectShards reads group, of n shards: its live members with their
// weights, fair shares and owned shards, and each shard's owner, from one
// linearizable read, then the members' owner records (WithShardSession(WithOwner)), one
// round trip per 100 members. It is read-only and needs no session. It
// blocks for these round trips, which ctx bounds: if ctx ends first it
// returns an error matching ctx.Err(). A nil client gives ErrNilClient, an
// empty group ErrInvalidPrefix and n <= 0 ErrInvalidShardCount, before any
// round trip, as is n > MaxShardCount. Members that run another shard
// count are left out, as the members themselves leave them out; so are
// member keys whose value does not parse, and a weight above
// MaxShardWeight counts as MaxShardWeight (parseMember): no value written
// under the group makes InspectShards panic.
func InspectShards(ctx context.Context, c *clientv3.Client, group string, n int) (*ShardGroup, error) {
	if err := validGroup(c, group, n); err != nil {
		return nil, err
	}
	g, err := readGroup(ctx, c, group, n)
	if err != nil {
		return nil, err
	}
	ids := make([]clientv3.LeaseID, len(g.Members))
	for i, mb := range g.Members {
		ids[i] = mb.Lease
	}
	owners, err := readOwners(ctx, c, ids)
	if err != nil {
		return nil, fmt.Errorf("concurrency: InspectShards %q: %w", group, err)
	}
	for i := range g.Members {
		g.Members[i].Owner = owners[g.Members[i].Lease]
	}
	return g, nil
}
