package historycheck_test

import (
	"testing"

	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

// sem is a semaphore of limit 2 with three keys: a [10, 20), b [11, 30),
// c [12, 40); c holds from 20, when a goes.
var sem = []hc.KeyEvent{
	{Key: "/s/a", Rev: 10, CreateRev: 10},
	{Key: "/s/b", Rev: 11, CreateRev: 11},
	{Key: "/s/c", Rev: 12, CreateRev: 12},
	{Key: "/s/a", Rev: 20, Delete: true},
	{Key: "/s/b", Rev: 30, Delete: true},
	{Key: "/s/c", Rev: 40, Delete: true},
}

// rw is an RWMutex: readers r1 [10, 20) and r2 [11, 25), writer w [12, 30)
// holding from 25, reader r3 [13, 35) holding from 30.
var rw = []hc.KeyEvent{
	{Key: "/rw/r/1", Rev: 10, CreateRev: 10},
	{Key: "/rw/r/2", Rev: 11, CreateRev: 11},
	{Key: "/rw/w/3", Rev: 12, CreateRev: 12},
	{Key: "/rw/r/4", Rev: 13, CreateRev: 13},
	{Key: "/rw/r/1", Rev: 20, Delete: true},
	{Key: "/rw/r/2", Rev: 25, Delete: true},
	{Key: "/rw/w/3", Rev: 30, Delete: true},
	{Key: "/rw/r/4", Rev: 35, Delete: true},
}

func shared(ops []hc.Op, events []hc.KeyEvent, rule hc.Rule) *hc.Report {
	r := hc.NewReport()
	hc.CheckShared(r, "/x", ops, hc.NewTimeline(r, "/x", events), rule)
	return r
}

func incr(client string, token, rev int64) hc.Op {
	return hc.Op{Type: hc.OK, F: hc.FIncr, Client: client, Token: token, Rev: rev}
}

func rread(client string, token, rev, value int64) hc.Op {
	return hc.Op{Type: hc.OK, F: hc.FRRead, Client: client, Token: token, Rev: rev, Value: value}
}

func TestSharedCorrect(t *testing.T) {
	r := shared([]hc.Op{
		acquired("A", "/s/a", 10, 10), acquired("B", "/s/b", 11, 11), incr("A", 10, 15), incr("B", 11, 16),
		acquired("C", "/s/c", 12, 20), incr("C", 12, 21),
	}, sem, hc.SemaphoreRule(2))
	if r.Total() != 0 || r.Checked[hc.SemLimit] != 6 || r.Checked[hc.GuardedTxn] != 3 {
		t.Fatalf("correct semaphore history: %v, checked %v", r.Violations, r.Checked)
	}
	r = shared([]hc.Op{
		acquired("R1", "/rw/r/1", 10, 0), rread("R1", 10, 14, 5), rread("R1", 10, 15, 5),
		acquired("R2", "/rw/r/2", 11, 11),
		acquired("W", "/rw/w/3", 12, 0), incr("W", 12, 26),
		acquired("R3", "/rw/r/4", 13, 30), rread("R3", 13, 31, 6),
	}, rw, hc.RWMutexRule())
	if r.Total() != 0 || r.Checked[hc.RWExclude] != 8 || r.Checked[hc.ReadStable] != 3 {
		t.Fatalf("correct rwmutex history: %v, checked %v", r.Violations, r.Checked)
	}
}

func TestSharedViolations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ops    []hc.Op
		events []hc.KeyEvent
		rule   hc.Rule
		inv    string
	}{
		{"third semaphore holder granted early", []hc.Op{acquired("C", "/s/c", 12, 15)}, sem, hc.SemaphoreRule(2), hc.SemLimit},
		{"guarded write of a waiter", []hc.Op{incr("C", 12, 15)}, sem, hc.SemaphoreRule(2), hc.GuardedTxn},
		{"writer granted beside a reader", []hc.Op{acquired("W", "/rw/w/3", 12, 22)}, rw, hc.RWMutexRule(), hc.RWExclude},
		{"reader granted behind a writer", []hc.Op{acquired("R3", "/rw/r/4", 13, 26)}, rw, hc.RWMutexRule(), hc.RWExclude},
		{"writer's write beside a reader", []hc.Op{incr("W", 12, 21)}, rw, hc.RWMutexRule(), hc.GuardedTxn},
		{"a reader's reads differ", []hc.Op{rread("R1", 10, 14, 5), rread("R1", 10, 15, 6)}, rw, hc.RWMutexRule(), hc.ReadStable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := shared(tc.ops, tc.events, tc.rule)
			if len(r.Violations[tc.inv]) == 0 {
				t.Fatalf("no violation of %q: %v", tc.inv, r.Violations)
			}
		})
	}
}

// wsem is a weighted semaphore of limit 4: a (weight 3) [10, 20), b
// (weight 2) [11, 30), c (weight 1) [12, 40). b holds from 20, when a
// goes; c behind b from 20 too (3 of 4). At 25 a resize to 2 rewrites b
// and c: both keep holding. d (weight 1) [26, 50) fits only once b is
// gone (30: 1+1 of 2).
var wsem = []hc.KeyEvent{
	{Key: "/w/a", Rev: 10, CreateRev: 10, Value: "4/3"},
	{Key: "/w/b", Rev: 11, CreateRev: 11, Value: "4/2"},
	{Key: "/w/c", Rev: 12, CreateRev: 12, Value: "4"},
	{Key: "/w/a", Rev: 20, Delete: true},
	{Key: "/w/b", Rev: 25, CreateRev: 11, Value: "2/2"},
	{Key: "/w/c", Rev: 25, CreateRev: 12, Value: "2"},
	{Key: "/w/d", Rev: 26, CreateRev: 26, Value: "2"},
	{Key: "/w/b", Rev: 30, Delete: true},
	{Key: "/w/c", Rev: 40, Delete: true},
	{Key: "/w/d", Rev: 50, Delete: true},
}

func TestSharedWeighted(t *testing.T) {
	rule := hc.WeightedSemaphoreRule()
	r := shared([]hc.Op{
		acquired("A", "/w/a", 10, 10), incr("A", 10, 15),
		acquired("B", "/w/b", 11, 21), acquired("C", "/w/c", 12, 22),
		incr("B", 11, 27), incr("C", 12, 28), // beyond the smaller limit: still held
		acquired("D", "/w/d", 26, 31), incr("D", 26, 32),
	}, wsem, rule)
	if r.Total() != 0 || r.Checked[hc.SemWeight] != 8 || r.Checked[hc.GuardedTxn] != 4 {
		t.Fatalf("correct weighted history: %v, checked %v", r.Violations, r.Checked)
	}
	for _, tc := range []struct {
		name string
		ops  []hc.Op
		inv  string
	}{
		{"weight 2 granted beside weight 3 of 4", []hc.Op{acquired("B", "/w/b", 11, 15)}, hc.SemWeight},
		{"unit granted behind a waiting weight 2 (not FIFO)", []hc.Op{acquired("C", "/w/c", 12, 15)}, hc.SemWeight},
		{"granted past a smaller limit", []hc.Op{acquired("D", "/w/d", 26, 27)}, hc.SemWeight},
		{"guarded write of a waiter", []hc.Op{incr("B", 11, 15)}, hc.GuardedTxn},
		{"holds beyond the limit at once", []hc.Op{acquired("A", "/w/a", 10, 10), acquired("B", "/w/b", 11, 0), incr("B", 11, 16)}, hc.GuardedTxn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := shared(tc.ops, wsem, rule)
			if len(r.Violations[tc.inv]) == 0 {
				t.Fatalf("no violation of %q: %v", tc.inv, r.Violations)
			}
		})
	}
}
