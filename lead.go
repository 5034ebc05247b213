package concurrency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// Backoff between two campaigns after a failure or a lost leadership: it
// starts at leadMinBackoff, doubles up to leadMaxBackoff, and is reset once
// a leadership has lasted leadMaxBackoff. Each wait is drawn at random from
// its upper half, so that candidates that lost together do not return
// together.
const (
	leadMinBackoff = 100 * time.Millisecond
	leadMaxBackoff = 5 * time.Second
)

// leaderFinalRead bounds how long the leader-change watcher catches up
// after Lead has handed over, so that its last report shows the handover.
const leaderFinalRead = time.Second

// Lead campaigns in the election pfx with value val and, each time it is
// elected, calls fn as the leader. It blocks until fn returns as the
// leader, ctx ends, or an error that retrying cannot fix.
//
// Each term runs on a new Session (WithLeadTTL sets its TTL; default 60 s,
// and why)
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
// permission denied, and a closed client. Bad input is reported at once,
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
	o := leadOptions{ttl: defaultSessionTTL}
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return o.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	if o.onChange != nil {
		// The watcher outlives ctx until the handover is done, and then
		// catches up, within leaderFinalRead, so that its last report shows
		// the handover.
		fin, finish := context.WithCancel(context.Background())
		wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			watchLeaders(wctx, fin, cli, livenessFor(time.Duration(o.ttl)*time.Second), prefix(pfx), o.onChange)
		}()
		defer func() {
			finish()
			t := time.AfterFunc(leaderFinalRead, stop)
			<-done
			t.Stop()
			stop()
		}()
	}

	l := &leader{cli: cli, name: pfx, val: val, fn: fn, o: &o}
	backoff := leadMinBackoff
	for {
		retry, lasted, err := l.term(ctx)
		if !retry {
			return err
		}
		if lasted >= leadMaxBackoff {
			backoff = leadMinBackoff
		}
		if !sleepCtx(ctx, jittered(backoff)) {
			return ctx.Err()
		}
		backoff = min(2*backoff, leadMaxBackoff)
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
	s, closeSession, err := l.newSession(ctx)
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

// join is errors.Join, but returns a single error unchanged, so that Lead
// returns fn's error or ctx.Err() itself when nothing else went wrong.
func join(errs ...error) error {
	var one error
	n := 0
	for _, err := range errs {
		if err != nil {
			one = err
			n++
		}
	}
	if n <= 1 {
		return one
	}
	return errors.Join(errs...)
}

// failed is term's result when no leadership was won: ctx's error if it
// ended, the error if retrying cannot fix it, or retry.
func (l *leader) failed(ctx context.Context, err error) (bool, time.Duration, error) {
	if ctx.Err() != nil {
		return false, 0, ctx.Err()
	}
	if perr := l.permanent(err); perr != nil {
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

// newSession starts the session of a term. NewSession's round trip ends
// when ctx does; the session itself lives until the returned function
// closes it, which revokes the lease within cleanupTimeout and may be
// called more than once.
func (l *leader) newSession(ctx context.Context) (*Session, func() error, error) {
	// The session carries ctx's values but ends only when closed.
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	stopOnCtx := context.AfterFunc(ctx, scancel)
	s, err := NewSession(l.cli, append([]SessionOption{WithTTL(l.o.ttl), WithContext(sctx)}, l.o.sessionOpts...)...)
	if !stopOnCtx() || err != nil {
		if err == nil {
			s.Orphan() // ctx ended as the lease was granted: revoke it
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			l.cli.Revoke(ctx, s.Lease())
			cancel()
		}
		scancel()
		if err == nil {
			err = ctx.Err()
		}
		return nil, nil, err
	}
	var once sync.Once
	var cerr error
	closeSession := func() error {
		once.Do(func() {
			t := time.AfterFunc(cleanupTimeout, scancel)
			cerr = s.Close()
			t.Stop()
			scancel()
		})
		return cerr
	}
	return s, closeSession, nil
}

// permanent returns err, wrapped, if retrying cannot fix it
// (authentication, a closed client), and nil otherwise.
func (l *leader) permanent(err error) error {
	if l.cli.Ctx().Err() != nil {
		return fmt.Errorf("concurrency: Lead: client closed: %w", err)
	}
	if errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrUserEmpty) ||
		errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrInvalidAuthToken) {
		return fmt.Errorf("concurrency: Lead: %w", err)
	}
	if c := grpcCode(err); c == codes.PermissionDenied || c == codes.Unauthenticated {
		return fmt.Errorf("concurrency: Lead: %w", err)
	}
	return nil
}

type leadOptions struct {
	ttl      int
	onChange func(LeaderInfo)
	status   *LeaderStatus
	err      error // the first invalid option
	// sessionOpts are given to the session of each term: WithLeadMetrics,
	// WithLeadTracerProvider, WithLeadOwner.
	sessionOpts []SessionOption
}

// LeadOption configures Lead.
type LeadOption func(*leadOptions)

// WithLeadTTL sets the TTL in seconds of the session of each term (default
// 60): how long a leadership outlives a leader that crashed without
// resigning. A TTL of zero or less makes Lead return an error matching
// ErrInvalidTTL.
//
// The default is kept at 60 s, etcd's session default, rather than
// client-go's 15 s lease, because the TTL weighs two failures against each
// other, and Lead already takes care of the common one. A Lead that
// returns, or whose ctx ends (a rolling update, SIGTERM), resigns at once,
// and the next candidate leads after one commit, whatever the TTL; only a
// leader that dies without resigning (a crash, SIGKILL, a lost host) keeps
// the others waiting for up to the TTL. The TTL is also how long a leader
// keeps its term while it cannot renew its lease: its session's
// conservative deadline is about one TTL after the last renewal sent, so a
// shorter TTL turns shorter etcd trouble (a leader election, a member
// restart, a slow disk, a long pause of this process) into a lost term, fn
// cancelled and its work started again elsewhere. client-go's leases are
// judged on the clocks of the candidates; etcd expires the lease itself,
// so no margin for clock skew is needed here either way. A drop-in for
// etcd's package also fails over as it did. Services that cannot wait a
// minute after a leader's crash should pass WithLeadTTL(15), or less,
// accepting that an etcd outage of that length ends the term.
//
// Lead takes no other SessionOption: each term needs a new lease (so not
// WithLease), and Lead's own ctx, not the session's, says when to stop (so
// not WithContext; the sessions carry ctx's values).
func WithLeadTTL(ttl int) LeadOption {
	return func(o *leadOptions) {
		if ttl <= 0 && o.err == nil {
			o.err = fmt.Errorf("%w: WithLeadTTL(%d)", ErrInvalidTTL, ttl)
		}
		o.ttl = ttl
	}
}

// WithLeaderChanges has Lead call fn with the leader of the election each
// time it changes, whoever leads: first with the leader when Lead starts,
// then with each new leader or proclaimed value, and with the zero
// LeaderInfo whenever the election has no leader (which etcd's Observe,
// and Election.Observe, never report). A nil fn is ignored (the default).
//
// The calls come one at a time from a goroutine that Lead starts and waits
// for before it returns, so that none comes after Lead returns; fn should
// return quickly, as it delays the next report. After Lead has handed
// over, the goroutine catches up with etcd's revision at that moment
// (for at most 1 s) before it stops, so that the last report shows the
// leader after Lead's resignation, or none. The goroutine reads
// the election's keys once and then follows them with a watch, so it
// reports each leader of each revision, in order, even one that lasted a
// single revision. If watching fails (no leader, lost connection,
// compaction), it reads the keys again, after a backoff of 100 ms doubling
// to 5 s, for as long as Lead runs; a leader that came and went meanwhile
// is not reported, but the latest always is.
func WithLeaderChanges(fn func(LeaderInfo)) LeadOption {
	return func(o *leadOptions) { o.onChange = fn }
}

// WithStatus has Lead record in st whether it is the leader, and since
// when, and whether a term outlived its leadership, for a health endpoint
// (LeaderStatus.Check, Handler) or a readiness gate (LeaderStatus.Wait).
// st may be read from any goroutine; pass it to one Lead at a time. A nil
// st is ignored (the default).
func WithStatus(st *LeaderStatus) LeadOption {
	return func(o *leadOptions) { o.status = st }
}

// LeaderInfo is a leader of an election, as WithLeaderChanges reports it.
// The zero LeaderInfo means that the election has no leader.
type LeaderInfo struct {
	Key   string // the leader key, NAME/<lease ID in hex>; "" if no leader
	Value string // the leader's value, as given to Campaign or Proclaim
	Rev   int64  // the leader key's create revision: the leader's fencing token
}

// LeaderStatus records whether a Lead is the leader, for operators: a
// health endpoint (Check, Handler), a readiness gate (Wait), or a gauge
// that reads Leading when it is scraped. Its zero value is ready to use and
// reports not leading. It is safe for use by several goroutines.
type LeaderStatus struct {
	mu      sync.Mutex // guards the fields below
	leading bool
	since   time.Time
	rev     int64
	// term is the session of the term whose fn runs, and ended when its
	// leadership ended or may have ended while fn still runs (zero while
	// it leads); nil and zero when no fn runs.
	term  *Session
	ended time.Time
	// changed is closed, and set to nil, when leading changes; Wait makes
	// it.
	changed chan struct{}
}

// Leading reports whether the Lead that st was given to is the leader now,
// and if so since when: from the moment its Campaign won (just before fn
// was called) until its leadership ended or may have ended, or fn returned
// and Lead began to resign, whichever came first. It never blocks on etcd.
func (st *LeaderStatus) Leading() (bool, time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.leading, st.since
}

// Rev returns the fencing token (Election.Rev) of the current leadership,
// or 0 when not leading.
func (st *LeaderStatus) Rev() int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.rev
}

// Wait blocks until the Lead that st was given to is the leader, as
// Leading reports it, or ctx ends, and does not talk to etcd. It returns
// nil at once if it leads already, and an error matching ctx.Err() if ctx
// ends first; it waits for as long as ctx lasts, also when no Lead runs
// (one may start later) or the Lead has returned. Like Curator's
// LeaderLatch.await, it is for code that must not start before this
// process leads (a readiness gate); it runs nothing, and the leadership
// may end at any moment after it returns: work that needs the leadership
// belongs in Lead's fn, under its context.
func (st *LeaderStatus) Wait(ctx context.Context) error {
	for {
		st.mu.Lock()
		if st.leading {
			st.mu.Unlock()
			return nil
		}
		if st.changed == nil {
			st.changed = make(chan struct{})
		}
		changed := st.changed
		st.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Check reports whether the Lead that st was given to is stuck: nil
// unless a term's fn still runs more than tolerance after the term's
// leadership ended or may have ended, which is an error matching
// ErrLeaderStuck. That is, either
//
//   - st still says leading more than tolerance past the conservative
//     deadline of the term's session (Session.Deadline): the session should
//     have ended the term at its deadline, so the process is too starved
//     or paused to notice that its lease may have expired, and another
//     candidate may lead; or
//   - the leadership ended (lost, deadline passed, resigned in fn) more
//     than tolerance ago, and fn has not returned: fn ignores its context
//     and may still act as the leader, and Lead cannot campaign again
//     until it returns.
//
// Not leading is healthy: followers, a Lead between terms, and no Lead at
// all pass. Check never blocks and does not talk to etcd; a tolerance
// below 0 counts as 0. Like client-go's leader-election HealthzAdaptor, it
// is meant for a liveness probe, whose failure restarts the process: pick
// a tolerance that covers a scheduling hiccup (client-go suggests a few
// seconds), since the term's end is noticed by goroutines that need a
// moment to run.
func (st *LeaderStatus) Check(tolerance time.Duration) error {
	st.mu.Lock()
	term, leading, ended := st.term, st.leading, st.ended
	st.mu.Unlock()
	if term == nil {
		return nil
	}
	tolerance = max(tolerance, 0)
	now := time.Now()
	if leading {
		if late := now.Sub(term.Deadline()); late > tolerance {
			return fmt.Errorf("%w: leading %v past the term's conservative deadline", ErrLeaderStuck, late.Round(time.Millisecond))
		}
		return nil
	}
	if late := now.Sub(ended); late > tolerance {
		return fmt.Errorf("%w: fn still runs %v after its leadership ended", ErrLeaderStuck, late.Round(time.Millisecond))
	}
	return nil
}

// Handler returns an http.Handler for a liveness endpoint: it answers 200
// "ok" while Check(tolerance) passes, and 500 with Check's error
// otherwise, whatever the request.
func (st *LeaderStatus) Handler(tolerance time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := st.Check(tolerance); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
}

// begin records that a term on session s won at since with token rev, and
// that its fn is about to run.
func (st *LeaderStatus) begin(s *Session, since time.Time, rev int64) {
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.leading, st.since, st.rev = true, since, rev
	st.term, st.ended = s, time.Time{}
	st.notifyLocked()
}

// lost records that the leadership of the running fn ended, or may have
// ended, at when.
func (st *LeaderStatus) lost(when time.Time) {
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.leading, st.since, st.rev = false, time.Time{}, 0
	if st.term != nil && st.ended.IsZero() {
		st.ended = when
	}
	st.notifyLocked()
}

// clear records that no fn runs, and so no term leads.
func (st *LeaderStatus) clear() {
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.leading, st.since, st.rev = false, time.Time{}, 0
	st.term, st.ended = nil, time.Time{}
	st.notifyLocked()
}

// notifyLocked wakes the goroutines in Wait, which look at leading again.
func (st *LeaderStatus) notifyLocked() {
	if st.changed != nil {
		close(st.changed)
		st.changed = nil
	}
}

// watchLeaders reports the leader of the election pfx to notify each time
// it changes. It keeps the candidates' keys, read once and then followed
// by a watch of the prefix, and works out the leader after each revision's
// events, so that it reports every leader in turn, even one that lasted a
// single revision. Only after a failed watch, when it reads the keys
// again, may it skip a leader.
//
// Once fin is cancelled, it catches up with the revision etcd has then and
// returns: the last report shows what Lead left behind. ctx bounds that,
// and ends it at once.
func watchLeaders(ctx, fin context.Context, cli *clientv3.Client, l liveness, pfx string, notify func(LeaderInfo)) {
	w := &leaderWatch{cli: cli, l: l, pfx: pfx, notify: notify, keys: make(map[string]LeaderInfo)}
	backoff := leadMinBackoff
	for ctx.Err() == nil && cli.Ctx().Err() == nil {
		rev, err := w.read(ctx)
		if err == nil {
			backoff = leadMinBackoff
			if err = w.follow(ctx, fin, rev); err == nil {
				return // caught up after fin
			}
		}
		switch {
		case ctx.Err() != nil || cli.Ctx().Err() != nil:
			return
		case fin.Err() != nil:
			w.read(ctx) // the last report, as good as it gets
			return
		case errors.Is(err, rpctypes.ErrCompacted):
			continue // reading again is enough
		}
		t := time.NewTimer(jittered(backoff))
		select {
		case <-t.C:
		case <-fin.Done():
		case <-ctx.Done():
		}
		t.Stop()
		backoff = min(2*backoff, leadMaxBackoff)
	}
}

// leaderWatch is the state of watchLeaders, used by its goroutine only.
type leaderWatch struct {
	cli    *clientv3.Client
	l      liveness // of the terms' sessions: see probe
	pfx    string
	notify func(LeaderInfo)
	keys   map[string]LeaderInfo // the candidates, by key
	last   *LeaderInfo           // the last report, nil before the first
}

// report tells notify the leader among keys, if it changed.
func (w *leaderWatch) report() {
	var li LeaderInfo
	for _, k := range w.keys {
		if li.Key == "" || k.Rev < li.Rev {
			li = k
		}
	}
	if w.last == nil || *w.last != li {
		w.last = &li
		w.notify(li)
	}
}

// read reads the candidates, reports the leader, and returns the revision
// read.
func (w *leaderWatch) read(ctx context.Context) (int64, error) {
	resp, _, err := ask(ctx, w.cli, w.l.wait, classRead, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return w.cli.Get(ctx, w.pfx, clientv3.WithPrefix())
	})
	if err != nil {
		return 0, err
	}
	clear(w.keys)
	for _, kv := range resp.Kvs {
		w.keys[string(kv.Key)] = LeaderInfo{Key: string(kv.Key), Value: string(kv.Value), Rev: kv.CreateRevision}
	}
	w.report()
	return resp.Header.Revision, nil
}

// follow applies the events after revision rev to the candidates and
// reports the leader after each revision. It returns nil once fin has
// ended and it has seen the revision etcd had then, and otherwise the error
// that ended the watch.
func (w *leaderWatch) follow(ctx, fin context.Context, rev int64) error {
	wt, err := openWatch(ctx, nil, w.cli, w.l, w.pfx, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	defer func() { wt.close() }()
	replayed := false
	seen, target := rev, int64(0) // target: etcd's revision once fin ended
	finc := fin.Done()
	for {
		select {
		case <-wt.done:
			// ctx ended or the stream was found silent (see probe), and
			// clientv3 may not close the channel yet (see watchUntil).
			return wt.closed(ctx, nil, w.pfx)
		case wr, ok := <-wt.ch:
			if !ok {
				// ctx ended, the stream was found silent, or clientv3
				// lost it.
				return wt.closed(ctx, nil, w.pfx)
			}
			wt.st.heard()
			if err := wr.Err(); err != nil {
				return err
			}
			if !replayed && missed(wr, rev) {
				// Something was written between the read and the watch
				// (see missed): etcd has written rev+1 by now, so watch
				// again from it, to apply every event after the read.
				wt.close()
				replayed = true
				if wt, err = openWatch(ctx, nil, w.cli, w.l, w.pfx, clientv3.WithPrefix(), clientv3.WithRev(rev+1)); err != nil {
					return err
				}
				continue
			}
			for i, ev := range wr.Events {
				k := string(ev.Kv.Key)
				if ev.Type == mvccpb.DELETE {
					delete(w.keys, k)
				} else {
					w.keys[k] = LeaderInfo{Key: k, Value: string(ev.Kv.Value), Rev: ev.Kv.CreateRevision}
				}
				// The events of one revision (one transaction) change the
				// leader at once; etcd never splits them.
				if i == len(wr.Events)-1 || wr.Events[i+1].Kv.ModRevision != ev.Kv.ModRevision {
					w.report()
					seen = ev.Kv.ModRevision
				}
			}
			if wr.IsProgressNotify() {
				// Every event up to this revision has been sent.
				seen = max(seen, wr.Header.Revision)
			}
		case <-finc:
			finc = nil
			resp, _, err := ask(ctx, w.cli, w.l.wait, classRead, func(ctx context.Context) (*clientv3.GetResponse, error) {
				return w.cli.Get(ctx, w.pfx, clientv3.WithCountOnly())
			})
			if err != nil {
				return err
			}
			target = resp.Header.Revision
			// Without events after seen, only a progress notification
			// tells that there are none.
			wt.requestProgress(ctx)
		}
		if target > 0 && seen >= target {
			return nil
		}
	}
}

// jittered is half to all of d, at random, so that candidates that failed
// together do not retry together.
func jittered(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }
