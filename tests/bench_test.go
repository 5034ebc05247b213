package concurrency_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/lockbench"
)

// The benchmarks run each case for this package (impl=ours) and for etcd's
// (impl=etcd) on the shared cluster, so that benchstat can compare them:
//
//	go test -run '^$' -bench . -benchmem -count=10 . > bench.txt
//	benchstat -col /impl bench.txt
//
// Besides ns/op they report unary RPCs and watch events per operation, and
// for contended runs the mean and p90 handoff. B/op and allocs/op count the
// whole process, including the shared cluster's in-process members: compare
// them only between the two packages. cmd/lockbench runs more workloads,
// with percentiles; BENCHMARKS.md has its numbers.

// benchBound bounds the measured window of one benchmark run, whatever b.N.
const benchBound = 2 * time.Minute

// benchEnv returns n clients of the shared cluster with one counter.
func benchEnv(b *testing.B, n int) lockbench.Env {
	env := lockbench.Env{Counter: new(lockbench.Counter)}
	for i := 0; i < n; i++ {
		env.Clients = append(env.Clients, etcdtest.NewClient(b, etcdtest.Endpoints(), env.Counter.Option))
	}
	return env
}

// benchLimits is a window of b.N operations, timed by b.
func benchLimits(b *testing.B) lockbench.Limits {
	return lockbench.Limits{Duration: benchBound, MaxOps: b.N, OnStart: b.ResetTimer, OnStop: b.StopTimer}
}

// benchFunc is a lockbench workload bound to its arguments but the package.
type benchFunc func(ctx context.Context, env lockbench.Env, impl lockbench.Impl, pfx string, lim lockbench.Limits) (lockbench.Result, error)

// benchWorkload runs w for both packages, each with clients of its own.
func benchWorkload(b *testing.B, clients int, w benchFunc) {
	for _, impl := range []lockbench.Impl{lockbench.Ours, lockbench.Etcd} {
		b.Run("impl="+impl.Name, func(b *testing.B) {
			pfx := etcdtest.Begin(b)
			r, err := w(b.Context(), benchEnv(b, clients), impl, pfx, benchLimits(b))
			if err != nil {
				b.Fatal(err)
			}
			st := r.Stats()
			b.ReportMetric(st.RPC, "rpcs/op")
			b.ReportMetric(st.Events, "events/op")
			if r.Ops > 1 && len(r.Unlocks) > 0 { // a contended run: its samples are handoffs
				b.ReportMetric(float64(st.Mean.Nanoseconds()), "handoff-mean-ns")
				b.ReportMetric(float64(st.P90.Nanoseconds()), "handoff-p90-ns")
			}
		})
	}
}

func BenchmarkLockUnlock(b *testing.B) { benchWorkload(b, 1, lockbench.Uncontended) }

func BenchmarkTryLockMiss(b *testing.B) { benchWorkload(b, 2, lockbench.TryLockMiss) }

// BenchmarkContended times acquisitions (ns/op) by sessions that each loop
// Lock and Unlock, one client per session.
func BenchmarkContended(b *testing.B) {
	for _, n := range []int{2, 8, 32} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			benchWorkload(b, n, func(ctx context.Context, env lockbench.Env, impl lockbench.Impl, pfx string, lim lockbench.Limits) (lockbench.Result, error) {
				return lockbench.Contended(ctx, env, impl, pfx, n, lim)
			})
		})
	}
}

// BenchmarkManyLocks times Lock+Unlock cycles (ns/op, all sessions
// together) of 16 sessions, each on a lock of its own.
func BenchmarkManyLocks(b *testing.B) {
	benchWorkload(b, 4, func(ctx context.Context, env lockbench.Env, impl lockbench.Impl, pfx string, lim lockbench.Limits) (lockbench.Result, error) {
		r, err := lockbench.ManyLocks(ctx, env, impl, pfx, 16, 0, lim)
		return r.Result, err
	})
}

// BenchmarkSemaphoreContended times acquisitions of a Semaphore of 4 by 16
// sessions (this package only: etcd has no semaphore).
func BenchmarkSemaphoreContended(b *testing.B) {
	const n = 16
	pfx := etcdtest.Begin(b)
	r, err := lockbench.Contended(b.Context(), benchEnv(b, n), lockbench.OursSemaphore(4), pfx, n, benchLimits(b))
	if err != nil {
		b.Fatal(err)
	}
	st := r.Stats()
	b.ReportMetric(st.RPC, "rpcs/op")
	b.ReportMetric(st.Events, "events/op")
}
