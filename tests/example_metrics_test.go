package concurrency_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	concurrencyprom "github.com/seed-a9d410c6/concurrency/prometheus"
)

func Example_metrics() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()

	// A registry of the program's own (or prometheus.DefaultRegisterer),
	// served with promhttp.HandlerFor(reg, ...) on /metrics.
	reg := prometheus.NewRegistry()
	metrics, err := concurrencyprom.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	// Every lock on these sessions reports to metrics.
	s1, err := concurrency.NewSession(cli, concurrency.WithMetrics(metrics))
	if err != nil {
		log.Fatal(err)
	}
	defer s1.Close()
	s2, err := concurrency.NewSession(cli, concurrency.WithMetrics(metrics))
	if err != nil {
		log.Fatal(err)
	}
	defer s2.Close()

	m1 := concurrency.NewMutex(s1, "/example/metrics")
	m2 := concurrency.NewMutex(s2, "/example/metrics")
	for range 2 {
		if err := m1.Lock(ctx); err != nil {
			log.Fatal(err)
		}
		if err := m2.TryLock(ctx); err != nil {
			fmt.Println("TryLock:", err)
		}
		if err := m1.Unlock(ctx); err != nil {
			log.Fatal(err)
		}
	}

	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP concurrency_lock_acquisitions_total Locks, semaphore permits and leaderships acquired.
# TYPE concurrency_lock_acquisitions_total counter
concurrency_lock_acquisitions_total{kind="mutex"} 2
# HELP concurrency_lock_holds_ended_total Holds ended, by cause: released, lost_key_deleted, lost_lease, session_expired, max_hold, yielded, unhealthy.
# TYPE concurrency_lock_holds_ended_total counter
concurrency_lock_holds_ended_total{cause="lost_key_deleted",kind="mutex"} 0
concurrency_lock_holds_ended_total{cause="lost_lease",kind="mutex"} 0
concurrency_lock_holds_ended_total{cause="max_hold",kind="mutex"} 0
concurrency_lock_holds_ended_total{cause="released",kind="mutex"} 2
concurrency_lock_holds_ended_total{cause="session_expired",kind="mutex"} 0
concurrency_lock_holds_ended_total{cause="unhealthy",kind="mutex"} 0
concurrency_lock_holds_ended_total{cause="yielded",kind="mutex"} 0
# HELP concurrency_lock_trylock_misses_total TryLock, TryAcquire, TryRLock calls that found the lock held.
# TYPE concurrency_lock_trylock_misses_total counter
concurrency_lock_trylock_misses_total{kind="mutex"} 2
`), "concurrency_lock_acquisitions_total", "concurrency_lock_holds_ended_total", "concurrency_lock_trylock_misses_total")
	fmt.Println("metrics as expected:", err == nil)
	// Output:
	// TryLock: mutex: Locked by another session
	// TryLock: mutex: Locked by another session
	// metrics as expected: true
}
