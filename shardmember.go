package concurrency

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds a Shards member at work: its membership on one session
// (register, follow the group and plan, leave) and the runner of each
// shard it waits for or owns (lock, run fn, release). How it follows the
// group and applies its plan is in shardfollow.go, the plan itself in
// shardplan.go.

// shardMember is the state of one call of Shards.
type shardMember struct {
	cli   *clientv3.Client
	group string
	n     int
	fn    func(ctx context.Context, sh Shard) error
	o     *shardOptions
}

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
	// Every session of a member yields its shards when asked.
	s, closeSession, err := startTermSession(ctx, g.cli, append(slices.Clip(g.o.session), WithYield()))
	if err != nil {
		return g.failed(ctx, err)
	}
	defer closeSession()
	m := &membership{shardMember: g, s: s, kick: make(chan struct{}, 1), runners: make(map[int]*shardRunner), asked: make(map[int]int64)}
	m.mctx, m.mend = context.WithCancelCause(context.WithoutCancel(ctx))
	defer m.mend(nil)

	if err := m.register(ctx); err != nil {
		m.leave(ctx, nil)
		return g.failed(ctx, err)
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
func (g *shardMember) failed(ctx context.Context, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if errors.Is(err, ErrInvalidShardCount) {
		return false, err
	}
	if perr := g.permanent(err); perr != nil {
		return false, perr
	}
	return true, nil
}

// permanent returns err, wrapped, if retrying cannot fix it. Its text
// names Lead, as it has since Shards took Lead's session handling: the
// move of that handling to termsession.go changed no error.
func (g *shardMember) permanent(err error) error { return termPermanent(g.cli, "Lead", err) }

// register writes the member key, after checking that no live member
// runs another shard count; and checks again after the write, so that of
// two members of different counts that joined at once, the younger (by
// create revision) leaves. On an error, join's leave deletes the key.
func (m *membership) register(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, m.s.live().Wait*4)
	defer cancel()
	mp := membersPrefix(m.group)
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
		request.SleepCtx(wctx, jittered(time.Second))
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

	// fn's context ends after the release, as the runner returns.
	fctx, cancel := context.WithCancelCause(m.mctx)
	defer cancel(nil)
	m.tenure(fctx, cancel, r.id, mu)
	release()
}

// tenure runs fn for shard id with fctx while mu, its Mutex, holds it:
// until fn returns, then, if fn returned nil while the shard is still
// owned, until the hold or the membership ends. The end of the hold
// cancels fctx (cancel) with its cause. An error of fn while the shard is
// owned ends the membership (fnErr).
func (m *membership) tenure(fctx context.Context, cancel context.CancelCauseFunc, id int, mu *Mutex) {
	hctx := mu.Ctx()
	sh := Shard{id: id, token: mu.Token(), m: mu}
	st := m.o.status
	st.begin(id, m.s, sh.token)
	defer st.clear(id)
	lostc := make(chan struct{})
	stop := context.AfterFunc(hctx, func() {
		defer close(lostc)
		st.lost(id, time.Now())
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
		st.idle(id)
		select {
		case <-hctx.Done():
		case <-m.mctx.Done():
		}
	}
	st.clear(id)
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
