package compare

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Variant is one row of the safety table: a system, with or without its
// fencing token (and, for this module, the guarded Txn).
type Variant struct {
	System string
	Fenced bool
}

func (v Variant) String() string {
	switch {
	case v.System == This && v.Fenced:
		return "this module, Txn + Fence"
	case v.System == This:
		return "this module, unguarded"
	case v.System == ZooKeeper && v.Fenced:
		return "zk recipe, czxid fence"
	}
	return Label(v.System)
}

// Label names a system in the tables.
func Label(sys string) string {
	switch sys {
	case This:
		return "this module"
	case Etcd:
		return "etcd concurrency"
	case RedisLock:
		return "redislock, 1 master + 1 replica"
	case Redsync3:
		return "redsync, 3 servers"
	case Redsync5:
		return "redsync, 5 servers"
	case ZooKeeper:
		return "zk recipe"
	}
	return sys
}

// Variants lists the safety table's rows.
var Variants = []Variant{
	{This, false}, {This, true}, {Etcd, false}, {RedisLock, false},
	{Redsync3, false}, {Redsync5, false}, {ZooKeeper, false}, {ZooKeeper, true},
}

// The faults, each applied the same way to every system.
const (
	NoFault     = "none"
	ClientPause = "client paused"      // SIGSTOP of the holding worker past the TTL
	Partition   = "client partitioned" // the holding worker's proxies blackholed
	LeaderKill  = "leader killed"      // kill -9 of the leader / master / one Redlock server
	ServerPause = "server paused"      // SIGSTOP of the leader / master / one Redlock server
)

// Faults lists the safety table's columns.
var Faults = []string{NoFault, ClientPause, Partition, LeaderKill, ServerPause}

// Env is the servers of every system and the worker binary.
type Env struct {
	Dir     string
	Worker  string
	EtcdBin string   // the etcd server binary
	Etcd    *Servers // 3 members: this module and etcd's package
	Redis   *Servers // master and replica: redislock
	R3, R5  *Servers // independent servers: redsync
	ZK      *Servers // 3-server ensemble
	runs    int
}

// StartEnv builds the worker and etcd and starts the servers of the given
// systems.
func StartEnv(ctx context.Context, dir string, systems []string) (*Env, error) {
	e := &Env{Dir: dir}
	need := map[string]bool{}
	for _, s := range systems {
		need[s] = true
	}
	e.Worker = filepath.Join(dir, "worker")
	if b, err := goBuild(ctx, e.Worker, "github.com/seed-a9d410c6/concurrency/compare/worker"); err != nil {
		return nil, fmt.Errorf("compare: build worker: %w\n%s", err, b)
	}
	sub := func(n string) string {
		d := filepath.Join(dir, n)
		os.MkdirAll(d, 0o755)
		return d
	}
	var err error
	if need[This] || need[Etcd] {
		bin, berr := BuildEtcd(ctx, sub("bin"))
		if berr != nil {
			return nil, berr
		}
		e.EtcdBin = bin
		if e.Etcd, err = StartEtcd(ctx, bin, sub("etcd"), 3); err != nil {
			return nil, err
		}
	}
	if need[RedisLock] {
		if e.Redis, err = StartRedis(ctx, sub("redis"), 2, true); err != nil {
			e.Close()
			return nil, err
		}
	}
	if need[Redsync3] {
		if e.R3, err = StartRedis(ctx, sub("redis3"), 3, false); err != nil {
			e.Close()
			return nil, err
		}
	}
	if need[Redsync5] {
		if e.R5, err = StartRedis(ctx, sub("redis5"), 5, false); err != nil {
			e.Close()
			return nil, err
		}
	}
	if need[ZooKeeper] {
		if e.ZK, err = StartZooKeeper(ctx, sub("zk"), 3); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// Close stops every server.
func (e *Env) Close() {
	for _, s := range []*Servers{e.Etcd, e.Redis, e.R3, e.R5, e.ZK} {
		if s != nil {
			s.Close()
		}
	}
}

// Servers returns the servers a system runs on.
func (e *Env) Servers(sys string) *Servers {
	switch sys {
	case This, Etcd:
		return e.Etcd
	case RedisLock:
		return e.Redis
	case Redsync3:
		return e.R3
	case Redsync5:
		return e.R5
	case ZooKeeper:
		return e.ZK
	}
	return nil
}

// ClientAddrs are the addresses a client of sys dials: for redislock only
// the current master, else every server.
func (e *Env) ClientAddrs(sys string) []string {
	s := e.Servers(sys)
	if sys == RedisLock {
		return []string{s.Addrs[s.Master]}
	}
	return s.Addrs
}

// SafetyOpts sizes one fault run.
type SafetyOpts struct {
	Workers  int           // client processes (default 3)
	Duration time.Duration // each worker's run
	Warmup   time.Duration // before the first fault
	FaultFor time.Duration // how long a pause, partition or kill lasts
	Faults   int           // how many times the fault is applied
	TTL      time.Duration
	Work     time.Duration
	Retry    time.Duration
}

// Result is one cell of the safety table.
type Result struct {
	Variant Variant
	Fault   string
	Counts
	Events  []string
	Applied int // faults applied
	Stuck   int // workers killed after their grace
	Err     error
}

// Per1000 returns n per 1,000 acquisitions.
func (r Result) Per1000(n int) float64 {
	if r.Acquisitions == 0 {
		return 0
	}
	return 1000 * float64(n) / float64(r.Acquisitions)
}

// RunSafety runs both safety workloads of one variant under one fault.
func (e *Env) RunSafety(ctx context.Context, v Variant, fault string, o SafetyOpts) Result {
	if o.Workers == 0 {
		o.Workers = 3
	}
	e.runs++
	res := Result{Variant: v, Fault: fault}
	srv := e.Servers(v.System)
	st, err := NewStore(v.Fenced)
	if err != nil {
		res.Err = err
		return res
	}
	defer st.Close()
	var etcd *clientv3.Client
	if v.System == This && v.Fenced {
		etcd, err = clientv3.New(clientv3.Config{Endpoints: urls(srv.Addrs), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			res.Err = err
			return res
		}
		defer etcd.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = etcd.Put(cctx, "/compare-data/ctr", "0")
		cancel()
		if err != nil {
			res.Err = err
			return res
		}
	}
	// One proxy per worker per server: a partition cuts one worker off.
	proxies := make([][]*Proxy, o.Workers)
	defer func() {
		for _, ps := range proxies {
			for _, p := range ps {
				p.Close()
			}
		}
	}()
	workers := make([]*Proc, o.Workers)
	runDir := filepath.Join(e.Dir, fmt.Sprintf("run%03d", e.runs))
	os.MkdirAll(runDir, 0o755)
	for i := range o.Workers {
		var addrs []string
		for _, a := range e.ClientAddrs(v.System) {
			p, err := NewProxy(a)
			if err != nil {
				res.Err = err
				return res
			}
			proxies[i] = append(proxies[i], p)
			addrs = append(addrs, p.Addr())
		}
		workers[i] = NewProc(fmt.Sprintf("w%d", i), filepath.Join(runDir, fmt.Sprintf("w%d.log", i)), e.Worker,
			"-system", v.System, "-addrs", strings.Join(addrs, ","), "-store", st.URL(),
			"-name", fmt.Sprintf("w%d", i), "-ttl", o.TTL.String(), "-retry", o.Retry.String(),
			"-fenced="+strconv.FormatBool(v.Fenced), "-duration", o.Duration.String(),
			"-work", o.Work.String(), "-lockpfx", fmt.Sprintf("r%d-", e.runs))
	}
	for _, w := range workers {
		if err := w.Start(); err != nil {
			res.Err = err
			return res
		}
	}
	st.Phase("before faults")
	var wg sync.WaitGroup
	nctx, stop := context.WithCancel(ctx)
	if fault != NoFault {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res.Applied, res.Err = e.nemesis(nctx, v.System, fault, o, st, workers, proxies)
		}()
	}
	for _, w := range workers {
		if !w.Wait(o.Duration + 15*time.Second) {
			res.Stuck++
			w.Kill()
		}
	}
	stop()
	wg.Wait()
	res.Counts, res.Events = st.Result()
	if etcd != nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := etcd.Get(cctx, "/compare-data/ctr")
		cancel()
		if err == nil && len(resp.Kvs) == 1 {
			final, _ := strconv.Atoi(string(resp.Kvs[0].Value))
			res.Writes = res.TxnCommitted
			if lost := res.TxnCommitted - final; lost > 0 {
				res.Lost = lost
				res.Events = append(res.Events, fmt.Sprintf("lost updates: etcd committed %d guarded writes but the counter is %d", res.TxnCommitted, final))
			}
		} else if res.Err == nil {
			res.Err = fmt.Errorf("compare: read final counter: %v", err)
		}
	}
	if err := e.heal(ctx, v.System); err != nil && res.Err == nil {
		res.Err = err
	}
	return res
}

// nemesis applies the fault o.Faults times, each time as soon as a worker
// begins a hold after the warm-up (or the previous fault's recovery).
func (e *Env) nemesis(ctx context.Context, sys, fault string, o SafetyOpts, st *Store, workers []*Proc, proxies [][]*Proxy) (int, error) {
	srv := e.Servers(sys)
	applied := 0
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	if !wait(o.Warmup) {
		return 0, nil
	}
	for range o.Faults {
		// Drain stale notices, then take the next hold that begins.
		for len(st.Holds()) > 0 {
			<-st.Holds()
		}
		var client string
		select {
		case <-ctx.Done():
			return applied, nil
		case client = <-st.Holds():
		}
		wi, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(client, ".", 2)[0], "w"))
		switch fault {
		case ClientPause:
			st.Phase(fmt.Sprintf("%s: w%d paused", fault, wi))
			if err := workers[wi].Pause(); err != nil {
				return applied, err
			}
			wait(o.FaultFor)
			st.Phase(fmt.Sprintf("w%d resumed after a %v pause", wi, o.FaultFor))
			workers[wi].Resume()
		case Partition:
			st.Phase(fmt.Sprintf("%s: w%d cut off", fault, wi))
			for _, p := range proxies[wi] {
				p.Blackhole()
			}
			wait(o.FaultFor)
			st.Phase(fmt.Sprintf("w%d reconnected after a %v partition", wi, o.FaultFor))
			for _, p := range proxies[wi] {
				p.Heal()
			}
		case LeaderKill, ServerPause:
			i, err := e.leader(ctx, sys)
			if err != nil {
				return applied, err
			}
			st.Phase(fmt.Sprintf("%s: %s", fault, srv.Procs[i].Name))
			if fault == ServerPause {
				if err := srv.Procs[i].Pause(); err != nil {
					return applied, err
				}
				wait(o.FaultFor)
				st.Phase(fmt.Sprintf("%s resumed after a %v pause", srv.Procs[i].Name, o.FaultFor))
				srv.Procs[i].Resume()
			} else {
				srv.Procs[i].Kill()
				if sys == RedisLock {
					// Sentinel's failover: promote the replica and point
					// the clients at it.
					nm := 1 - i
					if err := srv.Promote(context.WithoutCancel(ctx), nm); err != nil {
						return applied, err
					}
					for _, ps := range proxies {
						ps[0].Retarget(srv.Addrs[nm])
					}
				}
				wait(o.FaultFor)
				st.Phase(fmt.Sprintf("%s restarting after %v down", srv.Procs[i].Name, o.FaultFor))
				if err := e.restart(context.WithoutCancel(ctx), sys, i); err != nil {
					return applied, err
				}
			}
		}
		applied++
		// Events in the next 1.5 s keep the label of the recovery.
		if !wait(1500 * time.Millisecond) {
			return applied, nil
		}
		st.Phase("later, after " + fault)
	}
	return applied, nil
}

// leader returns the index of the server a fault on "the leader" hits:
// etcd's and ZooKeeper's leader, Redis's master, Redlock's first server.
func (e *Env) leader(ctx context.Context, sys string) (int, error) {
	srv := e.Servers(sys)
	switch sys {
	case This, Etcd:
		return srv.EtcdLeader(ctx)
	case ZooKeeper:
		return srv.ZooKeeperLeader(ctx)
	case RedisLock:
		return srv.Master, nil
	}
	return 0, nil
}

// restart starts killed server i again: etcd and ZooKeeper with their data,
// Redis empty (no persistence), the old master as a replica of the new one.
func (e *Env) restart(ctx context.Context, sys string, i int) error {
	srv := e.Servers(sys)
	switch sys {
	case This, Etcd:
		if err := srv.Procs[i].Start(); err != nil {
			return err
		}
		_, err := srv.EtcdLeader(ctx)
		return err
	case ZooKeeper:
		if err := srv.Procs[i].Start(); err != nil {
			return err
		}
		return srv.WaitZooKeeper(ctx, i)
	case RedisLock:
		return srv.RestartRedis(ctx, i, true)
	}
	return srv.RestartRedis(ctx, i, false)
}

// heal waits until every server of sys serves again after a run.
func (e *Env) heal(ctx context.Context, sys string) error {
	srv := e.Servers(sys)
	for _, p := range srv.Procs {
		p.Resume()
	}
	switch sys {
	case This, Etcd:
		_, err := srv.EtcdLeader(ctx)
		return err
	case ZooKeeper:
		for i := range srv.Procs {
			if err := srv.WaitZooKeeper(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range srv.Procs {
		replica := sys == RedisLock && i != srv.Master
		if err := srv.WaitRedis(ctx, i, replica); err != nil {
			return err
		}
	}
	return nil
}

func urls(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		out = append(out, "http://"+a)
	}
	return out
}
