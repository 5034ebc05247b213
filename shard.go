package concurrency

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds partitioned work (Shards): n shards of a named group
// spread over the members that run Shards on it, each shard a Mutex, each
// member owning its fair share by weight. A shard's safety is its Mutex's
// (at most one holder per shard at any revision; the token is the hold's);
// the rest of the file only decides which member queues for which shard.
//
// Keys, under the group name g:
//
//	g/members/<lease hex>   a member, on its session's lease; value "shards=N weight=W"
//	g/shard/<i>/<lease hex> the Mutex keys of shard i (a Mutex named g/shard/<i>)

// Errors of Shards and InspectShards.
var (
	// ErrInvalidShardCount is returned by Shards and InspectShards for a
	// shard count of zero or less, and by Shards when a live member of the
	// group runs it with another count: the two would not agree on the
	// shares.
	ErrInvalidShardCount = errors.New("concurrency: invalid shard count")

	// ErrInvalidShardWeight is returned by Shards for WithShardWeight(w)
	// with w <= 0.
	ErrInvalidShardWeight = errors.New("concurrency: shard weight must be positive")
)

// Shard is a shard that a member of a group owns, as Shards gives it to
// its function: its number, its fencing token and a guarded transaction.
// It stays valid after the ownership ended: Token still returns the
// tenure's token, and Txn no longer commits.
type Shard struct {
	id    int
	token int64
	m     *Mutex
}

// ID returns the shard's number, from 0 to the group's count less one.
func (sh Shard) ID() int { return sh.id }

// Token returns the shard's fencing token for this tenure: the create
// revision of its Mutex key (Mutex.Token). Tokens of one shard strictly
// increase from one owner to the next.
func (sh Shard) Token() int64 { return sh.token }

// Key returns the shard's Mutex key while it is owned, and "" once the
// ownership has been released.
func (sh Shard) Key() string { return sh.m.Key() }

// IsOwner returns a comparison that holds, in a transaction, only while
// this tenure of the shard lasts (Mutex.IsOwner).
func (sh Shard) IsOwner() clientv3.Cmp { return sh.m.IsOwner() }

// Txn returns a transaction that commits only while this tenure of the
// shard lasts, as Mutex.Txn and Election.Txn do: once it has ended, Commit
// returns an error matching ErrLockLost and nothing is written.
func (sh Shard) Txn(ctx context.Context) clientv3.Txn { return sh.m.Txn(ctx) }

// Shards joins the group named group, of n shards, and calls fn, each in
// its own goroutine, for every shard this member comes to own. It blocks
// until ctx ends, fn returns an error while its shard is owned, or an
// error that retrying cannot fix; it returns only after every fn has
// returned and every shard has been released.
//
// Each shard is a Mutex named group/shard/<i>, so at any etcd revision at
// most one member owns it, as a Mutex is held. A member registers, on its
// session's lease, as group/members/<lease ID in hex>; the live members,
// in the order of those keys' create revisions, split the n shards by
// weight (WithShardWeight; largest remainders, ties to the older member),
// so that each member's share is within one of n times its weight over
// the total. A member below its share queues for as many shards as it
// lacks, no more: first shards nobody owns, then the shards of members
// above their share, whose owners it asks to hand them over
// (RequestYield's request, written for that one hold) once its own key
// waits behind theirs. It never takes a shard: it gets one only when the
// owner lets go. A member above its share keeps its shards until asked.
// Every member computes the same plan from the same keys, so the shards
// that move are exactly the surplus. Each member reads the group's keys
// once and keeps them from a watch, planning again after events (plans
// at least 20 ms, and four times the last plan's cost, apart); it reads
// them again, with a new watch, every third of the TTL (1 s to 20 s) and
// after a failure.
//
// Bounds, while at least one member is live: a shard whose owner left by
// its ctx is owned again after about one commit and a plan; one whose
// owner crashed, once etcd expires the owner's lease (a TTL after its
// last renewal) and a plan; a member cut off from etcd ends its functions
// at its session's conservative deadline, before that. Once membership is
// stable, every member owns exactly its share after a few plans and
// commits per shard moved (BENCHMARKS.md measures them).
//
// fn is called with a Shard (its number, token and guarded Txn) and a
// context that ends when the ownership ends or may have ended, with the
// hold's cause: ErrYieldRequested when it is handed to another member,
// ErrLockLost when its key was deleted, ErrSessionExpired (wrapping
// ErrUnhealthy after failed health checks) when the member's session
// ended or its conservative deadline passed; and, when ctx ends, ctx's
// cause. fn is never called for a shard while an earlier call for the
// same shard still runs in this process.
//
// How a call of fn ends decides what happens next:
//
//   - its context ended (the shard was lost or handed over, or ctx ended):
//     its error is dropped, the shard is released (one commit, so that the
//     next owner starts at once), and the member plans again;
//   - it returned nil while the shard is still owned: the member keeps the
//     shard, idle, until it is lost, handed over or ctx ends (work that
//     is done for this tenure);
//   - it returned an error while the shard is still owned: Shards leaves
//     the group as when ctx ends, and returns that error.
//
// When the member's session ends (lease revoked or expired, failed
// health checks), every shard's fn is cancelled; once all have returned,
// Shards joins again on a new session after a backoff (100 ms doubling to
// 5 s, as Lead's), behind the members already there.
//
// Leaving, when ctx ends or fn failed: Shards deletes the member key first
// (so that no one plans to give it shards), then cancels every fn, waits
// for them, and releases each shard as it returns (one commit each, in
// parallel), and closes the session, each cleanup bounded by 5 s on a
// fresh context. It returns an error matching ctx.Err() when ctx ended;
// the errors of functions whose context had ended are dropped (they
// usually only report the cancellation; fn should record anything else
// itself), as Lead drops them.
//
// A function that ignores its context outlives its ownership: another
// member may own the shard meanwhile (safe for writes through Txn or
// fenced by Token, and only for those). WithShardStatus reports it, as
// LeaderStatus.Check reports a stuck term. Shards cannot return before
// such a function does.
//
// Bad input is reported at once, before Shards talks to etcd: a nil
// client (ErrNilClient), an empty group (ErrInvalidPrefix), n <= 0
// (ErrInvalidShardCount), a nil fn (ErrNilFunc), and the options' own
// errors. A live member of the group that runs another shard count makes
// Shards return ErrInvalidShardCount when it joins. Failures to start a
// session or to read are retried until ctx ends, as in Lead.
func Shards(ctx context.Context, cli *clientv3.Client, group string, n int, fn func(ctx context.Context, sh Shard) error, opts ...ShardOption) error {
	switch {
	case cli == nil:
		return ErrNilClient
	case group == "":
		return ErrInvalidPrefix
	case n <= 0:
		return fmt.Errorf("%w: %d", ErrInvalidShardCount, n)
	case fn == nil:
		return ErrNilFunc
	}
	o := shardOptions{weight: 1, ttl: defaultSessionTTL}
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return o.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g := &shardMember{cli: cli, group: group, n: n, fn: fn, o: &o}
	backoff := leadMinBackoff
	for {
		since := time.Now()
		retry, err := g.join(ctx)
		if !retry {
			return err
		}
		if time.Since(since) >= leadMaxBackoff {
			backoff = leadMinBackoff
		}
		if !sleepCtx(ctx, jittered(backoff)) {
			return ctx.Err()
		}
		backoff = min(2*backoff, leadMaxBackoff)
	}
}

type shardOptions struct {
	weight      int
	ttl         int
	status      *ShardStatus
	sessionOpts []SessionOption
	err         error // the first invalid option
}

// ShardOption configures Shards.
type ShardOption func(*shardOptions)

// WithShardWeight sets the member's weight (default 1): its share of the
// shards is n times its weight over the sum of the live members' weights,
// rounded so that the shares add up to n. A weight of zero or less makes
// Shards return an error matching ErrInvalidShardWeight.
func WithShardWeight(w int) ShardOption {
	return func(o *shardOptions) {
		if w <= 0 && o.err == nil {
			o.err = fmt.Errorf("%w: WithShardWeight(%d)", ErrInvalidShardWeight, w)
		}
		o.weight = w
	}
}

// WithShardTTL sets the TTL in seconds of the member's session (default
// 60, as WithLeadTTL explains): how long the shards of a member that
// crashed stay owned by it before the others take them over. A TTL of zero
// or less makes Shards return an error matching ErrInvalidTTL.
func WithShardTTL(ttl int) ShardOption {
	return func(o *shardOptions) {
		if ttl <= 0 && o.err == nil {
			o.err = fmt.Errorf("%w: WithShardTTL(%d)", ErrInvalidTTL, ttl)
		}
		o.ttl = ttl
	}
}

// WithShardHealthCheck gives each of the member's sessions WithHealthCheck:
// when the checks fail, the session ends and its lease is revoked, so
// every shard of the member goes to the others at once, and fn's contexts
// end with a cause matching ErrUnhealthy; Shards then joins again on a new
// session, whose checks start afresh.
func WithShardHealthCheck(interval time.Duration, failures int, check func(ctx context.Context) error) ShardOption {
	return func(o *shardOptions) {
		o.sessionOpts = append(o.sessionOpts, WithHealthCheck(interval, failures, check))
	}
}

// WithShardOwner has each of the member's sessions record o, as WithOwner
// does, so that Inspect and InspectShards show who owns each shard. An
// Owner too large to record makes Shards return an error matching
// ErrInvalidOwner at once.
func WithShardOwner(o Owner) ShardOption {
	return func(so *shardOptions) {
		if _, err := ownerRecord(o); err != nil && so.err == nil {
			so.err = fmt.Errorf("WithShardOwner: %w", err)
		}
		so.sessionOpts = append(so.sessionOpts, WithOwner(o))
	}
}

// WithShardMetrics has each of the member's sessions report to r, as
// WithMetrics does: each shard is a Mutex named group/shard/<i> (kind
// "mutex"), so with concurrencyprom the shards this process owns are
// concurrency_lock_holders, the shards it handed over are
// concurrency_lock_holds_ended_total{cause="yielded"} (and those it lost,
// the other causes), the shards it took over are
// concurrency_lock_acquisitions_total, and concurrency_lock_wait_seconds
// is how long each took from queueing to grant; per shard with
// WithLockNameLabel, else summed over the process's mutexes. The time a
// shard spends without any owner is not measured by a member (no member
// sees it whole). A nil r is ignored (the default).
func WithShardMetrics(r MetricsRecorder) ShardOption {
	return func(o *shardOptions) { o.sessionOpts = append(o.sessionOpts, WithMetrics(r)) }
}

// WithShardStatus has Shards record in st which shards this member owns
// and whether a fn outlived its shard (ShardStatus.Check). st may be read
// from any goroutine; pass it to one Shards at a time. A nil st is ignored
// (the default).
func WithShardStatus(st *ShardStatus) ShardOption {
	return func(o *shardOptions) { o.status = st }
}

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

// memberKey is the member key of lease id in group.
func memberKey(group string, id clientv3.LeaseID) string {
	return leaseKey(group+"/members/", id)
}

// memberValue is the value of a member key.
func memberValue(n, weight int) string { return fmt.Sprintf("shards=%d weight=%d", n, weight) }

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
// runs another shard count.
func (m *membership) register(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, m.s.live().wait*4)
	defer cancel()
	resp, err := m.s.get(rctx, m.group+"/members/", clientv3.WithPrefix())
	if err != nil {
		return err
	}
	for _, kv := range resp.Kvs {
		if n, _, ok := parseMember(string(kv.Value)); ok && n != m.n {
			return fmt.Errorf("%w: %d here, but member %s runs %d", ErrInvalidShardCount, m.n, kv.Key, n)
		}
	}
	_, err = m.cli.Put(rctx, memberKey(m.group, m.s.Lease()), memberValue(m.n, m.o.weight), clientv3.WithLease(m.s.Lease()))
	return err
}

// parseMember reads a member key's value.
func parseMember(v string) (n, weight int, ok bool) {
	if _, err := fmt.Sscanf(v, "shards=%d weight=%d", &n, &weight); err != nil || n <= 0 || weight <= 0 {
		return 0, 0, false
	}
	return n, weight, true
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
	rctx, cancel := context.WithTimeout(ctx, m.s.live().wait*4)
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

// apply applies a watch response's events to v, and reports false if it
// is an error (the watch must be opened again, from a new read).
func (v *groupView) apply(wr clientv3.WatchResponse) bool {
	if wr.Err() != nil || wr.Canceled {
		return false
	}
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
			if !ok || !view.apply(wr) {
				view, retryAt = nil, time.Now().Add(next())
				continue
			}
		drain:
			for {
				select {
				case wr, ok := <-wch:
					if !ok || !view.apply(wr) {
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
	rctx, cancel := context.WithTimeout(ctx, m.s.live().wait*4)
	defer cancel()
	kvs := make([]*mvccpb.KeyValue, 0, len(gv.kvs))
	for _, kv := range gv.kvs {
		kvs = append(kvs, kv)
	}
	v := readShardGroup(m.group, m.n, kvs)
	me := m.s.Lease()
	if _, ok := v.member(me); !ok {
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
