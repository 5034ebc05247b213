package concurrency

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// This file holds what Lead reports of itself and of the election, for
// operators and callers: LeaderInfo and LeaderStatus.

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
