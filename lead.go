package concurrency

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/watch"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds Lead, the leader runner: a campaign, a term that runs
// the caller's function, and the handover, in a loop. Its options are in
// leadopts.go, what it reports in leaderstatus.go, the watch of the leader
// in leaderwatch.go; the session of a term in termsession.go.

// leaderFinalRead bounds how long the leader-change watcher catches up
// after Lead has handed over, so that its last report shows the handover.
const leaderFinalRead = time.Second

// Lead campaigns in the election pfx with value val and, each time it is
// elected, calls fn as the leader. It blocks until fn returns as the
// leader, ctx ends, or an error that retrying cannot fix.
//
// Each term runs on a new Session (WithLeadSession gives it options, and
// WithTTL among them its TTL: default 60 s, and WithLeadSession says why)
// and a new Election on it. Once Campaign has won, fn is called with the
// Election, whose Rev is the term's fencing token and whose Txn writes only
// while the term lasts, and with a context that is cancelled as soon as the
// leadership ends or may have ended (the Election's Ctx: Resign, the key
// deleted, the lease revoked or expired, the session's conservative
// deadline passed; context.Cause says which) or ctx ends (ctx's cause).
// fn is not called once the leadership is known to have ended, never while
// an earlier call still runs, and the term's session is closed only after
// fn has returned.
//
// How a term ends decides what Lead does next:
//
//   - fn returns before its context was cancelled: Lead resigns at once,
//     so that the next candidate is elected in about one commit, closes the
//     session, and returns fn's error (nil included).
//   - the leadership ends while fn runs: fn's context is cancelled; once fn
//     returns, its error is dropped (it usually only reports the
//     cancellation; fn should record anything else itself), the session is
//     closed, and Lead campaigns again on a new session after a backoff
//     (100 ms doubling to 5 s, with jitter; reset once a leadership lasted
//     5 s).
//   - ctx ends (while fn runs, or while Lead campaigns or waits): fn's
//     context is cancelled, Lead waits for fn to return, resigns at once,
//     closes the session, and returns an error matching ctx.Err(), joined
//     with fn's error if fn returned one that does not match ctx.Err().
//
// fn may call e.Proclaim to change the value, and e.Resign to step down
// for a while: that ends the leadership like a loss, and Lead campaigns
// again. To stop leading, fn returns or ctx ends.
//
// The resignation and the revoke of the lease each use a fresh context
// bounded by 5 s, so they run after ctx has ended. If both fail (etcd
// unreachable), the key stays until the lease expires, and the error Lead
// returns says so.
//
// Failures to start a session or to campaign (etcd unreachable, no leader)
// are retried with the same backoff until ctx ends; Lead returns at once
// only on errors that retrying cannot fix: authentication failures and
// permission denied, and a closed client. A client closed while fn runs
// ends the term's session at once, and so fn's context; once fn has
// returned, Lead returns an error matching ErrClientClosed (the key stays
// until the lease expires: a closed client revokes nothing). Bad input is reported at once,
// before Lead talks to etcd: a nil client (ErrNilClient), an empty name
// (ErrInvalidPrefix), a nil fn (ErrNilFunc), WithLeadTTL(n) with n <= 0
// (ErrInvalidTTL).
//
// A panic in fn is not recovered; the session is closed while it unwinds,
// which deletes the key.
func Lead(ctx context.Context, cli *clientv3.Client, pfx, val string, fn func(ctx context.Context, e *Election) error, opts ...LeadOption) error {
	switch {
	case cli == nil:
		return ErrNilClient
	case pfx == "":
		return ErrInvalidPrefix
	case fn == nil:
		return ErrNilFunc
	}
	var o leadOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return o.err
	}
	o.ttl = termOptions(o.session).ttl
	if err := ctx.Err(); err != nil {
		return err
	}

	if o.onChange != nil {
		defer reportLeaders(ctx, cli, pfx, &o)()
	}

	l := &leader{cli: cli, name: pfx, val: val, fn: fn, o: &o}
	// Between two campaigns after a failure or a lost leadership: reset
	// once a leadership lasted retryMaxBackoff.
	var backoff retryBackoff
	for {
		retry, lasted, err := l.term(ctx)
		if !retry {
			return err
		}
		if cli.Ctx().Err() != nil { // the term ended with its session
			return termPermanent(l.cli, "Lead", nil)
		}
		backoff.resetAfter(lasted)
		if !request.Pause(ctx, cli, backoff.next()) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return termPermanent(l.cli, "Lead", nil)
		}
	}
}

// reportLeaders starts the goroutine of WithLeaderChanges, and returns the
// function that ends it once Lead has handed over: the watcher outlives
// ctx until then, and then catches up, within leaderFinalRead, so that its
// last report shows the handover.
func reportLeaders(ctx context.Context, cli *clientv3.Client, pfx string, o *leadOptions) (stop func()) {
	fin, finish := context.WithCancel(context.Background())
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchLeaders(wctx, fin, cli, watch.LivenessFor(time.Duration(o.ttl)*time.Second), prefix(pfx), o.onChange)
	}()
	return func() {
		finish()
		t := time.AfterFunc(leaderFinalRead, cancel)
		<-done
		t.Stop()
		cancel()
	}
}

// leader is the state of one call of Lead.
type leader struct {
	cli  *clientv3.Client
	name string
	val  string
	fn   func(ctx context.Context, e *Election) error
	o    *leadOptions
}

// term runs one term: a new session, a campaign, fn, and the cleanup. It
// returns retry true to campaign again, with how long the leadership lasted
// (0 if there was none); otherwise the error Lead returns (ctx ended, fn
// returned as the leader, or an error that retrying cannot fix).
func (l *leader) term(ctx context.Context) (retry bool, lasted time.Duration, err error) {
	s, closeSession, err := startTermSession(ctx, l.cli, l.o.session)
	if err != nil {
		return l.failed(ctx, err)
	}
	defer closeSession()

	e := NewElection(s, l.name)
	if err := e.Campaign(ctx, l.val); err != nil {
		return l.failed(ctx, err)
	}
	lctx := e.Ctx()
	switch {
	case ctx.Err() != nil: // won just as ctx ended
		return false, 0, join(ctx.Err(), l.handOver(ctx, e, closeSession))
	case lctx.Err() != nil: // lost before fn could start
		return true, 0, nil
	}

	since := time.Now()
	l.o.status.begin(s, since, e.Rev())
	defer l.o.status.clear() // also if fn panics
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	fctx, endSpan := s.ins.startTerm(fctx, l.name, e.Rev())
	lostc := make(chan struct{})
	stop := context.AfterFunc(lctx, func() {
		defer close(lostc)
		l.o.status.lost(time.Now())
		cancel(context.Cause(lctx))
	})
	fnErr := l.fn(fctx, e)
	// stop reports false once the loss has begun to cancel fctx; a loss
	// after this point comes after fn returned as the leader.
	lost := !stop()
	if lost {
		<-lostc // its status update comes before the next term's
	}
	lasted = time.Since(since)
	endSpan(lost, ctx.Err(), fnErr)

	switch {
	case ctx.Err() != nil:
		if errors.Is(fnErr, ctx.Err()) {
			fnErr = nil
		}
		return false, lasted, join(ctx.Err(), fnErr, l.handOver(ctx, e, closeSession))
	case lost:
		// fn's result only reports the loss: campaign again, on a new
		// session once this one is closed (deferred).
		return true, lasted, nil
	default:
		return false, lasted, join(fnErr, l.handOver(ctx, e, closeSession))
	}
}

// failed is term's result when no leadership was won: ctx's error if it
// ended, the error if retrying cannot fix it, or retry.
func (l *leader) failed(ctx context.Context, err error) (bool, time.Duration, error) {
	if ctx.Err() != nil {
		return false, 0, ctx.Err()
	}
	if perr := termPermanent(l.cli, "Lead", err); perr != nil {
		return false, 0, perr
	}
	return true, 0, nil
}

// handOver ends a leadership that fn no longer needs: it resigns, so that
// the next candidate is elected at once, and closes the session, each
// bounded by cleanupTimeout. It returns an error only if neither worked, so
// that the key stays until the lease expires.
func (l *leader) handOver(ctx context.Context, e *Election, closeSession func() error) error {
	l.o.status.clear()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	rerr := e.Resign(rctx)
	cerr := closeSession()
	if rerr != nil && cerr != nil {
		return fmt.Errorf("concurrency: Lead could neither resign nor revoke lease %x of %q; its key stays until the lease expires: %w",
			int64(e.s.Lease()), e.Key(), errors.Join(rerr, cerr))
	}
	return nil
}
