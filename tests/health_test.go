package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdproc"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// These tests cover WithHealthCheck: a session whose checks fail a number
// of times in a row ends and revokes its lease, so every hold on it ends.

// healthInterval is the check interval of these tests.
const healthInterval = 100 * time.Millisecond

// scripted is a health check whose results the test gives one at a time:
// each call says that it began (called), then takes its result from
// results, or passes if none comes in time (the test was busy: setting up
// takes longer than an interval on a loaded machine). So the test knows
// how many calls were made, and that each earlier one was counted (the
// next begins only after).
type scripted struct{ began, results chan error }

func newScripted() *scripted { return &scripted{began: make(chan error), results: make(chan error)} }

func (s *scripted) check(ctx context.Context) error {
	// Return just before the context ends, so that the pass counts.
	d, _ := ctx.Deadline()
	wait, cancel := context.WithDeadline(ctx, d.Add(-200*time.Millisecond))
	defer cancel()
	select {
	case s.began <- nil:
	case <-wait.Done():
		return nil
	}
	select {
	case err := <-s.results:
		return err
	case <-wait.Done():
		return nil
	}
}

// called waits for the next call to begin, or fails the test if none
// does within 10 s.
func (s *scripted) called(t *testing.T) {
	t.Helper()
	select {
	case <-s.began:
	case <-time.After(10 * time.Second):
		t.Fatal("no health check called within 10 s")
	}
}

// next waits for the next call and hands it its result.
func (s *scripted) next(t *testing.T, err error) {
	t.Helper()
	s.called(t)
	s.results <- err
}

var errSick = errors.New("sick")

// Failures in a row up to the limit end the session: every hold on it
// ends with ErrUnhealthy, the lease is revoked so that a waiter elsewhere
// is granted at once, and the metrics count the holds as "unhealthy". A
// success in between resets the count.
func TestHealthFailuresEndSession(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	metrics, reg := newMetrics(t)
	h := newScripted()
	// Two seconds per check: time enough to look at etcd while a call
	// waits for its result.
	s := newSession(t, c, concurrency.WithMetrics(metrics), concurrency.WithHealthCheck(2*time.Second, 3, h.check))
	m := concurrency.NewMutex(s, pfx+"/m")
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	sem := concurrency.NewSemaphore(s, pfx+"/s", 2)
	if err := sem.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	mctx, sctx := m.Ctx(), sem.Ctx()
	ws := newSession(t, sharedClient(t))
	wm := concurrency.NewMutex(ws, pfx+"/m")
	errc := async(t, func() error { return wm.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx+"/m", 2)

	// Two failures, a success, then failures: the success resets the
	// count. Inspect shows the failures while they last.
	health := func() *concurrency.Health {
		q, err := concurrency.Inspect(t.Context(), c, pfx+"/m")
		if err != nil {
			t.Fatal(err)
		}
		return q.Keys[0].Health
	}
	h.next(t, errSick)
	h.next(t, errSick)
	h.called(t) // the second failure was counted; this call waits
	var hl *concurrency.Health
	etcdtest.Eventually(t, time.Second, func() bool {
		hl = health()
		return hl != nil && hl.Failures == 2 && hl.Limit == 3 && hl.Err == errSick.Error()
	}, "Inspect shows health %+v, want 2 failures of 3: sick", hl)
	h.results <- nil
	h.next(t, errSick)
	h.next(t, errSick)
	h.called(t)
	if s.Ctx().Err() != nil || mctx.Err() != nil {
		t.Fatalf("session ended without three failures in a row: %v", context.Cause(s.Ctx()))
	}
	etcdtest.Eventually(t, time.Second, func() bool {
		hl = health()
		return hl != nil && hl.Failures == 2
	}, "Inspect shows health %+v after a success and two failures, want 2 failures", hl)
	h.results <- errSick
	ended := time.Now()
	select {
	case <-mctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("hold alive 5 s after the third failure in a row")
	}
	// The holds' contexts and the session's are children of the session's
	// life, which Go cancels one after another: each must end, within the
	// same bound, and with the cause.
	for _, hctx := range []context.Context{mctx, sctx, s.Ctx()} {
		select {
		case <-hctx.Done():
		case <-time.After(time.Until(ended.Add(5 * time.Second))):
			t.Fatal("a hold or the session alive 5 s after the third failure in a row")
		}
		cause := context.Cause(hctx)
		if !errors.Is(cause, concurrency.ErrUnhealthy) || !errors.Is(cause, concurrency.ErrSessionExpired) || !errors.Is(cause, errSick) {
			t.Fatalf("cause = %v, want ErrUnhealthy, ErrSessionExpired and the check's error", cause)
		}
	}
	if err := within(t, 10*time.Second, errc, "waiter"); err != nil {
		t.Fatal(err)
	}
	t.Logf("waiter granted %v after the third failure", time.Since(ended))
	r, err := c.TimeToLive(t.Context(), s.Lease())
	if err != nil || r.TTL != -1 {
		t.Fatalf("the unhealthy session's lease: %v %v, want it revoked", r, err)
	}
	eventually(t, reg, "concurrency_lock_holds_ended_total", map[string]string{"kind": "mutex", "cause": "unhealthy"}, func(v float64) bool { return v == 1 })
	eventually(t, reg, "concurrency_lock_holds_ended_total", map[string]string{"kind": "semaphore", "cause": "unhealthy"}, func(v float64) bool { return v == 1 })
	if err := wm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A stuck process: the check does not return, even past its context. Each
// interval it is still running counts as a failure, so the session ends
// all the same; Close then waits for the check.
func TestHealthStuckCheck(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	release := make(chan struct{})
	stuck := func(context.Context) error { <-release; return nil }
	s, err := concurrency.NewSession(c, concurrency.WithHealthCheck(healthInterval, 3, stuck))
	if err != nil {
		t.Fatal(err)
	}
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hctx := m.Ctx()
	select {
	case <-hctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("hold alive 10 s after its health check got stuck")
	}
	if cause := context.Cause(hctx); !errors.Is(cause, concurrency.ErrUnhealthy) || !errors.Is(cause, context.DeadlineExceeded) {
		t.Fatalf("cause = %v, want ErrUnhealthy and DeadlineExceeded", cause)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
	// A check that ignores its context does not hang Close: it waits 1 s
	// for it, then leaves it to its goroutine.
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
		t.Logf("Close returned after %v", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits 10 s later for a check that ignores its context")
	}
	close(release)
}

// The fault: the holder's only connection goes silent and the check fails
// with it (a check that needs etcd, or a process cut off). The session
// ends by its checks, before its conservative deadline; the revoke cannot
// reach etcd, so the lease expires after its TTL and a waiter elsewhere
// is granted then.
func TestHealthCutOffHolder(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	p, err := etcdproc.NewProxy(etcdtest.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	hc := etcdtest.NewClient(t, []string{p.URL()})
	check := func(ctx context.Context) error {
		_, err := hc.Get(ctx, "health-probe", clientv3.WithSerializable())
		return err
	}
	hs := newSession(t, hc, concurrency.WithTTL(5), concurrency.WithHealthCheck(300*time.Millisecond, 2, check))
	t.Cleanup(p.Heal) // before the session's Close
	m := concurrency.NewMutex(hs, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hctx := m.Ctx()
	wm := concurrency.NewMutex(newSession(t, c), pfx)
	errc := async(t, func() error { return wm.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 2)
	p.Blackhole()
	cut := time.Now()
	select {
	case <-hctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("hold alive 10 s after the cut")
	}
	if cause := context.Cause(hctx); !errors.Is(cause, concurrency.ErrUnhealthy) {
		t.Fatalf("cause = %v, want ErrUnhealthy (the checks end the session before its deadline)", cause)
	}
	t.Logf("hold ended %v after the cut", time.Since(cut))
	if err := within(t, 20*time.Second, errc, "waiter"); err != nil {
		t.Fatal(err)
	}
	t.Logf("waiter granted %v after the cut (TTL 5 s)", time.Since(cut))
	if err := wm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Lead with WithLeadHealthCheck: failing checks end the term, the
// follower is elected at once, and the first Lead campaigns again.
func TestHealthLead(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	var sick atomic.Bool
	check := func(context.Context) error {
		if sick.Load() {
			return errSick
		}
		return nil
	}
	started := make(chan *term, 4)
	cancelA, errA := goLead(t, c, pfx, "a", blockUntilDone("a", started), concurrency.WithLeadTTL(10),
		concurrency.WithLeadHealthCheck(time.Second, 2, check))
	a := nextTerm(t, started, 10*time.Second, "first Lead")
	cancelB, errB := goLead(t, c, pfx, "b", blockUntilDone("b", started), concurrency.WithLeadTTL(10))
	etcdtest.WaitKeys(t, c, pfx, 2)
	sick.Store(true)
	b := nextTerm(t, started, 10*time.Second, "second Lead after the failed checks")
	sick.Store(false) // the next term's session is checked afresh
	if b.val != "b" {
		t.Fatalf("%q leads after the failed checks, want b", b.val)
	}
	if cause := context.Cause(a.ctx); !errors.Is(cause, concurrency.ErrUnhealthy) {
		t.Fatalf("first term's cause = %v, want ErrUnhealthy", cause)
	}
	// Lead campaigns again, on a new session whose checks run afresh.
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		kvs := etcdtest.Keys(t, c, pfx)
		return len(kvs) == 2 && string(kvs[1].Value) == "a"
	}, "first Lead campaigning again")
	cancelB()
	if err := within(t, 5*time.Second, errB, "second Lead"); !errors.Is(err, context.Canceled) {
		t.Fatalf("second Lead = %v", err)
	}
	if a2 := nextTerm(t, started, 10*time.Second, "first Lead's second term"); a2.val != "a" {
		t.Fatalf("second term %q, want a", a2.val)
	}
	cancelA()
	if err := within(t, 5*time.Second, errA, "first Lead"); !errors.Is(err, context.Canceled) {
		t.Fatalf("first Lead = %v", err)
	}
}

// Bad options are refused before a lease is granted.
func TestHealthInvalid(t *testing.T) {
	etcdtest.Begin(t)
	c := sharedClient(t)
	ok := func(context.Context) error { return nil }
	for _, opt := range []concurrency.SessionOption{
		concurrency.WithHealthCheck(0, 3, ok),
		concurrency.WithHealthCheck(-time.Second, 3, ok),
		concurrency.WithHealthCheck(time.Second, 0, ok),
		concurrency.WithHealthCheck(time.Second, 3, nil),
	} {
		s, err := concurrency.NewSession(c, opt)
		if !errors.Is(err, concurrency.ErrInvalidHealthCheck) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("NewSession = %v, want ErrInvalidHealthCheck", err)
		}
	}
}

// blockingCheck is a health check that counts its calls and, if block,
// waits until its context ends (a failure); else it passes at once.
type blockingCheck struct {
	calls atomic.Int64
	block bool
}

func (b *blockingCheck) check(ctx context.Context) error {
	b.calls.Add(1)
	if !b.block {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// healthGoroutines lists the goroutines running the health code of the
// sessions (a session's health goroutine, a call of blockingCheck). Tests
// of this module do not run in parallel, so any listed belong to the
// calling test.
func healthGoroutines() []string {
	buf := make([]byte, 1<<22)
	var found []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "(*Session).checkHealth") || strings.Contains(g, "(*blockingCheck).check") {
			found = append(found, g)
		}
	}
	return found
}

// noHealthGoroutines fails the test if health goroutines are still
// running 5 s from now.
func noHealthGoroutines(t *testing.T, when string) {
	t.Helper()
	left := healthGoroutines()
	for deadline := time.Now().Add(5 * time.Second); len(left) != 0 && time.Now().Before(deadline); left = healthGoroutines() {
		time.Sleep(5 * time.Millisecond)
	}
	if len(left) != 0 {
		t.Fatalf("%s: %d health goroutines left for 5 s:\n%s", when, len(left), strings.Join(left, "\n\n"))
	}
}

// Close ends the session's health goroutine and a check call in flight
// that returns when its context ends: none is left running once Close has
// returned (a call's own goroutine may take a moment more to exit after
// it returns). Checked for a session closed with its first call in
// flight, with a later call in flight after a failure, between calls
// that pass, and after its checks ended it.
func TestHealthCloseLeavesNoGoroutine(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	noHealthGoroutines(t, "before the test (an earlier test's check still returning)")
	for i, tc := range []struct {
		name     string
		block    bool
		failures int
		calls    int  // calls begun before Close
		ended    bool // the checks end the session first
	}{
		{"first call in flight", true, 1000, 1, false},
		{"later call in flight", true, 1000, 2, false},
		// 1000 failures, not 1: a passing call that a loaded machine
		// does not schedule within the interval counts as failed, and
		// ended the session under -race in CI (a bound on the machine).
		{"between passing calls", false, 1000, 3, false},
		{"ended by its checks", true, 1, 1, true},
	} {
		b := &blockingCheck{block: tc.block}
		s, err := concurrency.NewSession(c, concurrency.WithHealthCheck(healthInterval, tc.failures, b.check))
		if err != nil {
			t.Fatal(err)
		}
		m := concurrency.NewMutex(s, fmt.Sprintf("%s/%d", pfx, i))
		if err := m.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		_ = m.Ctx()
		for deadline := time.Now().Add(10 * time.Second); b.calls.Load() < int64(tc.calls); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d health checks begun in 10 s, want %d (session ended: %v)", tc.name, b.calls.Load(), tc.calls, context.Cause(s.Ctx()))
			}
		}
		if tc.ended {
			select {
			case <-s.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: session alive 10 s after its only allowed check failed", tc.name)
			}
		}
		if err := s.Close(); err != nil && !tc.ended {
			t.Fatalf("%s: Close: %v", tc.name, err)
		}
		noHealthGoroutines(t, tc.name+": after Close")
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}
