package faults_test

import (
	"flag"
	"fmt"
	"sort"
	"time"

	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

var flagLiveBound = flag.Duration("faults.livebound", 0, "how long after a lock is free its first waiter may still wait, and after a hold's key is deleted its Ctx may still live, in a half-open window (default: from -faults.ttl, see liveBound)")

// liveBound is how long a wait or hold may take to notice, on a
// connection gone silent, that its lock is free or its key gone (issue
// 27, findings 1 and 2). The library promises, per watch stream, a third
// of the TTL idle (plus up to half of that, its jitter) and a sixth to
// wait for the progress answer, each clamped as livenessFor does, and
// then the reads. A new stream is placed by the balancer and may land on
// the silent connection again, one time in three with three endpoints:
// the bound allows three streams in a row, and 2 s for the reads (each
// attempt waits a sixth of the TTL, at least 1 s, when it goes to the
// silent connection first).
func liveBound(ttl int) time.Duration {
	if *flagLiveBound > 0 {
		return *flagLiveBound
	}
	t := time.Duration(ttl) * time.Second
	idle := min(max(t/3, time.Second), 20*time.Second)
	wait := min(max(t/6, time.Second), 5*time.Second)
	return 3*(idle+idle/2+wait) + 2*time.Second
}

// liveStats is what the liveness checks measured.
type liveStats struct {
	windows      int
	bound        time.Duration
	waits, holds int
	maxWait      time.Duration
	maxHold      time.Duration
}

// liveWorkloads are the workloads whose queues grant the oldest key, so
// that a waiter is due as soon as every older key is gone.
var liveWorkloads = map[string]string{"txn": hc.FLock, "fence": hc.FLock, "unguarded": hc.FLock, "cancel": hc.FLock, "hold": hc.FLock, "election": hc.FCampaign}

// checkLiveness checks, inside the windows of the half-open fault, that
// no waiter stayed blocked on a free lock and no hold outlived its key by
// more than liveBound (issue 27). A window is the fault's time less the
// bound at its end, so that the code before the fix, whose watches wait
// on the silent connection until the fault heals it, cannot pass: a lock
// freed in the window is granted only after the bound, a key deleted in
// it ends its hold only after the bound.
//
// Wall-clock times come from the test's own watch, on a healthy client:
// the moment it delivered the deletion that left a waiter's key the
// oldest, or the creation of a key that was the oldest at once; and the
// moment the fault's delete of a hold's key returned; against the
// workers' records of the grant or failure of a Lock and of the end of a
// hold's Ctx. Both moments are at or after the commit, so a measured
// wait is at most the true one: the checks never blame the library for
// the checker's own lag. A Lock whose key was
// the oldest for longer than the bound before it returned, granted or
// not, is a violation, as is a hold of the hold workload whose key was
// deleted by someone else (the fault deletes it, as etcdlock force-unlock
// does) while its Ctx lived on for longer than the bound.
func checkLiveness(rep *hc.Report, cfg runConfig, events map[string][]hc.KeyEvent, at map[int64]time.Time, byWorkload map[string][]hc.Op, injected []injection, forced map[forcedKey]time.Time, lockPfx string) liveStats {
	st := liveStats{bound: liveBound(cfg.ttl)}
	var inWindow func(time.Time) bool
	st.windows, inWindow = halfOpenWindows(injected, st.bound)
	for wl, acquire := range liveWorkloads {
		if _, ok := byWorkload[wl]; !ok {
			continue
		}
		name := lockPfx + wl
		lt := lifetimes(events[name])
		// free returns when key k (created at rev) became the oldest: its
		// creation, or the last deletion of an older key after it.
		free := func(k *keyLife) (time.Time, bool) {
			rev := k.created
			for _, o := range lt {
				if o.created >= k.created {
					break
				}
				if o.deleted == 0 || (k.deleted != 0 && o.deleted > k.deleted) {
					return time.Time{}, false // never the oldest while it lived
				}
				rev = max(rev, o.deleted)
			}
			t, ok := at[rev]
			return t, ok
		}
		byKey := map[string][]*keyLife{}
		byCreate := map[int64]*keyLife{}
		for _, k := range lt {
			byKey[k.key] = append(byKey[k.key], k)
			byCreate[k.created] = k
		}
		invoked := map[string]hc.Op{}
		held := map[string]hc.Op{}
		for _, op := range byWorkload[wl] {
			if op.F == hc.FHeld {
				held[fmt.Sprintf("%s/%d", op.Client, op.Token)] = op
			}
		}
		// checkHold checks a hold of the hold workload whose key k was
		// deleted while the hold lasted, by the fault (or an expiry).
		checkHold := func(op hc.Op, k *keyLife) {
			td, ok := forced[forcedKey{k.key, k.created}]
			h, hok := held[fmt.Sprintf("%s/%d", op.Client, op.Token)]
			if !ok || !hok || !inWindow(td) {
				return
			}
			d := time.Unix(0, h.Time).Sub(td)
			if h.Type != hc.OK && d <= st.bound {
				return // gave up, Ctx live, before the bound: nothing to tell
			}
			rep.Checked[hc.HoldEnds]++
			st.holds++
			st.maxHold = max(st.maxHold, d)
			if h.Type != hc.OK || d > st.bound {
				how := "ended"
				if h.Type != hc.OK {
					how = "was still live when the holder gave up"
				}
				rep.Violate(hc.HoldEnds, "%s: key %s deleted at %s, the hold's Ctx %s %v later (bound %v)",
					op.Client, k.key, td.Format("15:04:05.000"), how, d.Round(time.Millisecond), st.bound)
			}
		}
		for _, op := range byWorkload[wl] {
			if op.F != acquire {
				continue
			}
			if op.Type == hc.Invoke {
				invoked[op.Client] = op
				continue
			}
			var k *keyLife
			switch op.Type {
			case hc.OK:
				k = byCreate[op.Token]
			case hc.Fail:
				// The key of a failed Lock: its session's, created after
				// the call began and before it returned, if ever.
				inv, ok := invoked[op.Client]
				if !ok || inv.Lease == 0 {
					continue
				}
				for _, c := range byKey[fmt.Sprintf("%s/%x", name, inv.Lease)] {
					if ct, ok := at[c.created]; ok && !ct.Before(time.Unix(0, inv.Time).Add(-time.Second)) && ct.Before(time.Unix(0, op.Time)) {
						k = c
						break
					}
				}
			}
			if k == nil {
				continue
			}
			if wl == "hold" && op.Type == hc.OK {
				checkHold(op, k)
			}
			tFree, ok := free(k)
			if !ok || !inWindow(tFree) {
				continue
			}
			end := time.Unix(0, op.Time)
			if k.deleted != 0 {
				if td, ok := at[k.deleted]; ok && td.Before(end) && op.Type != hc.OK {
					end = td // taken out of the queue before it gave up
				}
			}
			d := end.Sub(tFree)
			rep.Checked[hc.WaiterLive]++
			st.waits++
			st.maxWait = max(st.maxWait, d)
			if d > st.bound {
				rep.Violate(hc.WaiterLive, "%s %s (%s, key %s): the lock was free from %s, the call returned %v later (bound %v)",
					op.Client, op.F, op.Type, k.key, tFree.Format("15:04:05.000"), d.Round(time.Millisecond), st.bound)
			}
		}
	}
	return st
}

// halfOpenWindows returns how many half-open faults were injected for
// longer than bound, and a function that reports whether a time is in one
// of their windows: from the fault's start to bound before its end, so
// that what happens in a window must be noticed before the fault heals.
func halfOpenWindows(injected []injection, bound time.Duration) (int, func(time.Time) bool) {
	type window struct{ from, to time.Time }
	var windows []window
	for _, in := range injected {
		if in.kind == halfOpenFault && in.err == nil && in.end.Sub(in.start) > bound {
			windows = append(windows, window{in.start, in.end.Add(-bound)})
		}
	}
	return len(windows), func(t time.Time) bool {
		for _, w := range windows {
			if !t.Before(w.from) && !t.After(w.to) {
				return true
			}
		}
		return false
	}
}

// forcedKey names a lock key deleted from outside by a fault: its key and
// create revision.
type forcedKey struct {
	key string
	rev int64
}

// keyLife is one incarnation of a key of a queue: [created, deleted).
type keyLife struct {
	key              string
	created, deleted int64 // deleted is 0 while the key exists
}

// lifetimes returns the incarnations of a queue's keys, by creation.
func lifetimes(events []hc.KeyEvent) []*keyLife {
	alive := map[string]*keyLife{}
	var out []*keyLife
	for _, ev := range events {
		switch l := alive[ev.Key]; {
		case ev.Delete && l != nil:
			l.deleted = ev.Rev
			delete(alive, ev.Key)
		case !ev.Delete && l == nil:
			l = &keyLife{key: ev.Key, created: ev.CreateRev}
			alive[ev.Key] = l
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].created < out[j].created })
	return out
}
