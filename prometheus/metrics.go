// Package concurrencyprom reports the metrics of
// github.com/seed-a9d410c6/concurrency to Prometheus: New registers them
// with a registry, and the *Metrics it returns is given to sessions with
// concurrency.WithMetrics and to Lead with concurrency.WithLeadMetrics.
//
// It is a module of its own so that the library's importers who do not use
// Prometheus never build client_golang (issue 22). Its name is not its
// directory's, prometheus, because a program that uses it always imports
// client_golang's package prometheus too (for the Registerer): it follows
// grpcprom and the like, and goimports writes the name in the import.
package concurrencyprom

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a9d410c6/concurrency"
)

// ErrNilRegisterer is returned by New when the registerer is nil.
var ErrNilRegisterer = errors.New("concurrencyprom: nil prometheus registerer")

// waitBuckets suit waits from 1 ms to a minute; holdBuckets go on to an hour.
var (
	waitBuckets      = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	holdBuckets      = append(append([]float64(nil), waitBuckets...), 300, 900, 3600)
	keepaliveBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
)

// Metrics is a set of Prometheus metrics for the sessions, locks,
// elections and Leads given it (concurrency.WithMetrics,
// concurrency.WithLeadMetrics): it implements concurrency.MetricsRecorder.
// One Metrics may serve any number of sessions, from any goroutine. The
// library's README lists every metric with queries to graph it. A nil
// *Metrics records nothing.
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

var _ concurrency.MetricsRecorder = (*Metrics)(nil)

type options struct {
	nameLabel bool
}

// Option configures New.
type Option func(*options)

// WithLockNameLabel adds the label name, the lock name, to the lock metrics
// (off by default). Each lock name then has its own series: use it only
// with a small, fixed set of names, as every name ever used stays exported
// for the life of the process.
func WithLockNameLabel() Option {
	return func(o *options) { o.nameLabel = true }
}

// New creates the library's metrics and registers them with reg. It starts
// nothing; the metrics move only for sessions given concurrency.WithMetrics
// and Leads given concurrency.WithLeadMetrics. Nothing is ever registered
// with prometheus.DefaultRegisterer unless it is reg.
//
// It returns ErrNilRegisterer for a nil reg, and the registry's error if a
// metric of the same name is already registered there (a second New on the
// same registry: share one Metrics instead, or wrap reg with
// prometheus.WrapRegistererWith to tell them apart). On error nothing stays
// registered.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	if reg == nil {
		return nil, ErrNilRegisterer
	}
	var o options
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
			return nil, fmt.Errorf("concurrencyprom: New: %w", err)
		}
	}
	return m, nil
}

// labels are the lock metrics' label values.
func (m *Metrics) labels(kind, name string) []string {
	if m.nameLabel {
		return []string{kind, name}
	}
	return []string{kind}
}

// WaitStarted adds one to etcd_lock_waiters.
func (m *Metrics) WaitStarted(kind, name string) {
	if m == nil {
		return
	}
	m.waiters.WithLabelValues(m.labels(kind, name)...).Inc()
}

// WaitEnded takes one from etcd_lock_waiters.
func (m *Metrics) WaitEnded(kind, name string) {
	if m == nil {
		return
	}
	m.waiters.WithLabelValues(m.labels(kind, name)...).Dec()
}

// Acquired counts an acquisition in etcd_lock_acquisitions_total, observes
// its wait in etcd_lock_wait_seconds and adds one to etcd_lock_holders.
func (m *Metrics) Acquired(kind, name string, wait time.Duration) {
	if m == nil {
		return
	}
	lv := m.labels(kind, name)
	m.acquisitions.WithLabelValues(lv...).Inc()
	m.wait.WithLabelValues(lv...).Observe(wait.Seconds())
	m.holders.WithLabelValues(lv...).Inc()
}

// TryLockMissed counts a miss in etcd_lock_trylock_misses_total.
func (m *Metrics) TryLockMissed(kind, name string) {
	if m == nil {
		return
	}
	m.misses.WithLabelValues(m.labels(kind, name)...).Inc()
}

// AcquireFailed counts a failure in etcd_lock_acquire_failures_total.
func (m *Metrics) AcquireFailed(kind, name string) {
	if m == nil {
		return
	}
	m.failures.WithLabelValues(m.labels(kind, name)...).Inc()
}

// HoldEnded takes one from etcd_lock_holders, observes the hold in
// etcd_lock_hold_seconds and counts it in etcd_lock_holds_ended_total by
// cause.
func (m *Metrics) HoldEnded(kind, name, cause string, held time.Duration) {
	if m == nil {
		return
	}
	lv := m.labels(kind, name)
	m.holders.WithLabelValues(lv...).Dec()
	m.held.WithLabelValues(lv...).Observe(held.Seconds())
	m.ended.WithLabelValues(append([]string{cause}, lv...)...).Inc()
}

// LeaderStarted adds one to etcd_lock_leader{name} and counts a change in
// etcd_lock_leader_changes_total{name}.
func (m *Metrics) LeaderStarted(name string) {
	if m == nil {
		return
	}
	m.leader.WithLabelValues(name).Inc()
	m.leaderChanges.WithLabelValues(name).Inc()
}

// LeaderEnded takes one from etcd_lock_leader{name}.
func (m *Metrics) LeaderEnded(name string) {
	if m == nil {
		return
	}
	m.leader.WithLabelValues(name).Dec()
}

// KeepAlive observes a renewal's round trip in
// etcd_lock_session_keepalive_seconds.
func (m *Metrics) KeepAlive(rtt time.Duration) {
	if m == nil {
		return
	}
	m.keepalive.Observe(rtt.Seconds())
}

// KeepAliveFailed counts a failed renewal in
// etcd_lock_session_keepalive_failures_total.
func (m *Metrics) KeepAliveFailed() {
	if m == nil {
		return
	}
	m.keepaliveFailures.Inc()
}

// DeadlineExpired counts a session ended by its deadline in
// etcd_lock_session_deadline_expirations_total.
func (m *Metrics) DeadlineExpired() {
	if m == nil {
		return
	}
	m.deadlineExpiries.Inc()
}
