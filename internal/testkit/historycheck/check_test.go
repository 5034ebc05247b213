package historycheck_test

import (
	"os"
	"path/filepath"
	"testing"

	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

// Each check is shown to pass a correct history and to catch the
// violation it exists for: a checker that cannot fail proves nothing.

// queue is a lock with two holds, A (key a, created at 10, deleted at 20)
// and B (key b, created at 12, first at 20, deleted at 30).
var queue = []hc.KeyEvent{
	{Key: "/l/a", Rev: 10, CreateRev: 10, Lease: 1},
	{Key: "/l/b", Rev: 12, CreateRev: 12, Lease: 2},
	{Key: "/l/a", Rev: 20, Delete: true},
	{Key: "/l/b", Rev: 30, Delete: true},
}

func acquired(client, key string, token, rev int64) hc.Op {
	return hc.Op{Type: hc.OK, F: hc.FLock, Client: client, Key: key, Token: token, Rev: rev}
}

func holds(t *testing.T, ops []hc.Op, events []hc.KeyEvent) *hc.Report {
	t.Helper()
	r := hc.NewReport()
	tl := hc.NewTimeline(r, "/l", events)
	hc.CheckHolds(r, "/l", ops, hc.FLock, tl, hc.Exclusion, hc.CreateOrder)
	return r
}

func TestHoldsCorrect(t *testing.T) {
	r := holds(t, []hc.Op{
		acquired("A", "/l/a", 10, 10),
		{Type: hc.OK, F: hc.FIncr, Client: "A", Token: 10, Rev: 15, ID: "A.1"},
		acquired("B", "/l/b", 12, 20),
		{Type: hc.OK, F: hc.FLeader, Client: "B", Key: "/l/b", Token: 12, Rev: 25},
	}, queue)
	if r.Total() != 0 || r.Checked[hc.Exclusion] != 2 || r.Checked[hc.CreateOrder] != 1 {
		t.Fatalf("correct history: %v, checked %v", r.Violations, r.Checked)
	}
}

func TestHoldsViolations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ops    []hc.Op
		events []hc.KeyEvent
		inv    string
	}{
		{"B acquired while A's older key existed", []hc.Op{acquired("A", "/l/a", 10, 10), acquired("B", "/l/b", 12, 15)}, queue, hc.Exclusion},
		{"token that is no create revision", []hc.Op{acquired("A", "/l/a", 11, 10)}, queue, hc.Exclusion},
		{"acquired after the key was deleted", []hc.Op{acquired("A", "/l/a", 10, 25)}, queue, hc.Exclusion},
		{"guarded write after the hold ended", []hc.Op{acquired("A", "/l/a", 10, 10), {Type: hc.OK, F: hc.FIncr, Client: "A", Token: 10, Rev: 21}}, queue, hc.GuardedTxn},
		{"leader read of a key that was not first", []hc.Op{{Type: hc.OK, F: hc.FLeader, Client: "B", Key: "/l/b", Token: 12, Rev: 15}}, queue, hc.LeaderRead},
		{"token of another incarnation", []hc.Op{acquired("B", "/l/b", 12, 11), acquired("A", "/l/a", 10, 20)}, []hc.KeyEvent{
			{Key: "/l/b", Rev: 10, CreateRev: 10},
			{Key: "/l/a", Rev: 12, CreateRev: 12}, // keys named so that B's is older
		}, hc.Exclusion},
		{"delete never seen created", nil, []hc.KeyEvent{{Key: "/l/x", Rev: 5, Delete: true}}, hc.Complete},
		{"creation missed", nil, []hc.KeyEvent{{Key: "/l/x", Rev: 9, CreateRev: 5}}, hc.Complete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := holds(t, tc.ops, tc.events); len(r.Violations[tc.inv]) == 0 {
				t.Fatalf("no violation of %q: %v", tc.inv, r.Violations)
			}
		})
	}
}

// Holds granted in revision order must have increasing tokens, even when
// the timeline itself is consistent (a checker bug or a forged token).
func TestCreateOrder(t *testing.T) {
	events := []hc.KeyEvent{
		{Key: "/l/a", Rev: 10, CreateRev: 10}, {Key: "/l/a", Rev: 11, Delete: true},
		{Key: "/l/b", Rev: 12, CreateRev: 12}, {Key: "/l/b", Rev: 13, Delete: true},
	}
	r := holds(t, []hc.Op{acquired("A", "/l/a", 10, 10), acquired("B", "/l/b", 12, 12)}, events)
	if r.Total() != 0 {
		t.Fatalf("correct history: %v", r.Violations)
	}
	// Two acquisitions of the same incarnation by different clients.
	r = holds(t, []hc.Op{acquired("A", "/l/a", 10, 10), acquired("C", "/l/a", 10, 10)}, events)
	if len(r.Violations[hc.CreateOrder]) == 0 || len(r.Violations[hc.Exclusion]) == 0 {
		t.Fatalf("two holds of one key: %v", r.Violations)
	}
}

func TestTerms(t *testing.T) {
	r := hc.NewReport()
	hc.CheckTerms(r, "/e", []hc.Op{
		{Type: hc.OK, F: hc.FCampaign, Client: "A", Token: 10},
		{Type: hc.OK, F: hc.FCampaign, Client: "B", Token: 10},
	})
	if len(r.Violations[hc.OneLeader]) != 1 {
		t.Fatalf("two leaders of term 10: %v", r.Violations)
	}
}

func TestCounter(t *testing.T) {
	ok := []hc.Op{
		{Type: hc.OK, F: hc.FIncr, ID: "a", Value: 1},
		{Type: hc.OK, F: hc.FIncr, ID: "b", Value: 2},
		{Type: hc.Fail, F: hc.FIncr, ID: "c", Value: 3},
		{Type: hc.Info, F: hc.FIncr, ID: "d", Value: 3},
	}
	r := hc.NewReport()
	hc.CheckCounter(r, ok, hc.CounterState{Value: 3, Ops: map[string]int64{"a": 1, "b": 2, "d": 3}})
	if r.Total() != 0 {
		t.Fatalf("correct counter: %v", r.Violations)
	}
	for name, st := range map[string]hc.CounterState{
		"lost update":           {Value: 2, Ops: map[string]int64{"a": 1, "b": 2, "d": 2}},
		"acknowledged, missing": {Value: 1, Ops: map[string]int64{"a": 1}},
		"failed, committed":     {Value: 3, Ops: map[string]int64{"a": 1, "b": 2, "c": 3}},
		"counter off":           {Value: 4, Ops: map[string]int64{"a": 1, "b": 2, "d": 3}},
	} {
		r := hc.NewReport()
		hc.CheckCounter(r, ok, st)
		if len(r.Violations[hc.Counter]) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}

func TestStore(t *testing.T) {
	ops := []hc.Op{
		{Type: hc.OK, F: hc.FWrite, Workload: "fence", ID: "a"},
		{Type: hc.Fail, F: hc.FWrite, Workload: "fence", ID: "x"},
	}
	good := []hc.StoreWrite{
		{Resource: "f", Token: 5, Read: 0, Value: 1, ID: "a"},
		{Resource: "f", Token: 7, Read: 1, Value: 2, ID: "b"},
	}
	r := hc.NewReport()
	if lost := hc.CheckStore(r, ops, good, "f", "fence", true); lost != 0 || r.Total() != 0 {
		t.Fatalf("correct store: lost %d, %v", lost, r.Violations)
	}
	for name, log := range map[string][]hc.StoreWrite{
		"older token accepted": {good[0], good[1], {Resource: "f", Token: 6, Read: 2, Value: 3, ID: "c"}},
		"lost update":          {good[0], good[1], {Resource: "f", Token: 7, Read: 1, Value: 2, ID: "c"}},
		"acknowledged missing": {good[1]},
		"rejected present":     {good[0], good[1], {Resource: "f", Token: 8, Read: 2, Value: 3, ID: "x"}},
	} {
		r := hc.NewReport()
		hc.CheckStore(r, ops, log, "f", "fence", true)
		if len(r.Violations[hc.FenceStore]) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
	// Unfenced, the same lost update is only counted.
	r = hc.NewReport()
	lost := hc.CheckStore(r, nil, []hc.StoreWrite{good[0], {Resource: "f", Read: 0, Value: 1}}, "f", "unguarded", false)
	if lost != 1 || r.Total() != 0 {
		t.Fatalf("unfenced lost update: lost %d, violations %v", lost, r.Violations)
	}
}

func TestOverlaps(t *testing.T) {
	span := func(c string, from, to int64) []hc.Op {
		return []hc.Op{{Type: hc.OK, F: hc.FLock, Client: c, Time: from}, {Type: hc.Invoke, F: hc.FUnlock, Client: c, Time: to}}
	}
	var ops []hc.Op
	ops = append(ops, span("A", 0, 10)...)
	ops = append(ops, span("B", 10, 20)...)
	if n := hc.Overlaps(hc.NewReport(), ops); n != 0 {
		t.Fatalf("back-to-back holds: %d overlaps", n)
	}
	ops = append(ops, span("C", 15, 30)...)
	if n := hc.Overlaps(hc.NewReport(), ops); n != 1 {
		t.Fatalf("one overlapping hold: %d overlaps", n)
	}
}

func TestReturned(t *testing.T) {
	r := hc.NewReport()
	hc.CheckReturned(r, []hc.Op{
		{Type: hc.Invoke, F: hc.FLock, Client: "A"}, {Type: hc.OK, F: hc.FLock, Client: "A"},
		{Type: hc.Invoke, F: hc.FLock, Client: "B"},
		{Type: hc.Info, F: hc.FLeak, Proc: 1, Err: "2 goroutines"},
		{Type: hc.OK, F: hc.FExit, Proc: 1},
	}, []int{1, 2})
	if len(r.Violations[hc.Returned]) != 2 || len(r.Violations[hc.NoLeaks]) != 1 {
		t.Fatalf("pending Lock of B and missing exit of process 2, a leak in 1: %v", r.Violations)
	}
}

func TestWriterRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := hc.NewWriter(f)
	w.Record(hc.Op{Type: hc.Invoke, F: hc.FLock, Client: "A"})
	w.Record(hc.Op{Type: hc.OK, F: hc.FLock, Client: "A", Token: 7, Rev: 9, Key: "/l/a"})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ops, err := hc.ReadFile(path)
	if err != nil || len(ops) != 2 || ops[1].Token != 7 || ops[1].Time == 0 {
		t.Fatalf("read back %+v, %v", ops, err)
	}
	os.WriteFile(path, []byte(`{"type":"ok","f":"lo`), 0o644)
	if _, err := hc.ReadFile(path); err == nil {
		t.Fatal("a truncated history read without error")
	}
}
