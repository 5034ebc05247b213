package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/embedetcd"
)

type demoOptions struct {
	duration time.Duration
	workers  int
	work     time.Duration
}

func newDemoCommand(conn *connFlags) *cobra.Command {
	o := &demoOptions{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show the lock at work: workers contend for one lock, then the result is checked against etcd",
		Long: `Start a single-member etcd inside this process (on loopback, in a temporary
directory that is removed afterwards), or use the cluster given with
--endpoints or ETCDCTL_ENDPOINTS, and let --workers workers, each with its own
client and session, contend for one lock for --duration. Each holder keeps
the lock for about --work. One line is printed per acquisition: the worker,
the lock key, its create revision (the fencing token) and how long the
worker waited.

Then the run is verified from etcd's own revision history of the lock's keys,
not from what the workers believe: every reported hold must be a key etcd
created and had first in the queue at the revision the worker read it, no
two holds may overlap, tokens must increase, every key that held the lock in
etcd's history must have been reported, and no key may be left. Exit 0 only
if all of that holds, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case o.duration <= 0:
				return usagef("--duration must be positive, not %v", o.duration)
			case o.workers < 1:
				return usagef("--workers must be at least 1, not %d", o.workers)
			case o.work < 0:
				return usagef("--work must not be negative, not %v", o.work)
			}
			return o.run(conn, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.duration, "duration", 3*time.Second, "how long workers keep taking the lock")
	f.IntVar(&o.workers, "workers", 5, "number of workers, each with its own session")
	f.DurationVar(&o.work, "work", 50*time.Millisecond, "how long a holder keeps the lock, on average")
	return cmd
}

func (o *demoOptions) run(conn *connFlags, out io.Writer) error {
	ctx, stop := withSignals()
	defer stop()
	cfg, err := conn.config()
	if err != nil {
		return err
	}
	where := "the cluster at " + strings.Join(cfg.Endpoints, ",")
	if !conn.endpointsGiven() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		clus, err := embedetcd.Start(sctx, 1)
		cancel()
		if err != nil {
			return demoInterrupted(ctx, fmt.Errorf("starting an embedded etcd: %w", err))
		}
		defer clus.Close()
		cfg.Endpoints = clus.Endpoints
		where = "an embedded single member at " + clus.Endpoints[0] + " (temporary data directory)"
	}

	// A fresh name, so that the history holds this run only.
	name := fmt.Sprintf("etcdlock-demo/%08x", rand.Uint32())
	cli, err := conn.dial(ctx, cfg, lockPrefix(name))
	if err != nil {
		return demoInterrupted(ctx, err)
	}
	defer cli.Close()
	rctx, cancel := conn.requestCtx(ctx)
	version := "unknown"
	if st, err := cli.Status(rctx, cfg.Endpoints[0]); err == nil {
		version = st.Version
	}
	start, err := cli.Get(rctx, lockPrefix(name), clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return demoInterrupted(ctx, err)
	}
	if start.Count != 0 {
		return fmt.Errorf("lock %q already has %d keys", name, start.Count)
	}

	fmt.Fprintf(out, "etcd %s, %s\n", version, where)
	fmt.Fprintf(out, "%d workers, each with its own session, contend for lock %q for %v\n\n", o.workers, name, o.duration)
	acqs, err := o.contend(ctx, conn, cfg, name, out)
	if err != nil {
		return demoInterrupted(ctx, withCode(exitError, err))
	}

	// Every session is closed: its key, if any, is gone with its lease.
	rctx, cancel = conn.requestCtx(ctx)
	end, err := cli.Get(rctx, lockPrefix(name), clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return demoInterrupted(ctx, err)
	}
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	events, err := readHistory(hctx, cli, lockPrefix(name), start.Header.Revision+1, end.Header.Revision)
	cancel()
	if err != nil {
		return demoInterrupted(ctx, withCode(exitError, err))
	}
	lives, err := replay(events)
	if err != nil {
		return err
	}
	v := verify(acqs, lives)
	printSummary(out, v, acqs, o.workers, start.Header.Revision+1, end.Header.Revision, len(events))
	if len(v.Problems) > 0 {
		return fmt.Errorf("verification against etcd's history failed:\n  %s", strings.Join(v.Problems, "\n  "))
	}
	return nil
}

// demoInterrupted reports a signal that ended the demo rather than err.
func demoInterrupted(ctx context.Context, err error) error {
	return orInterrupted(ctx, "during the demo", err)
}

// contend runs the workers until the duration has passed, printing each
// acquisition, and returns them. A worker starts no Lock after the
// duration, but finishes the one it is in, so that every key that reaches
// the head of the queue is a reported hold.
func (o *demoOptions) contend(ctx context.Context, conn *connFlags, cfg clientv3.Config, name string, out io.Writer) ([]acquisition, error) {
	end := time.Now().Add(o.duration)
	// A safety net: the queue drains in o.workers holds after end.
	ctx, cancel := context.WithDeadline(ctx, end.Add(30*time.Second+time.Duration(o.workers)*o.work))
	defer cancel()

	var (
		mu      sync.Mutex // guards acqs and printing
		acqs    []acquisition
		holders atomic.Int32 // holders in this process, for a local check
		wg      sync.WaitGroup
	)
	fmt.Fprintf(out, "%5s  %6s  %6s  %8s  %s\n", "#", "worker", "token", "waited", "key")
	errc := make(chan error, o.workers)
	for w := 1; w <= o.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- o.worker(ctx, conn, cfg, name, w, end, func(a acquisition) error {
				if n := holders.Add(1); n != 1 {
					return fmt.Errorf("worker %d: %d holders at once in this process", w, n)
				}
				mu.Lock()
				acqs = append(acqs, a)
				fmt.Fprintf(out, "%5d  %6d  %6d  %8v  %s\n", len(acqs), a.Worker, a.Token, roundAge(a.Waited), a.Key)
				mu.Unlock()
				return nil
			}, func() { holders.Add(-1) })
		}()
	}
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	fmt.Fprintln(out)
	return acqs, errors.Join(errs...)
}

// worker takes and releases the lock until end, with its own client and
// session, calling held after each acquisition and released before each
// release.
func (o *demoOptions) worker(ctx context.Context, conn *connFlags, cfg clientv3.Config, name string, w int, end time.Time, held func(acquisition) error, released func()) error {
	cli, err := clientv3.New(cfg)
	if err != nil {
		return fmt.Errorf("worker %d: %w", w, err)
	}
	defer cli.Close()
	s, closeSession, err := startSession(ctx, conn, cli, 10)
	if err != nil {
		return fmt.Errorf("worker %d: %w", w, err)
	}
	defer closeSession(conn.commandTimeout)
	m := concurrency.NewMutex(s, name)
	for time.Now().Before(end) {
		t0 := time.Now()
		if err := m.Lock(ctx); err != nil {
			return fmt.Errorf("worker %d: Lock: %w", w, err)
		}
		err := held(acquisition{Worker: w, Key: m.Key(), Token: m.Token(), AcquiredRev: m.Header().Revision, Waited: time.Since(t0)})
		if err == nil {
			// The work: keep the lock for o.work on average.
			t := time.NewTimer(o.work/2 + rand.N(o.work+1))
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		released()
		uctx, cancel := conn.requestCtx(context.WithoutCancel(ctx))
		uerr := m.Unlock(uctx)
		cancel()
		if err = errors.Join(err, uerr); err != nil {
			return fmt.Errorf("worker %d: %w", w, err)
		}
	}
	return nil
}

func printSummary(out io.Writer, v verdict, acqs []acquisition, workers int, from, to int64, events int) {
	perWorker := make([]int, workers+1)
	var waits []time.Duration
	for _, a := range acqs {
		perWorker[a.Worker]++
		waits = append(waits, a.Waited)
	}
	var per []string
	for w := 1; w <= workers; w++ {
		per = append(per, fmt.Sprintf("w%d %d", w, perWorker[w]))
	}
	fmt.Fprintf(out, "summary, verified from etcd's revision history (revisions %d to %d, %d events on the lock's keys):\n", from, to, events)
	fmt.Fprintf(out, "  acquisitions       %d reported by the workers, %d holds in etcd's history\n", v.Reported, v.Holds)
	fmt.Fprintf(out, "  per worker         %s\n", strings.Join(per, ", "))
	fmt.Fprintf(out, "  overlapping holds  %d\n", v.Overlaps)
	fmt.Fprintf(out, "  keys left          %d\n", v.Left)
	if len(waits) > 0 {
		slices.Sort(waits)
		fmt.Fprintf(out, "  wait for the lock  median %v, max %v\n", roundAge(waits[len(waits)/2]), roundAge(waits[len(waits)-1]))
	}
	if len(v.Problems) == 0 {
		fmt.Fprintln(out, "PASS: one holder at a time, in queue order, with increasing fencing tokens")
	} else {
		fmt.Fprintf(out, "FAIL: %d problems\n", len(v.Problems))
	}
}
