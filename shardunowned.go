package concurrency

import (
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds the measure of unowned shards: ShardMetricsRecorder, the
// optional part of a MetricsRecorder that Shards looks for in its
// sessions' (WithShardSession(WithMetrics(r))), and
// the tracker by which a Shards member times, from its own view of the
// group's keys, how long each shard goes without a member owning it.

// ShardMetricsRecorder is implemented by a MetricsRecorder that also
// records how long the shards of a Shards group go without an owner.
// Shards checks the recorder its sessions are given for it (a type
// assertion): MetricsRecorder itself is unchanged, and a recorder without
// these methods gets the lock metrics alone. concurrencyprom.Metrics
// implements it.
//
// What is measured, and from whose view: every member of a group given
// such a recorder follows the group's keys (it reads them, then keeps them
// from a watch, as it does to plan). In that view, a shard is owned when
// the first key of its queue (the holder of its Mutex at that revision)
// is on the lease of a live member, one whose member key exists, and
// unowned otherwise: its queue is empty (its owner's lease expired or was
// revoked, or nobody has queued yet), or its holder is not a member (a
// member that is leaving deletes its member key before it releases its
// shards; another client may have locked group/shard/<i>). A span of a
// shard runs from the moment this member sees it unowned to the moment it
// sees it owned again, each moment stamped when the member's loop applies
// the watch response or read that shows it.
//
// The error of each end is how late the member learns of the change: the
// watch's delivery, plus at most one plan in progress (a few round trips);
// after a failed watch, the backoff before the next read (100 ms doubling
// to 5 s). A shard lost and owned again within one watch response, or
// while the watch was down, is not seen. A shard already unowned when the
// member first reads the group is counted from that read; a span still
// open when the membership ends (the member leaves, or its session ends)
// is reported then, cut short.
//
// What no member can see: a crashed owner keeps its keys until etcd
// expires its lease (a TTL after its last renewal), so its shards count as
// owned until then; and a handover by yield counts as owned throughout
// (the waiter is granted at the revision of the owner's release), though
// the old owner's fn stops when it reads the request and the new one's
// starts when it reads its grant.
//
// Every member of a group sees the same spans, each stamped by its own
// delays, so across members take the maximum (or any one member's), never
// the sum. The measure costs a member a second index of the group's keys
// (memory in proportion to them) and, per watch response, a look at each
// shard its events touch (every shard after a member key's event). The methods are called from the member's planning goroutine, as
// MetricsRecorder's are: they must be safe for concurrent use (several
// members in one process share a recorder), must not block, and must not
// call back into this package.
type ShardMetricsRecorder interface {
	// ShardGroupJoined is called when a member of group, of n shards,
	// starts to follow the group (each time it joins, on each session),
	// before any other call for that membership. It reports nothing that
	// happened: it lets a recorder start the group's series at 0, and may
	// be called many times for one group.
	ShardGroupJoined(group string, n int)

	// ShardUnownedStarted is called when the member sees shard of group
	// unowned, after seeing it owned or at its first read of the group.
	ShardUnownedStarted(group string, shard int)

	// ShardUnownedEnded is called exactly once after each
	// ShardUnownedStarted for the same shard of the same membership: when
	// the member sees the shard owned again, or when the membership ends
	// (the span cut short). unowned is the time between the two.
	ShardUnownedEnded(group string, shard int, unowned time.Duration)
}

// unownedTracker times the spans in which a membership sees shards of its
// group unowned. It keeps its own index of the group's keys (each shard's
// queue, the live members), updated by the same reads and watch events as
// the membership's view, so that a watch response costs only its events:
// each shard an event touches is looked at again, and every shard after a
// member key's event. It is used by the membership's loop goroutine only.
// A nil tracker (no ShardMetricsRecorder) does nothing.
type unownedTracker struct {
	r      ShardMetricsRecorder
	group  string
	n      int
	queues []map[string]shardKey       // shard -> its keys (usually one or two)
	leases map[string]clientv3.LeaseID // member key -> lease, of live members of this shard count
	live   map[clientv3.LeaseID]bool
	dirty  map[int]bool      // shards to look at again; nil: all of them
	open   map[int]time.Time // shard -> when this member began to see it unowned
}

// newUnownedTracker returns a tracker reporting to r, or nil if r is nil.
func newUnownedTracker(r ShardMetricsRecorder, group string, n int) *unownedTracker {
	if r == nil {
		return nil
	}
	r.ShardGroupJoined(group, n)
	return &unownedTracker{r: r, group: group, n: n, open: make(map[int]time.Time)}
}

// reset replaces the index with kvs, a read of the group's keys, and
// reports at now what changed since the last call.
func (t *unownedTracker) reset(kvs map[string]*mvccpb.KeyValue, now time.Time) {
	if t == nil {
		return
	}
	t.queues = make([]map[string]shardKey, t.n)
	t.leases = make(map[string]clientv3.LeaseID)
	t.live = make(map[clientv3.LeaseID]bool)
	for _, kv := range kvs {
		t.put(kv)
	}
	t.dirty = nil
	t.flush(now)
}

// events applies the events of a watch response (those after revision
// rev, which a read already showed) to the index, and reports at now what
// changed.
func (t *unownedTracker) events(evs []*clientv3.Event, rev int64, now time.Time) {
	if t == nil || t.queues == nil {
		return
	}
	for _, ev := range evs {
		if ev.Kv.ModRevision <= rev {
			continue
		}
		if ev.Type == mvccpb.DELETE {
			t.delete(string(ev.Kv.Key))
		} else {
			t.put(ev.Kv)
		}
	}
	t.flush(now)
}

// put indexes a key of the group, as written.
func (t *unownedTracker) put(kv *mvccpb.KeyValue) {
	k := string(kv.Key)
	switch gk := parseGroupKey(t.group, t.n, kv); {
	case gk.member:
		t.delete(k)
		if gk.live && gk.count == t.n {
			t.leases[k] = gk.lease
			t.live[gk.lease] = true
		}
		t.dirty = nil
	case gk.shard >= 0:
		i := gk.shard
		if t.queues[i] == nil {
			t.queues[i] = make(map[string]shardKey)
		}
		t.queues[i][k] = shardKey{key: k, lease: gk.lease, rev: gk.rev}
		t.touch(i)
	}
}

// delete removes a key of the group from the index.
func (t *unownedTracker) delete(k string) {
	if id, ok := t.leases[k]; ok {
		delete(t.leases, k)
		delete(t.live, id)
		t.dirty = nil
		return
	}
	if i := groupKeyOf(t.group, t.n, k).shard; i >= 0 {
		delete(t.queues[i], k)
		t.touch(i)
	}
}

// touch marks shard i to be looked at again.
func (t *unownedTracker) touch(i int) {
	if t.dirty != nil {
		t.dirty[i] = true
	}
}

// flush looks again at the shards marked, reports at now each that became
// unowned or owned, and clears the marks.
func (t *unownedTracker) flush(now time.Time) {
	look := func(i int) {
		var holder shardKey // the oldest key of the queue
		for _, k := range t.queues[i] {
			if holder.rev == 0 || k.rev < holder.rev {
				holder = k
			}
		}
		owned := holder.rev != 0 && t.live[holder.lease]
		since, open := t.open[i]
		switch {
		case !owned && !open:
			t.open[i] = now
			t.r.ShardUnownedStarted(t.group, i)
		case owned && open:
			delete(t.open, i)
			t.r.ShardUnownedEnded(t.group, i, now.Sub(since))
		}
	}
	if t.dirty == nil {
		for i := range t.n {
			look(i)
		}
	} else {
		for i := range t.dirty {
			look(i)
		}
	}
	t.dirty = make(map[int]bool)
}

// stop ends, at now, every span still open: the membership stops
// following the group.
func (t *unownedTracker) stop(now time.Time) {
	if t == nil {
		return
	}
	for i, since := range t.open {
		delete(t.open, i)
		t.r.ShardUnownedEnded(t.group, i, now.Sub(since))
	}
}
