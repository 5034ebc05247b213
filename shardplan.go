package concurrency

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds the plan of Shards: how one read of a group's keys
// becomes the members, their fair shares, and which shards each member
// should own; and the same read as operators see it (ShardGroup, read by
// readGroup for InspectShards, in inspectshards.go, and WatchShards).

// shardGroup is a group as one read saw it.
type shardGroup struct {
	members []groupMember              // in create-revision order
	shards  []groupShard               // by number
	others  map[clientv3.LeaseID]int64 // live members of another shard count: lease -> create revision
}

// groupMember is a live member of a group.
type groupMember struct {
	lease  clientv3.LeaseID
	rev    int64 // create revision of the member key
	weight int
}

// groupShard is the queue of one shard's Mutex.
type groupShard struct {
	keys []shardKey // in create-revision order: the first holds
}

type shardKey struct {
	key   string
	lease clientv3.LeaseID
	rev   int64
}

// holder is the lease of the shard's holder, or NoLease.
func (sh *groupShard) holder() clientv3.LeaseID {
	if len(sh.keys) == 0 {
		return clientv3.NoLease
	}
	return sh.keys[0].lease
}

// holderRev is the token of the shard's holder, or 0.
func (sh *groupShard) holderRev() int64 {
	if len(sh.keys) == 0 {
		return 0
	}
	return sh.keys[0].rev
}

// waits reports whether lease id waits for the shard.
func (sh *groupShard) waits(id clientv3.LeaseID) bool {
	for _, k := range sh.keys[1:] {
		if k.lease == id {
			return true
		}
	}
	return false
}

// readShardGroup parses the keys under group/ (one read) into a
// shardGroup of n shards. Members of another shard count are left out of
// the members (and kept in others), and so are keys of shards beyond n,
// member keys that parseMember refuses or that have no lease, and all but
// the oldest of several member keys on one lease.
func readShardGroup(group string, n int, kvs []*mvccpb.KeyValue) *shardGroup {
	v := &shardGroup{shards: make([]groupShard, n)}
	for _, kv := range kvs {
		gk := parseGroupKey(group, n, kv)
		switch {
		case gk.member && !gk.live:
		case gk.member && gk.count == n:
			v.members = append(v.members, groupMember{lease: gk.lease, rev: gk.rev, weight: gk.weight})
		case gk.member:
			if v.others == nil {
				v.others = make(map[clientv3.LeaseID]int64)
			}
			v.others[gk.lease] = gk.rev
		case gk.shard >= 0:
			v.shards[gk.shard].keys = append(v.shards[gk.shard].keys, shardKey{key: string(kv.Key), lease: gk.lease, rev: gk.rev})
		}
	}
	// Keys written in one transaction share a create revision: ties are
	// broken by lease and weight, so that every reader sees one order.
	slices.SortFunc(v.members, func(a, b groupMember) int {
		return cmp.Or(cmp.Compare(a.rev, b.rev), cmp.Compare(a.lease, b.lease), cmp.Compare(a.weight, b.weight))
	})
	// One member per lease (a Shards member writes one key; more are
	// written by hand): its oldest key.
	seen := make(map[clientv3.LeaseID]bool, len(v.members))
	v.members = slices.DeleteFunc(v.members, func(mb groupMember) bool {
		dup := seen[mb.lease]
		seen[mb.lease] = true
		return dup
	})
	for i := range v.shards {
		slices.SortFunc(v.shards[i].keys, func(a, b shardKey) int { return cmp.Or(cmp.Compare(a.rev, b.rev), strings.Compare(a.key, b.key)) })
	}
	return v
}

// member returns the index of lease id among the members.
func (v *shardGroup) member(id clientv3.LeaseID) (int, bool) {
	for i, mb := range v.members {
		if mb.lease == id {
			return i, true
		}
	}
	return 0, false
}

// shares returns each member's fair share of the shards, by weight: the
// whole part of n*weight/total, and one more for the members with the
// largest remainders (ties to the older member), so that they add up to n
// and each is within one of the exact share. It computes in int64 with
// each weight clamped to [0, MaxShardWeight] and n at most MaxShardCount
// (2^32 at most for n*weight), so that no member set, whatever its keys
// say, overflows it.
func (v *shardGroup) shares() []int {
	n := int64(len(v.shards))
	var total int64
	for _, mb := range v.members {
		total += memberWeight(mb.weight)
	}
	sh := make([]int, len(v.members))
	if total == 0 || n == 0 {
		return sh
	}
	rem := make([]int64, len(v.members))
	left := n
	for i, mb := range v.members {
		q := n * memberWeight(mb.weight)
		sh[i] = int(q / total)
		rem[i] = q % total
		left -= q / total
	}
	order := make([]int, len(v.members))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rem[b], rem[a]) })
	// 0 <= left < len(members): the remainders add up to left*total.
	for _, i := range order[:min(max(left, 0), int64(len(order)))] {
		sh[i]++
	}
	return sh
}

// memberWeight is a member's weight as the plan uses it: clamped to
// [0, MaxShardWeight]. parseMember clamps already; this guards the plan
// from any groupMember.
func memberWeight(w int) int64 { return int64(min(max(w, 0), MaxShardWeight)) }

// assign is the plan every member computes from the same read: for each
// member, the shards it should own, in order. A member keeps the shards
// it owns, up to its share (the lowest numbers); the rest (its surplus),
// and the shards nobody among the members owns, go to the members below
// their share, in member order, as many to each as it lacks. The shards
// that move are exactly the surplus and the unowned: no more than needed.
func (v *shardGroup) assign() map[clientv3.LeaseID][]int {
	share := v.shares()
	idx := make(map[clientv3.LeaseID]int, len(v.members))
	for i, mb := range v.members {
		idx[mb.lease] = i
	}
	owned := make([][]int, len(v.members))
	var pool []int // unowned first, then the surplus of each member in member order
	for i := range v.shards {
		mi, ok := idx[v.shards[i].holder()]
		if !ok {
			pool = append(pool, i)
			continue
		}
		owned[mi] = append(owned[mi], i)
	}
	plan := make(map[clientv3.LeaseID][]int, len(v.members))
	for mi, mb := range v.members {
		keep := owned[mi][:min(len(owned[mi]), share[mi])]
		pool = append(pool, owned[mi][len(keep):]...)
		plan[mb.lease] = slices.Clone(keep)
	}
	for mi, mb := range v.members {
		for len(plan[mb.lease]) < share[mi] && len(pool) > 0 {
			plan[mb.lease] = append(plan[mb.lease], pool[0])
			pool = pool[1:]
		}
	}
	return plan
}

// ShardGroup is a group of Shards as one linearizable read saw it, as
// InspectShards returns it.
type ShardGroup struct {
	Group    string        // the group name, as given to InspectShards
	Revision int64         // etcd's revision at the read
	Members  []ShardMember // the live members, in join order (create revision of their keys)
	Shards   []ShardOwner  // every shard, by number
}

// ShardMember is a live member of a group.
type ShardMember struct {
	Lease          clientv3.LeaseID // the member's session lease
	Key            string           // its member key, group/members/<lease hex>
	CreateRevision int64            // orders the members
	Weight         int              // WithShardWeight, as the plan uses it (at most MaxShardWeight)
	Share          int              // its fair share of the shards, as every member computes it
	Owned          []int            // the shards it owns, in order
	Owner          *Owner           // its owner record (WithShardSession(WithOwner)), or nil
}

// ShardOwner is a shard of a group and its owner.
type ShardOwner struct {
	ID      int
	Lease   clientv3.LeaseID // the owner's lease, or clientv3.NoLease if nobody owns the shard
	Token   int64            // the owner's fencing token (the create revision of its key), or 0
	Member  bool             // the owner is a live member (else it left or is another client)
	Waiters int              // how many keys wait behind the owner
}

// validGroup reports a nil client, an empty group name and a shard count
// below 1 or above MaxShardCount, as Shards, InspectShards and WatchShards
// do before any round trip.
func validGroup(c *clientv3.Client, group string, n int) error {
	switch {
	case c == nil:
		return ErrNilClient
	case group == "":
		return ErrInvalidPrefix
	case n <= 0 || n > MaxShardCount:
		return fmt.Errorf("%w: %d (1 to %d)", ErrInvalidShardCount, n, MaxShardCount)
	}
	return nil
}

// readGroup is InspectShards without the owner records: one linearizable
// read of the group's keys.
func readGroup(ctx context.Context, c *clientv3.Client, group string, n int) (*ShardGroup, error) {
	resp, err := c.Get(ctx, group+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("concurrency: reading shards group %q: %w", group, err)
	}
	v := readShardGroup(group, n, resp.Kvs)
	g := &ShardGroup{Group: group, Revision: resp.Header.Revision, Shards: make([]ShardOwner, n)}
	share := v.shares()
	idx := make(map[clientv3.LeaseID]int, len(v.members))
	for i, mb := range v.members {
		idx[mb.lease] = i
		g.Members = append(g.Members, ShardMember{Lease: mb.lease, Key: memberKey(group, mb.lease), CreateRevision: mb.rev, Weight: mb.weight, Share: share[i]})
	}
	for i := range v.shards {
		sh := &v.shards[i]
		o := ShardOwner{ID: i, Lease: sh.holder(), Token: sh.holderRev(), Waiters: max(len(sh.keys)-1, 0)}
		if mi, ok := idx[o.Lease]; ok && len(sh.keys) > 0 {
			o.Member = true
			g.Members[mi].Owned = append(g.Members[mi].Owned, i)
		}
		g.Shards[i] = o
	}
	return g, nil
}
