// Package concurrencyprom reports the metrics of
// github.com/seed-a9d410c6/concurrency to Prometheus: New registers them
// with a registry, and the *Metrics it returns is given to sessions with
// concurrency.WithMetrics, and to Lead and Shards with that option given
// through concurrency.WithLeadSession and concurrency.WithShardSession.
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
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a9d410c6/concurrency"
)

var (
	// ErrNilRegisterer is returned by New when the registerer is nil.
	ErrNilRegisterer = errors.New("concurrencyprom: nil prometheus registerer")

	// ErrInvalidNamespace is returned by New when WithNamespace gives a
	// namespace that is not a legacy Prometheus name: a letter or "_",
	// then letters, digits and "_".
	ErrInvalidNamespace = errors.New("concurrencyprom: invalid namespace")
)

// validNamespace matches what WithNamespace accepts besides "".
var validNamespace = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// waitBuckets suit waits from 1 ms to a minute; holdBuckets go on to an hour.
var (
	waitBuckets      = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	holdBuckets      = append(append([]float64(nil), waitBuckets...), 300, 900, 3600)
	keepaliveBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
)

// Metrics is a set of Prometheus metrics for the sessions, locks,
// elections and Leads given it (concurrency.WithMetrics, also through
// concurrency.WithLeadSession): it implements concurrency.MetricsRecorder,
// and concurrency.ShardMetricsRecorder for Shards members
// (concurrency.WithMetrics through concurrency.WithShardSession).
// One Metrics may serve any number of sessions, from any goroutine. The
// repository's docs/operators.md lists every metric with queries to graph it. A nil
// *Metrics records nothing.
//
// The lock metrics have the label kind (mutex, election, semaphore,
// rwmutex_read, rwmutex_write), and name (the lock name) only with
// WithLockNameLabel. The leadership metrics always have the label name, the
// election's name: there is one series per election this process takes
// part in. The shard metrics (concurrency_shard_…, for members given
// WithMetrics through concurrency.WithShardSession) always have the label group, the Shards
// group's name: one series per group this process is a member of.
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

	shardUnowned      *prometheus.GaugeVec     // shards.go
	shardUnownedSpans *prometheus.HistogramVec // shards.go
}

var (
	_ concurrency.MetricsRecorder      = (*Metrics)(nil)
	_ concurrency.ShardMetricsRecorder = (*Metrics)(nil)
)

type options struct {
	nameLabel bool
	namespace string
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

// DefaultNamespace is the first part of every metric's name unless
// WithNamespace gives another: concurrency_lock_acquisitions_total and so
// on. It is not "etcd": etcd's own servers export etcd_server_…,
// etcd_mvcc_… and the like, often on the same dashboards.
const DefaultNamespace = "concurrency"

// WithNamespace replaces DefaultNamespace as the first part of every
// metric's name, for a process that registers metrics of its own or of
// another library under "concurrency_lock_…" (New would then fail with the
// registry's error). An empty ns leaves the names without one
// (lock_acquisitions_total). A namespace other than "" that is not a
// legacy Prometheus name (a letter or "_", then letters, digits and "_")
// makes New fail with ErrInvalidNamespace. The alerting rules and the
// dashboard in this module's directory use DefaultNamespace.
func WithNamespace(ns string) Option {
	return func(o *options) { o.namespace = ns }
}

// New creates the library's metrics and registers them with reg. It starts
// nothing; the metrics move only for sessions given concurrency.WithMetrics
// and Leads and Shards given it through concurrency.WithLeadSession and
// concurrency.WithShardSession. Nothing is ever registered
// with prometheus.DefaultRegisterer unless it is reg.
//
// It returns ErrNilRegisterer for a nil reg, ErrInvalidNamespace for an
// invalid WithNamespace, and the registry's error if a
// metric of the same name is already registered there (a second New on the
// same registry: share one Metrics instead, or wrap reg with
// prometheus.WrapRegistererWith or WithNamespace to tell them apart). On
// error nothing stays
// registered.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	if reg == nil {
		return nil, ErrNilRegisterer
	}
	o := options{namespace: DefaultNamespace}
	for _, opt := range opts {
		opt(&o)
	}
	if o.namespace != "" && !validNamespace.MatchString(o.namespace) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidNamespace, o.namespace)
	}
	lock := []string{"kind"}
	if o.nameLabel {
		lock = append(lock, "name")
	}
	ns, sub := o.namespace, "lock"
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
			Name: "holds_ended_total", Help: "Holds ended, by cause: released, lost_key_deleted, lost_lease, session_expired, max_hold, yielded, unhealthy."}, append([]string{"cause"}, lock...)),
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
	m.shardUnowned, m.shardUnownedSpans = newShardMetrics(ns)
	cs := []prometheus.Collector{m.acquisitions, m.misses, m.failures, m.wait, m.held, m.ended, m.waiters, m.holders,
		m.keepalive, m.keepaliveFailures, m.deadlineExpiries, m.leader, m.leaderChanges, m.shardUnowned, m.shardUnownedSpans}
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

// causes are the values of the label cause of
// concurrency_lock_holds_ended_total (concurrency.MetricsRecorder.HoldEnded).
var causes = []string{"released", "lost_key_deleted", "lost_lease", "session_expired", "max_hold", "yielded", "unhealthy"}

// LockCreated starts at 0 the series of a lock of kind named name (with
// WithLockNameLabel; of kind only, without): its counters, histograms,
// gauges and holds_ended_total for every cause, and for an election
// concurrency_lock_leader{name} and concurrency_lock_leader_changes_total{name},
// so that rates and alerts have a series from the first scrape on, before
// the first acquisition. It changes no value.
func (m *Metrics) LockCreated(kind, name string) {
	if m == nil {
		return
	}
	lv := m.labels(kind, name)
	m.acquisitions.WithLabelValues(lv...)
	m.misses.WithLabelValues(lv...)
	m.failures.WithLabelValues(lv...)
	m.wait.WithLabelValues(lv...)
	m.held.WithLabelValues(lv...)
	m.waiters.WithLabelValues(lv...)
	m.holders.WithLabelValues(lv...)
	for _, c := range causes {
		m.ended.WithLabelValues(append([]string{c}, lv...)...)
	}
	if kind == "election" {
		m.leader.WithLabelValues(name)
		m.leaderChanges.WithLabelValues(name)
	}
}

// WaitStarted adds one to concurrency_lock_waiters.
func (m *Metrics) WaitStarted(kind, name string) {
	if m == nil {
		return
	}
	m.waiters.WithLabelValues(m.labels(kind, name)...).Inc()
}

// WaitEnded takes one from concurrency_lock_waiters.
func (m *Metrics) WaitEnded(kind, name string) {
	if m == nil {
		return
	}
	m.waiters.WithLabelValues(m.labels(kind, name)...).Dec()
}

// Acquired counts an acquisition in concurrency_lock_acquisitions_total, observes
// its wait in concurrency_lock_wait_seconds and adds one to concurrency_lock_holders.
func (m *Metrics) Acquired(kind, name string, wait time.Duration) {
	if m == nil {
		return
	}
	lv := m.labels(kind, name)
	m.acquisitions.WithLabelValues(lv...).Inc()
	m.wait.WithLabelValues(lv...).Observe(wait.Seconds())
	m.holders.WithLabelValues(lv...).Inc()
}

// TryLockMissed counts a miss in concurrency_lock_trylock_misses_total.
func (m *Metrics) TryLockMissed(kind, name string) {
	if m == nil {
		return
	}
	m.misses.WithLabelValues(m.labels(kind, name)...).Inc()
}

// AcquireFailed counts a failure in concurrency_lock_acquire_failures_total.
func (m *Metrics) AcquireFailed(kind, name string) {
	if m == nil {
		return
	}
	m.failures.WithLabelValues(m.labels(kind, name)...).Inc()
}

// HoldEnded takes one from concurrency_lock_holders, observes the hold in
// concurrency_lock_hold_seconds and counts it in concurrency_lock_holds_ended_total by
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

// LeaderStarted adds one to concurrency_lock_leader{name} and counts a change in
// concurrency_lock_leader_changes_total{name}.
func (m *Metrics) LeaderStarted(name string) {
	if m == nil {
		return
	}
	m.leader.WithLabelValues(name).Inc()
	m.leaderChanges.WithLabelValues(name).Inc()
}

// LeaderEnded takes one from concurrency_lock_leader{name}.
func (m *Metrics) LeaderEnded(name string) {
	if m == nil {
		return
	}
	m.leader.WithLabelValues(name).Dec()
}

// KeepAlive observes a renewal's round trip in
// concurrency_lock_session_keepalive_seconds.
func (m *Metrics) KeepAlive(rtt time.Duration) {
	if m == nil {
		return
	}
	m.keepalive.Observe(rtt.Seconds())
}

// KeepAliveFailed counts a failed renewal in
// concurrency_lock_session_keepalive_failures_total.
func (m *Metrics) KeepAliveFailed() {
	if m == nil {
		return
	}
	m.keepaliveFailures.Inc()
}

// DeadlineExpired counts a session ended by its deadline in
// concurrency_lock_session_deadline_expirations_total.
func (m *Metrics) DeadlineExpired() {
	if m == nil {
		return
	}
	m.deadlineExpiries.Inc()
}
