package faults_test

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
	hc "github.com/seed-a9d410c6/concurrency/internal/historycheck"
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

// checkShards checks the shards workload's group name: each shard's keys
// (name/shard/<i>/...) form a queue of their own, against which the
// tenures (FLock ok) and guarded writes (FIncr) of that shard are checked
// as a Mutex's holds are (hc.CheckHolds). The shard of an op is the last
// part of its client name (the worker names each shard's calls so).
func checkShards(rep *hc.Report, name string, events []hc.KeyEvent, ops []hc.Op) {
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
	for i, evs := range byShard {
		sn := fmt.Sprintf("%s%d", sp, i)
		tl := hc.NewTimeline(rep, sn, evs)
		hc.CheckHolds(rep, sn, opsOf[i], hc.FLock, tl, hc.Exclusion, hc.CreateOrder)
	}
	for i, o := range opsOf {
		if _, ok := byShard[i]; !ok && len(o) > 0 {
			rep.Violate(hc.Exclusion, "%s: %d calls on shard %d, which never had a key", name, len(o), i)
		}
	}
}
