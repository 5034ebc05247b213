package concurrency

import (
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds the keys of a Shards group, their layout spelled here
// only:
//
//	g/members/<lease hex>   a member, on its session's lease; value "shards=N weight=W"
//	g/shard/<i>/<lease hex> the Mutex keys of shard i (a Mutex named g/shard/<i>)
//
// how a member writes them; the one parse of a key that any process wrote
// (bounded, never a panic), which every reader of a group shares: the plan
// (readShardGroup, and so InspectShards and WatchShards), the tracker of
// time unowned, and the rule of one shard count per group that the member
// keys' create revisions settle.

// membersPrefix is the prefix of group's member keys.
func membersPrefix(group string) string { return group + "/members/" }

// shardsPrefix is the prefix of the Mutex names of group's shards.
func shardsPrefix(group string) string { return group + "/shard/" }

// memberKey is the member key of lease id in group.
func memberKey(group string, id clientv3.LeaseID) string {
	return leaseKey(membersPrefix(group), id)
}

// shardName is the Mutex name of shard i of group.
func shardName(group string, i int) string { return shardsPrefix(group) + strconv.Itoa(i) }

// groupKey is a key under a group as every reader takes it.
type groupKey struct {
	member bool // under the members' prefix, whatever its value
	shard  int  // the shard whose Mutex key it is (shardOfKey), or -1

	lease clientv3.LeaseID
	rev   int64 // the key's create revision

	// Of a member key: live if its value parses (parseMember) and it is on
	// a lease; then its count and weight.
	live          bool
	count, weight int
}

// parseGroupKey places kv, a key read or watched under group, in the
// layout of a group of n shards, and parses a member key's value.
func parseGroupKey(group string, n int, kv *mvccpb.KeyValue) groupKey {
	gk := groupKeyOf(group, n, string(kv.Key))
	gk.lease, gk.rev = clientv3.LeaseID(kv.Lease), kv.CreateRevision
	if gk.member {
		gk.count, gk.weight, gk.live = parseMember(string(kv.Value))
		gk.live = gk.live && kv.Lease != 0
	}
	return gk
}

// groupKeyOf places key in the layout of a group of n shards by its name
// alone (the key of a delete event has no value).
func groupKeyOf(group string, n int, key string) groupKey {
	if strings.HasPrefix(key, membersPrefix(group)) {
		return groupKey{member: true, shard: -1}
	}
	if sp := shardsPrefix(group); strings.HasPrefix(key, sp) {
		if i, ok := shardOfKey(key[len(sp):], n); ok {
			return groupKey{shard: i}
		}
	}
	return groupKey{shard: -1}
}

// shardOfKey returns the shard number i of rest, the part of a key after
// group/shard/, if it is i/<anything> with 0 <= i < n written plainly.
func shardOfKey(rest string, n int) (int, bool) {
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		return 0, false
	}
	i, err := strconv.Atoi(rest[:slash])
	if err != nil || i < 0 || i >= n || strconv.Itoa(i) != rest[:slash] {
		return 0, false
	}
	return i, true
}

// memberValue is the value of a member key.
func memberValue(n, weight int) string { return fmt.Sprintf("shards=%d weight=%d", n, weight) }

// countConflict returns an error matching ErrInvalidShardCount if one of
// the member keys (under group/members/) among kvs, live (on a lease) and
// created before revision rev, runs another count than n.
func countConflict(group string, n int, rev int64, kvs []*mvccpb.KeyValue) error {
	for _, kv := range kvs {
		if gk := parseGroupKey(group, n, kv); gk.live && gk.count != n && gk.rev < rev {
			return fmt.Errorf("%w: %d here, but older member %s runs %d", ErrInvalidShardCount, n, kv.Key, gk.count)
		}
	}
	return nil
}

// parseMember reads a member key's value, "shards=N weight=W", written by
// any process: ok is false for a value that does not parse, a count
// outside [1, MaxShardCount] or a weight below 1; a weight above
// MaxShardWeight (a newer version's, or a hand-written key) is clamped to
// it. It never panics.
func parseMember(v string) (n, weight int, ok bool) {
	if _, err := fmt.Sscanf(v, "shards=%d weight=%d", &n, &weight); err != nil || n <= 0 || n > MaxShardCount || weight <= 0 {
		return 0, 0, false
	}
	return n, min(weight, MaxShardWeight), true
}
