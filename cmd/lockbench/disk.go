package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/embedetcd"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdproc"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/lockbench"
)

// The disk-bound comparison (-disk, issue 43): the contended workload on a
// cluster whose commits wait for the disk, as production's do. Three etcd
// server processes, built from this module's dependency graph and run with
// etcd's own defaults (fsync on; 100 ms heartbeat, 1 s election), write
// their WAL and snapshots to a directory on a real file system; each
// package's sessions are spread round robin over three clients, one per
// member; each session loops Lock and Unlock on one name until
// -disk-acquisitions are done. The packages alternate within each round
// (ours first in even rounds, etcd's first in odd ones), and the rate of
// sequential single-key Puts from one client is measured before and
// after the pair (linearizable Gets too, after the first). -disk-inprocess
// runs the members in this process instead. Around each window the members' /metrics pages are
// scraped: WAL fsyncs, raft entries committed and applied, the apply time
// of each request type, ranges served, and each member's CPU.

// diskWindow is one package's window at one session count, in one round.
type diskWindow struct {
	res       lockbench.Result
	kinds     map[string]int64    // client requests by kind
	members   []lockbench.Metrics // each member's metrics (or, in process, the one registry's), after minus before
	clientCPU time.Duration       // this process's CPU over the window
}

func (d diskWindow) perSec() float64 { return d.res.Stats().PerSec }

// diskRound is one round at one session count: both packages' windows and
// the raw Put rate before and after them.
type diskRound struct {
	sessions       int
	round          int
	putBefore      lockbench.Result
	putAfter       lockbench.Result
	get            lockbench.Result // linearizable Gets, after putBefore
	ours, etcd     diskWindow
	loadAtStart    string
	firstIsEtcd    bool
	putRateAroundS float64 // raw Put's rate over both of its windows
}

// diskResults is what the disk-bound run measured.
type diskResults struct {
	dir, fsType string
	inProcess   bool // the members ran in this process (-disk-inprocess)
	leader      int  // member index that led the cluster at the start; -1 if unknown
	leaderEnd   int
	rounds      []diskRound
	anatomy     []anatomyPair
	fsyncs      float64 // WAL fsyncs over the run, summed over the members
	loadStart   string
	loadEnd     string
	took        time.Duration
}

// fsTypes names the file systems that keep data in memory: a -disk
// directory on one of them would make fsync free.
var fsTypes = map[int64]string{0x01021994: "tmpfs", 0x858458f6: "ramfs"}

// diskDir makes the run's data directory under base (default: the
// system's temporary directory) and refuses a file system kept in memory.
func diskDir(base string) (dir, fsType string, err error) {
	if base == "" {
		base = os.TempDir()
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(base, &st); err != nil {
		return "", "", fmt.Errorf("-disk-dir %s: %w", base, err)
	}
	fsType = fmt.Sprintf("0x%x", uint64(st.Type))
	if name, ok := fsTypes[int64(st.Type)]; ok {
		return "", "", fmt.Errorf("-disk-dir %s is on %s, which keeps data in memory: fsync would cost nothing; give a directory on a disk", base, name)
	}
	if st.Type == 0xEF53 {
		fsType = "ext4"
	}
	dir, err = os.MkdirTemp(base, "lockbench-disk-")
	return dir, fsType, err
}

// runDisk runs the disk-bound comparison and writes its report to w.
func runDisk(ctx context.Context, cfg config, w io.Writer) (err error) {
	start := time.Now()
	res := diskResults{loadStart: loadavg(), leader: -1, leaderEnd: -1}
	dir, fsType, err := diskDir(cfg.diskDir)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	res.dir, res.fsType = dir, fsType
	var eps []string
	if cfg.diskInProcess {
		progress("starting 3 embedded etcd members in this process, data in %s (%s), fsync on", dir, fsType)
		clus, err := embedetcd.StartWith(ctx, 3, embedetcd.Options{Dir: dir})
		if err != nil {
			return err
		}
		defer clus.Close()
		eps, res.inProcess = clus.Endpoints, true
	} else {
		bin := cfg.etcdBinary
		if bin == "" {
			progress("building the etcd server (%s) into %s", etcdproc.ServerPackage, dir)
			if bin, err = etcdproc.Build(ctx, dir); err != nil {
				return fmt.Errorf("%w (run from the repository, or give -etcd-binary)", err)
			}
		}
		progress("starting 3 etcd processes, data in %s (%s), fsync on", dir, fsType)
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		clus, err := etcdproc.Start(sctx, etcdproc.Config{Binary: bin, Dir: dir, Size: 3})
		cancel()
		if err != nil {
			return err
		}
		defer clus.Close()
		eps = clus.Endpoints()
	}
	// Members in this process share one registry: scrape it once.
	scraped := eps
	if res.inProcess {
		scraped = eps[:1]
	}
	// One client per member, each session on one of them, round robin.
	var counter lockbench.Counter
	var kinds lockbench.Kinds
	var cs []*clientv3.Client
	for _, ep := range eps {
		c, closeC, err := newClients([]string{ep}, 1, counter.Option, kinds.Option)
		if err != nil {
			return err
		}
		defer closeC()
		cs = append(cs, c[0])
	}
	// The Put client is the first member's, and counted by neither.
	putc, closePut, err := newClients(eps[:1], 1)
	if err != nil {
		return err
	}
	defer closePut()
	res.leader = leaderOf(ctx, eps, putc[0])

	root := cfg.prefix
	if root == "" {
		root = fmt.Sprintf("/lockbench/%d", time.Now().UnixNano())
	}
	defer func() { err = errors.Join(err, checkEmpty(ctx, cs[0], root)) }()
	m0, err := scrapeAll(ctx, scraped)
	if err != nil {
		return err
	}
	env := lockbench.Env{Clients: cs, Counter: &counter}
	putEnv := lockbench.Env{Clients: putc}
	putLim := lockbench.Limits{Duration: cfg.diskPut, MaxOps: cfg.maxOps}
	for _, n := range cfg.diskSessions {
		for round := 0; round < cfg.diskRounds; round++ {
			r := diskRound{sessions: n, round: round, loadAtStart: loadavg(), firstIsEtcd: round%2 == 1}
			pfx := fmt.Sprintf("%s/disk-%d-%d", root, n, round)
			progress("disk-bound, %d sessions, round %d/%d: raw Put", n, round+1, cfg.diskRounds)
			if r.putBefore, err = lockbench.RawPut(ctx, putEnv, pfx+"/put-before", putLim); err != nil {
				return err
			}
			if r.get, err = lockbench.RawGet(ctx, putEnv, pfx+"/get", putLim); err != nil {
				return err
			}
			order := []lockbench.Impl{ours, etcd}
			if r.firstIsEtcd {
				order = []lockbench.Impl{etcd, ours}
			}
			for _, impl := range order {
				progress("disk-bound, %d sessions, round %d/%d: %s, %d acquisitions", n, round+1, cfg.diskRounds, impl.Name, cfg.diskAcquisitions)
				dw, err := diskLocks(ctx, cfg, env, &kinds, scraped, impl, pfx+"/"+impl.Name, n)
				if err != nil {
					return err
				}
				if impl.Name == ours.Name {
					r.ours = dw
				} else {
					r.etcd = dw
				}
			}
			progress("disk-bound, %d sessions, round %d/%d: raw Put", n, round+1, cfg.diskRounds)
			if r.putAfter, err = lockbench.RawPut(ctx, putEnv, pfx+"/put-after", putLim); err != nil {
				return err
			}
			both := r.putBefore
			both.Merge(r.putAfter)
			r.putRateAroundS = both.Stats().PerSec
			res.rounds = append(res.rounds, r)
		}
	}
	if cfg.diskAnatomy {
		res.anatomy, err = anatomies(cfg.diskSessions, func(impl lockbench.Impl, n int) (lockbench.AnatomyResult, error) {
			progress("disk-bound anatomy, %d sessions, %s", n, impl.Name)
			return diskAnatomy(ctx, cfg, eps, impl, fmt.Sprintf("%s/disk-anatomy-%d/%s", root, n, impl.Name), n)
		})
		if err != nil {
			return err
		}
	}
	m1, err := scrapeAll(ctx, scraped)
	if err != nil {
		return err
	}
	for i := range m1 {
		res.fsyncs += m1[i].Sub(m0[i]).Sum("etcd_disk_wal_fsync_duration_seconds_count")
	}
	if res.fsyncs == 0 {
		return errors.New("disk-bound: the members made no WAL fsync: fsync is off, and the run measures nothing it means to")
	}
	res.leaderEnd = leaderOf(ctx, eps, putc[0])
	res.loadEnd, res.took = loadavg(), time.Since(start)
	progress("disk-bound: done in %v", res.took.Round(time.Second))
	diskReport(w, cfg, res)
	return nil
}

// leaderOf is the index of the member of eps that leads, or -1.
func leaderOf(ctx context.Context, eps []string, c *clientv3.Client) int {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for i, ep := range eps {
		if st, err := c.Status(lctx, ep); err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}

// scrapeAll scrapes every member's metrics at once.
func scrapeAll(ctx context.Context, eps []string) ([]lockbench.Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out := make([]lockbench.Metrics, len(eps))
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = lockbench.ScrapeMetrics(ctx, ep)
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// diskLocks runs one package's window: n sessions, spread over env's
// clients, loop Lock and Unlock on one name until -disk-acquisitions are
// done; the members are scraped as the window opens and as it closes.
func diskLocks(ctx context.Context, cfg config, env lockbench.Env, kinds *lockbench.Kinds, eps []string, impl lockbench.Impl, pfx string, n int) (diskWindow, error) {
	var dw diskWindow
	var (
		before, after []lockbench.Metrics
		k0, k1        map[string]int64
		c0, c1        time.Duration
		serr          error
	)
	lim := lockbench.Limits{
		Duration: cfg.diskBound,
		MaxOps:   cfg.diskAcquisitions,
		OnStart: func() {
			k0, c0 = kinds.Snapshot(), selfCPU()
			var err error
			before, err = scrapeAll(ctx, eps)
			serr = errors.Join(serr, err)
		},
		OnStop: func() {
			k1, c1 = kinds.Snapshot(), selfCPU()
			var err error
			after, err = scrapeAll(ctx, eps)
			serr = errors.Join(serr, err)
		},
	}
	r, err := lockbench.Contended(ctx, env, impl, pfx, n, lim)
	if err != nil {
		return dw, err
	}
	if serr != nil {
		return dw, serr
	}
	if before == nil || after == nil {
		return dw, fmt.Errorf("disk-bound, %d sessions, %s: the window never opened", n, impl.Name)
	}
	if r.Ops < cfg.diskAcquisitions {
		return dw, fmt.Errorf("disk-bound, %d sessions, %s: %d acquisitions within -disk-bound %v, want %d", n, impl.Name, r.Ops, cfg.diskBound, cfg.diskAcquisitions)
	}
	dw.res, dw.kinds, dw.clientCPU = r, lockbench.SubKinds(k1, k0), c1-c0
	for i := range after {
		dw.members = append(dw.members, after[i].Sub(before[i]))
	}
	return dw, nil
}

// diskAnatomy runs the anatomy workload on clients of its own, one per
// member, in this process (which runs no member in this mode).
func diskAnatomy(ctx context.Context, cfg config, eps []string, impl lockbench.Impl, pfx string, n int) (lockbench.AnatomyResult, error) {
	var tracer lockbench.Tracer
	var cs []*clientv3.Client
	for _, ep := range eps {
		c, closeC, err := newClients([]string{ep}, 1, tracer.Option)
		if err != nil {
			return lockbench.AnatomyResult{}, err
		}
		defer closeC()
		cs = append(cs, c[0])
	}
	return lockbench.Anatomy(ctx, lockbench.Env{Clients: cs}, &tracer, impl, pfx, n, 0,
		lockbench.Limits{Duration: cfg.diskBound, MaxOps: cfg.diskAcquisitions, Pause: cfg.diskPause})
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// diskReport writes the disk-bound report.
func diskReport(w io.Writer, cfg config, res diskResults) {
	fmt.Fprintf(w, "# lockbench -disk: contended Lock/Unlock on a cluster whose commits wait for the disk\n\n")
	fmt.Fprintf(w, "- machine: %s\n", machine())
	if res.inProcess {
		fmt.Fprintf(w, "- cluster: 3 etcd members embedded in this process (internal/embedetcd: fsync on, heartbeat 50 ms, election 500 ms), with the clients: the members' metrics are one registry, shown as \"all members\", and the CPU rows are this process's, members and clients together; ")
	} else {
		fmt.Fprintf(w, "- cluster: 3 etcd server processes (%s, built from this module's graph), etcd's default flags (fsync on, heartbeat 100 ms, election 1000 ms); ", etcdproc.ServerPackage)
	}
	fmt.Fprintf(w, "data in %s (file system %s); %.0f WAL fsyncs over the run; leader: member %d at the start, %d at the end\n", res.dir, res.fsType, res.fsyncs, res.leader, res.leaderEnd)
	fmt.Fprintf(w, "- clients: one per member; a package's sessions are spread over them round robin; the raw Put client is member 0's\n")
	fmt.Fprintf(w, "- workload: each session loops Lock and Unlock on one name until %d acquisitions are done (counted once every session has queued); %d rounds, the packages alternating (ours first in even rounds); raw Put (one client, sequential Puts of one key, %v windows) before and after each round's pair, and raw Get (linearizable, the same client) after the first\n", cfg.diskAcquisitions, cfg.diskRounds, cfg.diskPut)
	fmt.Fprintf(w, "- load average: %s at the start, %s at the end; run time %v\n\n", res.loadStart, res.loadEnd, res.took.Round(time.Second))

	fmt.Fprintf(w, "## Rounds\n\n")
	t := newTable("sessions", "round", "load", "raw Put/s (before, after)", "raw Get mean", "ours acq/s", "etcd acq/s", "ours ÷ etcd", "ours handoff p50", "etcd handoff p50")
	for _, r := range res.rounds {
		first := "ours first"
		if r.firstIsEtcd {
			first = "etcd first"
		}
		t.add(fmt.Sprint(r.sessions), fmt.Sprintf("%d (%s)", r.round+1, first), r.loadAtStart,
			fmt.Sprintf("%s (%s, %s)", num(r.putRateAroundS), num(r.putBefore.Stats().PerSec), num(r.putAfter.Stats().PerSec)),
			dur(r.get.Stats().Mean),
			num(r.ours.perSec()), num(r.etcd.perSec()), ratio(r.ours.perSec(), r.etcd.perSec()),
			dur(r.ours.res.Stats().P50), dur(r.etcd.res.Stats().P50))
	}
	t.write(w)

	fmt.Fprintf(w, "\n## Best of the rounds\n\n")
	t = newTable("sessions", "raw Put/s (mean of the rounds)", "ours acq/s", "etcd acq/s", "ours ÷ etcd", "ours ÷ Put", "etcd ÷ Put")
	for _, n := range cfg.diskSessions {
		var o, e, put []float64
		for _, r := range res.rounds {
			if r.sessions == n {
				o, e, put = append(o, r.ours.perSec()), append(e, r.etcd.perSec()), append(put, r.putRateAroundS)
			}
		}
		if len(o) == 0 {
			continue
		}
		bo, be, p := slices.Max(o), slices.Max(e), meanOf(put)
		t.add(fmt.Sprint(n), num(p), num(bo), num(be), ratio(bo, be), ratio(bo, p), ratio(be, p))
	}
	t.write(w)

	fmt.Fprintf(w, "\n## Where an acquisition's cost goes\n\nPer acquisition, over every round of the session count. Client requests are counted by interceptors on the sessions' clients (Lock and Unlock, the packages' keepalive streams apart); the rest is from the members' /metrics pages, after minus before each window: entries are the leader's raft log entries committed (`etcd_server_proposals_committed_total`), fsyncs the WAL's (`etcd_disk_wal_fsync_duration_seconds`), apply the time etcd's apply loop spent on each request type (`etcd_server_apply_duration_seconds`, on every member), ranges the reads served (`etcd_server_range_duration_seconds`), CPU each process's (`process_cpu_seconds_total`; the client's is this process's getrusage, scrapes included).\n\n")
	for _, n := range cfg.diskSessions {
		var ws [2][]diskWindow
		for _, r := range res.rounds {
			if r.sessions == n {
				ws[0], ws[1] = append(ws[0], r.ours), append(ws[1], r.etcd)
			}
		}
		if len(ws[0]) == 0 {
			continue
		}
		fmt.Fprintf(w, "%d sessions:\n\n", n)
		leader := res.leader
		if res.inProcess {
			leader = -1 // one registry for the three members
		}
		costTable(w, leader, ws[0], ws[1])
		fmt.Fprintln(w)
	}

	if len(res.anatomy) > 0 {
		fmt.Fprintf(w, "## Anatomy of a handoff on this cluster\n\nThe contended workload again, on clients of its own (one per member) with the anatomy's interceptors, %d acquisitions per package and session count (see the default run's anatomy for how a handoff is cut). Server CPU is in the table above (\"-\" here: the members are other processes).", cfg.diskAcquisitions)
		if cfg.diskPause > 0 {
			fmt.Fprintf(w, " Each session waits %v after its Unlock before it locks again (-disk-pause).", cfg.diskPause)
		}
		fmt.Fprintf(w, "\n\n")
		for _, p := range res.anatomy {
			anatomyTables(w, p)
		}
	}
}

// costTable writes, for one session count, what each package's
// acquisitions cost, summed over its windows.
func costTable(w io.Writer, leader int, ours, etcd []diskWindow) {
	type sums struct {
		ops       float64
		elapsed   time.Duration
		kinds     map[string]int64
		watch     lockbench.Counts
		members   []lockbench.Metrics
		clientCPU time.Duration
	}
	sum := func(ws []diskWindow) sums {
		s := sums{kinds: map[string]int64{}}
		for _, d := range ws {
			s.ops += float64(d.res.Ops)
			s.elapsed += d.res.Elapsed
			s.watch = s.watch.Add(d.res.Counts)
			s.clientCPU += d.clientCPU
			for k, v := range d.kinds {
				s.kinds[k] += v
			}
			for i, m := range d.members {
				if i >= len(s.members) {
					s.members = append(s.members, lockbench.Metrics{})
				}
				s.members[i] = s.members[i].Add(m)
			}
		}
		return s
	}
	o, e := sum(ours), sum(etcd)
	per := func(s sums, x float64) string { return num(x / s.ops) }
	all := func(s sums, name string, labels ...string) float64 {
		var x float64
		for _, m := range s.members {
			x += m.Sum(name, labels...)
		}
		return x
	}
	// Without a leader's own metrics (members in this process share one
	// registry) the leader's rows are every member's.
	lead := func(s sums, name string, labels ...string) float64 {
		if leader < 0 || leader >= len(s.members) {
			return all(s, name, labels...)
		}
		return s.members[leader].Sum(name, labels...)
	}
	meanMs := func(sumS, count float64) string {
		if count == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3fms", 1000*sumS/count)
	}
	t := newTable("per acquisition", "ours", "etcd")
	row := func(label string, f func(s sums) string) { t.add(label, f(o), f(e)) }
	var kindNames []string
	for k := range o.kinds {
		kindNames = append(kindNames, k)
	}
	for k := range e.kinds {
		if _, ok := o.kinds[k]; !ok {
			kindNames = append(kindNames, k)
		}
	}
	sort.Strings(kindNames)
	for _, k := range kindNames {
		row("client: "+k, func(s sums) string { return per(s, float64(s.kinds[k])) })
	}
	row("client: watch requests / events", func(s sums) string {
		return per(s, float64(s.watch.WatchReqs)) + " / " + per(s, float64(s.watch.Events))
	})
	row("leader: raft entries committed", func(s sums) string { return per(s, lead(s, "etcd_server_proposals_committed_total")) })
	row("leader: WAL fsyncs (mean fsync)", func(s sums) string {
		c := lead(s, "etcd_disk_wal_fsync_duration_seconds_count")
		return per(s, c) + " (" + meanMs(lead(s, "etcd_disk_wal_fsync_duration_seconds_sum"), c) + ")"
	})
	row("leader: entries per WAL fsync", func(s sums) string {
		c := lead(s, "etcd_disk_wal_fsync_duration_seconds_count")
		if c == 0 {
			return "-"
		}
		return num(lead(s, "etcd_server_proposals_committed_total") / c)
	})
	row("all members: WAL fsyncs", func(s sums) string { return per(s, all(s, "etcd_disk_wal_fsync_duration_seconds_count")) })
	row("all members: backend commits", func(s sums) string {
		return per(s, all(s, "etcd_disk_backend_commit_duration_seconds_count"))
	})
	var ops []string
	for _, s := range []sums{o, e} {
		for _, m := range s.members {
			for _, op := range m.LabelValues("etcd_server_apply_duration_seconds_count", "op") {
				if !slices.Contains(ops, op) {
					ops = append(ops, op)
				}
			}
		}
	}
	sort.Strings(ops)
	for _, op := range ops {
		l := fmt.Sprintf("op=%q", op)
		if all(o, "etcd_server_apply_duration_seconds_count", l)+all(e, "etcd_server_apply_duration_seconds_count", l) == 0 {
			continue
		}
		row("leader: applies of "+op+" (mean apply)", func(s sums) string {
			c := lead(s, "etcd_server_apply_duration_seconds_count", l)
			if c == 0 {
				return "0"
			}
			return per(s, c) + " (" + meanMs(lead(s, "etcd_server_apply_duration_seconds_sum", l), c) + ")"
		})
	}
	row("leader: apply time, all types", func(s sums) string {
		return fmt.Sprintf("%.3fms", 1000*lead(s, "etcd_server_apply_duration_seconds_sum")/s.ops)
	})
	row("all members: ranges served (mean)", func(s sums) string {
		c := all(s, "etcd_server_range_duration_seconds_count")
		return per(s, c) + " (" + meanMs(all(s, "etcd_server_range_duration_seconds_sum"), c) + ")"
	})
	row("all members: slow read indexes", func(s sums) string { return per(s, all(s, "etcd_server_slow_read_indexes_total")) })
	row("all members: gRPC Txn / Range / DeleteRange handled", func(s sums) string {
		return per(s, all(s, "grpc_server_handled_total", `grpc_method="Txn"`)) + " / " +
			per(s, all(s, "grpc_server_handled_total", `grpc_method="Range"`)) + " / " +
			per(s, all(s, "grpc_server_handled_total", `grpc_method="DeleteRange"`))
	})
	row("server CPU: leader / all members", func(s sums) string {
		return fmt.Sprintf("%s / %s", dur(time.Duration(1e9*lead(s, "process_cpu_seconds_total")/s.ops)),
			dur(time.Duration(1e9*all(s, "process_cpu_seconds_total")/s.ops)))
	})
	row("client CPU", func(s sums) string { return dur(s.clientCPU / time.Duration(s.ops)) })
	row("acquisitions / window time", func(s sums) string {
		return fmt.Sprintf("%.0f / %v", s.ops, s.elapsed.Round(time.Millisecond))
	})
	t.write(w)
}

func meanOf(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
