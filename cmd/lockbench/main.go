// Command lockbench runs the same lock workloads against this module's
// package and against etcd's go.etcd.io/etcd/client/v3/concurrency, in one
// process and one run, on one cluster, and prints them side by side with
// the ratio of the two: latency (mean, p50, p90, p99), throughput, and the
// unary RPCs, watch requests and watch events per operation, counted by gRPC
// client interceptors.
//
// With no flags it starts an embedded 3-member etcd cluster on loopback and
// takes a few minutes; -endpoints runs against a real cluster instead, and
// -quick runs a tiny workload in seconds, to keep the harness working.
//
// Workloads, each for both packages:
//
//   - raw Put: a single-key Put, the floor for a lock operation, and raw
//     Get: a linearizable read, which a handoff needs once after the watch
//     event;
//   - uncontended Lock+Unlock on one session, with etcd's package also timed
//     a second time ("etcd#2"): the ratio of its two runs is the noise;
//   - TryLock on a lock held by another session;
//   - contended: N sessions, each looping Lock and Unlock; a handoff is the
//     time from the holder's Unlock returning to the next holder's Lock
//     returning, and ops/s counts acquisitions;
//   - anatomy: the contended workload again, in a child process that runs
//     no etcd member, with every handoff cut into segments where the
//     clients see it (holder's Unlock called, its delete answered, the
//     delete's watch event at the next waiter's client, that waiter's
//     re-check read sent and answered, its Lock returned, its Unlock
//     called), by gRPC client interceptors on the child's own clients; and
//     the CPU time per acquisition of the clients (the child) and of the
//     embedded members (this process);
//   - many locks: N sessions, each looping Lock and Unlock on a lock of its
//     own, all at once; ops/s sums the sessions, and the server's watchers
//     (the etcd_debugging_mvcc_watcher_total gauge) are read during the
//     window and divided by the locks held at each reading;
//   - queue: N waiters queued on a held lock, then drained; traffic per
//     handoff, and heap bytes and goroutines per session and per waiting
//     Lock (measured in a child process that runs no etcd member);
//   - metrics overhead (-metrics): uncontended, and contended on 8 sessions,
//     with this package's metrics off and on, in interleaved rounds;
//   - lost-lock notice: the time from a lease revoke sent by another client
//     to the holder being told: Mutex.Ctx() here, Session.Done() in etcd's
//     package, which learns it only from its next keepalive (TTL/3).
//
// Two more workloads compare what etcd's package has no counterpart for, or
// has only in its recipes:
//
//   - semaphore, this package only (etcd has no semaphore): N sessions, each
//     with one Semaphore of limit L cycling Acquire and Release; a handoff is
//     the time from a Release returning to the return of the Acquire that
//     took its permit. And a semaphore queue: L permits held, N waiters
//     queued behind them, then drained, to show the traffic per handoff
//     does not grow with the queue;
//   - RWMutex, this package's against etcd's recipe
//     (go.etcd.io/etcd/client/v3/experimental/recipes): N sessions, each
//     choosing per operation the read side with a given probability and
//     the write side otherwise; each acquisition is timed from call to
//     return.
//
// One more, idle, runs only when -only names it (its windows are minutes
// long): what idle holds and waits cost the cluster (issue 27). For each
// package, -idle-holds locks held, each by a session of its own (this
// package's holds watched, as once Mutex.Ctx is asked for; etcd's package
// has no such context), with as many sessions waiting, one behind each
// hold, all on one client; then the same on -idle-clients clients, one
// session each; for each TTL of -idle-ttls. The requests that reach the
// servers over -idle-window are counted by method from the servers' gRPC
// metrics, and the watch progress requests by client interceptors.
//
// And slow, also only when -only names it (issue 38): every operation of
// both packages (and this package's Semaphore, SetLimit and RWMutex) on a
// client whose writes are answered -slow-write late (2 s by default) while
// its reads, watches and keepalives are answered at once, -slow-trials
// times each on a new client: how many succeed, their mean time, and the
// writes the client sends for each (every attempt).
//
// -only runs some of the workloads, by group: basic (raw Put and Get,
// uncontended, TryLock), contended, anatomy, many, queue, lost, semaphore,
// rwmutex, metrics, idle, slow.
//
// -peer-delay makes commits slow: the embedded members reach one another
// through loopback proxies that delay every byte of their peer connections
// by that much, each way (see embedetcd.Options).
//
// -disk runs, instead of all of the above, the disk-bound comparison (issue
// 43; see disk.go): 3 etcd server processes with fsync on and their data
// on a real disk, each package's sessions spread over one client per
// member, looping Lock and Unlock until -disk-acquisitions, the packages
// interleaved round by round, with the members' own metrics (WAL fsyncs,
// raft entries, apply time by request type, CPU) and the requests of each
// kind per acquisition, and the anatomy of a handoff on that cluster.
//
// Every workload uses its own key prefix under /lockbench/<run>, closes its
// sessions, and checks that its prefix is empty; the run checks that the
// whole run prefix is empty at the end.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdproc"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/lockbench"
)

type config struct {
	endpoints       []string
	members         int
	duration        time.Duration
	rounds          int
	sessions        []int
	waiters         []int
	many            int
	manyHold        time.Duration
	clients         int
	maxOps          int
	lostTTL         int
	lostTrials      int
	lostBound       time.Duration
	queueTimeout    time.Duration
	timeout         time.Duration
	quick           bool
	prefix          string
	childQueue      string
	semSessions     int
	semLimit        int
	semWaiters      []int
	rwSessions      int
	rwReads         []float64
	only            map[string]bool // nil: every group
	metrics         bool
	metricsSessions int
	idleHolds       int
	idleClients     int
	idleTTLs        []int
	idleWindow      time.Duration
	anatomySessions []int
	childAnatomy    string
	serverPID       int
	peerDelay       time.Duration
	// The slow group (see slow.go).
	slowWrite   time.Duration
	slowTTL     int
	slowTrials  int
	slowTimeout time.Duration
	// The disk-bound comparison (-disk, issue 43): see disk.go.
	disk             bool
	diskDir          string
	etcdBinary       string
	diskSessions     []int
	diskAcquisitions int
	diskRounds       int
	diskPut          time.Duration
	diskBound        time.Duration
	diskAnatomy      bool
	diskInProcess    bool
	diskPause        time.Duration
	// The interleaved comparison (-interleave, issue 42): see interleave.go.
	interleave bool
	ilPairs    int
	ilWindow   time.Duration
	ilMany     []int
	ilProcs    bool
	// The capacity run (-capacity, issue 42): see capacity.go.
	capacity     bool
	capN         []int
	capScenarios []string
	capImpls     []string
	capWindow    time.Duration
	capBound     time.Duration
	capRate      int
	// Profiles of this process over the whole run, if named.
	cpuProfile, memProfile string
	// rebalance group (rebalance.go)
	rebalanceShards, rebalanceMembers []int
}

// groups are the workload groups that -only selects from, in run order.
var groups = []string{"basic", "contended", "anatomy", "many", "queue", "semaphore", "rwmutex", "metrics", "lost", "idle", "slow", "rebalance", "workq"}

// optIn are the groups that run only when -only names them: their
// windows are minutes long.
var optIn = []string{"idle", "slow", "rebalance", "workq"}

// runs reports whether the workloads of group run.
func (c config) runs(group string) bool {
	if c.only == nil {
		return !slices.Contains(optIn, group)
	}
	return c.only[group]
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("lockbench: ")
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	// Every step is bounded by ctx; this is the backstop if one is not.
	watchdog := time.AfterFunc(cfg.timeout+time.Minute, func() {
		log.Printf("still running %v after -timeout; giving up", time.Minute)
		os.Exit(2)
	})
	defer watchdog.Stop()

	stopProfiles, err := startProfiles(cfg)
	if err != nil {
		log.Fatal(err)
	}
	switch {
	case cfg.childQueue != "":
		err = runChildQueue(ctx, cfg, os.Stdout)
	case cfg.childAnatomy != "":
		err = runChildAnatomy(ctx, cfg, os.Stdout)
	case cfg.disk:
		err = runDisk(ctx, cfg, os.Stdout)
	case cfg.interleave:
		err = runInterleave(ctx, cfg, os.Stdout)
	case cfg.capacity:
		err = runCapacity(ctx, cfg, os.Stdout)
	default:
		err = run(ctx, cfg, os.Stdout)
	}
	if perr := stopProfiles(); perr != nil {
		log.Print(perr)
	}
	if err != nil {
		log.Print(err)
		watchdog.Stop()
		cancel()
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("lockbench", flag.ContinueOnError)
	var cfg config
	var endpoints, sessions, waiters, semWaiters, rwReads, only, idleTTLs, anatomySessions, diskSessions, ilMany, capN, capScenarios, capImpls string
	var rebalanceShards, rebalanceMembers string
	fs.StringVar(&rebalanceShards, "rebalance-shards", "64,1024", "rebalance group: shard counts of concurrency.Shards")
	fs.StringVar(&rebalanceMembers, "rebalance-members", "2,8,32", "rebalance group: member counts after a join")
	fs.StringVar(&endpoints, "endpoints", "", "comma-separated client URLs of a running etcd cluster (default: start an embedded cluster on loopback)")
	fs.IntVar(&cfg.members, "members", 3, "members of the embedded cluster")
	fs.DurationVar(&cfg.duration, "duration", 3*time.Second, "measured window of each timed workload, per package")
	fs.IntVar(&cfg.rounds, "rounds", 3, "interleaved rounds that split the window of raw Put and Get, uncontended and TryLock")
	fs.StringVar(&sessions, "sessions", "2,8,32,128", "session counts of the contended workload")
	fs.StringVar(&waiters, "waiters", "2,1000", "queue lengths of the queue workload")
	fs.IntVar(&cfg.many, "many", 64, "sessions of the many-locks workload, each on a lock of its own (0: skip it)")
	fs.DurationVar(&cfg.manyHold, "many-hold", 0, "how long each hold of the many-locks workload lasts before its Unlock")
	fs.IntVar(&cfg.clients, "clients", 16, "clients that sessions are spread over (one per session up to this many)")
	fs.IntVar(&cfg.maxOps, "max-ops", 100000, "most operations in one window")
	fs.IntVar(&cfg.lostTTL, "lost-ttl", 5, "session TTL, in seconds, of the lost-lock workload")
	fs.IntVar(&cfg.lostTrials, "lost-trials", 5, "holds revoked per package in the lost-lock workload")
	fs.DurationVar(&cfg.lostBound, "lost-bound", 30*time.Second, "longest wait for a lost-lock notice")
	fs.DurationVar(&cfg.queueTimeout, "queue-timeout", 3*time.Minute, "bound of one queue workload")
	fs.DurationVar(&cfg.timeout, "timeout", 15*time.Minute, "bound of the whole run")
	fs.BoolVar(&cfg.metrics, "metrics", true, "measure the overhead of the package's metrics: uncontended and contended, off and on")
	fs.IntVar(&cfg.metricsSessions, "metrics-sessions", 8, "sessions of the contended metrics-overhead workload")
	fs.BoolVar(&cfg.quick, "quick", false, "tiny workload that checks the harness works (numbers are not meaningful)")
	fs.StringVar(&cfg.prefix, "prefix", "", "key prefix of the run (default: /lockbench/<unix ns>)")
	fs.StringVar(&cfg.childQueue, "child-queue", "", "internal: run one queue workload, PKG:N, and print it as JSON")
	fs.StringVar(&cfg.childAnatomy, "child-anatomy", "", "internal: run one anatomy workload, PKG:N, and print it as JSON")
	fs.IntVar(&cfg.serverPID, "server-pid", 0, "internal: with -child-anatomy, the process of the etcd members, whose CPU time is the server's (0: unknown)")
	fs.StringVar(&anatomySessions, "anatomy-sessions", "2,32,128", "session counts of the anatomy workload (a contended handoff cut into segments)")
	fs.DurationVar(&cfg.peerDelay, "peer-delay", 0, "slow commits: the embedded members' peer traffic passes through proxies that delay each direction of every peer connection by this much, so that a commit (and a linearizable read's heartbeat round) waits for it (0: direct)")
	fs.BoolVar(&cfg.disk, "disk", false, "run the disk-bound comparison instead of the workloads above: 3 etcd server processes with fsync on and data on a real disk, sessions spread over one client per member, both packages interleaved (issue 43)")
	fs.StringVar(&cfg.diskDir, "disk-dir", "", "-disk: directory on a disk (not tmpfs) under which the members' data directory is made (default: the system's temporary directory)")
	fs.StringVar(&cfg.etcdBinary, "etcd-binary", "", "-disk: etcd server executable (default: build "+etcdproc.ServerPackage+" from this module's graph, which needs the repository as the working directory)")
	fs.StringVar(&diskSessions, "disk-sessions", "2,32,128", "-disk: session counts")
	fs.IntVar(&cfg.diskAcquisitions, "disk-acquisitions", 400, "-disk: acquisitions of each window")
	fs.IntVar(&cfg.diskRounds, "disk-rounds", 2, "-disk: rounds per session count, the packages alternating first; the best round of each counts")
	fs.DurationVar(&cfg.diskPut, "disk-put", time.Second, "-disk: each raw Put window, before and after each round")
	fs.DurationVar(&cfg.diskBound, "disk-bound", 3*time.Minute, "-disk: longest lock window; a window that has not reached -disk-acquisitions by then fails the run")
	fs.BoolVar(&cfg.diskAnatomy, "disk-anatomy", true, "-disk: also cut the handoffs of one more window per package and session count into segments")
	fs.DurationVar(&cfg.diskPause, "disk-pause", 0, "-disk: in the anatomy, each session waits this long after its Unlock before it locks again, so that the next waiter's read does not meet the releaser's new enqueue")
	fs.BoolVar(&cfg.diskInProcess, "disk-inprocess", false, "-disk: the 3 members embedded in this process (as etcd's integration framework runs them), with data under -disk-dir and fsync on, instead of server processes")
	fs.BoolVar(&cfg.interleave, "interleave", false, "run the interleaved comparison instead of the workloads above: uncontended Lock+Unlock and many independent locks, the packages in alternating windows (ABBA) on the same sessions, with a 95% interval for each ratio (issue 42)")
	fs.IntVar(&cfg.ilPairs, "il-pairs", 10, "-interleave: pairs of windows per row (one window of each package per pair)")
	fs.DurationVar(&cfg.ilWindow, "il-window", 3*time.Second, "-interleave: length of each window")
	fs.StringVar(&ilMany, "il-many", "64,512", "-interleave: session counts of the many-locks rows, each session on a lock of its own")
	fs.BoolVar(&cfg.ilProcs, "il-procs", false, "-interleave: run the members as etcd server processes (see -etcd-binary), so that this process's CPU and allocations are the clients' alone and the servers' CPU is read from /proc")
	fs.BoolVar(&cfg.capacity, "capacity", false, "run the capacity scenarios instead of the workloads above: N idle sessions, holds and waiters on a fresh cluster of etcd server processes each, their cost to the client and the servers, and the drain of the queues (issue 42)")
	fs.StringVar(&capN, "cap-n", "1000,10000", "-capacity: the Ns")
	fs.StringVar(&capScenarios, "cap-scenarios", "all", "-capacity: comma-separated scenarios by number: 1 "+strings.Join(lockbench.CapScenarios, ", 2 ")+" (the numbers in order; all: every one)")
	fs.StringVar(&capImpls, "cap-impls", "ours,etcd", "-capacity: packages")
	fs.DurationVar(&cfg.capWindow, "cap-window", 30*time.Second, "-capacity: idle window of each row, over which requests and server CPU are counted")
	fs.DurationVar(&cfg.capBound, "cap-bound", 10*time.Minute, "-capacity: bound of each row's setup and of its drain")
	fs.IntVar(&cfg.capRate, "cap-rate", 0, "-capacity: waiters that call Lock per second during a row's setup (0: all at once)")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of this process over the run to this file (with -il-procs, of the clients alone)")
	fs.StringVar(&cfg.memProfile, "memprofile", "", "write an allocation profile of this process at the end of the run to this file")
	fs.IntVar(&cfg.semSessions, "sem-sessions", 32, "sessions of the semaphore workload, each with one Semaphore cycling Acquire and Release (0: skip it)")
	fs.IntVar(&cfg.semLimit, "sem-limit", 4, "permits of the semaphore workloads")
	fs.StringVar(&semWaiters, "sem-waiters", "2,1000", "queue lengths of the semaphore queue workload, behind -sem-limit held permits")
	fs.IntVar(&cfg.rwSessions, "rw-sessions", 16, "sessions of the RWMutex workload (0: skip it)")
	fs.StringVar(&rwReads, "rw-reads", "0.9,0.1", "fractions of RWMutex operations that take the read side, one run each")
	fs.StringVar(&only, "only", "", "comma-separated workload groups to run (default all but "+strings.Join(optIn, ", ")+"): "+strings.Join(groups, ", "))
	fs.IntVar(&cfg.idleHolds, "idle-holds", 500, "idle workload, one client: locks held, each by a session of its own, with as many sessions waiting, one behind each hold")
	fs.IntVar(&cfg.idleClients, "idle-clients", 100, "idle workload, fleet: clients, each with one session that holds or waits (half hold, half wait)")
	fs.StringVar(&idleTTLs, "idle-ttls", "60,6", "session TTLs, in seconds, of the idle workload, one run each")
	fs.DurationVar(&cfg.idleWindow, "idle-window", time.Minute, "idle workload: how long the traffic of the idle holds and waits is counted, per package, layout and TTL")
	fs.DurationVar(&cfg.slowWrite, "slow-write", 2*time.Second, "slow group: how late every write of its clients is answered (reads at once)")
	fs.IntVar(&cfg.slowTTL, "slow-ttl", 10, "slow group: session TTL, in seconds")
	fs.IntVar(&cfg.slowTrials, "slow-trials", 3, "slow group: trials per package, each on a new client")
	fs.DurationVar(&cfg.slowTimeout, "slow-timeout", 30*time.Second, "slow group: bound of each operation")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		quick := map[string]string{
			"duration": "200ms", "rounds": "1", "sessions": "2,8", "waiters": "2,20", "many": "4",
			"lost-ttl": "2", "lost-trials": "1", "queue-timeout": "1m", "timeout": "3m",
			"sem-sessions": "8", "sem-waiters": "2,20", "rw-sessions": "4",
			"idle-holds": "4", "idle-clients": "4", "idle-ttls": "3", "idle-window": "3s",
			"anatomy-sessions": "2,8",
			"disk-sessions":    "2,8", "disk-acquisitions": "40", "disk-put": "200ms", "disk-bound": "1m",
			"il-pairs": "2", "il-window": "200ms", "il-many": "4",
			"cap-n": "20", "cap-window": "1s", "cap-bound": "1m",
		}
		for name, v := range quick {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return cfg, err
				}
			}
		}
	}
	if endpoints != "" {
		cfg.endpoints = strings.Split(endpoints, ",")
	}
	var err error
	if cfg.sessions, err = intList(sessions, 2); err != nil {
		return cfg, fmt.Errorf("-sessions: %w", err)
	}
	if cfg.waiters, err = intList(waiters, 1); err != nil {
		return cfg, fmt.Errorf("-waiters: %w", err)
	}
	if cfg.semWaiters, err = intList(semWaiters, 1); err != nil {
		return cfg, fmt.Errorf("-sem-waiters: %w", err)
	}
	if cfg.diskSessions, err = intList(diskSessions, 2); err != nil {
		return cfg, fmt.Errorf("-disk-sessions: %w", err)
	}
	if cfg.ilMany, err = intList(ilMany, 2); err != nil {
		return cfg, fmt.Errorf("-il-many: %w", err)
	}
	if cfg.capN, err = intList(capN, 1); err != nil {
		return cfg, fmt.Errorf("-cap-n: %w", err)
	}
	cfg.capScenarios = lockbench.CapScenarios
	if capScenarios != "all" {
		nums, err := intList(capScenarios, 1)
		if err != nil {
			return cfg, fmt.Errorf("-cap-scenarios: %w", err)
		}
		cfg.capScenarios = nil
		for _, i := range nums {
			if i > len(lockbench.CapScenarios) {
				return cfg, fmt.Errorf("-cap-scenarios: %d: there are %d", i, len(lockbench.CapScenarios))
			}
			cfg.capScenarios = append(cfg.capScenarios, lockbench.CapScenarios[i-1])
		}
	}
	if cfg.capRate < 0 || cfg.capRate > 1_000_000 {
		return cfg, fmt.Errorf("-cap-rate: %d: want 0 (all at once) to 1000000", cfg.capRate)
	}
	for _, name := range strings.Split(capImpls, ",") {
		if _, ok := lockbench.Named(strings.TrimSpace(name)); !ok {
			return cfg, fmt.Errorf("-cap-impls: unknown package %q (ours, etcd)", name)
		}
		cfg.capImpls = append(cfg.capImpls, strings.TrimSpace(name))
	}
	if cfg.anatomySessions, err = intList(anatomySessions, 2); err != nil {
		return cfg, fmt.Errorf("-anatomy-sessions: %w", err)
	}
	if cfg.rebalanceShards, err = intList(rebalanceShards, 1); err != nil {
		return cfg, fmt.Errorf("-rebalance-shards: %w", err)
	}
	if cfg.rebalanceMembers, err = intList(rebalanceMembers, 1); err != nil {
		return cfg, fmt.Errorf("-rebalance-members: %w", err)
	}
	if cfg.idleTTLs, err = intList(idleTTLs, 1); err != nil {
		return cfg, fmt.Errorf("-idle-ttls: %w", err)
	}
	for _, f := range strings.Split(rwReads, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || x < 0 || x > 1 {
			return cfg, fmt.Errorf("-rw-reads: %q: want a fraction from 0 to 1", f)
		}
		cfg.rwReads = append(cfg.rwReads, x)
	}
	if only != "" {
		cfg.only = map[string]bool{}
		for _, g := range strings.Split(only, ",") {
			g = strings.TrimSpace(g)
			if !slices.Contains(groups, g) {
				return cfg, fmt.Errorf("-only: unknown group %q; groups: %s", g, strings.Join(groups, ", "))
			}
			cfg.only[g] = true
		}
	}
	switch {
	case cfg.semSessions < 0 || cfg.rwSessions < 0 || cfg.semLimit < 1:
		return cfg, errors.New("-sem-sessions and -rw-sessions must not be negative, -sem-limit at least 1")
	case cfg.members < 1:
		return cfg, fmt.Errorf("-members %d: need at least 1", cfg.members)
	case cfg.many < 0 || cfg.manyHold < 0:
		return cfg, errors.New("-many and -many-hold must not be negative")
	case cfg.duration <= 0 || cfg.lostBound <= 0 || cfg.queueTimeout <= 0 || cfg.timeout <= 0:
		return cfg, errors.New("durations must be positive")
	case cfg.idleHolds < 1 || cfg.idleClients < 2 || cfg.idleClients%2 != 0 || cfg.idleWindow <= 0:
		return cfg, errors.New("need -idle-holds >= 1, an even -idle-clients >= 2, a positive -idle-window")
	case cfg.peerDelay < 0 || cfg.peerDelay > 0 && len(cfg.endpoints) > 0:
		return cfg, errors.New("-peer-delay must not be negative, and applies only to the embedded cluster (no -endpoints)")
	case cfg.disk && (len(cfg.endpoints) > 0 || cfg.peerDelay > 0):
		return cfg, errors.New("-disk starts its own cluster: no -endpoints or -peer-delay")
	case cfg.diskAcquisitions < 2 || cfg.diskRounds < 1 || cfg.diskPut <= 0 || cfg.diskBound <= 0 || cfg.diskPause < 0:
		return cfg, errors.New("need -disk-acquisitions >= 2, -disk-rounds >= 1, positive -disk-put and -disk-bound, -disk-pause >= 0")
	case cfg.ilPairs < 1 || cfg.ilWindow <= 0:
		return cfg, errors.New("need -il-pairs >= 1 and a positive -il-window")
	case cfg.ilProcs && len(cfg.endpoints) > 0:
		return cfg, errors.New("-il-procs starts its own cluster: no -endpoints")
	case cfg.metricsSessions < 2:
		return cfg, errors.New("-metrics-sessions must be at least 2")
	case cfg.rounds < 1 || cfg.clients < 2 || cfg.maxOps < 1 || cfg.lostTTL < 1 || cfg.lostTrials < 1:
		return cfg, errors.New("need -rounds >= 1, -clients >= 2, -max-ops >= 1, -lost-ttl >= 1, -lost-trials >= 1")
	}
	return cfg, nil
}

// startProfiles starts the CPU profile of cfg, if any, and returns a
// function that stops it and writes the allocation profile, if any.
func startProfiles(cfg config) (stop func() error, err error) {
	var cpu *os.File
	if cfg.cpuProfile != "" {
		if cpu, err = os.Create(cfg.cpuProfile); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, err
		}
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if cfg.memProfile != "" {
			f, err := os.Create(cfg.memProfile)
			if err != nil {
				return errors.Join(append(errs, err)...)
			}
			errs = append(errs, pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
		}
		return errors.Join(errs...)
	}, nil
}

// intList parses a comma-separated list of integers of at least least.
func intList(s string, least int) ([]int, error) {
	var ns []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if n < least {
			return nil, fmt.Errorf("%d: need at least %d", n, least)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// newClients returns n clients of endpoints, each configured by opts (a
// Counter's or a Traffic's Option), and a function that closes them.
func newClients(endpoints []string, n int, opts ...func(*clientv3.Config)) ([]*clientv3.Client, func(), error) {
	var cs []*clientv3.Client
	closeAll := func() {
		for _, c := range cs {
			c.Close()
		}
	}
	for i := 0; i < n; i++ {
		cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
		for _, opt := range opts {
			opt(&cfg)
		}
		c, err := clientv3.New(cfg)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("client of %v: %w", endpoints, err)
		}
		cs = append(cs, c)
	}
	return cs, closeAll, nil
}

// runChildQueue runs one queue workload in this process, which runs no etcd
// member, and writes its result as JSON to w.
func runChildQueue(ctx context.Context, cfg config, w io.Writer) error {
	name, n, ok := strings.Cut(cfg.childQueue, ":")
	impl, found := lockbench.Named(name)
	waiters, err := strconv.Atoi(n)
	if !ok || !found || err != nil || waiters < 1 || len(cfg.endpoints) == 0 || cfg.prefix == "" {
		return fmt.Errorf("-child-queue %q: want PKG:N with -endpoints and -prefix", cfg.childQueue)
	}
	// LOCKBENCH_HEAPPROFILE=path writes the heap profile of the queued
	// waiters to path.PKG, every allocation sampled.
	var profile string
	if p := os.Getenv("LOCKBENCH_HEAPPROFILE"); p != "" {
		runtime.MemProfileRate = 1
		profile = p + "." + impl.Name
	}
	// The holder has a client of its own, not counted: the counts are the
	// waiters'.
	holder, closeHolder, err := newClients(cfg.endpoints, 1)
	if err != nil {
		return err
	}
	defer closeHolder()
	var counter lockbench.Counter
	cs, closeClients, err := newClients(cfg.endpoints, min(cfg.clients, waiters), counter.Option)
	if err != nil {
		return err
	}
	defer closeClients()
	r, err := lockbench.Queue(ctx, lockbench.Env{Clients: cs, Counter: &counter, HeapProfile: profile}, holder[0], impl, cfg.prefix, waiters, cfg.queueTimeout)
	if err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(r)
}

// childQueue runs the queue workload in a child process of this binary, so
// that its heap and goroutines are not mixed with those of embedded etcd
// members.
func childQueue(ctx context.Context, cfg config, impl lockbench.Impl, pfx string, waiters int) (lockbench.QueueResult, error) {
	var r lockbench.QueueResult
	exe, err := os.Executable()
	if err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.queueTimeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe,
		"-child-queue", fmt.Sprintf("%s:%d", impl.Name, waiters),
		"-endpoints", strings.Join(cfg.endpoints, ","),
		"-prefix", pfx,
		"-clients", strconv.Itoa(cfg.clients),
		"-queue-timeout", cfg.queueTimeout.String(),
		"-timeout", (cfg.queueTimeout + 10*time.Second).String())
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return r, fmt.Errorf("queue of %d, %s: %w", waiters, impl.Name, err)
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return r, fmt.Errorf("queue of %d, %s: reading result: %w", waiters, impl.Name, err)
	}
	return r, nil
}
