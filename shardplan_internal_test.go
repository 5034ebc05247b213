package concurrency

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// randomGroup returns a group of 1 to maxN shards and 1 to maxM members
// of weights 1 to 4 (and, if heavy, one in ten of MaxShardWeight), each
// shard owned by a member, by a lease that is no member, or by nobody.
func randomGroup(r *rand.Rand, maxN, maxM int, heavy bool) *shardGroup {
	n := 1 + r.IntN(maxN)
	v := &shardGroup{shards: make([]groupShard, n)}
	nm := 1 + r.IntN(maxM)
	for i := range nm {
		w := 1 + r.IntN(4)
		if heavy && r.IntN(10) == 0 {
			w = MaxShardWeight
		}
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
	return v
}

// The plan of random groups: shares add up to n and are each within one
// of n*weight/total; every member is planned exactly its share; a member
// keeps what it owns up to its share; and only surplus and unowned shards
// move, each to one member.
func TestShardPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 2000; trial++ {
		v := randomGroup(r, 70, 9, false)
		n := len(v.shards)
		total := 0
		for _, mb := range v.members {
			total += mb.weight
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

// The property of issue 49: any stable membership, from any ownership
// (shards owned by members, by leases that are no members, by nobody),
// settles, each member owning exactly its share, with no shard moved
// twice; whatever order the planned moves happen in (a random part of
// them between two plans), in at most one plan per shard plus one.
func TestShardPlanSettles(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 1000; trial++ {
		v := randomGroup(r, 64, 8, true)
		n := len(v.shards)
		moved := make(map[int]int)
		plans := 0
		for ; ; plans++ {
			if plans > n+1 {
				t.Fatalf("trial %d: not settled after %d plans", trial, plans)
			}
			plan := v.assign()
			var pending [][2]int // shard, member
			for mi, mb := range v.members {
				for _, sh := range plan[mb.lease] {
					if v.shards[sh].holder() != mb.lease {
						pending = append(pending, [2]int{sh, mi})
					}
				}
			}
			if len(pending) == 0 {
				break
			}
			// At least one of the planned moves happens before the next
			// plan; each of the others with probability 1/2.
			r.Shuffle(len(pending), func(i, j int) { pending[i], pending[j] = pending[j], pending[i] })
			for k, p := range pending {
				if k > 0 && r.IntN(2) == 0 {
					continue
				}
				v.shards[p[0]].keys = []shardKey{{lease: v.members[p[1]].lease, rev: int64(2000 + plans)}}
				if moved[p[0]]++; moved[p[0]] > 1 {
					t.Fatalf("trial %d: shard %d moved twice", trial, p[0])
				}
			}
		}
		share := v.shares()
		for mi, mb := range v.members {
			owns := 0
			for i := range v.shards {
				if v.shards[i].holder() == mb.lease {
					owns++
				}
			}
			if owns != share[mi] {
				t.Fatalf("trial %d: settled with member %d owning %d, share %d", trial, mi, owns, share[mi])
			}
		}
	}
}

// FuzzMemberValue: parseMember never panics, and accepts only a count in
// [1, MaxShardCount] and a weight in [1, MaxShardWeight] (clamped); what
// memberValue writes reads back as written.
func FuzzMemberValue(f *testing.F) {
	for _, s := range []string{memberValue(4, 1), "shards=16 weight=1152921504606846976", "shards=1125899906842624 weight=1", "shards=4 weight=-1", "shards=4", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, w, ok := parseMember(v)
		if !ok {
			return
		}
		if n < 1 || n > MaxShardCount || w < 1 || w > MaxShardWeight {
			t.Fatalf("parseMember(%q) = %d, %d: out of range", v, n, w)
		}
		if n2, w2, ok := parseMember(memberValue(n, w)); !ok || n2 != n || w2 != w {
			t.Fatalf("memberValue(%d, %d) reads back as %d, %d, %v", n, w, n2, w2, ok)
		}
	})
}

// FuzzShardPlan plans from any keys under a group: lines of "key suffix
// TAB value TAB lease" become keys group/<suffix> with that value, on
// that lease, created in line order. Nothing panics; the shares add up to
// n (or are all 0 without members) and are each within one of the exact
// share; each member is planned exactly its share, no shard twice, every
// shard number in range.
func FuzzShardPlan(f *testing.F) {
	f.Add(16, "members/1\tshards=16 weight=1152921504606846976\t1\nmembers/2\tshards=16 weight=1\t2\nshard/0/1\t\t1\nshard/15/2\t\t2")
	f.Add(4, "members/1\tshards=8 weight=1\t1\nmembers/2\tshards=4 weight=3\t2\nshard/3/1\t\t1\nshard/03/2\t\t2\nshard/9/2\t\t2")
	f.Add(65536, "members/a\tshards=65536 weight=65536\t1\nmembers/b\tshards=65536 weight=1\t2")
	f.Fuzz(func(t *testing.T, n int, spec string) {
		if n < 1 || n > MaxShardCount {
			n = 1 + int(uint(n)%uint(MaxShardCount))
		}
		const group = "g"
		var kvs []*mvccpb.KeyValue
		for i, line := range strings.Split(spec, "\n") {
			f := strings.SplitN(line, "\t", 3)
			kv := &mvccpb.KeyValue{Key: []byte(group + "/" + f[0]), CreateRevision: int64(i + 1), ModRevision: int64(i + 1)}
			if len(f) > 1 {
				kv.Value = []byte(f[1])
			}
			if len(f) > 2 {
				kv.Lease, _ = strconv.ParseInt(f[2], 10, 64)
			}
			kvs = append(kvs, kv)
		}
		v := readShardGroup(group, n, kvs)
		share := v.shares()
		var total float64
		for _, mb := range v.members {
			total += float64(memberWeight(mb.weight))
		}
		sum := 0
		for i, s := range share {
			sum += s
			exact := float64(n) * float64(memberWeight(v.members[i].weight)) / total
			if float64(s) < exact-1 || float64(s) > exact+1 {
				t.Fatalf("member %d: share %d, exact %.2f", i, s, exact)
			}
		}
		if len(v.members) > 0 && sum != n {
			t.Fatalf("shares add up to %d, not %d", sum, n)
		}
		seen := make(map[int]bool)
		plan := v.assign()
		for i, mb := range v.members {
			for _, sh := range plan[mb.lease] {
				if sh < 0 || sh >= n || seen[sh] {
					t.Fatalf("shard %d planned twice or out of range", sh)
				}
				seen[sh] = true
			}
			if got := len(plan[mb.lease]); got != share[i] {
				t.Fatalf("member %d planned %d shards, share %d", i, got, share[i])
			}
		}
	})
}
