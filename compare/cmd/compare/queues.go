package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/seed-a9d410c6/concurrency/compare"
)

// runQueues is -queues (issue 53): the work queues side by side, on a
// 3-process etcd cluster and a Redis master, the same items through 1, 8
// and 64 consumers, and through 8 of which one take in five is a crash.
func runQueues(out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	t0, load0 := time.Now(), loadavg()
	dir, err := os.MkdirTemp("", "compare-queues-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env, err := compare.StartEnv(ctx, dir, []string{compare.This, compare.RedisLock})
	if err != nil {
		return err
	}
	defer env.Close()
	addrs := map[string][]string{compare.QWorkQueue: env.ClientAddrs(compare.This), compare.QEtcdQueue: env.ClientAddrs(compare.This),
		compare.QRedis: env.ClientAddrs(compare.RedisLock)}
	const items = 500
	var rows []compare.QueueResult
	for _, crash := range []int{0, 5} {
		for _, n := range []int{1, 8, 64} {
			if crash > 0 && n != 8 {
				continue
			}
			for _, q := range compare.Queues {
				logf("queues: %s, %d consumers, crash 1 in %d", q, n, crash)
				r, err := compare.RunQueue(ctx, q, addrs[q], fmt.Sprintf("/queues/%s-%d-%d", q, n, crash), n, items, crash, 3*time.Second)
				if err != nil {
					return fmt.Errorf("%s, %d consumers: %w", q, n, err)
				}
				rows = append(rows, r)
			}
		}
	}
	fmt.Fprintf(out, "Run of `go run ./cmd/compare -queues` (in compare/) on %s, %d cores, %s; %s in all. Load average before: %s; after: %s. %s; %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version(), time.Since(t0).Round(time.Second), load0, loadavg(),
		redisVersion(), etcdVersion(env))
	fmt.Fprintf(out, "%d items, put by one producer as fast as it can while N consumers take and acknowledge them; end to end is put to acknowledgement. "+
		"A crash drops the item taken: this module's queue revokes the consumer's session (as etcd does when a dead consumer's lease expires), "+
		"etcd's Queue has already deleted it, Redis keeps it in the consumer's processing list (no reaper runs).\n\n", items)
	fmt.Fprintln(out, "| queue | consumers | crash | items/s | end to end p50 | p99 | lost | done twice |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		crash := "none"
		if r.Crashes > 0 {
			crash = fmt.Sprintf("1 in 5 (%d)", r.Crashes)
		}
		fmt.Fprintf(out, "| %s | %d | %s | %.0f | %v | %v | %d | %d |\n", compare.QueueLabel(r.Queue), r.Consumers, crash,
			float64(r.Done)/r.Elapsed.Seconds(), r.P50.Round(100*time.Microsecond), r.P99.Round(100*time.Microsecond), r.Lost, r.Duplicated)
	}
	return nil
}
