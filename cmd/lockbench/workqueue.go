package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/lockbench"
)

// The workq group (issue 53): recipes.WorkQueue beside etcd's recipe
// Queue, the same items drained by 1, 8 and 64 consumers (each on a
// session of its own, spread over -clients clients), and both again with
// one take in five a crash (the consumer drops its item and starts over
// on a new session). Raw Put, timed in the same group, is the floor: a
// WorkQueue delivery costs three commits (put, claim, ack), an etcd Queue
// item two (put, delete); puts are outside the drain's window here.

// workqItems is the number of items each drain takes.
const workqItems = 640

// runWorkQueue runs the group and writes its section.
func runWorkQueue(ctx context.Context, cfg config, root string, w io.Writer) error {
	load := loadavg()
	var counter lockbench.Counter
	cs, closeClients, err := newClients(cfg.endpoints, cfg.clients, counter.Option)
	if err != nil {
		return err
	}
	defer closeClients()
	env := lockbench.Env{Clients: cs, Counter: &counter}
	progress("work queue: raw Put")
	put, err := lockbench.RawPut(ctx, lockbench.Env{Clients: cs[:1], Counter: &counter}, root+"/workq-put", lockbench.Limits{Duration: cfg.duration})
	if err != nil {
		return err
	}
	putRate := float64(put.Ops) / put.Elapsed.Seconds()
	var rows []lockbench.WorkQueueResult
	for _, crash := range []int{0, 5} {
		for _, n := range []int{1, 8, 64} {
			if crash > 0 && n != 8 {
				continue
			}
			for _, impl := range []string{lockbench.WQOurs, lockbench.WQEtcd} {
				progress("work queue: %s, %d consumers, crash 1 in %d", impl, n, crash)
				r, err := lockbench.WorkQueueDrain(ctx, env, impl, fmt.Sprintf("%s/workq-%d-%d-%d", root, n, crash, len(rows)), n, workqItems, crash, 3*time.Second)
				if err != nil {
					return fmt.Errorf("%s, %d consumers: %w", impl, n, err)
				}
				rows = append(rows, r)
			}
		}
	}
	fmt.Fprintf(w, "\n## Work queues\n\n")
	fmt.Fprintf(w, "%d items put, then drained by N consumers (each on a session of its own, over %d clients); load average at the start %s, at the end %s. "+
		"Raw Put (one client, one at a time) in the same run: %.0f/s. A WorkQueue item is claimed (one transaction) and acknowledged (AckTxn, one transaction); "+
		"an etcd Queue item is deleted. Requests: unary RPCs and watch requests per item, counted by client interceptors.\n\n",
		workqItems, len(cs), load, loadavg(), putRate)
	fmt.Fprintf(w, "| queue | consumers | crash | items/s | vs raw Put | requests per item | lost | done twice | redelivered |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, r := range rows {
		crash := "none"
		if i >= 6 {
			crash = fmt.Sprintf("1 in 5 (%d)", r.Crashes)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.0f | %.2f× | %.1f | %d | %d | %d |\n", r.Impl, r.Consumers, crash, r.PerSec(), r.PerSec()/putRate,
			r.Requests(), r.Lost, r.Duplicated, r.Redelivered)
	}
	return nil
}
