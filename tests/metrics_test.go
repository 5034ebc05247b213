package concurrency_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	concurrencyprom "github.com/seed-a9d410c6/concurrency/prometheus"
)

// newMetrics returns metrics registered on a fresh registry.
func newMetrics(t testing.TB, opts ...concurrencyprom.Option) (*concurrencyprom.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := concurrencyprom.New(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// sample is the value of the series of name whose labels include want: a
// counter's or gauge's value, a histogram's count; 0 if there is none.
func sample(t testing.TB, reg prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
			switch {
			case m.Counter != nil:
				v += m.Counter.GetValue()
			case m.Gauge != nil:
				v += m.Gauge.GetValue()
			case m.Histogram != nil:
				v += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return v
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// expect fails the test unless the sample is want.
func expect(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	if got := sample(t, reg, name, labels); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// eventually polls the registry until the sample is want, for at most 10 s:
// for what the package records from a goroutine of its own (a hold ended
// by its session, a renewal).
func eventually(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string, want func(float64) bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		v := sample(t, reg, name, labels)
		if want(v) {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s%v = %v after 10 s", name, labels, v)
		}
	}
}

func kind(k string) map[string]string { return map[string]string{"kind": k} }

func TestMetricsMutexAcquisitions(t *testing.T) {
	pfx := etcdtest.Begin(t)
	metrics, reg := newMetrics(t)
	s := newSession(t, sharedClient(t), concurrency.WithMetrics(metrics))
	m := concurrency.NewMutex(s, pfx)
	const n = 5
	for range n {
		if err := m.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		expect(t, reg, "concurrency_lock_holders", kind("mutex"), 1)
		if err := m.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, reg, "concurrency_lock_acquisitions_total", kind("mutex"), n)
	expect(t, reg, "concurrency_lock_wait_seconds", kind("mutex"), n)
	expect(t, reg, "concurrency_lock_hold_seconds", kind("mutex"), n)
	expect(t, reg, "concurrency_lock_holds_ended_total", map[string]string{"kind": "mutex", "cause": "released"}, n)
	expect(t, reg, "concurrency_lock_holders", kind("mutex"), 0)
	expect(t, reg, "concurrency_lock_waiters", kind("mutex"), 0)
	expect(t, reg, "concurrency_lock_acquire_failures_total", kind("mutex"), 0)
}

// A waiter is counted while it waits, and its wait is in the histogram.
func TestMetricsContendedWait(t *testing.T) {
	pfx := etcdtest.Begin(t)
	metrics, reg := newMetrics(t, concurrencyprom.WithLockNameLabel())
	c := sharedClient(t)
	m1 := concurrency.NewMutex(newSession(t, c, concurrency.WithMetrics(metrics)), pfx)
	m2 := concurrency.NewMutex(newSession(t, c, concurrency.WithMetrics(metrics)), pfx)
	if err := m1.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m2.Lock(t.Context()) }()
	labels := map[string]string{"kind": "mutex", "name": pfx}
	eventually(t, reg, "concurrency_lock_waiters", labels, func(v float64) bool { return v == 1 })
	if err := m1.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	expect(t, reg, "concurrency_lock_waiters", labels, 0)
	expect(t, reg, "concurrency_lock_acquisitions_total", labels, 2)
	expect(t, reg, "concurrency_lock_wait_seconds", labels, 2)
	expect(t, reg, "concurrency_lock_holders", labels, 1)
	if err := m2.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}

	// A waiter that gives up is a failure, not an acquisition.
	if err := m1.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	go func() { done <- m2.Lock(ctx) }()
	eventually(t, reg, "concurrency_lock_waiters", labels, func(v float64) bool { return v == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock = %v, want context.Canceled", err)
	}
	m1.Unlock(t.Context())
	expect(t, reg, "concurrency_lock_acquire_failures_total", labels, 1)
	expect(t, reg, "concurrency_lock_acquisitions_total", labels, 3)
	expect(t, reg, "concurrency_lock_waiters", labels, 0)
}

func TestMetricsTryLockMisses(t *testing.T) {
	pfx := etcdtest.Begin(t)
	metrics, reg := newMetrics(t)
	c := sharedClient(t)
	m1 := concurrency.NewMutex(newSession(t, c, concurrency.WithMetrics(metrics)), pfx)
	m2 := concurrency.NewMutex(newSession(t, c, concurrency.WithMetrics(metrics)), pfx)
	if err := m1.TryLock(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Held by another session: a miss after a round trip.
	if err := m2.TryLock(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock = %v, want ErrLocked", err)
	}
	// Held by this Mutex: a miss without one.
	if err := m1.TryLock(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock = %v, want ErrLocked", err)
	}
	expect(t, reg, "concurrency_lock_trylock_misses_total", kind("mutex"), 2)
	expect(t, reg, "concurrency_lock_acquisitions_total", kind("mutex"), 1)
	expect(t, reg, "concurrency_lock_wait_seconds", kind("mutex"), 1)
	m1.Unlock(t.Context())
}

// A hold whose key is deleted, and one whose lease is revoked, are counted
// as lost with their causes.
func TestMetricsLostHolds(t *testing.T) {
	pfx := etcdtest.Begin(t)
	metrics, reg := newMetrics(t)
	c := sharedClient(t)

	s1 := newSession(t, c, concurrency.WithMetrics(metrics))
	m1 := concurrency.NewMutex(s1, pfx+"/deleted")
	if err := m1.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hold := m1.Ctx()
	if _, err := c.Delete(t.Context(), m1.Key()); err != nil {
		t.Fatal(err)
	}
	<-hold.Done()
	if cause := context.Cause(hold); !errors.Is(cause, concurrency.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	expect(t, reg, "concurrency_lock_holds_ended_total", map[string]string{"kind": "mutex", "cause": "lost_key_deleted"}, 1)
	expect(t, reg, "concurrency_lock_holders", kind("mutex"), 0)
	// The loss has the session renew at once.
	eventually(t, reg, "concurrency_lock_session_keepalive_seconds", nil, func(v float64) bool { return v >= 1 })
	// Unlock after the loss reports it and counts nothing more.
	if err := m1.Unlock(t.Context()); err != nil && !errors.Is(err, concurrency.ErrLockReleased) {
		t.Fatal(err)
	}
	expect(t, reg, "concurrency_lock_holds_ended_total", nil, 1)

	s2 := newSession(t, c, concurrency.WithMetrics(metrics))
	m2 := concurrency.NewMutex(s2, pfx+"/revoked")
	if err := m2.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hold = m2.Ctx()
	if _, err := c.Revoke(t.Context(), s2.Lease()); err != nil {
		t.Fatal(err)
	}
	<-hold.Done()
	if cause := context.Cause(hold); !errors.Is(cause, concurrency.ErrLockLost) && !errors.Is(cause, concurrency.ErrSessionExpired) {
		t.Fatalf("cause = %v", cause)
	}
	// Whichever saw it first, the watch or the session, it is the lease.
	eventually(t, reg, "concurrency_lock_holds_ended_total", map[string]string{"kind": "mutex", "cause": "lost_lease"}, func(v float64) bool { return v == 1 })
	expect(t, reg, "concurrency_lock_holders", kind("mutex"), 0)
	expect(t, reg, "concurrency_lock_hold_seconds", kind("mutex"), 2)
}

func TestMetricsKinds(t *testing.T) {
	pfx := etcdtest.Begin(t)
	metrics, reg := newMetrics(t)
	s := newSession(t, sharedClient(t), concurrency.WithMetrics(metrics))
	ctx := t.Context()

	sem := concurrency.NewSemaphore(s, pfx+"/sem", 2)
	if err := sem.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	sem.Release(ctx)
	rw := concurrency.NewRWMutex(s, pfx+"/rw")
	if err := rw.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	rw.RUnlock(ctx)
	if err := rw.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	rw.Unlock(ctx)
	e := concurrency.NewElection(s, pfx+"/elect")
	if err := e.Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	e.Resign(ctx)
	for _, k := range []string{"semaphore", "rwmutex_read", "rwmutex_write", "election"} {
		expect(t, reg, "concurrency_lock_acquisitions_total", kind(k), 1)
		expect(t, reg, "concurrency_lock_holds_ended_total", map[string]string{"kind": k, "cause": "released"}, 1)
	}
}

func TestMetricsLeader(t *testing.T) {
	pfx := etcdtest.Begin(t)
	metrics, reg := newMetrics(t)
	s := newSession(t, sharedClient(t), concurrency.WithMetrics(metrics))
	e := concurrency.NewElection(s, pfx)
	name := map[string]string{"name": pfx}
	if err := e.Campaign(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	expect(t, reg, "concurrency_lock_leader", name, 1)
	expect(t, reg, "concurrency_lock_leader_changes_total", name, 1)
	if err := e.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	expect(t, reg, "concurrency_lock_leader", name, 0)
}

func TestMetricsLead(t *testing.T) {
	pfx := etcdtest.Begin(t)
	metrics, reg := newMetrics(t)
	name := map[string]string{"name": pfx}
	var leading float64
	err := concurrency.Lead(t.Context(), sharedClient(t), pfx, "v", func(ctx context.Context, e *concurrency.Election) error {
		leading = sample(t, reg, "concurrency_lock_leader", name)
		return nil
	}, concurrency.WithLeadTTL(5), concurrency.WithLeadMetrics(metrics))
	if err != nil {
		t.Fatal(err)
	}
	if leading != 1 {
		t.Errorf("concurrency_lock_leader = %v while leading, want 1", leading)
	}
	expect(t, reg, "concurrency_lock_leader", name, 0)
	expect(t, reg, "concurrency_lock_leader_changes_total", name, 1)
}

// Without WithMetrics nothing is registered anywhere, and with or without,
// the package runs no goroutine of its own for metrics or traces.
func TestMetricsOff(t *testing.T) {
	pfx := etcdtest.Begin(t)
	before, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if _, err := concurrencyprom.New(nil); !errors.Is(err, concurrencyprom.ErrNilRegisterer) {
		t.Fatalf("New(nil) = %v, want ErrNilRegisterer", err)
	}
	metrics, err := concurrencyprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := concurrencyprom.New(reg); err == nil {
		t.Fatal("a second New on the same registry succeeded")
	}
	c := sharedClient(t)
	off := concurrency.NewMutex(newSession(t, c), pfx+"/off")
	on := concurrency.NewMutex(newSession(t, c, concurrency.WithMetrics(metrics),
		concurrency.WithTracerProvider(sdktrace.NewTracerProvider())), pfx+"/on")
	for _, m := range []*concurrency.Mutex{off, on} {
		if err := m.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		m.Ctx()
	}
	buf := make([]byte, 1<<22)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, file := range []string{"concurrency/metrics.go", "concurrency/trace.go", "concurrency/prometheus/metrics.go"} {
		if strings.Contains(stacks, file) {
			t.Errorf("a goroutine runs in %s", file)
		}
	}
	for _, m := range []*concurrency.Mutex{off, on} {
		m.Unlock(t.Context())
	}
	// Only the session with metrics counted.
	expect(t, reg, "concurrency_lock_acquisitions_total", nil, 1)
	after, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if names(after) != names(before) {
		t.Errorf("the default registry changed:\nbefore %s\nafter  %s", names(before), names(after))
	}
}

// A nil *concurrencyprom.Metrics given to WithMetrics (as a program that
// creates its metrics only when asked may do) records nothing and breaks
// nothing: a lock, a TryLock miss and an election run as without metrics.
func TestMetricsNilPrometheus(t *testing.T) {
	pfx := etcdtest.Begin(t)
	var metrics *concurrencyprom.Metrics
	c := sharedClient(t)
	s1 := newSession(t, c, concurrency.WithMetrics(metrics))
	s2 := newSession(t, c, concurrency.WithMetrics(metrics))
	m1, m2 := concurrency.NewMutex(s1, pfx+"/m"), concurrency.NewMutex(s2, pfx+"/m")
	if err := m1.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := m2.TryLock(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock = %v, want ErrLocked", err)
	}
	if err := m1.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	e := concurrency.NewElection(s1, pfx+"/e")
	if err := e.Campaign(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if err := e.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func names(mfs []*dto.MetricFamily) string {
	var b strings.Builder
	for _, mf := range mfs {
		b.WriteString(mf.GetName())
		b.WriteByte(' ')
	}
	return b.String()
}

// attr is the name of the span attribute a, in the module's namespace
// (issue 31: "concurrency." alone is generic enough to collide).
func attr(a string) string { return "seed_a9d410c6.concurrency." + a }

// spanAttrs are the attributes of a span, as strings.
func spanAttrs(sp sdktrace.ReadOnlySpan) map[string]string {
	got := map[string]string{}
	for _, kv := range sp.Attributes() {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	return got
}

// A session with a tracer provider records a span per acquisition, with
// the queue position and token, one per hold and one per release, with the
// lock's name.
func TestTraceSpans(t *testing.T) {
	pfx := etcdtest.Begin(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c := sharedClient(t)
	m1 := concurrency.NewMutex(newSession(t, c, concurrency.WithTracerProvider(tp)), pfx)
	m2 := concurrency.NewMutex(newSession(t, c, concurrency.WithTracerProvider(tp)), pfx)
	if err := m1.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := m2.TryLock(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock = %v", err)
	}
	token, key := m1.Token(), m1.Key()
	if err := m1.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}

	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4 (acquire, acquire, hold, release)", len(spans))
	}
	want := []struct {
		name  string
		attrs map[string]string
	}{
		{"concurrency.acquire", map[string]string{attr("kind"): "mutex", attr("lock"): pfx, attr("outcome"): "acquired", attr("queue.ahead"): "0", attr("wait"): "true"}},
		{"concurrency.acquire", map[string]string{attr("lock"): pfx, attr("outcome"): "locked", attr("queue.ahead"): "1", attr("wait"): "false"}},
		{"concurrency.hold", map[string]string{attr("kind"): "mutex", attr("lock"): pfx, attr("key"): key, attr("outcome"): "released"}},
		{"concurrency.release", map[string]string{attr("kind"): "mutex", attr("lock"): pfx, attr("key"): key, attr("outcome"): "released"}},
	}
	for i, w := range want {
		sp := spans[i]
		if sp.Name() != w.name {
			t.Errorf("span %d is %s, want %s", i, sp.Name(), w.name)
		}
		got := spanAttrs(sp)
		for k, v := range w.attrs {
			if got[k] != v {
				t.Errorf("span %d %s: %s = %q, want %q (all: %v)", i, sp.Name(), k, got[k], v, got)
			}
		}
		if i != 1 && got[attr("token")] != itoa(token) {
			t.Errorf("span %d: token %q, want %d", i, got[attr("token")], token)
		}
		for k := range got {
			if !strings.HasPrefix(k, attr("")) {
				t.Errorf("span %d %s: attribute %s is not in the module's namespace", i, sp.Name(), k)
			}
		}
	}
	// The hold lasts from the grant to the release, beside the acquisition.
	if hold, acq := spans[2], spans[0]; !hold.Parent().Equal(acq.Parent()) || hold.StartTime().Before(acq.StartTime()) {
		t.Errorf("hold span: parent %v, start %v; acquire span: parent %v, start %v", hold.Parent(), hold.StartTime(), acq.Parent(), acq.StartTime())
	}

	// The release span of the read side of an RWMutex names the lock too.
	rw := concurrency.NewRWMutex(newSession(t, c, concurrency.WithTracerProvider(tp)), pfx+"/rw")
	if err := rw.RLock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := rw.RUnlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans = rec.Ended()
	last := spans[len(spans)-1]
	if got := spanAttrs(last); last.Name() != "concurrency.release" || got[attr("lock")] != pfx+"/rw" || got[attr("kind")] != "rwmutex_read" {
		t.Errorf("RUnlock: span %s %v, want concurrency.release of lock %s/rw", last.Name(), got, pfx)
	}
}

// Each term of Lead has a span, the parent of fn's spans, with the
// election's name, the term's token, and how it ended; the leadership's
// hold has its own.
func TestTraceLeadTerm(t *testing.T) {
	pfx := etcdtest.Begin(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var rev int64
	var fnSpan trace.SpanContext
	err := concurrency.Lead(t.Context(), sharedClient(t), pfx, "v", func(ctx context.Context, e *concurrency.Election) error {
		rev = e.Rev()
		fnSpan = trace.SpanContextFromContext(ctx)
		return nil
	}, concurrency.WithLeadTTL(5), concurrency.WithLeadTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	var term, hold sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		switch sp.Name() {
		case "concurrency.lead.term":
			term = sp
		case "concurrency.hold":
			hold = sp
		}
	}
	if term == nil || hold == nil {
		t.Fatalf("spans %v: want a concurrency.lead.term and a concurrency.hold", rec.Ended())
	}
	got := spanAttrs(term)
	if got[attr("lock")] != pfx || got[attr("token")] != itoa(rev) || got[attr("outcome")] != "returned" {
		t.Errorf("term span attributes %v, want lock %s, token %d, outcome returned", got, pfx, rev)
	}
	if fnSpan.SpanID() != term.SpanContext().SpanID() {
		t.Errorf("fn's context carries span %v, not the term's %v", fnSpan.SpanID(), term.SpanContext().SpanID())
	}
	if got := spanAttrs(hold); got[attr("kind")] != "election" || got[attr("outcome")] != "released" || got[attr("token")] != itoa(rev) {
		t.Errorf("hold span attributes %v, want an election's, released, token %d", got, rev)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A session that cannot renew ends by its conservative deadline, and says
// so; its hold ends as session_expired.
func TestMetricsDeadline(t *testing.T) {
	etcdtest.Begin(t)
	clus := bridgeCluster(t)
	metrics, reg := newMetrics(t)
	cli := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	s := newSession(t, cli, concurrency.WithTTL(3), concurrency.WithMetrics(metrics))
	m := concurrency.NewMutex(s, "/metrics-deadline")
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	clus.Members[0].Bridge().Blackhole()
	defer clus.Members[0].Bridge().Unblackhole()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("session did not end within 10 s")
	}
	expect(t, reg, "concurrency_lock_session_deadline_expirations_total", nil, 1)
	if v := sample(t, reg, "concurrency_lock_session_keepalive_failures_total", nil); v < 1 {
		t.Errorf("keepalive failures = %v, want at least 1", v)
	}
	eventually(t, reg, "concurrency_lock_holds_ended_total", map[string]string{"kind": "mutex", "cause": "session_expired"}, func(v float64) bool { return v == 1 })
}

// exists reports whether the registry has a series of name whose labels
// include want, whatever its value.
func exists(t testing.TB, reg prometheus.Gatherer, name string, want map[string]string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, want) {
				return true
			}
		}
	}
	return false
}

// Issue 31: a lock's series exist at 0 from its creation, so that rates and
// alerts work from the first scrape: before any acquisition, and the
// waiters of a lock that was held without waiting.
func TestMetricsSeriesFromStart(t *testing.T) {
	pfx := etcdtest.Begin(t)
	metrics, reg := newMetrics(t, concurrencyprom.WithLockNameLabel())
	s := newSession(t, sharedClient(t), concurrency.WithMetrics(metrics))
	m := concurrency.NewMutex(s, pfx+"/m")
	concurrency.NewSemaphore(s, pfx+"/s", 2)
	concurrency.NewRWMutex(s, pfx+"/rw")
	concurrency.NewElection(s, pfx+"/e")
	// Invalid locks make no series.
	concurrency.NewMutex(s, "")
	concurrency.NewMutex(nil, pfx+"/nil")

	for _, l := range []map[string]string{
		{"kind": "mutex", "name": pfx + "/m"},
		{"kind": "semaphore", "name": pfx + "/s"},
		{"kind": "rwmutex_read", "name": pfx + "/rw"},
		{"kind": "rwmutex_write", "name": pfx + "/rw"},
		{"kind": "election", "name": pfx + "/e"},
	} {
		for _, name := range []string{"concurrency_lock_acquisitions_total", "concurrency_lock_acquire_failures_total",
			"concurrency_lock_trylock_misses_total", "concurrency_lock_wait_seconds", "concurrency_lock_hold_seconds",
			"concurrency_lock_waiters", "concurrency_lock_holders"} {
			if !exists(t, reg, name, l) {
				t.Errorf("no series %s%v before any acquisition", name, l)
			}
			expect(t, reg, name, l, 0)
		}
		for _, cause := range []string{"released", "lost_key_deleted", "lost_lease", "session_expired", "max_hold", "yielded", "unhealthy"} {
			lc := map[string]string{"kind": l["kind"], "name": l["name"], "cause": cause}
			if !exists(t, reg, "concurrency_lock_holds_ended_total", lc) {
				t.Errorf("no series concurrency_lock_holds_ended_total%v before any acquisition", lc)
			}
		}
	}
	e := map[string]string{"name": pfx + "/e"}
	for _, name := range []string{"concurrency_lock_leader", "concurrency_lock_leader_changes_total"} {
		if !exists(t, reg, name, e) {
			t.Errorf("no series %s%v before any campaign", name, e)
		}
		expect(t, reg, name, e, 0)
	}
	// One holders series per valid lock and kind: none for the invalid ones.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "concurrency_lock_holders" && len(mf.GetMetric()) != 5 {
			t.Errorf("%d holders series, want 5 (no series for an empty name or a nil session)", len(mf.GetMetric()))
		}
	}

	// A holder that never waited has its waiters series, at 0.
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	l := map[string]string{"kind": "mutex", "name": pfx + "/m"}
	if !exists(t, reg, "concurrency_lock_waiters", l) {
		t.Error("no waiters series after an acquisition without a wait")
	}
	expect(t, reg, "concurrency_lock_acquisitions_total", l, 1)
}
