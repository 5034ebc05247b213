package faults_test

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

var flagModelTimeout = flag.Duration("faults.modeltimeout", 5*time.Minute, "how long porcupine may check one name's history; a check that runs out is a violation, not a pass")

// modelVerdict is the porcupine check of one lock name or counter, beside
// what the revision checks found on it.
type modelVerdict struct {
	name, model string
	ops         int
	result      porcupine.CheckResult
	took        time.Duration
	found       int // violations the revision checks found on the same name
	m           porcupine.Model
	h           []porcupine.Operation
}

// checkModels checks each workload's history against its porcupine model,
// partitioned by lock name (and by counter), beside the revision checks
// that finish ran: found holds how many violations those found on each.
// Both must agree: a name that one finds a violation on and the other
// finds linearizable is a violation of hc.Agree. The rwmutex, queue and
// barrier workloads have no model here: the revision checks alone check
// them.
func checkModels(rep *hc.Report, workloads []string, all []hc.Op, delivered map[int64]time.Time, byWorkload map[string][]hc.Op, timelines map[string]*hc.Timeline, counters map[string]hc.CounterState, found map[string]int) []modelVerdict {
	clock := hc.NewRevClock(hc.Calls(all), delivered)
	var vs []modelVerdict
	check := func(name, model string, m porcupine.Model, h []porcupine.Operation) {
		start := time.Now()
		res := hc.CheckModel(rep, name, model, m, h, *flagModelTimeout)
		v := modelVerdict{name: name, model: model, ops: len(h), result: res, took: time.Since(start), found: found[name], m: m, h: h}
		vs = append(vs, v)
		if res == porcupine.Unknown {
			return // a violation of hc.Linearizable already
		}
		rep.Checked[hc.Agree]++
		if (res == porcupine.Illegal) != (v.found > 0) {
			rep.Violate(hc.Agree, "%s: porcupine's %s model says %s, the revision checks found %d violations", name, model, res, v.found)
		}
	}
	for _, wl := range workloads {
		tl := timelines[wl]
		calls := hc.Calls(byWorkload[wl])
		switch {
		case tl == nil:
		case wl == "election" || wl == "lead":
			check(wl, "fenced lock", hc.FencedLock, hc.HoldHistory(calls, hc.FCampaign, hc.FResign, tl, clock, nil))
		case wl == "semaphore" || wl == "wsemaphore":
			check(wl, "weighted semaphore", hc.WeightedSemaphore, hc.HoldHistory(calls, hc.FLock, hc.FUnlock, tl, clock, hc.GrantWeight))
		case wl != "rwmutex":
			check(wl, "fenced lock", hc.FencedLock, hc.HoldHistory(calls, hc.FLock, hc.FUnlock, tl, clock, nil))
		}
		if st, ok := counters[wl]; ok {
			check(wl+" counter", "register", hc.Register, hc.CounterHistory(calls, st))
		}
	}
	return vs
}

// keepModelFailures writes, into dir, for each name whose history no
// order obeys its model, or on which the revision checks found a
// violation (porcupine's visualisation then shows the order it found), the
// history porcupine checked (porcupine-NAME.txt,
// one operation a line in the order of their invokes, times in
// nanoseconds from the first) and porcupine's visualisation of its
// longest partial orders (porcupine-NAME.html, which a browser opens).
// A verdict without its model is an error, not a panic.
func keepModelFailures(dir string, vs []modelVerdict) error {
	for _, v := range vs {
		if v.result != porcupine.Illegal && v.found == 0 {
			continue
		}
		if v.m.Step == nil && v.m.StepContext == nil {
			return fmt.Errorf("%s: the verdict carries no model to show its history with", v.name)
		}
		base := filepath.Join(dir, "porcupine-"+strings.NewReplacer("/", "_", " ", "_").Replace(v.name))
		h := slices.Clone(v.h)
		slices.SortStableFunc(h, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		var b strings.Builder
		var t0 int64
		if len(h) > 0 {
			t0 = h[0].Call
		}
		at := func(t int64) string {
			if t == math.MaxInt64 {
				return "never"
			}
			return strconv.FormatInt(t-t0, 10)
		}
		for _, op := range h {
			fmt.Fprintf(&b, "client %d\t%s\t%s\t%s\n", op.ClientId, at(op.Call), at(op.Return), v.m.DescribeOperation(op.Input, op.Output))
		}
		if err := os.WriteFile(base+".txt", []byte(b.String()), 0o644); err != nil {
			return err
		}
		_, info := porcupine.CheckOperationsVerbose(v.m, v.h, *flagModelTimeout)
		if err := porcupine.VisualizePath(v.m, info, base+".html"); err != nil {
			return err
		}
	}
	return nil
}

// modelTable formats the models' verdicts as a Markdown table.
func modelTable(vs []modelVerdict) string {
	if len(vs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n| name | porcupine model | operations | verdict | check took | revision checks' violations |\n|---|---|---:|---|---:|---:|\n")
	for _, v := range vs {
		verdict := "linearizable"
		switch v.result {
		case porcupine.Illegal:
			verdict = "**not linearizable**"
		case porcupine.Unknown:
			verdict = "**timed out (not checked)**"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %v | %d |\n", v.name, v.model, v.ops, verdict, v.took.Round(time.Millisecond), v.found)
	}
	return b.String()
}

// A verdict that lost its model is reported, not a panic (issue 49: the
// shards workload's verdicts carried none, and keeping a shard's evidence
// panicked); the shards workload's verdicts carry theirs.
func TestKeepModelFailuresNeedsModel(t *testing.T) {
	if err := keepModelFailures(t.TempDir(), []modelVerdict{{name: "shards 0", result: porcupine.Illegal}}); err == nil {
		t.Error("a verdict without a model was kept without an error")
	}
	rep := hc.NewReport()
	vs := checkShards(rep, "g", []hc.KeyEvent{{Key: "g/shard/0/1", Rev: 2, CreateRev: 2, Lease: 1}}, nil, nil, nil)
	if len(vs) != 1 {
		t.Fatalf("%d verdicts for one shard", len(vs))
	}
	if vs[0].m.Step == nil && vs[0].m.StepContext == nil {
		t.Errorf("%s: the verdict carries no model", vs[0].name)
	}
}
