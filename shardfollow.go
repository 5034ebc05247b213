package concurrency

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds how a Shards membership follows its group: the loop
// that reads the group's keys once and keeps them from a watch, and plans
// from them, spaced; and how it applies a plan (start the runners it
// lacks, drop the waits it no longer needs, ask the owners of the shards
// it waits for to yield). The runners themselves are in shardmember.go,
// the plan in shardplan.go.

// minPlanGap is the least time between two plans of a membership.
const minPlanGap = 20 * time.Millisecond

// resyncEvery is how often a membership reads its group again, and
// opens its watch again, without a failure: a third of its TTL, between
// 1 s and 20 s, so that a watch that went silent (it is a plain clientv3
// watch) delays a plan by that much at most.
func (m *membership) resyncEvery() time.Duration {
	return min(max(time.Duration(m.o.ttl)*time.Second/3, time.Second), 20*time.Second)
}

// groupView is the group's keys as a membership knows them: read once,
// then kept by its watch's events.
type groupView struct {
	kvs map[string]*mvccpb.KeyValue
	rev int64 // the revision the keys are known at
}

// sync reads the group's keys into a new view.
func (m *membership) sync(ctx context.Context) (*groupView, error) {
	rctx, cancel := context.WithTimeout(ctx, m.s.live().Wait*4)
	defer cancel()
	resp, err := m.s.get(rctx, m.group+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	v := &groupView{kvs: make(map[string]*mvccpb.KeyValue, len(resp.Kvs)), rev: resp.Header.Revision}
	for _, kv := range resp.Kvs {
		v.kvs[string(kv.Key)] = kv
	}
	return v, nil
}

// apply applies a watch response's events to v, and to the unowned
// tracker t (nil: none), and reports false if it is an error or there is
// no view (the watch must be opened again, from a new read).
func (v *groupView) apply(wr clientv3.WatchResponse, t *unownedTracker) bool {
	if v == nil || wr.Err() != nil || wr.Canceled {
		return false
	}
	t.events(wr.Events, v.rev, time.Now())
	for _, ev := range wr.Events {
		if ev.Kv.ModRevision <= v.rev {
			continue // seen by the read
		}
		if ev.Type == mvccpb.DELETE {
			delete(v.kvs, string(ev.Kv.Key))
		} else {
			v.kvs[string(ev.Kv.Key)] = ev.Kv
		}
	}
	v.rev = max(v.rev, wr.Header.Revision)
	return true
}

// loop plans and applies until ctx ends, the session ends or a fn failed.
// It reads the group's keys once and keeps them from a watch, and plans
// again after events, changes of runners and reads (spaced, see planDue):
// every resyncEvery, it reads again and opens a new watch; after a failed
// read or watch, it retries after a backoff.
func (m *membership) loop(ctx context.Context) error {
	f := &groupFollow{unwatch: func() {}, dirty: true}
	defer func() { f.unwatch() }()
	tick := time.NewTicker(m.resyncEvery())
	defer tick.Stop()
	// The spans of unowned shards, from this view (WithShardSession(WithMetrics)).
	f.unowned = newUnownedTracker(m.o.unowned, m.group, m.n)
	defer func() { f.unowned.stop(time.Now()) }()
	for {
		if err := m.resync(ctx, f); err != nil {
			return err
		}
		gap, err := m.planDue(ctx, f)
		if err != nil {
			return err
		}
		var retry <-chan time.Time
		if f.view == nil {
			retry = time.After(time.Until(f.retryAt))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-m.s.Ctx().Done():
			return nil
		case <-m.mctx.Done():
			return nil // a fn failed
		case <-retry:
		case <-gap:
		case <-m.kick:
			f.dirty = true
		case <-tick.C:
			f.view = nil
		case wr, ok := <-f.wch:
			f.events(wr, ok)
		}
	}
}

// groupFollow is the state of a membership's loop: its view of the group,
// the watch that keeps it, and when to read or plan again.
type groupFollow struct {
	view    *groupView // nil: read again
	wch     clientv3.WatchChan
	unwatch func()
	retryAt time.Time    // after a failure: when to read again
	backoff retryBackoff // after a failure
	unowned *unownedTracker

	dirty    bool      // the view or the runners changed since the last plan
	nextPlan time.Time // the earliest time of the next plan
}

// resync reads the group's keys into a new view, with a new watch from
// the read's revision, if the view is gone and the retry time has come.
// It returns an error only if retrying cannot fix it.
func (m *membership) resync(ctx context.Context, f *groupFollow) error {
	if f.view != nil || time.Now().Before(f.retryAt) {
		return nil
	}
	f.unwatch()
	f.wch = nil
	v, err := m.sync(ctx)
	if err != nil {
		if err := m.fatal(ctx, err); err != nil {
			return err
		}
		f.retryAt = time.Now().Add(f.backoff.next())
		return nil
	}
	f.wch, f.unwatch = m.watch(ctx, v.rev+1)
	f.view, f.dirty = v, true
	f.unowned.reset(v.kvs, time.Now())
	f.backoff.reset()
	return nil
}

// planDue plans from the view if it changed and the gap after the last
// plan has passed; while the gap lasts, it returns a channel that fires
// at its end. Plans are spaced by at least minPlanGap, and by four times
// what the last one took, so that a storm of events (many members
// starting together, each queueing) costs a plan per gap, not one per
// event batch: the events that arrive meanwhile are applied to the view,
// and the next plan sees them all. It returns an error only if retrying
// cannot fix it.
func (m *membership) planDue(ctx context.Context, f *groupFollow) (<-chan time.Time, error) {
	if f.view == nil || !f.dirty {
		return nil, nil
	}
	if d := time.Until(f.nextPlan); d > 0 {
		return time.After(d), nil
	}
	start := time.Now()
	err := m.plan(ctx, f.view)
	f.nextPlan = time.Now().Add(max(minPlanGap, 4*time.Since(start)))
	f.dirty = false
	if err != nil {
		return nil, m.fatal(ctx, err)
	}
	return nil, nil
}

// events applies a watch response (ok false: the watch channel closed),
// and those already waiting behind it, to the view; after a failed watch,
// it drops the view, to be read again after a backoff.
func (f *groupFollow) events(wr clientv3.WatchResponse, ok bool) {
	f.dirty = true
	for {
		if !ok || !f.view.apply(wr, f.unowned) {
			f.view, f.retryAt = nil, time.Now().Add(f.backoff.next())
			return
		}
		select {
		case wr, ok = <-f.wch:
		default:
			return
		}
	}
}

// watch watches the group's keys from revision rev, until the returned
// function is called or ctx ends.
func (m *membership) watch(ctx context.Context, rev int64) (clientv3.WatchChan, func()) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	return m.cli.Watch(wctx, m.group+"/", clientv3.WithPrefix(), clientv3.WithRev(rev)), cancel
}

// fatal returns err, wrapped, if retrying cannot fix it, and nil for an
// error that a later read or plan may not meet (the ends of ctx and of the
// session are seen by loop itself).
func (m *membership) fatal(ctx context.Context, err error) error {
	if errors.Is(err, ErrInvalidShardCount) {
		return err // an older member runs another count: leave
	}
	if ctx.Err() != nil || m.s.Ctx().Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return nil
	}
	return m.permanent(err)
}

// plan works out, from the group's keys, which shards this member should
// own or wait for, and applies it: it starts a runner for each shard it
// should own and has none for, drops the waits it no longer needs, and
// asks the owners of the shards it waits for to yield, once its key waits
// there.
func (m *membership) plan(ctx context.Context, gv *groupView) error {
	rctx, cancel := context.WithTimeout(ctx, m.s.live().Wait*4)
	defer cancel()
	kvs := make([]*mvccpb.KeyValue, 0, len(gv.kvs))
	for _, kv := range gv.kvs {
		kvs = append(kvs, kv)
	}
	v := readShardGroup(m.group, m.n, kvs)
	me := m.s.Lease()
	mi, ok := v.member(me)
	if ok {
		if err := countConflict(m.group, m.n, v.members[mi].rev, kvs); err != nil {
			return err
		}
	} else {
		// Our key is gone (deleted by someone else) though the session
		// lives: write it again. A lease that is gone fails the put, and
		// the session ends.
		_, err := m.cli.Put(rctx, memberKey(m.group, me), memberValue(m.n, m.o.weight), clientv3.WithLease(me))
		return err
	}
	take := v.assign()[me]
	want := make(map[int]bool, len(take))
	for _, i := range take {
		want[i] = true
	}
	m.startRunners(take, want)
	if err := m.askYields(rctx, v, take); err != nil {
		return err
	}
	for i, rev := range m.asked {
		if !want[i] || v.shards[i].holderRev() != rev {
			delete(m.asked, i)
		}
	}
	return nil
}

// startRunners drops the waits for shards not in want, and starts a
// runner for each shard of take that has none.
func (m *membership) startRunners(take []int, want map[int]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, r := range m.runners {
		if !r.held && !want[id] {
			r.cancelWait()
		}
	}
	for _, i := range take {
		if _, ok := m.runners[i]; !ok && m.mctx.Err() == nil && m.s.Ctx().Err() == nil {
			wctx, cancel := context.WithCancel(m.mctx)
			r := &shardRunner{id: i, cancelWait: cancel, done: make(chan struct{})}
			m.runners[i] = r
			go m.run(wctx, r)
		}
	}
}

// askYields asks the owners of the shards of take to hand them over, once
// this member's key waits behind theirs, so that the shard comes to it:
// one request per hold, each applied only while that hold is current, up
// to maxTxnOps of them in one transaction; never twice for one hold.
func (m *membership) askYields(ctx context.Context, v *shardGroup, take []int) error {
	me := m.s.Lease()
	var ops []clientv3.Op
	var asking []int
	for _, i := range take {
		sh := &v.shards[i]
		if len(sh.keys) < 2 || sh.keys[0].lease == me || !sh.waits(me) {
			continue
		}
		if _, other := v.others[sh.keys[0].lease]; other {
			continue // a member of another count: it leaves by itself, or we do
		}
		h := sh.keys[0]
		if m.asked[i] == h.rev {
			continue
		}
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)},
			[]clientv3.Op{clientv3.OpPut(yieldKey(h.key), strconv.FormatInt(h.rev, 10), clientv3.WithLease(h.lease))}, nil))
		asking = append(asking, i)
	}
	for len(ops) > 0 {
		k := min(len(ops), maxTxnOps)
		if _, err := m.cli.Txn(ctx).Then(ops[:k]...).Commit(); err != nil {
			return err
		}
		for _, i := range asking[:k] {
			m.asked[i] = v.shards[i].holderRev()
		}
		ops, asking = ops[k:], asking[k:]
	}
	return nil
}
