package concurrency

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds a Shards member at work: its membership on one session
// (register, follow the group, plan, leave) and the runner of each shard
// it waits for or owns (lock, run fn, release). The plan itself is in
// shardplan.go.

// shardMember is the state of one call of Shards.
type shardMember struct {
	cli   *clientv3.Client
	group string
	n     int
	fn    func(ctx context.Context, sh Shard) error
	o     *shardOptions
}

// shardName is the Mutex name of shard i of group.
func shardName(group string, i int) string { return group + "/shard/" + strconv.Itoa(i) }

// shardRunner is one shard that a membership waits for or owns: the
// goroutine that locks it, runs fn and releases it.
type shardRunner struct {
	id         int
	cancelWait context.CancelFunc // ends Lock while it waits; then the runner drops the shard
	done       chan struct{}      // closed when the runner has returned
	held       bool               // guarded by membership.mu
}

// membership is one session's worth of Shards: registered under one lease.
type membership struct {
	*shardMember
	s    *Session
	mctx context.Context // ends fn's contexts: when Shards leaves, or the session ended
	mend context.CancelCauseFunc
	kick chan struct{} // a runner changed state: plan again

	mu      sync.Mutex // guards runners, fnErr
	runners map[int]*shardRunner
	fnErr   error // the first error a fn returned while owning its shard

	asked map[int]int64 // shard -> token of the hold this member asked to yield; used by the plan loop only
}

// join runs one membership, on one session: register, plan and run until
// ctx ends, the session ends or fn fails. It returns retry true to join
// again on a new session; otherwise the error Shards returns.
func (g *shardMember) join(ctx context.Context) (retry bool, err error) {
	// Lead's session handling, with the options of a member: every
	// session of a member yields its shards when asked.
	l := &leader{cli: g.cli, o: &leadOptions{ttl: g.o.ttl, sessionOpts: append(slices.Clip(g.o.sessionOpts), WithYield())}}
	s, closeSession, err := l.newSession(ctx)
	if err != nil {
		return g.failed(ctx, l, err)
	}
	defer closeSession()
	m := &membership{shardMember: g, s: s, kick: make(chan struct{}, 1), runners: make(map[int]*shardRunner), asked: make(map[int]int64)}
	m.mctx, m.mend = context.WithCancelCause(context.WithoutCancel(ctx))
	defer m.mend(nil)

	if err := m.register(ctx); err != nil {
		m.leave(ctx, nil)
		return g.failed(ctx, l, err)
	}
	loopErr := m.loop(ctx)
	m.mu.Lock()
	fnErr := m.fnErr
	m.mu.Unlock()
	var cause error
	switch {
	case ctx.Err() != nil:
		cause = context.Cause(ctx)
	case fnErr != nil:
		cause = fmt.Errorf("concurrency: Shards %q: a shard's function failed: %w", g.group, fnErr)
	case loopErr != nil:
		cause = loopErr
	default:
		cause = context.Cause(s.Ctx())
	}
	m.leave(ctx, cause)
	cerr := closeSession()
	switch {
	case ctx.Err() != nil:
		if errors.Is(fnErr, ctx.Err()) {
			fnErr = nil
		}
		return false, join(ctx.Err(), fnErr)
	case fnErr != nil:
		return false, join(fnErr, cerr)
	case loopErr != nil:
		return false, loopErr
	}
	return true, nil // the session ended: join again
}

// failed is join's result when no membership could be run: ctx's error if
// it ended, the error if retrying cannot fix it, or retry.
func (g *shardMember) failed(ctx context.Context, l *leader, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if errors.Is(err, ErrInvalidShardCount) {
		return false, err
	}
	if perr := l.permanent(err); perr != nil {
		return false, perr
	}
	return true, nil
}

// register writes the member key, after checking that no live member
// runs another shard count; and checks again after the write, so that of
// two members of different counts that joined at once, the younger (by
// create revision) leaves. On an error, join's leave deletes the key.
func (m *membership) register(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, m.s.live().Wait*4)
	defer cancel()
	mp := m.group + "/members/"
	resp, err := m.s.get(rctx, mp, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	if err := countConflict(m.group, m.n, math.MaxInt64, resp.Kvs); err != nil {
		return err
	}
	put, err := m.cli.Put(rctx, memberKey(m.group, m.s.Lease()), memberValue(m.n, m.o.weight), clientv3.WithLease(m.s.Lease()))
	if err != nil {
		return err
	}
	resp, err = m.s.get(rctx, mp, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	// The key's create revision orders it; that of the put, if the key
	// is gone already (its lease ended: the session ends too).
	rev := put.Header.Revision
	own := memberKey(m.group, m.s.Lease())
	for _, kv := range resp.Kvs {
		if string(kv.Key) == own {
			rev = kv.CreateRevision
		}
	}
	return countConflict(m.group, m.n, rev, resp.Kvs)
}

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
// again after events, changes of runners and reads (spaced, see below):
// every resyncEvery, it reads again and opens a new watch; after a failed
// read or watch, it retries after a backoff.
func (m *membership) loop(ctx context.Context) error {
	var (
		view    *groupView // nil: read again
		wch     clientv3.WatchChan
		unwatch = func() {}
		retryAt time.Time // after a failure: when to read again
	)
	defer func() { unwatch() }()
	wait := leadMinBackoff // the next backoff after a failure
	next := func() time.Duration {
		d := jittered(wait)
		wait = min(2*wait, leadMaxBackoff)
		return d
	}
	tick := time.NewTicker(m.resyncEvery())
	defer tick.Stop()
	// The spans of unowned shards, from this view (WithShardMetrics).
	unowned := newUnownedTracker(m.o.unowned, m.group, m.n)
	defer func() { unowned.stop(time.Now()) }()
	// Plans are spaced by at least minPlanGap, and by four times what the
	// last one took, so that a storm of events (many members starting
	// together, each queueing) costs a plan per gap, not one per event
	// batch: the events that arrive meanwhile are applied to the view,
	// and the next plan sees them all.
	dirty := true
	var nextPlan time.Time
	for {
		if view == nil && !time.Now().Before(retryAt) {
			unwatch()
			wch = nil
			v, err := m.sync(ctx)
			if err == nil {
				wch, unwatch = m.watch(ctx, v.rev+1)
				view, dirty = v, true
				unowned.reset(view.kvs, time.Now())
				wait = leadMinBackoff
			} else if err := m.fatal(ctx, err); err != nil {
				return err
			} else {
				retryAt = time.Now().Add(next())
			}
		}
		var gap <-chan time.Time
		if view != nil && dirty {
			if d := time.Until(nextPlan); d > 0 {
				gap = time.After(d)
			} else {
				start := time.Now()
				err := m.plan(ctx, view)
				nextPlan = time.Now().Add(max(minPlanGap, 4*time.Since(start)))
				dirty = false
				if err != nil {
					if err := m.fatal(ctx, err); err != nil {
						return err
					}
				}
			}
		}
		var retry <-chan time.Time
		if view == nil {
			retry = time.After(time.Until(retryAt))
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
			dirty = true
		case <-tick.C:
			view = nil
		case wr, ok := <-wch:
			dirty = true
			if !ok || !view.apply(wr, unowned) {
				view, retryAt = nil, time.Now().Add(next())
				continue
			}
		drain:
			for {
				select {
				case wr, ok := <-wch:
					if !ok || !view.apply(wr, unowned) {
						view, retryAt = nil, time.Now().Add(next())
						break drain
					}
				default:
					break drain
				}
			}
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
	return (&leader{cli: m.cli}).permanent(err)
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

	m.mu.Lock()
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
	m.mu.Unlock()

	// Ask the owners of the shards given to us to hand them over, once our
	// key waits behind theirs, so that the shard comes to us: one request
	// per hold, each applied only while that hold is current, up to
	// maxTxnOps of them in one transaction.
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
		if _, err := m.cli.Txn(rctx).Then(ops[:k]...).Commit(); err != nil {
			return err
		}
		for _, i := range asking[:k] {
			m.asked[i] = v.shards[i].holderRev()
		}
		ops, asking = ops[k:], asking[k:]
	}
	for i, rev := range m.asked {
		if !want[i] || v.shards[i].holderRev() != rev {
			delete(m.asked, i)
		}
	}
	return nil
}

// run is the goroutine of runner r: it locks the shard with wctx, runs fn
// while it owns it, and releases it.
func (m *membership) run(wctx context.Context, r *shardRunner) {
	defer func() {
		m.mu.Lock()
		delete(m.runners, r.id)
		m.mu.Unlock()
		close(r.done)
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}()
	mu := NewMutex(m.s, shardName(m.group, r.id))
	if err := mu.Lock(wctx); err != nil {
		// Not dropped: etcd failed, or the session ended. Wait a little
		// before the next plan starts another runner, so that a failing
		// cluster is not asked again at once.
		sleepCtx(wctx, jittered(time.Second))
		return
	}
	release := func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(m.mctx), cleanupTimeout)
		mu.release(uctx)
		cancel()
	}
	if wctx.Err() != nil { // granted as the wait was dropped
		release()
		return
	}
	m.mu.Lock()
	r.held = true
	m.mu.Unlock()

	hctx := mu.Ctx()
	sh := Shard{id: r.id, token: mu.Token(), m: mu}
	st := m.o.status
	st.begin(r.id, m.s, sh.token)
	defer st.clear(r.id)
	fctx, cancel := context.WithCancelCause(m.mctx)
	defer cancel(nil)
	lostc := make(chan struct{})
	stop := context.AfterFunc(hctx, func() {
		defer close(lostc)
		st.lost(r.id, time.Now())
		cancel(context.Cause(hctx))
	})
	err := m.fn(fctx, sh)
	lost := !stop()
	if lost {
		<-lostc // its status update comes before the next tenure's
	}
	switch {
	case lost || m.mctx.Err() != nil:
	case err != nil:
		m.mu.Lock()
		if m.fnErr == nil {
			m.fnErr = err
		}
		m.mu.Unlock()
		m.mend(err)
	default:
		// Done for this tenure: keep the shard until it goes.
		st.idle(r.id)
		select {
		case <-hctx.Done():
		case <-m.mctx.Done():
		}
	}
	st.clear(r.id)
	release()
}

// leave ends the membership: it deletes the member key, so that nobody
// plans to give this member shards, cancels every fn with cause (nil: the
// session ended), and waits for the runners, which release their shards.
func (m *membership) leave(ctx context.Context, cause error) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	if m.s.Ctx().Err() == nil {
		k := memberKey(m.group, m.s.Lease())
		m.cli.Delete(dctx, k)
	}
	cancel()
	if cause == nil {
		cause = context.Cause(m.s.Ctx())
	}
	m.mend(cause)
	for {
		m.mu.Lock()
		var r *shardRunner
		for _, r = range m.runners {
			break
		}
		m.mu.Unlock()
		if r == nil {
			return
		}
		<-r.done
	}
}
