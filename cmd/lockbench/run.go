package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/embedetcd"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/lockbench"
)

var (
	ours  = lockbench.Ours
	etcd  = lockbench.Etcd
	etcd2 = func() lockbench.Impl { i := lockbench.Etcd; i.Name = "etcd#2"; return i }()
)

// pair is one workload measured for both packages; sessions is the session
// count of a contended workload.
type pair struct {
	ours, etcd lockbench.Result
	sessions   int
}

type queuePair struct{ ours, etcd lockbench.QueueResult }

type manyPair struct{ ours, etcd lockbench.ManyResult }

type rwPair struct{ ours, etcd lockbench.RWResult }

type lost struct {
	impl    lockbench.Impl
	samples []time.Duration
	capped  int
}

// results is everything one run measured.
type results struct {
	put, get    lockbench.Result
	uncontended map[string]lockbench.Result // by package name, with etcd#2
	tryLock     pair
	contended   []pair
	anatomy     []anatomyPair
	many        *manyPair // nil with -many 0
	watchersSrc string    // where the server's watcher count came from
	queue       []queuePair
	semaphore   *lockbench.Result       // nil when not run
	semWeighted *lockbench.Result       // weight 2 of twice the limit; nil when not run
	semQueue    []lockbench.QueueResult // by -sem-waiters
	rw          []rwPair                // by -rw-reads
	lost        []lost
	overhead    *overhead    // nil with -metrics=false
	elections   int          // raft elections during the run (embedded cluster); -1 if unknown
	idle        *idleResults // nil when not run
}

// run starts (or connects to) the cluster, runs every workload for both
// packages, and writes the report to w.
func run(ctx context.Context, cfg config, w io.Writer) (err error) {
	where := strings.Join(cfg.endpoints, ",")
	watchers := lockbench.ScrapedWatchers(cfg.endpoints)
	watchersSrc := fmt.Sprintf("`%s`, summed over the members' /metrics pages", lockbench.WatcherMetric)
	server := lockbench.ScrapedServerMsgs(cfg.endpoints)
	streams := lockbench.ScrapedGauge(cfg.endpoints, lockbench.WatchStreamMetric)
	serverSrc := "`grpc_server_msg_received_total` and `grpc_server_handled_total`, summed over the members' /metrics pages"
	embedded := false
	elections := func() int { return -1 } // unknown with -endpoints
	if len(cfg.endpoints) == 0 {
		progress("starting an embedded %d-member cluster", cfg.members)
		clus, err := embedetcd.StartWith(ctx, cfg.members, embedetcd.Options{PeerDelay: cfg.peerDelay})
		if err != nil {
			return err
		}
		defer clus.Close()
		cfg.endpoints = clus.Endpoints
		embedded = true
		term0 := clus.Term()
		elections = func() int { return int(clus.Term() - term0) }
		where = fmt.Sprintf("embedded %d-member cluster (in this process, loopback)", cfg.members)
		if cfg.peerDelay > 0 {
			where += fmt.Sprintf("; slow commits: every peer connection delayed by %v each way (-peer-delay)", cfg.peerDelay)
		}
		// The members' mvcc packages add to one gauge in this process's
		// default registry: read it there.
		watchers = lockbench.GatheredWatchers(prometheus.DefaultGatherer)
		watchersSrc = fmt.Sprintf("`%s`, the gauge the in-process members share, read from prometheus.DefaultGatherer", lockbench.WatcherMetric)
		// The members share one set of gRPC server metrics, registered
		// with the default registry by the first of them.
		server = lockbench.GatheredServerMsgs(prometheus.DefaultGatherer)
		streams = lockbench.GatheredGauge(prometheus.DefaultGatherer, lockbench.WatchStreamMetric)
		serverSrc = "`grpc_server_msg_received_total` and `grpc_server_handled_total`, the gRPC server metrics the in-process members share, read from prometheus.DefaultGatherer"
	}
	root := cfg.prefix
	if root == "" {
		root = fmt.Sprintf("/lockbench/%d", time.Now().UnixNano())
	}
	var counter lockbench.Counter
	cs, closeClients, err := newClients(cfg.endpoints, cfg.clients, counter.Option)
	if err != nil {
		return err
	}
	defer closeClients()
	defer func() { err = errors.Join(err, checkEmpty(ctx, cs[0], root)) }()

	env := func(n int) lockbench.Env {
		return lockbench.Env{Clients: cs[:min(n, len(cs))], Counter: &counter, Watchers: watchers}
	}
	lim := func(d time.Duration) lockbench.Limits { return lockbench.Limits{Duration: d, MaxOps: cfg.maxOps} }
	start := time.Now()
	res := results{uncontended: map[string]lockbench.Result{}, watchersSrc: watchersSrc}

	// Raw Put, uncontended and TryLock run in interleaved rounds, in a
	// different order each round, so that drift in the machine's load
	// falls on all of them alike.
	slice := cfg.duration / time.Duration(cfg.rounds)
	for round := 0; round < cfg.rounds && cfg.runs("basic"); round++ {
		progress("round %d/%d: raw Put and Get, uncontended Lock+Unlock, TryLock miss", round+1, cfg.rounds)
		steps := []func() error{
			func() error {
				r, err := lockbench.RawPut(ctx, env(1), root+"/put", lim(slice))
				res.put.Merge(r)
				return err
			},
			func() error {
				r, err := lockbench.RawGet(ctx, env(1), root+"/get", lim(slice))
				res.get.Merge(r)
				return err
			},
		}
		for _, impl := range []lockbench.Impl{ours, etcd, etcd2} {
			steps = append(steps, func() error {
				r, err := lockbench.Uncontended(ctx, env(1), impl, root+"/uncontended/"+impl.Name, lim(slice))
				prev := res.uncontended[impl.Name]
				prev.Merge(r)
				res.uncontended[impl.Name] = prev
				return err
			})
		}
		for _, p := range []struct {
			impl lockbench.Impl
			into *lockbench.Result
		}{{ours, &res.tryLock.ours}, {etcd, &res.tryLock.etcd}} {
			steps = append(steps, func() error {
				r, err := lockbench.TryLockMiss(ctx, env(2), p.impl, root+"/trylock/"+p.impl.Name, lim(slice))
				p.into.Merge(r)
				return err
			})
		}
		for i := range steps {
			if err := steps[(i+round)%len(steps)](); err != nil {
				return err
			}
		}
	}

	for _, n := range cfg.sessions {
		if !cfg.runs("contended") {
			break
		}
		o, e, err := both(func(impl lockbench.Impl) (lockbench.Result, error) {
			progress("contended, %d sessions, %s", n, impl.Name)
			return lockbench.Contended(ctx, env(n), impl, fmt.Sprintf("%s/contended-%d/%s", root, n, impl.Name), n, lim(cfg.duration))
		})
		if err != nil {
			return err
		}
		res.contended = append(res.contended, pair{o, e, n})
	}

	if cfg.runs("anatomy") {
		if res.anatomy, err = runAnatomy(ctx, cfg, root, embedded); err != nil {
			return err
		}
	}

	if n := cfg.many; n > 0 && cfg.runs("many") {
		o, e, err := both(func(impl lockbench.Impl) (lockbench.ManyResult, error) {
			progress("many locks, %d sessions, %s", n, impl.Name)
			return lockbench.ManyLocks(ctx, env(n), impl, fmt.Sprintf("%s/many-%d/%s", root, n, impl.Name), n, cfg.manyHold, lim(cfg.duration))
		})
		if err != nil {
			return err
		}
		res.many = &manyPair{o, e}
	}

	for _, n := range cfg.waiters {
		if !cfg.runs("queue") {
			break
		}
		o, e, err := both(func(impl lockbench.Impl) (lockbench.QueueResult, error) {
			progress("queue of %d waiters, %s (child process)", n, impl.Name)
			return childQueue(ctx, cfg, impl, fmt.Sprintf("%s/queue-%d/%s", root, n, impl.Name), n)
		})
		if err != nil {
			return err
		}
		res.queue = append(res.queue, queuePair{o, e})
	}

	if err := runSemaphore(ctx, cfg, env, lim, root, &res); err != nil {
		return err
	}

	for _, reads := range cfg.rwReads {
		if cfg.rwSessions == 0 || !cfg.runs("rwmutex") {
			break
		}
		var p rwPair
		for _, x := range []struct {
			impl lockbench.RWImpl
			into *lockbench.RWResult
		}{{lockbench.OursRW, &p.ours}, {lockbench.EtcdRW, &p.etcd}} {
			progress("RWMutex, %d sessions, %.0f%% reads, %s", cfg.rwSessions, 100*reads, x.impl.Name)
			r, err := lockbench.RWMixed(ctx, env(cfg.rwSessions), x.impl,
				fmt.Sprintf("%s/rw-%d-%.0f/%s", root, cfg.rwSessions, 100*reads, strings.ReplaceAll(x.impl.Name, " ", "-")), cfg.rwSessions, reads, lim(cfg.duration))
			if err != nil {
				return err
			}
			*x.into = r
		}
		res.rw = append(res.rw, p)
	}

	if cfg.metrics && cfg.runs("metrics") {
		if res.overhead, err = measureOverhead(ctx, cfg, env, root); err != nil {
			return err
		}
	}

	for _, impl := range []lockbench.Impl{ours, etcd} {
		if !cfg.runs("lost") {
			break
		}
		progress("lost-lock notice, %s, %d trials, TTL %d s", impl.Name, cfg.lostTrials, cfg.lostTTL)
		samples, capped, err := lockbench.LostNotice(ctx, env(2), impl, root+"/lost/"+impl.Name, cfg.lostTTL, cfg.lostTrials, cfg.lostBound)
		if err != nil {
			return err
		}
		res.lost = append(res.lost, lost{impl, samples, capped})
	}

	if cfg.runs("idle") {
		if res.idle, err = runIdle(ctx, cfg, lockbench.Env{Watchers: watchers, WatchStreams: streams}, server, root); err != nil {
			return err
		}
		res.idle.serverSrc = serverSrc
	}

	progress("done in %v", time.Since(start).Round(time.Second))
	res.elections = elections()
	report(w, cfg, where, time.Since(start), res)
	if res.overhead != nil {
		reportOverhead(w, res.overhead)
	}
	if cfg.runs("slow") {
		if err := runSlow(ctx, cfg, root, w); err != nil {
			return err
		}
	}
	if res.idle != nil {
		idleSection(w, cfg, res.idle)
	}
	if cfg.runs("rebalance") { // rebalance.go
		if err := runRebalance(ctx, cfg, root, w); err != nil {
			return err
		}
	}
	if cfg.runs("workq") { // workqueue.go
		if err := runWorkQueue(ctx, cfg, root, w); err != nil {
			return err
		}
	}
	return nil
}

// runSemaphore runs the semaphore workloads, this package's only: the
// contended one and the queues. The queues run in this process, with an
// uncounted client of their own for the holder.
func runSemaphore(ctx context.Context, cfg config, env func(int) lockbench.Env, lim func(time.Duration) lockbench.Limits, root string, res *results) error {
	if !cfg.runs("semaphore") {
		return nil
	}
	impl := lockbench.OursSemaphore(cfg.semLimit)
	if n := cfg.semSessions; n > 0 {
		progress("semaphore of %d, %d sessions, %s", cfg.semLimit, n, impl.Name)
		r, err := lockbench.Contended(ctx, env(n), impl, fmt.Sprintf("%s/semaphore-%d-%d", root, cfg.semLimit, n), n, lim(cfg.duration))
		if err != nil {
			return err
		}
		res.semaphore = &r
		// As many holders at once, each taking 2 of twice the permits:
		// the cost of weights alone.
		wimpl := lockbench.OursWeightedSemaphore(2*cfg.semLimit, 2)
		progress("semaphore of %d, weight 2 each, %d sessions, %s", 2*cfg.semLimit, n, wimpl.Name)
		wr, err := lockbench.Contended(ctx, env(n), wimpl, fmt.Sprintf("%s/semaphore-weighted-%d-%d", root, cfg.semLimit, n), n, lim(cfg.duration))
		if err != nil {
			return err
		}
		res.semWeighted = &wr
	}
	holder, closeHolder, err := newClients(cfg.endpoints, 1)
	if err != nil {
		return err
	}
	defer closeHolder()
	for _, n := range cfg.semWaiters {
		progress("semaphore of %d, queue of %d waiters, %s", cfg.semLimit, n, impl.Name)
		r, err := lockbench.Queue(ctx, env(n), holder[0], impl, fmt.Sprintf("%s/semaphore-queue-%d", root, n), n, cfg.queueTimeout)
		if err != nil {
			return err
		}
		res.semQueue = append(res.semQueue, r)
	}
	return nil
}

// both runs f for this package, then for etcd's.
func both[R any](f func(lockbench.Impl) (R, error)) (o, e R, err error) {
	if o, err = f(ours); err != nil {
		return o, e, err
	}
	e, err = f(etcd)
	return o, e, err
}

// checkEmpty fails if any key is left under the run's prefix.
func checkEmpty(ctx context.Context, c *clientv3.Client, root string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, root+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("checking %s/ is empty: %w", root, err)
	}
	if len(resp.Kvs) > 0 {
		return fmt.Errorf("%d keys left under %s/, first %q", len(resp.Kvs), root, resp.Kvs[0].Key)
	}
	progress("no key left under %s/", root)
	return nil
}

func progress(format string, args ...any) {
	log.Printf(format, args...)
}

// machine describes the machine for the report.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs, GOMAXPROCS %d, %s %s/%s", model, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
