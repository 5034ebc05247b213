package faults_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

// The functions of the barrier workloads' histories, as in faults/worker.
const (
	fBHold    = "bhold"
	fBRelease = "brelease"
	fBWait    = "bwait"
	fDBEnter  = "dbenter"
	fDBLeave  = "dbleave"
	fDBRound  = "dbround"
	fLStart   = "lstart"
	fLCount   = "lcount"
	fLWait    = "lwait"
)

// leaseGone is the reason the worker gives for a dbarrier round whose
// lease etcd no longer had while the session's deadline was ahead (its
// roundLeaseGone).
const leaseGone = "lease gone before the deadline"

// barrierWorkload reports whether wl is one of the barrier workloads.
func barrierWorkload(wl string) bool { return wl == "barrier" || wl == "dbarrier" || wl == "latch" }

// checkBarriers checks the rounds of a barrier workload (barrier,
// dbarrier, latch), each on its own key:
//   - none released early: no Barrier.Wait returned before the Release
//     of its round was called, no CountDownLatch.Wait before the last
//     CountDown was called, no DoubleBarrier.Enter before the last
//     entrant called Enter, and, in a round whose session lived
//     throughout, no Leave before the last entrant called Leave;
//   - none released late: when a Barrier's Release or a latch's last
//     CountDown returned inside a half-open window (see checkLiveness),
//     every Wait called before it returned within the bound.
//
// Times are the workers' own, on one machine's clock: a call that
// returned before another was called did not see its effect.
//
// It returns, for the dbarrier workload, how many rounds whose every
// entrant called Leave were not checked for an early Leave, by why their
// session may not have lived throughout (the worker's livedThroughout):
// its Ctx had ended, its deadline had passed, etcd no longer had its
// lease though the deadline was ahead, or the lease could not be read;
// and, under each reason with ", with a Leave before the last was
// called", how many of those rounds the check would have failed. A round
// whose lease etcd no longer had is also counted under the kind of the
// last fault injected before it ended (lastFault), which tells an etcd
// that ended the lease early after a leader change from a deadline of
// this package's that was not conservative.
func checkBarriers(rep *hc.Report, wl string, ops []hc.Op, inWindow func(time.Time) bool, bound time.Duration, lastFault func(time.Time) string) (unchecked map[string]int) {
	unchecked = map[string]int{}
	type call struct{ invoke, done hc.Op }
	rounds := map[string]map[string][]*call{} // round -> function -> calls
	open := map[string]*call{}                // by client: the call in flight
	for _, op := range ops {
		if op.Type == hc.Invoke {
			c := &call{invoke: op}
			open[op.Client] = c
			if rounds[op.ID] == nil {
				rounds[op.ID] = map[string][]*call{}
			}
			rounds[op.ID][op.F] = append(rounds[op.ID][op.F], c)
			continue
		}
		if c := open[op.Client]; c != nil && c.invoke.F == op.F {
			c.done = op
			delete(open, op.Client)
		} else if op.F == fDBRound {
			if rounds[op.ID] == nil {
				rounds[op.ID] = map[string][]*call{}
			}
			rounds[op.ID][op.F] = append(rounds[op.ID][op.F], &call{done: op})
		}
	}
	ts := func(op hc.Op) time.Time { return time.Unix(0, op.Time) }
	ok := func(c *call) bool { return c.done.Type == hc.OK }
	lastInvoke := func(cs []*call) time.Time {
		var t time.Time
		for _, c := range cs {
			if ts(c.invoke).After(t) {
				t = ts(c.invoke)
			}
		}
		return t
	}
	// before reports whether w returned ok before opened.
	before := func(opened time.Time) func(w *call) bool {
		return func(w *call) bool { return ok(w) && ts(w.done).Before(opened) }
	}
	// early checks that no call of waits returned ok before opened.
	early := func(id, what string, waits []*call, opened time.Time) {
		for _, w := range waits {
			rep.Checked[hc.BarrierEarly]++
			if before(opened)(w) {
				rep.Violate(hc.BarrierEarly, "%s round %s: %s %s returned at %s, before %s was called at %s",
					wl, id, w.invoke.Client, w.invoke.F, ts(w.done).Format("15:04:05.000"), what, opened.Format("15:04:05.000"))
			}
		}
	}
	// late checks that the waits called before opened returned within
	// the bound, when opened is in a half-open window.
	late := func(id string, waits []*call, opened time.Time) {
		if !inWindow(opened) {
			return
		}
		for _, w := range waits {
			if !ts(w.invoke).Before(opened) || w.done.Type == "" {
				continue
			}
			rep.Checked[hc.BarrierLate]++
			if d := ts(w.done).Sub(opened); !ok(w) || d > bound {
				rep.Violate(hc.BarrierLate, "%s round %s: %s %s (%s) returned %v after the barrier opened at %s (bound %v)",
					wl, id, w.invoke.Client, w.invoke.F, w.done.Type, d.Round(time.Millisecond), opened.Format("15:04:05.000"), bound)
			}
		}
	}
	for id, r := range rounds {
		switch wl {
		case "barrier":
			if len(r[fBHold]) != 1 || !ok(r[fBHold][0]) || len(r[fBRelease]) != 1 {
				continue // never held: its waits may return at once
			}
			rel := r[fBRelease][0]
			early(id, "Release", r[fBWait], ts(rel.invoke))
			if ok(rel) {
				late(id, r[fBWait], ts(rel.done))
			}
		case "latch":
			if len(r[fLStart]) != 1 || !ok(r[fLStart][0]) || len(r[fLCount]) != barrierParties {
				continue
			}
			early(id, "the last CountDown", r[fLWait], lastInvoke(r[fLCount]))
			var opened time.Time
			all := true
			for _, c := range r[fLCount] {
				all = all && ok(c)
				if ts(c.done).After(opened) {
					opened = ts(c.done)
				}
			}
			if all {
				late(id, r[fLWait], opened)
			}
		case "dbarrier":
			if len(r[fDBEnter]) != barrierParties {
				continue
			}
			early(id, "the last Enter", r[fDBEnter], lastInvoke(r[fDBEnter]))
			if len(r[fDBLeave]) != barrierParties || len(r[fDBRound]) != 1 {
				continue
			}
			if end := r[fDBRound][0]; !ok(end) {
				why := strings.SplitN(end.done.Err, ": ", 2)[0]
				unchecked[why]++
				if why == leaseGone {
					unchecked[why+", "+lastFault(ts(end.done))]++
				}
				if slices.ContainsFunc(r[fDBLeave], before(lastInvoke(r[fDBLeave]))) {
					unchecked[why+", with a Leave before the last was called"]++
				}
				continue
			}
			early(id, "the last Leave", r[fDBLeave], lastInvoke(r[fDBLeave]))
		}
	}
	return unchecked
}

// recipesBound is how long a wait of package recipes may take to return,
// on a connection gone silent, after what it waits for happened (issue
// 27): recipes waits take a client, not a session, so the core's
// TTL-derived liveness does not apply; they read again every 5 s while
// their watch says nothing (recheckInterval), each read bounded by 5 s
// (readTimeout) and then sent again, maybe to another endpoint: one
// interval and two reads.
const recipesBound = 15 * time.Second

// barrierParties is the worker's: the parties of each round.
const barrierParties = 3

func TestLastFault(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1000+int64(s), 0) }
	injected := []injection{
		{kind: "pause", start: at(10), end: at(16)},
		{kind: "restart", start: at(20), end: at(32)},
	}
	last := lastFault(injected)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{at(5), "before any fault"},
		{at(10), "during pause"},
		{at(16), "during pause"},
		{at(17), "after pause"},
		{at(20), "during restart"},
		{at(40), "after restart"},
	} {
		if got := last(c.t); got != c.want {
			t.Errorf("lastFault at %v: %q, want %q", c.t.Sub(at(0)), got, c.want)
		}
	}
	if got := lastFault(nil)(at(1)); got != "before any fault" {
		t.Errorf("lastFault of no injections: %q", got)
	}
}
