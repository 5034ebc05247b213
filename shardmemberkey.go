package concurrency

import (
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds a Shards member key, group/members/<lease hex> with the
// value "shards=N weight=W": how a member writes it, and how every reader
// takes one that any process wrote (bounded, never a panic), and the rule
// of one shard count per group that the keys' create revisions settle.

// memberKey is the member key of lease id in group.
func memberKey(group string, id clientv3.LeaseID) string {
	return leaseKey(group+"/members/", id)
}

// memberValue is the value of a member key.
func memberValue(n, weight int) string { return fmt.Sprintf("shards=%d weight=%d", n, weight) }

// countConflict returns an error matching ErrInvalidShardCount if one of
// the member keys (under group/members/) among kvs, live (on a lease) and
// created before revision rev, runs another count than n.
func countConflict(group string, n int, rev int64, kvs []*mvccpb.KeyValue) error {
	mp := group + "/members/"
	for _, kv := range kvs {
		if !strings.HasPrefix(string(kv.Key), mp) {
			continue
		}
		cnt, _, ok := parseMember(string(kv.Value))
		if ok && cnt != n && kv.Lease != 0 && kv.CreateRevision < rev {
			return fmt.Errorf("%w: %d here, but older member %s runs %d", ErrInvalidShardCount, n, kv.Key, cnt)
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
