package faults_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

var flagShardsDuration = flag.Duration("faults.shardsduration", 90*time.Second, "how long TestFaultsShards runs the shards workload under faults")

// TestFaultsShards runs the shards workload alone (concurrency.Shards,
// members joining and leaving every few seconds) on a 3-process cluster
// while the nemesis injects every fault kind, and checks each shard's
// history as a lock's: at most one owner at any revision, tokens (create
// revisions) strictly increasing, every guarded write inside its tenure.
// TestFaults runs the workload too, among the others.
func TestFaultsShards(t *testing.T) {
	pfx := etcdtest.Begin(t)
	etcd, worker := binaries(t)
	cfg := runConfig{
		etcd:      etcd,
		etcdArgs:  []string{"--unsafe-no-fsync"},
		worker:    worker,
		duration:  *flagShardsDuration,
		procs:     *flagProcs,
		clients:   *flagClients,
		ttl:       *flagTTL,
		workloads: []string{"shards"},
		faults:    allFaults,
	}
	res := runWith(t, pfx, cfg)
	if n := res.ops["shards: lock ok"]; n < 10 {
		t.Errorf("workload shards: only %d tenures in %v", n, res.elapsed)
	}
	if n := res.ops["shards: incr ok"]; n < 10 {
		t.Errorf("workload shards: only %d guarded writes in %v", n, res.elapsed)
	}
}

// TestFaultsShardsEvidence runs the shards workload on the deliberately
// broken build (locks granted to every waiter at once) until a shard is
// violated (by porcupine's model or the revision checks; at most 4 runs
// of 30 s), and checks that the evidence of each violated shard is kept:
// its history (porcupine-shards_N.txt) and porcupine's visualisation
// (.html), which a verdict without its model and history lost to a panic
// (issue 49). It needs the broken worker, so it runs only with
// -faults.tags=concurrency_brokenjudge (RELIABILITY.md):
//
//	go test -count=1 -v ./faults/ -run '^TestFaultsShardsEvidence$' -faults.tags=concurrency_brokenjudge
func TestFaultsShardsEvidence(t *testing.T) {
	if !strings.Contains(*flagTags, "concurrency_brokenjudge") {
		t.Skip("needs the broken build: -faults.tags=concurrency_brokenjudge")
	}
	pfx := etcdtest.Begin(t)
	etcd, worker := binaries(t)
	cfg := runConfig{
		etcd: etcd, etcdArgs: []string{"--unsafe-no-fsync"}, worker: worker,
		duration: 30 * time.Second, procs: 3, clients: 2, ttl: *flagTTL,
		workloads: []string{"shards"},
		faults:    faultsNamed(t, "proxy delay 250 ms"),
	}
	for round := 1; ; round++ {
		r := startRun(t, pfx, cfg)
		start := time.Now()
		res := r.finish(startNemesis(r, start, 2*time.Second, 10*time.Second), start)
		dir := t.TempDir()
		if err := keepModelFailures(dir, res.models); err != nil {
			t.Fatal(err)
		}
		violated := 0
		for _, v := range res.models {
			if !strings.HasPrefix(v.name, "shards ") || (v.result != porcupine.Illegal && v.found == 0) {
				continue
			}
			violated++
			for _, ext := range []string{".txt", ".html"} {
				f := filepath.Join(dir, "porcupine-"+strings.ReplaceAll(v.name, " ", "_")+ext)
				if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
					t.Errorf("%s: evidence %s not written: %v", v.name, f, err)
				}
			}
		}
		t.Logf("round %d: %d tenures, %d guarded writes; %d of %d shards violated, %d violations of the revision checks",
			round, res.ops["shards: lock ok"], res.ops["shards: incr ok"], violated, len(res.models), res.report.Total())
		if violated == 0 {
			t.Logf("summary of round %d:\n%s", round, res.summary())
		}
		if violated > 0 {
			return
		}
		if round == 4 {
			t.Fatal("the broken build violated no shard in 4 runs")
		}
	}
}

// checkShards checks the shards workload's group name: each shard's keys
// (name/shard/<i>/...) form a queue of their own, against which the
// tenures (FLock ok) and guarded writes (FIncr) of that shard are checked
// as a Mutex's holds are, by the revision checks (hc.CheckHolds) and by
// porcupine's fenced lock model, whose verdicts it returns; the two must
// agree on each shard. The shard of an op is the last part of its client
// name (the worker names each shard's calls so). all and delivered are
// every history and the watch's delivery times, for the revision clock.
func checkShards(rep *hc.Report, name string, events []hc.KeyEvent, ops, all []hc.Op, delivered map[int64]time.Time) []modelVerdict {
	byShard := map[int][]hc.KeyEvent{}
	sp := name + "/shard/"
	for _, ev := range events {
		rest, ok := strings.CutPrefix(ev.Key, sp)
		if !ok {
			continue // a member key
		}
		i, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '/'), 0)])
		if err != nil {
			rep.Violate(hc.Complete, "%s: a key %q of no shard", name, ev.Key)
			continue
		}
		byShard[i] = append(byShard[i], ev)
	}
	opsOf := map[int][]hc.Op{}
	for _, op := range ops {
		k := strings.LastIndexByte(op.Client, '/')
		if k < 0 {
			continue // the member's own records (a Shards that failed)
		}
		if i, err := strconv.Atoi(op.Client[k+1:]); err == nil {
			opsOf[i] = append(opsOf[i], op)
		}
	}
	clock := hc.NewRevClock(hc.Calls(all), delivered)
	var vs []modelVerdict
	for i := range shardCount {
		evs, ok := byShard[i]
		if !ok {
			if len(opsOf[i]) > 0 {
				rep.Violate(hc.Exclusion, "%s: %d calls on shard %d, which never had a key", name, len(opsOf[i]), i)
			}
			continue
		}
		sn := fmt.Sprintf("%s%d", sp, i)
		before := rep.Total()
		tl := hc.NewTimeline(rep, sn, evs)
		hc.CheckHolds(rep, sn, opsOf[i], hc.FLock, tl, hc.Exclusion, hc.CreateOrder)
		found := rep.Total() - before
		h := hc.HoldHistory(hc.Calls(opsOf[i]), hc.FLock, hc.FUnlock, tl, clock, nil)
		start := time.Now()
		res := hc.CheckModel(rep, sn, "fenced lock", hc.FencedLock, h, *flagModelTimeout)
		vs = append(vs, modelVerdict{name: fmt.Sprintf("shards %d", i), model: "fenced lock", ops: len(h), result: res, took: time.Since(start), found: found, m: hc.FencedLock, h: h})
		if res == porcupine.Unknown {
			continue // a violation of hc.Linearizable already
		}
		rep.Checked[hc.Agree]++
		if (res == porcupine.Illegal) != (found > 0) {
			rep.Violate(hc.Agree, "%s: porcupine's fenced lock model says %s, the revision checks found %d violations", sn, res, found)
		}
	}
	return vs
}

// shardCount is the worker's number of shards (faults/worker/shards.go).
const shardCount = 8
