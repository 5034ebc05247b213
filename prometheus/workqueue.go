package concurrencyprom

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a9d410c6/concurrency/recipes"
)

// This file holds the work queue metrics (recipes.WorkQueue, issue 53): a
// collector that reads the queue's counts from etcd at each scrape, and
// counters of the deliveries a consumer observes.

// WorkQueueCollector exports the state of recipes.WorkQueues, read from
// etcd at each scrape (one transaction per queue: WorkQueue.Stats), and
// counts the deliveries given to ObserveDelivery:
//
//	concurrency_workqueue_items{queue,state}   ready, in_flight, delayed, dead
//	concurrency_workqueue_oldest_age_seconds{queue}  age of the oldest item ready or in flight (0 if none), by the producer's clock
//	concurrency_workqueue_deliveries_total{queue}
//	concurrency_workqueue_redeliveries_total{queue}  deliveries after the first (a Nack, a lost claim)
//	concurrency_workqueue_scrape_errors_total{queue}  scrapes whose read of etcd failed (the gauges are then absent)
//
// The gauges are the queue's, the same from every process that exports
// them: aggregate with max, not sum. Register it with a
// prometheus.Registerer; it starts no goroutine.
type WorkQueueCollector struct {
	queues  []*recipes.WorkQueue
	timeout time.Duration
	items   *prometheus.Desc
	age     *prometheus.Desc
	deliv   *prometheus.CounterVec
	redeliv *prometheus.CounterVec
	errs    *prometheus.CounterVec
}

// NewWorkQueueCollector returns a collector of queues in namespace ns (""
// for "concurrency"), whose reads of etcd at a scrape are bounded by
// timeout (5 s if 0 or less).
func NewWorkQueueCollector(ns string, timeout time.Duration, queues ...*recipes.WorkQueue) *WorkQueueCollector {
	if ns == "" {
		ns = "concurrency"
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	q := []string{"queue"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "workqueue", Name: name, Help: help}, q)
	}
	c := &WorkQueueCollector{queues: queues, timeout: timeout,
		items: prometheus.NewDesc(prometheus.BuildFQName(ns, "workqueue", "items"),
			"Items of the work queue by state (ready, in_flight, delayed, dead), read from etcd at the scrape; the same from every exporter: aggregate with max.", []string{"queue", "state"}, nil),
		age: prometheus.NewDesc(prometheus.BuildFQName(ns, "workqueue", "oldest_age_seconds"),
			"Age of the oldest item ready or in flight (0 if none), by the producer's clock.", q, nil),
		deliv:   counter("deliveries_total", "Deliveries this process took (given to ObserveDelivery)."),
		redeliv: counter("redeliveries_total", "Deliveries this process took that were not an item's first (after a Nack or a lost claim)."),
		errs:    counter("scrape_errors_total", "Scrapes whose read of the queue in etcd failed."),
	}
	for _, wq := range queues {
		c.deliv.WithLabelValues(wq.Name())
		c.redeliv.WithLabelValues(wq.Name())
		c.errs.WithLabelValues(wq.Name())
	}
	return c
}

// ObserveDelivery counts d, taken from the queue named queue.
func (c *WorkQueueCollector) ObserveDelivery(queue string, d *recipes.Delivery) {
	if c == nil || d == nil {
		return
	}
	c.deliv.WithLabelValues(queue).Inc()
	if d.Count() > 1 {
		c.redeliv.WithLabelValues(queue).Inc()
	}
}

// Describe implements prometheus.Collector.
func (c *WorkQueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.items
	ch <- c.age
	c.deliv.Describe(ch)
	c.redeliv.Describe(ch)
	c.errs.Describe(ch)
}

// Collect implements prometheus.Collector: it reads each queue's Stats.
func (c *WorkQueueCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.queues {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		st, err := q.Stats(ctx)
		cancel()
		if err != nil {
			c.errs.WithLabelValues(q.Name()).Inc()
			continue
		}
		for state, n := range map[string]int64{"ready": st.Ready, "in_flight": st.InFlight, "delayed": st.Delayed, "dead": st.Dead} {
			ch <- prometheus.MustNewConstMetric(c.items, prometheus.GaugeValue, float64(n), q.Name(), state)
		}
		age := 0.0
		if !st.Oldest.IsZero() {
			age = max(time.Since(st.Oldest).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, age, q.Name())
	}
	c.deliv.Collect(ch)
	c.redeliv.Collect(ch)
	c.errs.Collect(ch)
}
