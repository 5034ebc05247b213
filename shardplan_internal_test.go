package concurrency

import (
	"math/rand/v2"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The plan of random groups: shares add up to n and are each within one
// of n*weight/total; every member is planned exactly its share; a member
// keeps what it owns up to its share; and only surplus and unowned shards
// move, each to one member.
func TestShardPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 2000; trial++ {
		n := 1 + r.IntN(70)
		v := &shardGroup{shards: make([]groupShard, n)}
		nm := 1 + r.IntN(9)
		total := 0
		for i := range nm {
			w := 1 + r.IntN(4)
			total += w
			v.members = append(v.members, groupMember{lease: clientv3.LeaseID(100 + i), rev: int64(10 + i), weight: w})
		}
		for i := range v.shards {
			switch h := r.IntN(nm + 2); {
			case h < nm:
				v.shards[i].keys = []shardKey{{lease: v.members[h].lease, rev: int64(1000 + i)}}
			case h == nm:
				v.shards[i].keys = []shardKey{{lease: 7, rev: int64(1000 + i)}} // not a member
			}
		}
		share := v.shares()
		sum := 0
		for i, s := range share {
			sum += s
			exact := float64(n*v.members[i].weight) / float64(total)
			if float64(s) < exact-1 || float64(s) > exact+1 {
				t.Fatalf("trial %d: member %d share %d, exact %.2f", trial, i, s, exact)
			}
		}
		if sum != n {
			t.Fatalf("trial %d: shares add up to %d, not %d", trial, sum, n)
		}
		plan := v.assign()
		seen := make(map[int]clientv3.LeaseID)
		moved, needed := 0, 0
		for i, mb := range v.members {
			got := plan[mb.lease]
			if len(got) != share[i] {
				t.Fatalf("trial %d: member %d planned %d shards, share %d", trial, i, len(got), share[i])
			}
			owns := 0
			for _, sh := range got {
				if prev, ok := seen[sh]; ok {
					t.Fatalf("trial %d: shard %d planned for %v and %v", trial, sh, prev, mb.lease)
				}
				seen[sh] = mb.lease
				if v.shards[sh].holder() == mb.lease {
					owns++
				} else {
					moved++
				}
			}
			had := 0
			for sh := range v.shards {
				if v.shards[sh].holder() == mb.lease {
					had++
				}
			}
			if owns != min(had, share[i]) {
				t.Fatalf("trial %d: member %d keeps %d of its %d shards, share %d", trial, i, owns, had, share[i])
			}
			needed += max(share[i]-had, 0)
		}
		if len(seen) != n || moved != needed {
			t.Fatalf("trial %d: %d shards planned of %d; %d move, %d needed", trial, len(seen), n, moved, needed)
		}
	}
}
