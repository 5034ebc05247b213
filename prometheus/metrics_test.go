package concurrencyprom_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	concurrencyprom "github.com/seed-a9d410c6/concurrency/prometheus"
)

// Tests that need no etcd: the names and the series a new lock starts. The
// tests on a real etcd are in the module tests/ (metrics_test.go,
// operators_test.go).

// Every metric is named with the namespace "concurrency", never etcd's
// "etcd_" (issue 31).
func TestDefaultNamespace(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := concurrencyprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.LockCreated("election", "/e")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 13 {
		t.Errorf("%d metrics, want 13", len(mfs))
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "concurrency_lock_") {
			t.Errorf("metric %s is not in the namespace concurrency_lock_", mf.GetName())
		}
	}
}

func TestWithNamespace(t *testing.T) {
	for _, ns := range []string{"bad-ns", "9lives", "a.b", "é"} {
		reg := prometheus.NewRegistry()
		if _, err := concurrencyprom.New(reg, concurrencyprom.WithNamespace(ns)); !errors.Is(err, concurrencyprom.ErrInvalidNamespace) {
			t.Errorf("WithNamespace(%q): New = %v, want ErrInvalidNamespace", ns, err)
		}
		if mfs, _ := reg.Gather(); len(mfs) != 0 {
			t.Errorf("WithNamespace(%q): %d metrics registered after the error", ns, len(mfs))
		}
	}
	for ns, want := range map[string]string{"myapp": "myapp_lock_waiters", "": "lock_waiters"} {
		reg := prometheus.NewRegistry()
		m, err := concurrencyprom.New(reg, concurrencyprom.WithNamespace(ns))
		if err != nil {
			t.Fatalf("WithNamespace(%q): %v", ns, err)
		}
		m.WaitStarted("mutex", "/a")
		err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP `+want+` Acquisitions of this process waiting in a queue now.
# TYPE `+want+` gauge
`+want+`{kind="mutex"} 1
`), want)
		if err != nil {
			t.Errorf("WithNamespace(%q): %v", ns, err)
		}
	}
	// Two Metrics on one registry, told apart by their namespaces.
	reg := prometheus.NewRegistry()
	if _, err := concurrencyprom.New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := concurrencyprom.New(reg, concurrencyprom.WithNamespace("other")); err != nil {
		t.Errorf("a second New with another namespace: %v", err)
	}
}

// A lock's series exist from LockCreated on, at 0, before any acquisition
// (issue 31): with the label name, and without it.
func TestLockCreatedSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := concurrencyprom.New(reg, concurrencyprom.WithLockNameLabel())
	if err != nil {
		t.Fatal(err)
	}
	m.LockCreated("election", "/jobs/leader")
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP concurrency_lock_waiters Acquisitions of this process waiting in a queue now.
# TYPE concurrency_lock_waiters gauge
concurrency_lock_waiters{kind="election",name="/jobs/leader"} 0
# HELP concurrency_lock_holders Holds of this process now.
# TYPE concurrency_lock_holders gauge
concurrency_lock_holders{kind="election",name="/jobs/leader"} 0
# HELP concurrency_lock_acquisitions_total Locks, semaphore permits and leaderships acquired.
# TYPE concurrency_lock_acquisitions_total counter
concurrency_lock_acquisitions_total{kind="election",name="/jobs/leader"} 0
# HELP concurrency_lock_acquire_failures_total Acquisitions that ended without the lock: context ended, session ended, etcd error.
# TYPE concurrency_lock_acquire_failures_total counter
concurrency_lock_acquire_failures_total{kind="election",name="/jobs/leader"} 0
# HELP concurrency_lock_trylock_misses_total TryLock, TryAcquire, TryRLock calls that found the lock held.
# TYPE concurrency_lock_trylock_misses_total counter
concurrency_lock_trylock_misses_total{kind="election",name="/jobs/leader"} 0
# HELP concurrency_lock_holds_ended_total Holds ended, by cause: released, lost_key_deleted, lost_lease, session_expired, max_hold, yielded, unhealthy.
# TYPE concurrency_lock_holds_ended_total counter
concurrency_lock_holds_ended_total{cause="lost_key_deleted",kind="election",name="/jobs/leader"} 0
concurrency_lock_holds_ended_total{cause="lost_lease",kind="election",name="/jobs/leader"} 0
concurrency_lock_holds_ended_total{cause="max_hold",kind="election",name="/jobs/leader"} 0
concurrency_lock_holds_ended_total{cause="released",kind="election",name="/jobs/leader"} 0
concurrency_lock_holds_ended_total{cause="session_expired",kind="election",name="/jobs/leader"} 0
concurrency_lock_holds_ended_total{cause="unhealthy",kind="election",name="/jobs/leader"} 0
concurrency_lock_holds_ended_total{cause="yielded",kind="election",name="/jobs/leader"} 0
# HELP concurrency_lock_leader 1 while this process leads the election name, else 0.
# TYPE concurrency_lock_leader gauge
concurrency_lock_leader{name="/jobs/leader"} 0
# HELP concurrency_lock_leader_changes_total Times this process became the leader of the election name.
# TYPE concurrency_lock_leader_changes_total counter
concurrency_lock_leader_changes_total{name="/jobs/leader"} 0
`), "concurrency_lock_waiters", "concurrency_lock_holders", "concurrency_lock_acquisitions_total",
		"concurrency_lock_acquire_failures_total", "concurrency_lock_trylock_misses_total",
		"concurrency_lock_holds_ended_total", "concurrency_lock_leader", "concurrency_lock_leader_changes_total")
	if err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	histograms := 0
	for _, mf := range mfs {
		if h := mf.GetName(); h == "concurrency_lock_wait_seconds" || h == "concurrency_lock_hold_seconds" {
			if n := len(mf.GetMetric()); n != 1 || mf.GetMetric()[0].GetHistogram().GetSampleCount() != 0 {
				t.Errorf("%s: %d series, want 1 with no observation", h, n)
			}
			histograms++
		}
	}
	if histograms != 2 {
		t.Errorf("%d of the 2 histograms have series", histograms)
	}

	// Without the label name, a mutex's series are by kind, and it makes no
	// leadership series.
	reg = prometheus.NewRegistry()
	m, err = concurrencyprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.LockCreated("mutex", "/a")
	m.LockCreated("mutex", "/b")
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP concurrency_lock_waiters Acquisitions of this process waiting in a queue now.
# TYPE concurrency_lock_waiters gauge
concurrency_lock_waiters{kind="mutex"} 0
`), "concurrency_lock_waiters", "concurrency_lock_leader")
	if err != nil {
		t.Error(err)
	}
}
