package concurrency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// This file is the package's Prometheus metrics: what they are (Metrics),
// how a session gets them (WithMetrics, WithLeadMetrics), and the hooks that
// the shared code calls: acquire (queue.go) for acquisitions and waits, hold
// (hold.go) for the end of a tenure, the keepalive loop (session.go) for
// renewals. A session without metrics and without a tracer provider has no
// instruments: every hook is then a nil check. Spans are in trace.go.

// The kinds of lock, as the label "kind" of the metrics and the attribute
// concurrency.kind of the spans.
const (
	kindMutex     = "mutex"
	kindElection  = "election"
	kindSemaphore = "semaphore"
	kindRead      = "rwmutex_read"
	kindWrite     = "rwmutex_write"
)

// Why a hold ended, as the label "cause" of etcd_lock_holds_ended_total.
const (
	causeReleased   = "released"         // Unlock, Release, RUnlock, Resign
	causeKeyDeleted = "lost_key_deleted" // the key was deleted by someone else
	causeLease      = "lost_lease"       // the lease was revoked or expired on the server
	causeSession    = "session_expired"  // the session ended: conservative deadline, Close, its context
)

// errLeaseLost is wrapped by the causes that say the lease is gone from the
// server (revoked or expired), as opposed to a session that ended on its
// own (deadline, Close): it tells lost_lease from session_expired, and from
// lost_key_deleted when a hold's key was deleted with its lease.
var errLeaseLost = errors.New("revoked or expired")

// waitBuckets suit waits from 1 ms to a minute; holdBuckets go on to an hour.
var (
	waitBuckets      = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	holdBuckets      = append(append([]float64(nil), waitBuckets...), 300, 900, 3600)
	keepaliveBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
)

// Metrics is a set of Prometheus metrics for the sessions, locks,
// elections and Leads given it (WithMetrics, WithLeadMetrics). One Metrics
// may serve any number of sessions, from any goroutine. The README lists
// every metric with queries to graph it.
//
// The lock metrics have the label kind (mutex, election, semaphore,
// rwmutex_read, rwmutex_write), and name (the lock name) only with
// WithLockNameLabel. The leadership metrics always have the label name, the
// election's name: there is one series per election this process takes
// part in.
type Metrics struct {
	nameLabel bool

	acquisitions *prometheus.CounterVec
	misses       *prometheus.CounterVec
	failures     *prometheus.CounterVec
	wait         *prometheus.HistogramVec
	held         *prometheus.HistogramVec
	ended        *prometheus.CounterVec
	waiters      *prometheus.GaugeVec
	holders      *prometheus.GaugeVec

	keepalive         prometheus.Histogram
	keepaliveFailures prometheus.Counter
	deadlineExpiries  prometheus.Counter

	leader        *prometheus.GaugeVec
	leaderChanges *prometheus.CounterVec
}

type metricsOptions struct {
	nameLabel bool
}

// MetricsOption configures NewMetrics.
type MetricsOption func(*metricsOptions)

// WithLockNameLabel adds the label name, the lock name, to the lock metrics
// (off by default). Each lock name then has its own series: use it only
// with a small, fixed set of names, as every name ever used stays exported
// for the life of the process.
func WithLockNameLabel() MetricsOption {
	return func(o *metricsOptions) { o.nameLabel = true }
}

// NewMetrics creates the package's metrics and registers them with reg. It
// starts nothing; the metrics move only for sessions given WithMetrics and
// Leads given WithLeadMetrics. Nothing is ever registered with
// prometheus.DefaultRegisterer unless it is reg.
//
// It returns ErrNilRegisterer for a nil reg, and the registry's error if a
// metric of the same name is already registered there (a second
// NewMetrics on the same registry: share one Metrics instead, or wrap reg
// with prometheus.WrapRegistererWith to tell them apart). On error nothing
// stays registered.
func NewMetrics(reg prometheus.Registerer, opts ...MetricsOption) (*Metrics, error) {
	if reg == nil {
		return nil, ErrNilRegisterer
	}
	var o metricsOptions
	for _, opt := range opts {
		opt(&o)
	}
	lock := []string{"kind"}
	if o.nameLabel {
		lock = append(lock, "name")
	}
	const ns, sub = "etcd", "lock"
	m := &Metrics{
		nameLabel: o.nameLabel,
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "acquisitions_total", Help: "Locks, semaphore permits and leaderships acquired."}, lock),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "trylock_misses_total", Help: "TryLock, TryAcquire, TryRLock calls that found the lock held."}, lock),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "acquire_failures_total", Help: "Acquisitions that ended without the lock: context ended, session ended, etcd error."}, lock),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "wait_seconds", Help: "Time from the call to the hold, of each acquisition that succeeded.", Buckets: waitBuckets}, lock),
		held: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "hold_seconds", Help: "How long each hold lasted, whatever ended it.", Buckets: holdBuckets}, lock),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "holds_ended_total", Help: "Holds ended, by cause: released, lost_key_deleted, lost_lease, session_expired."}, append([]string{"cause"}, lock...)),
		waiters: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "waiters", Help: "Acquisitions of this process waiting in a queue now."}, lock),
		holders: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "holders", Help: "Holds of this process now."}, lock),
		keepalive: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "session_keepalive_seconds", Help: "Round-trip time of each answered lease renewal.", Buckets: keepaliveBuckets}),
		keepaliveFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "session_keepalive_failures_total", Help: "Lease renewals that failed (and were retried)."}),
		deadlineExpiries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "session_deadline_expirations_total", Help: "Sessions ended because their conservative deadline passed without a renewal."}),
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "leader", Help: "1 while this process leads the election name, else 0."}, []string{"name"}),
		leaderChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "leader_changes_total", Help: "Times this process became the leader of the election name."}, []string{"name"}),
	}
	cs := []prometheus.Collector{m.acquisitions, m.misses, m.failures, m.wait, m.held, m.ended, m.waiters, m.holders,
		m.keepalive, m.keepaliveFailures, m.deadlineExpiries, m.leader, m.leaderChanges}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, c := range cs[:i] {
				reg.Unregister(c)
			}
			return nil, fmt.Errorf("concurrency: NewMetrics: %w", err)
		}
	}
	return m, nil
}

// WithMetrics has the session, and every Mutex, Election, Semaphore and
// RWMutex on it, report to m. A nil m is ignored (the default: no metrics).
func WithMetrics(m *Metrics) SessionOption {
	return func(o *sessionOptions) { o.metrics = m }
}

// WithTracerProvider has the session, and every lock on it, record spans
// with tp: one per acquisition (concurrency.acquire) and one per release
// (concurrency.release). A nil tp is ignored (the default: no spans). The
// global provider (otel.GetTracerProvider) is never used unless it is
// passed here: a library should not emit spans its user did not ask for.
func WithTracerProvider(tp trace.TracerProvider) SessionOption {
	return func(o *sessionOptions) { o.tracerProvider = tp }
}

// WithLeadMetrics has the sessions of Lead report to m, as WithMetrics does:
// in particular etcd_lock_leader{name} is 1 while Lead leads. A nil m is
// ignored (the default).
func WithLeadMetrics(m *Metrics) LeadOption {
	return func(o *leadOptions) { o.sessionOpts = append(o.sessionOpts, WithMetrics(m)) }
}

// WithLeadTracerProvider has the sessions of Lead record spans with tp, as
// WithTracerProvider does. A nil tp is ignored (the default).
func WithLeadTracerProvider(tp trace.TracerProvider) LeadOption {
	return func(o *leadOptions) { o.sessionOpts = append(o.sessionOpts, WithTracerProvider(tp)) }
}

// instruments are a session's metrics and tracer; a session has none (nil)
// unless given WithMetrics or WithTracerProvider. Every method may be
// called on nil, and then does nothing.
type instruments struct {
	m      *Metrics     // nil without metrics
	tracer trace.Tracer // nil without a tracer provider
}

func newInstruments(m *Metrics, tp trace.TracerProvider) *instruments {
	if m == nil && tp == nil {
		return nil
	}
	i := &instruments{m: m}
	if tp != nil {
		i.tracer = tp.Tracer(tracerName)
	}
	return i
}

// lockName is the name of the lock whose keys are under pfx.
func lockName(pfx string) string { return strings.TrimSuffix(pfx, "/") }

// labels are the lock metrics' label values.
func (m *Metrics) labels(kind, name string) []string {
	if m.nameLabel {
		return []string{kind, name}
	}
	return []string{kind}
}

// missed counts a TryLock that missed without reaching acquire: another
// goroutine holds or is acquiring the same value.
func (i *instruments) missed(r rule) {
	if i == nil || i.m == nil {
		return
	}
	i.m.misses.WithLabelValues(i.m.labels(r.kind, lockName(r.pfx))...).Inc()
}

// renewed records a keepalive sent at sent that ended with err.
func (i *instruments) renewed(sent time.Time, err error) {
	if i == nil || i.m == nil {
		return
	}
	if err != nil {
		i.m.keepaliveFailures.Inc()
		return
	}
	i.m.keepalive.Observe(time.Since(sent).Seconds())
}

// deadlinePassed records a session ended by its conservative deadline.
func (i *instruments) deadlinePassed() {
	if i == nil || i.m == nil {
		return
	}
	i.m.deadlineExpiries.Inc()
}

// acquisition is one call of acquire, as the instruments see it.
type acquisition struct {
	i       *instruments
	kind    string
	name    string
	start   time.Time
	span    trace.Span // nil without a tracer
	waiting bool
}

// startAcquire begins to record an acquisition by rule r of key; the
// returned context carries its span, if any.
func (i *instruments) startAcquire(ctx context.Context, r rule, key string, wait bool) (context.Context, *acquisition) {
	if i == nil {
		return ctx, nil
	}
	a := &acquisition{i: i, kind: r.kind, name: lockName(r.pfx), start: time.Now()}
	ctx = a.startSpan(ctx, key, wait)
	return ctx, a
}

// enqueued records where enqueue left the key.
func (a *acquisition) enqueued(q queued) {
	if a == nil {
		return
	}
	a.spanEnqueued(q)
}

// wait records that the acquisition begins to wait.
func (a *acquisition) wait() {
	if a == nil {
		return
	}
	a.waiting = true
	if m := a.i.m; m != nil {
		m.waiters.WithLabelValues(m.labels(a.kind, a.name)...).Inc()
	}
	a.spanWait()
}

// done records the end of the acquisition: h held, or err.
func (a *acquisition) done(h *hold, err error) {
	if a == nil {
		return
	}
	if m := a.i.m; m != nil {
		lv := m.labels(a.kind, a.name)
		if a.waiting {
			m.waiters.WithLabelValues(lv...).Dec()
		}
		switch {
		case err == nil:
			m.acquisitions.WithLabelValues(lv...).Inc()
			m.wait.WithLabelValues(lv...).Observe(time.Since(a.start).Seconds())
			m.holders.WithLabelValues(lv...).Inc()
			if a.kind == kindElection {
				m.leader.WithLabelValues(a.name).Inc()
				m.leaderChanges.WithLabelValues(a.name).Inc()
			}
			h.obs = &holdObs{m: m, kind: a.kind, name: a.name}
			// The session's end cancels the hold's context without a
			// call to finish: record it then. Nothing runs until then.
			h.stopObs = context.AfterFunc(h.ctx, func() { h.obs.ended(h, context.Cause(h.ctx)) })
		case errors.Is(err, ErrLocked):
			m.misses.WithLabelValues(lv...).Inc()
		default:
			m.failures.WithLabelValues(lv...).Inc()
		}
	}
	if h != nil {
		h.kind = a.kind
	}
	a.spanDone(h, err)
}

// holdObs records the end of a hold.
type holdObs struct {
	m    *Metrics
	kind string
	name string
}

// ended records that h ended with cause; it is called once per hold.
func (o *holdObs) ended(h *hold, cause error) {
	lv := o.m.labels(o.kind, o.name)
	o.m.holders.WithLabelValues(lv...).Dec()
	o.m.held.WithLabelValues(lv...).Observe(time.Since(h.since).Seconds())
	o.m.ended.WithLabelValues(append([]string{causeLabel(cause)}, lv...)...).Inc()
	if o.kind == kindElection {
		o.m.leader.WithLabelValues(o.name).Dec()
	}
}

// causeLabel says why a hold ended, from the cause of its context.
func causeLabel(cause error) string {
	switch {
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
