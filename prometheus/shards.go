package concurrencyprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// This file holds the shard metrics: how long the shards of a Shards group
// go without an owner, as the members of the group given WithMetrics
// through concurrency.WithShardSession see it
// (concurrency.ShardMetricsRecorder).

// newShardMetrics returns the shard metrics in namespace ns, subsystem
// "shard": concurrency_shard_unowned and concurrency_shard_unowned_seconds.
func newShardMetrics(ns string) (*prometheus.GaugeVec, *prometheus.HistogramVec) {
	group := []string{"group"}
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: "shard",
			Name: "unowned", Help: "Shards of the group that this process's members see without a member owner now (every member sees the same shards: aggregate with max, not sum)."}, group),
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: "shard",
			Name: "unowned_seconds", Help: "Each span in which a member of this process saw a shard of the group without a member owner, from its view of the group's keys; its sum is unowned shard-seconds (aggregate with max over members, not sum).", Buckets: holdBuckets}, group)
}

// ShardGroupJoined starts at 0 the series of group:
// concurrency_shard_unowned{group} and
// concurrency_shard_unowned_seconds{group}. It changes no value.
func (m *Metrics) ShardGroupJoined(group string, n int) {
	if m == nil {
		return
	}
	m.shardUnowned.WithLabelValues(group)
	m.shardUnownedSpans.WithLabelValues(group)
}

// ShardUnownedStarted adds one to concurrency_shard_unowned{group}.
func (m *Metrics) ShardUnownedStarted(group string, shard int) {
	if m == nil {
		return
	}
	m.shardUnowned.WithLabelValues(group).Inc()
}

// ShardUnownedEnded takes one from concurrency_shard_unowned{group} and
// observes the span in concurrency_shard_unowned_seconds{group}.
func (m *Metrics) ShardUnownedEnded(group string, shard int, unowned time.Duration) {
	if m == nil {
		return
	}
	m.shardUnowned.WithLabelValues(group).Dec()
	m.shardUnownedSpans.WithLabelValues(group).Observe(unowned.Seconds())
}
