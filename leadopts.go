package concurrency

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// This file holds the options of Lead: its own (WithLeaderChanges,
// WithStatus), the options of its terms' sessions (WithLeadSession, and
// WithLeadTTL), and the deprecated wrappers of single session options.

type leadOptions struct {
	onChange func(LeaderInfo)
	status   *LeaderStatus
	err      error // the first invalid option
	// session is given to the session of each term (WithLeadSession).
	session []SessionOption
	ttl     int // the terms' TTL, from session: set by Lead once all options are applied
}

// LeadOption configures Lead.
type LeadOption func(*leadOptions)

// WithLeadSession gives opts to the session of each of Lead's terms, after
// those of earlier WithLeadSession options (a later option of a kind wins,
// as in NewSession). Each does for a term's session what it does for any:
//
//   - WithTTL sets the terms' TTL (default 60 s, and why: below),
//     ignoring a TTL of zero or less as NewSession does;
//   - WithHealthCheck: when the checks fail, the term ends (fn's context
//     with a cause matching ErrUnhealthy), the lease is revoked so that a
//     follower is elected at once, and Lead campaigns again on a new
//     session, whose checks start afresh;
//   - WithOwner has each term's session record the owner, so that Inspect
//     shows who leads and who stands; an Owner too large to record makes
//     Lead return an error matching ErrInvalidOwner at once;
//   - WithYield makes the leadership yield to RequestYield: the term's
//     context is cancelled with cause ErrYieldRequested, and once fn has
//     returned Lead closes the term's session (which deletes its key, so
//     that the next candidate is elected) and campaigns again, behind the
//     candidates already waiting;
//   - WithMetrics: in particular the recorder is told LeaderStarted when
//     Lead begins to lead and LeaderEnded when it stops (with
//     concurrencyprom, concurrency_lock_leader{name} is 1 while Lead
//     leads);
//   - WithTracerProvider adds a span per term (concurrency.lead.term) to
//     the session's spans.
//
// Any other SessionOption does for each term's session what it does for
// any session. WithLease and WithContext are overridden: each term needs a
// new lease, and Lead's own ctx, not the session's, says when to stop (the
// sessions carry ctx's values).
// An option NewSession would refuse (an Owner too large, a bad
// WithHealthCheck, WithMaxHold or WithLockDelay) makes Lead return its
// error, matching the option's sentinel, before any round trip.
//
// The TTL is how long a leadership outlives a leader that crashed without
// resigning. The default is kept at 60 s, etcd's session default, rather
// than client-go's 15 s lease, because the TTL weighs two failures against
// each other, and Lead already takes care of the common one. A Lead that
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
// minute after a leader's crash should pass WithTTL(15), or less,
// accepting that an etcd outage of that length ends the term.
func WithLeadSession(opts ...SessionOption) LeadOption {
	return withLeadSession("WithLeadSession", opts)
}

// withLeadSession is WithLeadSession, reporting an option no session
// would take under the name of the option that gave it.
func withLeadSession(option string, opts []SessionOption) LeadOption {
	return func(o *leadOptions) {
		if err := termOptionsErr(option, opts); err != nil && o.err == nil {
			o.err = err
		}
		o.session = append(o.session, opts...)
	}
}

// WithLeadTTL sets the TTL in seconds of the session of each term (default
// 60), as WithLeadSession(WithTTL(ttl)) does, except that a TTL of zero or
// less makes Lead return an error matching ErrInvalidTTL.
//
// Deprecated: use WithLeadSession(WithTTL(ttl)), which ignores a TTL of
// zero or less (with a warning in the client's log) as NewSession does.
func WithLeadTTL(ttl int) LeadOption {
	return func(o *leadOptions) {
		if ttl <= 0 && o.err == nil {
			o.err = fmt.Errorf("%w: WithLeadTTL(%d)", ErrInvalidTTL, ttl)
		}
		WithLeadSession(WithTTL(ttl))(o)
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

// WithLeadHealthCheck gives the session of each of Lead's terms
// WithHealthCheck (see WithLeadSession).
//
// Deprecated: use WithLeadSession(WithHealthCheck(interval, failures, check)).
func WithLeadHealthCheck(interval time.Duration, failures int, check func(ctx context.Context) error) LeadOption {
	return withLeadSession("WithLeadHealthCheck", []SessionOption{WithHealthCheck(interval, failures, check)})
}

// WithLeadOwner has the session of each term of Lead record o, as
// WithOwner does (see WithLeadSession). An Owner too large to record makes
// Lead return an error matching ErrInvalidOwner at once.
//
// Deprecated: use WithLeadSession(WithOwner(o)).
func WithLeadOwner(o Owner) LeadOption {
	return withLeadSession("WithLeadOwner", []SessionOption{WithOwner(o)})
}

// WithLeadYield makes Lead's leadership yield to RequestYield (see
// WithLeadSession).
//
// Deprecated: use WithLeadSession(WithYield()).
func WithLeadYield() LeadOption { return WithLeadSession(WithYield()) }

// WithLeadMetrics has the sessions of Lead report to r, as WithMetrics
// does (see WithLeadSession). A nil r is ignored (the default).
//
// Deprecated: use WithLeadSession(WithMetrics(r)).
func WithLeadMetrics(r MetricsRecorder) LeadOption { return WithLeadSession(WithMetrics(r)) }

// WithLeadTracerProvider has the sessions of Lead record spans with tp, as
// WithTracerProvider does. A nil tp is ignored (the default).
//
// Deprecated: use WithLeadSession(WithTracerProvider(tp)).
func WithLeadTracerProvider(tp trace.TracerProvider) LeadOption {
	return WithLeadSession(WithTracerProvider(tp))
}
