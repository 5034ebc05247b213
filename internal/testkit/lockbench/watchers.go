package lockbench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// WatcherMetric is the etcd server's gauge of the watchers it holds
// (go.etcd.io/etcd/server/v3/storage/mvcc, metrics.go: watcherGauge). A
// member counts every watcher it serves, synced, unsynced or victim, from
// the watch's creation to its cancellation on the server.
const WatcherMetric = "etcd_debugging_mvcc_watcher_total"

// WatcherCount returns the number of watchers the cluster's members hold
// right now.
type WatcherCount func(ctx context.Context) (float64, error)

// WatchStreamMetric is the etcd server's gauge of the gRPC watch streams
// it serves (go.etcd.io/etcd/server/v3/storage/mvcc, metrics.go:
// watchStreamGauge), shared like WatcherMetric.
const WatchStreamMetric = "etcd_debugging_mvcc_watch_stream_total"

// GatheredWatchers reads WatcherMetric from g. The gauge is a package
// variable of etcd's mvcc package, registered with prometheus's default
// registry: with members running in this process, prometheus.DefaultGatherer
// holds one gauge that all of them add to, so its value is the cluster's
// total.
func GatheredWatchers(g prometheus.Gatherer) WatcherCount { return GatheredGauge(g, WatcherMetric) }

// GatheredGauge reads the gauge name from g, summed over its samples.
func GatheredGauge(g prometheus.Gatherer, name string) WatcherCount {
	return func(context.Context) (float64, error) {
		mfs, err := g.Gather()
		if err != nil {
			return 0, err
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
			return sum, nil
		}
		return 0, fmt.Errorf("lockbench: no %s in this process's metrics", name)
	}
}

// ScrapedWatchers sums WatcherMetric over the /metrics pages of endpoints,
// one per member of a cluster that runs outside this process.
func ScrapedWatchers(endpoints []string) WatcherCount { return ScrapedGauge(endpoints, WatcherMetric) }

// ScrapedGauge sums the unlabelled gauge name over the /metrics pages of
// endpoints.
func ScrapedGauge(endpoints []string, name string) WatcherCount {
	return func(ctx context.Context) (float64, error) {
		var sum float64
		for _, ep := range endpoints {
			v, err := scrapeGauge(ctx, strings.TrimSuffix(ep, "/")+"/metrics", name)
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	}
}

// scrapeGauge reads the unlabelled sample of name from the Prometheus text
// exposition at url.
func scrapeGauge(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("lockbench: GET %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		return strconv.ParseFloat(strings.TrimSpace(v), 64)
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("lockbench: reading %s: %w", url, err)
	}
	return 0, fmt.Errorf("lockbench: no %s at %s", name, url)
}
