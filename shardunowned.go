package concurrency

import (
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds the measure of unowned shards: ShardMetricsRecorder, the
// optional part of a MetricsRecorder that WithShardMetrics looks for, and
// the tracker by which a Shards member times, from its own view of the
// group's keys, how long each shard goes without a member owning it.

// ShardMetricsRecorder is implemented by a MetricsRecorder that also
// records how long the shards of a Shards group go without an owner.
// WithShardMetrics checks the recorder it is given for it (a type
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
// the sum. The methods are called from the member's planning goroutine, as
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
// group unowned. It is used by the membership's loop goroutine only. A nil
// tracker (no ShardMetricsRecorder) does nothing.
type unownedTracker struct {
	r     ShardMetricsRecorder
	group string
	n     int
	open  map[int]time.Time // shard -> when this member began to see it unowned
}

// newUnownedTracker returns a tracker reporting to r, or nil if r is nil.
func newUnownedTracker(r ShardMetricsRecorder, group string, n int) *unownedTracker {
	if r == nil {
		return nil
	}
	r.ShardGroupJoined(group, n)
	return &unownedTracker{r: r, group: group, n: n, open: make(map[int]time.Time)}
}

// observe updates the spans from the group's keys as a view shows them at
// now: it reports each shard that became unowned or owned since the last
// call.
func (t *unownedTracker) observe(kvs map[string]*mvccpb.KeyValue, now time.Time) {
	if t == nil {
		return
	}
	list := make([]*mvccpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		list = append(list, kv)
	}
	v := readShardGroup(t.group, t.n, list)
	live := make(map[clientv3.LeaseID]bool, len(v.members))
	for _, mb := range v.members {
		live[mb.lease] = true
	}
	for i := range v.shards {
		owned := live[v.shards[i].holder()] // NoLease is never a member
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
