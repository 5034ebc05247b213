package historycheck_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

// Each model is shown to accept a correct history and to reject the
// mutation of it that breaks the property it checks, through the same
// functions that the fault tests use (Calls, NewRevClock, HoldHistory,
// CounterHistory, CheckModel).

// rec is one record of a history at time t (nanoseconds).
func rec(t int64, typ, f, client string, token, rev int64) hc.Op {
	return hc.Op{Type: typ, F: f, Client: client, Token: token, Rev: rev, Time: t}
}

// lockOps is a correct history of queue (check_test.go): A holds from
// revision 10 and writes at 15; its Unlock deletes its key at 20, which
// the watch delivered at time 75; B, waiting since time 30, is granted at
// revision 21 and writes at 25.
func lockOps() []hc.Op {
	return []hc.Op{
		rec(10, hc.Invoke, hc.FLock, "A", 0, 0),
		rec(20, hc.OK, hc.FLock, "A", 10, 10),
		rec(30, hc.Invoke, hc.FLock, "B", 0, 0),
		rec(40, hc.Invoke, hc.FIncr, "A", 10, 0),
		rec(50, hc.OK, hc.FIncr, "A", 10, 15),
		rec(60, hc.Invoke, hc.FUnlock, "A", 10, 0),
		rec(80, hc.OK, hc.FUnlock, "A", 10, 0),
		rec(90, hc.OK, hc.FLock, "B", 12, 21),
		rec(100, hc.Invoke, hc.FIncr, "B", 12, 0),
		rec(110, hc.OK, hc.FIncr, "B", 12, 25),
		rec(120, hc.Invoke, hc.FUnlock, "B", 12, 0),
		rec(130, hc.OK, hc.FUnlock, "B", 12, 0),
	}
}

// other marks op as another workload's: it dates revisions, but is no
// part of the name's history.
func other(op hc.Op) hc.Op {
	op.Workload = "other"
	return op
}

// own is the calls of ops that are the name's own.
func own(calls []hc.Call) []hc.Call {
	var mine []hc.Call
	for _, c := range calls {
		if c.Workload == "" {
			mine = append(mine, c)
		}
	}
	return mine
}

var delivered = map[int64]time.Time{20: time.Unix(0, 75), 30: time.Unix(0, 125)}

// checkLock runs the fenced-lock model on ops against events, as the
// fault tests do.
func checkLock(t *testing.T, ops []hc.Op, events []hc.KeyEvent) (*hc.Report, porcupine.CheckResult) {
	t.Helper()
	r := hc.NewReport()
	tl := hc.NewTimeline(r, "/l", events)
	calls := hc.Calls(ops)
	h := hc.HoldHistory(own(calls), hc.FLock, hc.FUnlock, tl, hc.NewRevClock(calls, delivered), nil)
	return r, hc.CheckModel(r, "/l", "fenced lock", hc.FencedLock, h, time.Minute)
}

func TestRevClock(t *testing.T) {
	calls := hc.Calls(lockOps())
	k := hc.NewRevClock(calls, delivered)
	for _, tc := range []struct{ rev, lo, hi int64 }{
		// after the start of A's write (revision 15), before the watch
		// delivered it (75) and before B's grant returned (90)
		{20, 40, 75},
		{12, 10, 50}, // after A's grant began, before its write returned
		{26, 100, 1<<63 - 1},
	} {
		lo, hi := k.Bounds(tc.rev)
		if lo != tc.lo || hi != tc.hi {
			t.Errorf("Bounds(%d) = %d, %d; want %d, %d", tc.rev, lo, hi, tc.lo, tc.hi)
		}
	}
}

func TestFencedLockCorrect(t *testing.T) {
	if r, res := checkLock(t, lockOps(), queue); res != porcupine.Ok || r.Total() != 0 {
		t.Fatalf("correct history: %s, %v", res, r.Violations)
	}
}

// A holder paused past its lease is no violation: etcd deleted its key
// (an event at revision 20, not a call of A's), B was granted after it,
// and A's Unlock, when A woke up, returned after B's hold began; an Unlock
// of unknown outcome returns at never.
func TestFencedLockPause(t *testing.T) {
	for _, last := range []string{hc.OK, hc.Info} {
		ops := []hc.Op{
			rec(10, hc.Invoke, hc.FLock, "A", 0, 0),
			rec(20, hc.OK, hc.FLock, "A", 10, 10),
			rec(30, hc.Invoke, hc.FLock, "B", 0, 0),
			other(rec(31, hc.Invoke, hc.FIncr, "C", 0, 0)), // another workload's write at 16
			other(rec(32, hc.OK, hc.FIncr, "C", 0, 16)),
			rec(90, hc.OK, hc.FLock, "B", 12, 21),
			rec(100, hc.Invoke, hc.FIncr, "B", 12, 0),
			rec(110, hc.OK, hc.FIncr, "B", 12, 25),
			rec(200, hc.Invoke, hc.FUnlock, "A", 10, 0),
			rec(210, last, hc.FUnlock, "A", 10, 0),
		}
		if r, res := checkLock(t, ops, queue); res != porcupine.Ok {
			t.Fatalf("pause past the lease, last Unlock %s: %s, %v", last, res, r.Violations)
		}
	}
}

func TestFencedLockViolations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func([]hc.Op) []hc.Op
		events []hc.KeyEvent
	}{
		{"overlapping grant: B granted before A's key was deleted", func(ops []hc.Op) []hc.Op {
			ops[7] = rec(35, hc.OK, hc.FLock, "B", 12, 14) // returned before the write at 15 began
			// The write at 15 is another workload's, so that only the
			// grant is out of place.
			ops[3], ops[4] = other(rec(40, hc.Invoke, hc.FIncr, "C", 0, 0)), other(rec(50, hc.OK, hc.FIncr, "C", 0, 15))
			return ops
		}, queue},
		{"guarded write after the hold ended", func(ops []hc.Op) []hc.Op {
			return append(ops, rec(140, hc.Invoke, hc.FIncr, "A", 10, 0), rec(150, hc.OK, hc.FIncr, "A", 10, 31))
		}, queue},
		{"token that goes back", func(ops []hc.Op) []hc.Op {
			// A is granted 12, B later 10: keys named so that 10 is B's.
			for i := range ops {
				switch ops[i].Client {
				case "A":
					ops[i].Token = 12 * min(ops[i].Token, 1)
				case "B":
					ops[i].Token = 10 * min(ops[i].Token, 1)
				}
			}
			return ops
		}, []hc.KeyEvent{
			{Key: "/l/b", Rev: 10, CreateRev: 10},
			{Key: "/l/a", Rev: 12, CreateRev: 12},
			{Key: "/l/a", Rev: 20, Delete: true},
			{Key: "/l/b", Rev: 30, Delete: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, res := checkLock(t, tc.mutate(lockOps()), tc.events)
			if res != porcupine.Illegal || len(r.Violations[hc.Linearizable]) != 1 {
				t.Fatalf("mutated history: %s, %v", res, r.Violations)
			}
		})
	}
}

// semQueue: a semaphore of limit 3; A's key (weight 2) from revision 10
// to 20, B's (weight 1) from 11 to 30, C's (weight 1) from 12 to 40.
var semQueue = []hc.KeyEvent{
	{Key: "/s/a", Rev: 10, CreateRev: 10, Value: "3/2"},
	{Key: "/s/b", Rev: 11, CreateRev: 11, Value: "3"},
	{Key: "/s/c", Rev: 12, CreateRev: 12, Value: "3"},
	{Key: "/s/a", Rev: 20, Delete: true},
	{Key: "/s/b", Rev: 30, Delete: true},
	{Key: "/s/c", Rev: 40, Delete: true},
}

func semOps(cGrant hc.Op) []hc.Op {
	granted := func(t int64, client, key string, token, rev, w int64) hc.Op {
		op := rec(t, hc.OK, hc.FLock, client, token, rev)
		op.Key, op.Value = key, w
		return op
	}
	cGrant.Key, cGrant.Value = "/s/c", 1
	return []hc.Op{
		rec(1, hc.Invoke, hc.FLock, "A", 0, 0),
		granted(2, "A", "/s/a", 10, 10, 2),
		rec(3, hc.Invoke, hc.FLock, "B", 0, 0),
		granted(4, "B", "/s/b", 11, 11, 1),
		rec(5, hc.Invoke, hc.FLock, "C", 0, 0),
		rec(6, hc.Invoke, hc.FIncr, "B", 11, 0),
		rec(7, hc.OK, hc.FIncr, "B", 11, 13),
		rec(8, hc.Invoke, hc.FUnlock, "A", 10, 0),
		rec(9, hc.OK, hc.FUnlock, "A", 10, 0),
		cGrant,
		other(rec(20, hc.Invoke, hc.FIncr, "D", 0, 0)), // another workload's write at 35
		other(rec(21, hc.OK, hc.FIncr, "D", 0, 35)),
	}
}

func checkSem(t *testing.T, ops []hc.Op) (*hc.Report, porcupine.CheckResult) {
	t.Helper()
	r := hc.NewReport()
	tl := hc.NewTimeline(r, "/s", semQueue)
	calls := hc.Calls(ops)
	h := hc.HoldHistory(own(calls), hc.FLock, hc.FUnlock, tl, hc.NewRevClock(calls, nil), hc.GrantWeight)
	return r, hc.CheckModel(r, "/s", "weighted semaphore", hc.WeightedSemaphore, h, time.Minute)
}

func TestWeightedSemaphore(t *testing.T) {
	// C granted at revision 21, after A's key went at 20: 1 + 1 of 3.
	if r, res := checkSem(t, semOps(rec(10, hc.OK, hc.FLock, "C", 12, 21))); res != porcupine.Ok {
		t.Fatalf("correct history: %s, %v", res, r.Violations)
	}
	// C granted at revision 12 and returned at time 5.5, before A's
	// Unlock began: weights 2 + 1 + 1 over the limit of 3.
	r, res := checkSem(t, semOps(rec(5, hc.OK, hc.FLock, "C", 12, 12)))
	if res != porcupine.Illegal || len(r.Violations[hc.Linearizable]) != 1 {
		t.Fatalf("permit over the limit: %s, %v", res, r.Violations)
	}
}

// counted is a guarded increment by client, from time t to t+5, of the value
// read (to-1) to to, with outcome typ.
func counted(t int64, typ, client, id string, to int64) []hc.Op {
	op := func(t int64, typ string) hc.Op {
		return hc.Op{Type: typ, F: hc.FIncr, Client: client, ID: id, Value: to, Time: t}
	}
	return []hc.Op{op(t, hc.Invoke), op(t+5, typ)}
}

func checkCounter(t *testing.T, st hc.CounterState, parts ...[]hc.Op) porcupine.CheckResult {
	t.Helper()
	var ops []hc.Op
	for _, p := range parts {
		ops = append(ops, p...)
	}
	return hc.CheckModel(hc.NewReport(), "counter", "register", hc.Register, hc.CounterHistory(hc.Calls(ops), st), time.Minute)
}

func TestRegister(t *testing.T) {
	state := func(v int64, ids ...string) hc.CounterState {
		st := hc.CounterState{Value: v, Ops: map[string]int64{}}
		for i, id := range ids {
			st.Ops[id] = int64(i + 1)
		}
		return st
	}
	for _, tc := range []struct {
		name  string
		want  porcupine.CheckResult
		st    hc.CounterState
		parts [][]hc.Op
	}{
		{"three increments", porcupine.Ok, state(3, "a", "b", "c"),
			[][]hc.Op{counted(10, hc.OK, "A", "a", 1), counted(20, hc.OK, "B", "b", 2), counted(30, hc.OK, "A", "c", 3)}},
		{"an increment of unknown outcome that committed", porcupine.Ok, state(2, "a", "b"),
			[][]hc.Op{counted(10, hc.OK, "A", "a", 1), counted(20, hc.Info, "B", "b", 2)}},
		{"an increment of unknown outcome that did not commit", porcupine.Ok, state(1, "a"),
			[][]hc.Op{counted(10, hc.OK, "A", "a", 1), counted(20, hc.Info, "B", "b", 2)}},
		{"lost increment: two wrote 2 from 1", porcupine.Illegal, hc.CounterState{Value: 2, Ops: map[string]int64{"a": 1, "b": 2, "c": 2}},
			[][]hc.Op{counted(10, hc.OK, "A", "a", 1), counted(20, hc.OK, "B", "b", 2), counted(22, hc.OK, "C", "c", 2)}},
		{"a failed increment that committed", porcupine.Illegal, state(2, "a", "b"),
			[][]hc.Op{counted(10, hc.OK, "A", "a", 1), counted(20, hc.Fail, "B", "b", 2)}},
		{"a guarded read of a value never written", porcupine.Illegal, state(1, "a"),
			[][]hc.Op{counted(10, hc.OK, "A", "a", 1), {{Type: hc.Invoke, F: hc.FRRead, Client: "R", Time: 20}, {Type: hc.OK, F: hc.FRRead, Client: "R", Value: 7, Time: 25}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res := checkCounter(t, tc.st, tc.parts...); res != tc.want {
				t.Fatalf("got %s, want %s", res, tc.want)
			}
		})
	}
}

// A check that runs out of time is reported as such, never as a pass.
func TestModelTimeout(t *testing.T) {
	slow := porcupine.Model{
		Init: func() any { return 0 },
		Step: func(state, _, _ any) (bool, any) {
			time.Sleep(50 * time.Millisecond)
			return true, state
		},
	}
	var h []porcupine.Operation
	for i := range 20 {
		h = append(h, porcupine.Operation{ClientId: i, Call: 0, Return: 100})
	}
	r := hc.NewReport()
	if res := hc.CheckModel(r, "/slow", "slow", slow, h, 10*time.Millisecond); res != porcupine.Unknown {
		t.Fatalf("got %s, want %s", res, porcupine.Unknown)
	}
	if len(r.Violations[hc.Linearizable]) != 1 || r.Total() != 1 {
		t.Fatalf("a timed-out check is not a violation: %v", r.Violations)
	}
}
