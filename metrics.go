package concurrency

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// This file is the package's metrics: what it reports (MetricsRecorder),
// how a session gets a recorder (WithMetrics, in sessionopts.go;
// WithLeadMetrics), and the
// hooks that the shared code calls: acquire (acquire.go) for acquisitions
// and waits, hold (hold.go) for the end of a tenure, the keepalive loop
// (session.go) for renewals. The Prometheus metrics are in the nested
// module prometheus/, so that importers who do not want them do not build
// client_golang (issue 22). A session without metrics and without a tracer provider has no
// instruments: every hook is then a nil check. Spans are in trace.go.

// The kinds of lock, as the kind told to a MetricsRecorder (the label
// "kind" of the Prometheus metrics) and the attribute kind of the spans
// (trace.go).
const (
	kindMutex     = "mutex"
	kindElection  = "election"
	kindSemaphore = "semaphore"
	kindRead      = "rwmutex_read"
	kindWrite     = "rwmutex_write"
)

// Why a hold ended, as the cause told to MetricsRecorder.HoldEnded (the
// label "cause" of concurrency_lock_holds_ended_total).
const (
	causeReleased   = "released"         // Unlock, Release, RUnlock, Resign
	causeKeyDeleted = "lost_key_deleted" // the key was deleted by someone else
	causeLease      = "lost_lease"       // the lease was revoked or expired on the server
	causeSession    = "session_expired"  // the session ended: conservative deadline, Close, its context
	causeMaxHold    = "max_hold"         // the hold reached its session's WithMaxHold
	causeYielded    = "yielded"          // RequestYield asked, and the session opted in (WithYield)
	causeUnhealthy  = "unhealthy"        // the session's health checks failed (WithHealthCheck)
)

// MetricsRecorder receives what the sessions, locks, elections and Leads
// given it (WithMetrics, WithLeadMetrics) measure. This package imports no
// metrics library: the module github.com/seed-a9d410c6/concurrency/prometheus
// implements MetricsRecorder with Prometheus metrics (package
// concurrencyprom), and any other implementation may be given instead.
//
// The lock methods say which lock with kind and name: kind is one of
// "mutex", "election", "semaphore", "rwmutex_read" and "rwmutex_write", and
// name is the lock's name (its key prefix without the trailing "/"); how
// many names a process uses is up to its user, so a recorder that makes a
// series per name should let its user opt in. An acquisition reports, in
// order: WaitStarted and WaitEnded if it waited in the queue (a TryLock
// never does), then one of Acquired, TryLockMissed or AcquireFailed, and
// for an election also LeaderStarted after Acquired. A hold that was
// Acquired reports HoldEnded exactly once, and, for an election,
// LeaderEnded just after it.
//
// Every method is called synchronously on the path it measures (for
// instance between the grant of a lock and the return of Lock), possibly
// from many goroutines at once: an implementation must be safe for
// concurrent use, must not block, and must not call back into this
// package. A method that is called after its session has been closed must
// still return.
type MetricsRecorder interface {
	// LockCreated is called when a lock of kind named name is created on a
	// session given this recorder, from the goroutine that creates it:
	// NewMutex ("mutex"), NewElection and ResumeElection ("election",
	// also for each term of Lead), NewSemaphore ("semaphore"), NewRWMutex
	// (both "rwmutex_read" and "rwmutex_write"). It is not called for a
	// nil session or an empty name. It reports nothing that happened: it
	// lets a recorder start the lock's series at 0 (a counter that first
	// appears at 1 has no rate, and a gauge that never appeared cannot
	// alert), and may be called many times for one name.
	LockCreated(kind, name string)

	// WaitStarted is called when an acquisition (Lock, Campaign, Acquire,
	// RLock...) begins to wait for the keys ahead of its own, from the
	// goroutine that called it (for Lead, the goroutine Lead runs in).
	WaitStarted(kind, name string)

	// WaitEnded is called when an acquisition that reported WaitStarted
	// stops waiting, whatever the outcome, from the same goroutine, just
	// before that outcome is reported. Every WaitStarted is followed by
	// exactly one WaitEnded.
	WaitEnded(kind, name string)

	// Acquired is called when an acquisition holds the lock (or a permit,
	// or the leadership), from the goroutine that called it, before the
	// call returns. wait is the time from the call to the hold.
	Acquired(kind, name string, wait time.Duration)

	// TryLockMissed is called when a TryLock, TryAcquire or TryRLock finds
	// the lock held, from the goroutine that called it.
	TryLockMissed(kind, name string)

	// AcquireFailed is called when an acquisition ends without the lock
	// for any other reason (its context ended, the session ended, an etcd
	// error), from the goroutine that called it.
	AcquireFailed(kind, name string)

	// HoldEnded is called once for each hold that was Acquired, when it
	// ends, with how long it lasted and why, cause being one of
	// "released" (Unlock, Release, RUnlock, Resign), "lost_key_deleted"
	// (someone else deleted the key), "lost_lease" (the lease was revoked
	// or expired on the server), "session_expired" (the session ended:
	// its conservative deadline, Close, its context), "max_hold" (the
	// hold reached its session's WithMaxHold), "yielded" (RequestYield
	// asked it to let go, WithYield) and "unhealthy" (its session's health
	// checks failed, WithHealthCheck). It is called from
	// the goroutine that ends the hold: for a release or a loss, the one
	// that releases it or the hold's watch goroutine, before the hold's
	// context ends; for the session's end, a goroutine started by it
	// (context.AfterFunc), after.
	HoldEnded(kind, name, cause string, held time.Duration)

	// LeaderStarted is called just after Acquired when the hold is an
	// election's leadership (kind "election"), from the same goroutine:
	// this process now leads the election name.
	LeaderStarted(name string)

	// LeaderEnded is called just after HoldEnded of an election's
	// leadership, from the same goroutine: this process no longer leads
	// the election name.
	LeaderEnded(name string)

	// KeepAlive is called after each answered lease renewal, with its
	// round-trip time, from the session's keepalive goroutine.
	KeepAlive(rtt time.Duration)

	// KeepAliveFailed is called after each failed lease renewal (it is
	// retried), from the session's keepalive goroutine.
	KeepAliveFailed()

	// DeadlineExpired is called when a session ends because its
	// conservative deadline passed without a renewal, from the session's
	// keepalive goroutine, before the session's context ends.
	DeadlineExpired()
}

// instruments are a session's metrics and tracer; a session has none (nil)
// unless given WithMetrics or WithTracerProvider. Every method may be
// called on nil, and then does nothing.
type instruments struct {
	m      MetricsRecorder // nil without metrics
	tracer trace.Tracer    // nil without a tracer provider
}

func newInstruments(m MetricsRecorder, tp trace.TracerProvider) *instruments {
	if m == nil && tp == nil {
		return nil
	}
	i := &instruments{m: m}
	if tp != nil {
		i.tracer = tp.Tracer(tracerName)
	}
	return i
}

// created reports locks of kinds named name created
// (MetricsRecorder.LockCreated).
func (i *instruments) created(name string, kinds ...string) {
	if i == nil || i.m == nil {
		return
	}
	for _, k := range kinds {
		i.m.LockCreated(k, name)
	}
}

// missed counts a TryLock of a lock of kind named name that missed
// without reaching etcd: another goroutine holds or is acquiring the same
// value.
func (i *instruments) missed(kind, name string) {
	if i == nil || i.m == nil {
		return
	}
	i.m.TryLockMissed(kind, name)
}

// renewed records a keepalive sent at sent that ended with err.
func (i *instruments) renewed(sent time.Time, err error) {
	if i == nil || i.m == nil {
		return
	}
	if err != nil {
		i.m.KeepAliveFailed()
		return
	}
	i.m.KeepAlive(time.Since(sent))
}

// deadlinePassed records a session ended by its conservative deadline.
func (i *instruments) deadlinePassed() {
	if i == nil || i.m == nil {
		return
	}
	i.m.DeadlineExpired()
}

// acquisition is one call of acquire, as the instruments see it.
type acquisition struct {
	i       *instruments
	kind    string
	name    string
	start   time.Time
	parent  context.Context // the caller's, for the hold's span; nil without a tracer
	span    trace.Span      // nil without a tracer
	waiting bool
}

// startAcquire begins to record an acquisition of key, of a lock of kind
// named name, waiting if wait; the returned context carries its span, if
// any.
func (i *instruments) startAcquire(ctx context.Context, kind, name, key string, wait bool) (context.Context, *acquisition) {
	if i == nil {
		return ctx, nil
	}
	a := &acquisition{i: i, kind: kind, name: name, start: time.Now()}
	ctx = a.startSpan(ctx, key, wait)
	return ctx, a
}

// enqueued records the key's place: its create revision (the fencing
// token) and the keys ahead of it when it was created (-1: unknown).
func (a *acquisition) enqueued(token, ahead int64) {
	if a == nil {
		return
	}
	a.spanEnqueued(token, ahead)
}

// wait records that the acquisition begins to wait.
func (a *acquisition) wait() {
	if a == nil {
		return
	}
	a.waiting = true
	if m := a.i.m; m != nil {
		m.WaitStarted(a.kind, a.name)
	}
	a.spanWait()
}

// done records the end of the acquisition: a hold of the key with
// fencing token token, or err. For a hold, it returns what records the
// hold's end (see holdObs.ended); nil without instruments or on err.
func (a *acquisition) done(key string, token int64, err error) *holdObs {
	if a == nil {
		return nil
	}
	if m := a.i.m; m != nil {
		if a.waiting {
			m.WaitEnded(a.kind, a.name)
		}
		switch {
		case err == nil:
			m.Acquired(a.kind, a.name, time.Since(a.start))
			if a.kind == kindElection {
				m.LeaderStarted(a.name)
			}
		case errors.Is(err, ErrLocked):
			m.TryLockMissed(a.kind, a.name)
		default:
			m.AcquireFailed(a.kind, a.name)
		}
	}
	a.spanDone(token, err)
	if err != nil {
		return nil
	}
	return &holdObs{m: a.i.m, kind: a.kind, name: a.name, span: a.startHoldSpan(key, token)}
}

// holdObs records the end of a hold, in the metrics and its span.
type holdObs struct {
	m    MetricsRecorder // nil without metrics
	kind string
	name string
	span trace.Span // nil without a tracer
}

// ended records that a hold ended with cause, after lasting held; it is
// called once per hold.
func (o *holdObs) ended(held time.Duration, cause error) {
	label := causeLabel(cause)
	if o.m != nil {
		o.m.HoldEnded(o.kind, o.name, label, held)
		if o.kind == kindElection {
			o.m.LeaderEnded(o.name)
		}
	}
	endHoldSpan(o.span, label)
}

// causeLabel says why a hold ended, from the cause of its context.
func causeLabel(cause error) string {
	switch {
	case errors.Is(cause, ErrMaxHold):
		return causeMaxHold
	case errors.Is(cause, ErrYieldRequested):
		return causeYielded
	case errors.Is(cause, ErrUnhealthy):
		return causeUnhealthy
	case errors.Is(cause, errLeaseLost), errors.Is(cause, ErrLeaseNotFound):
		return causeLease
	case errors.Is(cause, ErrLockLost):
		return causeKeyDeleted
	case errors.Is(cause, ErrSessionExpired):
		return causeSession
	default:
		return causeReleased
	}
}
