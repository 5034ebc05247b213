package concurrency

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The unowned tracker's index, updated event by event, against the plan's
// own reading of the same keys (readShardGroup) after every watch
// response: random puts and deletes of member keys (of this shard count
// and of another), shard keys and stray keys, in batches, with now and
// then a fresh read. The shards the tracker has open spans for are always
// those whose holder is not a live member, and its calls pair up.
func TestUnownedTrackerIndex(t *testing.T) {
	const group, n = "g", 5
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 200; trial++ {
		rec := &pairRecorder{t: t, open: map[int]bool{}}
		tr := newUnownedTracker(rec, group, n)
		kvs := map[string]*mvccpb.KeyValue{}
		rev := int64(1)
		tr.reset(kvs, time.Now())
		for step := 0; step < 100; step++ {
			var evs []*clientv3.Event
			for range 1 + r.IntN(4) {
				rev++
				lease := int64(1 + r.IntN(4))
				var k, v string
				switch r.IntN(3) {
				case 0:
					k, v = memberKey(group, clientv3.LeaseID(lease)), memberValue(n, 1)
					if r.IntN(5) == 0 {
						v = memberValue(n+1, 1) // another shard count: not a member here
					}
				case 1:
					k = fmt.Sprintf("%s/%x", shardName(group, r.IntN(n+1)), lease) // shard n is beyond the count
				default:
					k = fmt.Sprintf("%s/shard/x/%x", group, lease)
				}
				if old, ok := kvs[k]; ok && r.IntN(2) == 0 {
					delete(kvs, k)
					evs = append(evs, &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: old.Key, ModRevision: rev}})
					continue
				}
				kv := &mvccpb.KeyValue{Key: []byte(k), Value: []byte(v), Lease: lease, CreateRevision: rev, ModRevision: rev}
				if old, ok := kvs[k]; ok {
					kv.CreateRevision = old.CreateRevision
				}
				kvs[k] = kv
				evs = append(evs, &clientv3.Event{Type: mvccpb.PUT, Kv: kv})
			}
			if r.IntN(10) == 0 {
				tr.reset(maps.Clone(kvs), time.Now())
			} else {
				tr.events(evs, rev-int64(len(evs)), time.Now())
			}
			if got, want := rec.shards(), unownedOf(group, n, kvs); !slices.Equal(got, want) {
				t.Fatalf("trial %d step %d: open spans for %v, want %v", trial, step, got, want)
			}
		}
		tr.stop(time.Now())
		if got := rec.shards(); len(got) != 0 {
			t.Fatalf("trial %d: open after stop: %v", trial, got)
		}
	}
}

// unownedOf is the shards without a live member holding them, by the
// plan's reading of kvs.
func unownedOf(group string, n int, kvs map[string]*mvccpb.KeyValue) []int {
	v := readShardGroup(group, n, slices.Collect(maps.Values(kvs)))
	var ids []int
	for i := range v.shards {
		if _, ok := v.member(v.shards[i].holder()); !ok || len(v.shards[i].keys) == 0 {
			ids = append(ids, i)
		}
	}
	return ids
}

// pairRecorder is a ShardMetricsRecorder that checks that each shard's
// spans start and end in pairs.
type pairRecorder struct {
	t    *testing.T
	open map[int]bool
}

func (p *pairRecorder) ShardGroupJoined(string, int) {}

func (p *pairRecorder) ShardUnownedStarted(_ string, i int) {
	if p.open[i] {
		p.t.Fatalf("shard %d started twice", i)
	}
	p.open[i] = true
}

func (p *pairRecorder) ShardUnownedEnded(_ string, i int, d time.Duration) {
	if !p.open[i] || d < 0 {
		p.t.Fatalf("shard %d ended (%v) without a start", i, d)
	}
	delete(p.open, i)
}

func (p *pairRecorder) shards() []int { return slices.Sorted(maps.Keys(p.open)) }
