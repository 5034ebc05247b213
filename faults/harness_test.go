package faults_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdproc"
	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

// runConfig is one run: a cluster of etcd processes, worker processes
// running workloads through per-process proxies, and a nemesis cycling
// through faults.
type runConfig struct {
	etcd      string   // server binary
	etcdArgs  []string // extra server flags
	worker    string   // worker binary
	duration  time.Duration
	procs     int
	clients   int
	ttl       int
	workloads []string
	faults    []fault
}

// run is the state of a run in progress.
type run struct {
	t       *testing.T
	cfg     runConfig
	dir     string
	pfx     string
	clus    *etcdproc.Cluster
	ctl     *clientv3.Client // direct to every member, for the nemesis and the checks
	proxies [][]*etcdproc.Proxy
	workers []*workerProc
	store   *store
	watch   *watch

	mu     sync.Mutex              // guards forced and slowed
	forced map[forcedKey]time.Time // hold keys a fault deleted, and when the delete returned
	slowed []slowWindow            // the slow-commit faults' windows
}

// result is what a run measured.
type result struct {
	cfg      runConfig
	elapsed  time.Duration
	ops      map[string]int
	faults   map[string]int
	injected []injection
	report   *hc.Report
	version  string
	live     liveStats
	// slow is what the slow-commit faults cost: the writes the slowed
	// processes sent while slowed (every attempt), and their acquisitions
	// (Lock and Campaign ok) in those windows.
	// And for comparison, the same over the whole run, every process.
	slow   struct{ windows, writes, acquisitions, allWrites, allAcquisitions int }
	models []modelVerdict
	// dbUnchecked counts the dbarrier rounds not checked for an early
	// Leave, by why their session may not have lived throughout them.
	dbUnchecked map[string]int
}

func startRun(t *testing.T, pfx string, cfg runConfig) *run {
	t.Helper()
	r := &run{t: t, cfg: cfg, dir: t.TempDir(), pfx: pfx, forced: map[forcedKey]time.Time{}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	clus, err := etcdproc.Start(ctx, etcdproc.Config{Binary: cfg.etcd, Dir: r.dir, Args: cfg.etcdArgs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(clus.Close)
	r.clus = clus
	if r.ctl, err = clus.Client(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.ctl.Close() })

	for p := 0; p < cfg.procs; p++ {
		var pxs []*etcdproc.Proxy
		for _, m := range clus.Members {
			px, err := etcdproc.NewProxy(m.ClientURL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(px.Close)
			pxs = append(pxs, px)
		}
		r.proxies = append(r.proxies, pxs)
	}
	r.store = startStore(t, filepath.Join(r.dir, "store.sock"))

	resp, err := r.ctl.Get(ctx, pfx+"/")
	if err != nil {
		t.Fatal(err)
	}
	r.watch = startWatch(t, r.ctl, pfx+"/lock/", resp.Header.Revision+1)

	for p := 0; p < cfg.procs; p++ {
		r.workers = append(r.workers, r.startWorker(p))
	}
	return r
}

// workerProc is a running worker process.
type workerProc struct {
	p       int
	cmd     *exec.Cmd
	exited  chan struct{}
	history string
	log     string
	mu      sync.Mutex // guards paused
	paused  bool
	dir     string // the run's directory, for slowFile
}

// slowFile is the file from which the worker reads the delay of its
// writes (see the worker's -slow).
func (w *workerProc) slowFile(dir string) string {
	return filepath.Join(dir, fmt.Sprintf("slow-%d", w.p))
}

// slow makes the worker's writes be answered d late (0: at once).
func (w *workerProc) slow(d time.Duration) error { return w.setSlow(d.String()) }

// slowRenewals makes the answers to the worker's renewals come d late
// (0: at once), its writes answered at once.
func (w *workerProc) slowRenewals(d time.Duration) error { return w.setSlow("0s renew=" + d.String()) }

// setSlow writes the worker's slow file (see the worker's -slow).
func (w *workerProc) setSlow(what string) error {
	tmp := w.slowFile(w.dir) + ".tmp"
	if err := os.WriteFile(tmp, []byte(what), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, w.slowFile(w.dir))
}

func (r *run) startWorker(p int) *workerProc {
	r.t.Helper()
	var eps []string
	for _, px := range r.proxies[p] {
		eps = append(eps, px.URL())
	}
	w := &workerProc{p: p, exited: make(chan struct{}), dir: r.dir,
		history: filepath.Join(r.dir, fmt.Sprintf("history-%d.jsonl", p)),
		log:     filepath.Join(r.dir, fmt.Sprintf("worker-%d.log", p))}
	logf, err := os.Create(w.log)
	if err != nil {
		r.t.Fatal(err)
	}
	defer logf.Close()
	w.cmd = exec.Command(r.cfg.worker,
		"-endpoints", strings.Join(eps, ","),
		"-proc", fmt.Sprint(p),
		"-pfx", r.pfx,
		"-workloads", strings.Join(r.cfg.workloads, ","),
		"-clients", fmt.Sprint(r.cfg.clients),
		"-ttl", fmt.Sprint(r.cfg.ttl),
		"-duration", r.cfg.duration.String(),
		"-grace", workerGrace.String(),
		"-store", filepath.Join(r.dir, "store.sock"),
		"-out", w.history,
		"-slow", w.slowFile(r.dir),
		fmt.Sprintf("-keepalive=%v", !defaultConfig(p)),
	)
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	w.cmd.SysProcAttr = etcdproc.ProcAttr()
	if err := w.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		w.cmd.Wait()
		close(w.exited)
	}()
	r.t.Cleanup(func() {
		w.signal(syscall.SIGCONT)
		w.signal(syscall.SIGKILL)
		<-w.exited
	})
	return w
}

// defaultConfig reports whether worker process p dials with clientv3's
// default configuration, without gRPC keepalive, as most programs do: the
// even ones. A keepalive would notice a silent connection by itself and
// hide what the half-open fault tests (issue 27).
func defaultConfig(p int) bool { return p%2 == 0 }

// workerGrace is how long a worker's calls may take to return after its
// run ends: longer than any Lock timeout and cleanup the worker uses.
const workerGrace = 45 * time.Second

func (w *workerProc) signal(sig syscall.Signal) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.exited:
		return
	default:
	}
	syscall.Kill(-w.cmd.Process.Pid, sig)
	w.paused = sig == syscall.SIGSTOP
	if w.paused {
		etcdproc.WaitStopped(w.cmd.Process.Pid, 5*time.Second)
	}
}

// wait waits for every worker to exit, and for at most d; it then sends
// SIGQUIT to those left (their stacks go to their logs) and kills them.
// It returns the processes that did not exit in time or exited non-zero.
func (r *run) waitWorkers(d time.Duration) []string {
	deadline, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var bad []string
	for _, w := range r.workers {
		select {
		case <-w.exited:
		case <-deadline.Done():
		}
		select {
		case <-w.exited:
			if code := w.cmd.ProcessState.ExitCode(); code != 0 {
				bad = append(bad, fmt.Sprintf("worker %d exited with status %d (log %s)", w.p, code, w.log))
			}
		default:
			w.signal(syscall.SIGCONT)
			w.signal(syscall.SIGQUIT)
			time.Sleep(time.Second) // let it write its stacks
			w.signal(syscall.SIGKILL)
			<-w.exited
			bad = append(bad, fmt.Sprintf("worker %d did not exit in time (stacks in %s)", w.p, w.log))
		}
	}
	return bad
}

// watch records every change under the lock prefixes from the start of
// the run, through faults, as the ground truth of who held what when.
type watch struct {
	mu        sync.Mutex // guards events, at, rev, lastEvent, err
	events    map[string][]hc.KeyEvent
	at        map[int64]time.Time // when the watch delivered each revision's events
	rev       int64               // the watch has delivered everything up to rev
	lastEvent int64               // revision of the last event delivered
	err       error
	cancel    context.CancelFunc
	done      chan struct{}
}

func startWatch(t *testing.T, cli *clientv3.Client, pfx string, from int64) *watch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watch{events: map[string][]hc.KeyEvent{}, at: map[int64]time.Time{}, cancel: cancel, done: make(chan struct{}), rev: from - 1}
	wch := cli.Watch(ctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	go func() {
		defer close(w.done)
		for wr := range wch {
			w.mu.Lock()
			if err := wr.Err(); err != nil {
				if w.err == nil && ctx.Err() == nil {
					w.err = err
				}
				w.mu.Unlock()
				continue
			}
			now := time.Now()
			for _, ev := range wr.Events {
				w.at[ev.Kv.ModRevision] = now
				// A queue is named by the first part of the key under
				// pfx: an RWMutex's keys are one level deeper (r/, w/).
				key := string(ev.Kv.Key)
				wl, _, _ := strings.Cut(strings.TrimPrefix(key, pfx), "/")
				name := pfx + wl
				w.events[name] = append(w.events[name], hc.KeyEvent{Key: key, Delete: ev.Type == clientv3.EventTypeDelete,
					Rev: ev.Kv.ModRevision, CreateRev: ev.Kv.CreateRevision, Lease: ev.Kv.Lease, Value: string(ev.Kv.Value)})
				w.lastEvent = ev.Kv.ModRevision
			}
			w.rev = max(w.rev, wr.Header.Revision)
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *watch) stop() {
	w.cancel()
	<-w.done
}

// safeCompactRev is a revision that can be compacted without making the
// watch miss anything: it resumes after the last event it delivered.
func (w *watch) safeCompactRev() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastEvent
}

// catchUp waits until the watch has delivered everything up to rev.
func (w *watch) catchUp(ctx context.Context, cli *clientv3.Client, rev int64) error {
	for {
		w.mu.Lock()
		got, err := w.rev, w.err
		w.mu.Unlock()
		if err != nil {
			return err
		}
		if got >= rev {
			return nil
		}
		cli.RequestProgress(ctx)
		select {
		case <-ctx.Done():
			return fmt.Errorf("watch at revision %d, want %d: %w", got, rev, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// finish waits for the workers, heals the cluster, and checks everything.
func (r *run) finish(nem *nemesis, start time.Time) *result {
	t := r.t
	t.Helper()
	bad := r.waitWorkers(time.Until(start.Add(r.cfg.duration + workerGrace + 15*time.Second)))
	nem.stop()
	elapsed := time.Since(start)
	rep := hc.NewReport()
	for _, b := range bad {
		rep.Violate(hc.Returned, "%s", b)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := r.clus.WaitHealthy(ctx); err != nil {
		t.Fatalf("cluster did not recover after the run: %v", err)
	}

	// Nothing may be left: lock keys, registry keys and leases go when the
	// sessions close, or at the latest when their leases expire.
	var left []string
	deadline := time.Now().Add(time.Duration(r.cfg.ttl)*time.Second + 15*time.Second)
	for {
		left = r.leftovers(ctx)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	rep.Checked[hc.NoKeysLeft]++
	for _, l := range left {
		rep.Violate(hc.NoKeysLeft, "%s", l)
	}

	resp, err := r.ctl.Get(ctx, r.pfx+"/counter")
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	if err := r.watch.catchUp(wctx, r.ctl, resp.Header.Revision); err != nil {
		rep.Violate(hc.Complete, "watch of the lock keys: %v", err)
	}
	wcancel()
	r.watch.stop()

	var st hc.CounterState
	if len(resp.Kvs) == 1 {
		fmt.Sscan(string(resp.Kvs[0].Value), &st.Value)
	}
	st.Ops = map[string]int64{}
	opsResp, err := r.ctl.Get(ctx, r.pfx+"/ops/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range opsResp.Kvs {
		var v int64
		fmt.Sscan(string(kv.Value), &v)
		st.Ops[strings.TrimPrefix(string(kv.Key), r.pfx+"/ops/")] = v
	}

	var all []hc.Op
	byWorkload := map[string][]hc.Op{}
	var procs []int
	for _, w := range r.workers {
		procs = append(procs, w.p)
		ops, err := hc.ReadFile(w.history)
		if err != nil {
			rep.Violate(hc.Complete, "history of worker %d: %v", w.p, err)
		}
		all = append(all, ops...)
		for _, op := range ops {
			byWorkload[op.Workload] = append(byWorkload[op.Workload], op)
		}
	}

	hc.CheckReturned(rep, all, procs)
	r.watch.mu.Lock()
	events, eventAt := r.watch.events, r.watch.at
	r.watch.mu.Unlock()
	res := &result{cfg: r.cfg, ops: countOps(all), faults: nem.counts(), injected: nem.log(), report: rep}
	r.mu.Lock()
	forced := r.forced
	r.mu.Unlock()
	r.mu.Lock()
	res.slow.windows = len(r.slowed)
	for _, op := range all {
		if op.F == hc.FExit && op.Type == hc.OK {
			var total, slowed int
			fmt.Sscanf(op.ID, "writes=%d slowed=%d", &total, &slowed)
			res.slow.writes += slowed
			res.slow.allWrites += total
		}
		if op.Type == hc.OK && (op.F == hc.FLock || op.F == hc.FCampaign) {
			res.slow.allAcquisitions++
			at := time.Unix(0, op.Time)
			for _, w := range r.slowed {
				if w.p == op.Proc && !at.Before(w.from) && !at.After(w.to) {
					res.slow.acquisitions++
					break
				}
			}
		}
	}
	r.mu.Unlock()
	res.live = checkLiveness(rep, r.cfg, events, eventAt, byWorkload, res.injected, forced, r.pfx+"/lock/")
	// found counts the violations that the revision checks find on each
	// lock name and counter, for the models' verdicts to agree with.
	found := map[string]int{}
	timelines := map[string]*hc.Timeline{}
	var shardModels []modelVerdict // shards_test.go
	var workqModels []modelVerdict // workq_test.go
	for _, wl := range r.cfg.workloads {
		before := rep.Total()
		if wl == "shards" { // shards_test.go
			shardModels = checkShards(rep, r.pfx+"/lock/shards", events[r.pfx+"/lock/shards"], byWorkload[wl], all, eventAt)
			continue
		}
		if wl == "workq" { // workq_test.go
			workqModels = checkWorkQueue(rep, r.pfx+"/lock/workq", events[r.pfx+"/lock/workq"], byWorkload[wl], r.workqEnd(ctx))
			continue
		}
		if queueWorkload(wl) {
			checkQueue(rep, wl, byWorkload[wl], r.queueLeft(ctx, wl))
			continue
		}
		if barrierWorkload(wl) {
			_, in := halfOpenWindows(res.injected, recipesBound)
			if n := checkBarriers(rep, wl, byWorkload[wl], in, recipesBound, lastFault(res.injected)); wl == "dbarrier" {
				res.dbUnchecked = n
			}
			continue
		}
		name := r.pfx + "/lock/" + wl
		tl := hc.NewTimeline(rep, name, events[name])
		timelines[wl] = tl
		switch wl {
		case "election", "lead":
			hc.CheckHolds(rep, name, byWorkload[wl], hc.FCampaign, tl, hc.OneLeader, hc.OneLeader)
			hc.CheckTerms(rep, name, byWorkload[wl])
		case "semaphore":
			hc.CheckShared(rep, name, byWorkload[wl], tl, hc.SemaphoreRule(semLimit))
		case "wsemaphore":
			hc.CheckShared(rep, name, byWorkload[wl], tl, hc.WeightedSemaphoreRule())
			logFails(r.t, wl, byWorkload[wl])
		case "rwmutex":
			hc.CheckShared(rep, name, byWorkload[wl], tl, hc.RWMutexRule())
		default:
			hc.CheckHolds(rep, name, byWorkload[wl], hc.FLock, tl, hc.Exclusion, hc.CreateOrder)
		}
		found[wl] = rep.Total() - before
	}
	log := r.store.writes()
	counters := map[string]hc.CounterState{}
	for _, wl := range r.cfg.workloads {
		before := rep.Total()
		switch wl {
		case "txn":
			counters[wl] = st
			hc.CheckCounter(rep, byWorkload[wl], st)
		case "semaphore":
			for slot := 0; slot < semLimit; slot++ {
				hc.CheckCounter(rep, slotOps(byWorkload[wl], slot), r.counter(ctx, fmt.Sprintf("/sem/counter/%d", slot), fmt.Sprintf("/sem/ops/%d/", slot)))
			}
			for _, op := range byWorkload[wl] {
				if op.F == hc.FSlot && op.Err == errNoSlot {
					rep.Violate(hc.SemLimit, "%s found no free permit slot (token %d): more than %d holders", op.Client, op.Token, semLimit)
				}
			}
		case "rwmutex":
			counters[wl] = r.counter(ctx, "/rw/counter", "/rw/ops/")
			hc.CheckCounter(rep, byWorkload[wl], counters[wl])
		case "cancel":
			counters[wl] = r.counter(ctx, "/cancel/counter", "/cancel/ops/")
			hc.CheckCounter(rep, byWorkload[wl], counters[wl])
		case "fence":
			hc.CheckStore(rep, byWorkload[wl], log, "fenced", wl, true)
		case "unguarded":
			rep.Measured[hc.UnguardedLost] = hc.CheckStore(rep, byWorkload[wl], log, "raw", wl, false)
			rep.Measured[hc.Overlap] = hc.Overlaps(rep, byWorkload[wl])
		}
		if _, ok := counters[wl]; ok {
			found[wl+" counter"] = rep.Total() - before
		}
	}
	res.models = append(checkModels(rep, r.cfg.workloads, all, eventAt, byWorkload, timelines, counters, found), append(shardModels, workqModels...)...)
	for _, w := range r.workers {
		r.t.Logf("worker %d: history %s, log %s", w.p, w.history, w.log)
	}
	res.elapsed, res.version = elapsed, r.version(ctx)
	return res
}

// logFails logs why the acquisitions of workload wl failed, by error (its
// text up to the second ": ", which names the sentinel without the key or
// lease): for wsemaphore, mostly ErrLimitMismatch after another client's
// resize, and the faults' timeouts and session ends.
func logFails(t *testing.T, wl string, ops []hc.Op) {
	n := map[string]int{}
	for _, op := range ops {
		if op.F == hc.FLock && op.Type == hc.Fail {
			parts := strings.SplitN(op.Err, ": ", 3)
			n[strings.Join(parts[:min(len(parts), 2)], ": ")]++
		}
	}
	for err, k := range n {
		t.Logf("%s: %d acquisitions failed with %q", wl, k, err)
	}
}

// semLimit and errNoSlot are the semaphore workload's limit and the error
// of a claim that found no free slot, as in faults/worker.
const (
	semLimit  = 2
	errNoSlot = "no free slot"
)

// slotOps returns the guarded increments of ops on the counter of slot,
// whose IDs begin with the slot, and the other ops.
func slotOps(ops []hc.Op, slot int) []hc.Op {
	var out []hc.Op
	for _, op := range ops {
		if op.F != hc.FIncr || strings.HasPrefix(op.ID, fmt.Sprintf("%d/", slot)) {
			out = append(out, op)
		}
	}
	return out
}

// counter reads a guarded counter at r.pfx+key and its per-increment keys
// under r.pfx+ops, named by the increments' IDs less the slot, if any.
func (r *run) counter(ctx context.Context, key, ops string) hc.CounterState {
	st := hc.CounterState{Ops: map[string]int64{}}
	resp, err := r.ctl.Get(ctx, r.pfx+key)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(resp.Kvs) == 1 {
		fmt.Sscan(string(resp.Kvs[0].Value), &st.Value)
	}
	opsResp, err := r.ctl.Get(ctx, r.pfx+ops, clientv3.WithPrefix())
	if err != nil {
		r.t.Fatal(err)
	}
	for _, kv := range opsResp.Kvs {
		var v int64
		fmt.Sscan(string(kv.Value), &v)
		id := strings.TrimPrefix(string(kv.Key), r.pfx+ops)
		if strings.HasPrefix(ops, "/sem/ops/") {
			id = strings.TrimPrefix(ops, "/sem/ops/") + id
		}
		st.Ops[id] = v
	}
	return st
}

// leftovers lists what the run left in etcd: keys under the lock and
// registry prefixes, and leases (the workers' owner records go with
// theirs).
func (r *run) leftovers(ctx context.Context) []string {
	var left []string
	for _, p := range []string{"/lock/", "/reg/"} {
		resp, err := r.ctl.Get(ctx, r.pfx+p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return []string{err.Error()}
		}
		for _, kv := range resp.Kvs {
			if workqLeft(r.pfx, string(kv.Key)) {
				continue // items a work queue keeps (workq_test.go)
			}
			left = append(left, fmt.Sprintf("key %s (lease %x)", kv.Key, kv.Lease))
		}
	}
	ls, err := r.ctl.Leases(ctx)
	if err != nil {
		return append(left, err.Error())
	}
	for _, l := range ls.Leases {
		left = append(left, fmt.Sprintf("lease %x", int64(l.ID)))
	}
	return left
}

func (r *run) version(ctx context.Context) string {
	resp, err := r.ctl.Status(ctx, r.clus.Members[0].ClientURL)
	if err != nil {
		return "unknown"
	}
	return resp.Version
}

// countOps counts completions by workload, function and type.
func countOps(ops []hc.Op) map[string]int {
	n := map[string]int{}
	for _, op := range ops {
		if op.Type == hc.Invoke {
			continue
		}
		n[op.F+" "+op.Type]++
		if (op.F == hc.FLock || op.F == hc.FCampaign) && op.Type == hc.OK {
			n[fmt.Sprintf("acquisitions by process %d", op.Proc)]++
		}
		if op.Workload != "" {
			n[op.Workload+": "+op.F+" "+op.Type]++
		}
	}
	return n
}

// summary formats a result as Markdown.
func (res *result) summary() string {
	var b strings.Builder
	c := res.cfg
	fmt.Fprintf(&b, "Run of %v (configured %v): etcd %s, 3 server processes; %d client processes × %d clients × workloads %s; session TTL %d s.\n\n",
		res.elapsed.Round(time.Second), c.duration, res.version, c.procs, c.clients, strings.Join(c.workloads, ", "), c.ttl)
	acq := res.ops["lock ok"] + res.ops["campaign ok"]
	fmt.Fprintf(&b, "| operations | count |\n|---|---:|\n")
	fmt.Fprintf(&b, "| lock acquisitions (Lock and Campaign ok) | %d |\n", acq)
	var keys []string
	for k := range res.ops {
		if strings.Contains(k, ": ") || strings.HasPrefix(k, "acquisitions by") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "| %s | %d |\n", k, res.ops[k])
	}
	fmt.Fprintf(&b, "\n| fault | injected |\n|---|---:|\n")
	var kinds []string
	for k := range res.faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	total := 0
	for _, k := range kinds {
		fmt.Fprintf(&b, "| %s | %d |\n", k, res.faults[k])
		total += res.faults[k]
	}
	fmt.Fprintf(&b, "| total | %d |\n\n", total)
	b.WriteString(res.report.Table())
	b.WriteString(modelTable(res.models))
	if l := res.live; l.windows > 0 {
		fmt.Fprintf(&b, "\nHalf-open windows: %d; bound %v; waits on a free lock checked %d, longest %v; holds whose key was deleted checked %d, longest to their Ctx's end %v.\n",
			l.windows, l.bound, l.waits, l.maxWait.Round(time.Millisecond), l.holds, l.maxHold.Round(time.Millisecond))
	}
	if len(res.dbUnchecked) > 0 {
		var why []string
		for k, n := range res.dbUnchecked {
			why = append(why, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(why)
		fmt.Fprintf(&b, "\nDouble-barrier rounds whose Leaves were not checked, their session not proven alive throughout: %s.\n", strings.Join(why, ", "))
	}
	if s := res.slow; s.windows > 0 {
		fmt.Fprintf(&b, "\nSlow-commit windows: %d; the slowed processes sent %d writes of every workload (every attempt) while slowed, and made %d Lock and Campaign acquisitions in them", s.windows, s.writes, s.acquisitions)
		if s.acquisitions > 0 {
			fmt.Fprintf(&b, ": %.1f writes per acquisition", float64(s.writes)/float64(s.acquisitions))
		}
		if s.allAcquisitions > 0 {
			fmt.Fprintf(&b, " (over the whole run, every process: %.1f)", float64(s.allWrites)/float64(s.allAcquisitions))
		}
		b.WriteString(".\n")
	}
	return b.String()
}
