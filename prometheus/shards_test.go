package concurrencyprom_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	concurrencyprom "github.com/seed-a9d410c6/concurrency/prometheus"
)

// Tests of the shard metrics (concurrency.ShardMetricsRecorder) that need
// no etcd: their names, types, labels and values. The test on a real
// group is TestShardsUnownedMetrics in the module tests/.

// A group's series exist at 0 from ShardGroupJoined on, under the subsystem
// "shard" with the label group; spans move the gauge up and down and are
// observed, in seconds, in the histogram.
func TestShardUnownedSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := concurrencyprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ShardGroupJoined("/jobs/shards", 8)
	const gauge = `
# HELP concurrency_shard_unowned Shards of the group that this process's members see without a member owner now (every member sees the same shards: aggregate with max, not sum).
# TYPE concurrency_shard_unowned gauge
concurrency_shard_unowned{group="/jobs/shards"} %s
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.Replace(gauge, "%s", "0", 1)), "concurrency_shard_unowned"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(reg, "concurrency_shard_unowned_seconds"); got != 1 {
		t.Errorf("concurrency_shard_unowned_seconds: %d series after ShardGroupJoined, want 1", got)
	}

	m.ShardUnownedStarted("/jobs/shards", 3)
	m.ShardUnownedStarted("/jobs/shards", 5)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.Replace(gauge, "%s", "2", 1)), "concurrency_shard_unowned"); err != nil {
		t.Error(err)
	}
	m.ShardUnownedEnded("/jobs/shards", 3, 1500*time.Millisecond)
	m.ShardUnownedEnded("/jobs/shards", 5, 20*time.Millisecond)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.Replace(gauge, "%s", "0", 1)), "concurrency_shard_unowned"); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "concurrency_shard_unowned_seconds" {
			continue
		}
		found = true
		if mf.GetType().String() != "HISTOGRAM" {
			t.Errorf("concurrency_shard_unowned_seconds is a %v, want a histogram", mf.GetType())
		}
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 2 || h.GetSampleSum() < 1.519 || h.GetSampleSum() > 1.521 {
			t.Errorf("concurrency_shard_unowned_seconds: count %d sum %v, want 2 and 1.52", h.GetSampleCount(), h.GetSampleSum())
		}
		if l := mf.GetMetric()[0].GetLabel(); len(l) != 1 || l[0].GetName() != "group" || l[0].GetValue() != "/jobs/shards" {
			t.Errorf("concurrency_shard_unowned_seconds labels %v, want group=/jobs/shards", l)
		}
	}
	if !found {
		t.Error("concurrency_shard_unowned_seconds is not exported")
	}

	// WithNamespace renames them too; a nil *Metrics records nothing.
	reg = prometheus.NewRegistry()
	m, err = concurrencyprom.New(reg, concurrencyprom.WithNamespace("myapp"))
	if err != nil {
		t.Fatal(err)
	}
	m.ShardGroupJoined("g", 1)
	if got := testutil.CollectAndCount(reg, "myapp_shard_unowned", "myapp_shard_unowned_seconds"); got != 2 {
		t.Errorf("WithNamespace(myapp): %d shard series, want 2", got)
	}
	var none *concurrencyprom.Metrics
	none.ShardGroupJoined("g", 1)
	none.ShardUnownedStarted("g", 0)
	none.ShardUnownedEnded("g", 0, time.Second)
}
