package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// fault is one kind of fault: inject applies it, holds it for its
// duration, heals it, and says what it did. It returns an error only when
// the harness failed (the cluster did not recover), not when clients did.
type fault struct {
	name   string
	inject func(ctx context.Context, r *run, n int) (string, error)
	// length is about how long inject takes, to leave the calm end of the
	// run without faults.
	length func(r *run) time.Duration
}

func secs(n int) func(*run) time.Duration {
	return func(*run) time.Duration { return time.Duration(n) * time.Second }
}

func ttlPlus(n int) func(*run) time.Duration {
	return func(r *run) time.Duration { return time.Duration(r.cfg.ttl+n) * time.Second }
}

// allFaults are the kinds of issue 6, in the order the nemesis cycles
// through them.
var allFaults = []fault{
	{"kill -9 leader + restart", killMember(true), secs(6)},
	{"kill -9 follower + restart", killMember(false), secs(6)},
	{"SIGSTOP/SIGCONT member", pauseMember, secs(6)},
	{"proxy delay 250 ms", proxyFault("delay"), secs(5)},
	{"proxy drop connections", proxyFault("drop"), secs(4)},
	{"proxy blackhole (client partitioned > TTL)", proxyFault("blackhole"), ttlPlus(3)},
	{"SIGSTOP client process > TTL", pauseClient, ttlPlus(3)},
	{"lease revoke from outside", revokeLease, secs(1)},
	{"waiter's lease revoked or key deleted", disturbWaiter, secs(1)},
	{"compaction + defrag with waiters", compactDefrag, secs(4)},
	{"full cluster restart", restartCluster, secs(12)},
	{halfOpenFault, halfOpen, halfOpenLength},
	{"member replaced (removed, new one added)", replaceMember, secs(10)},
	{"compaction while a client's watches resume", compactResume, secs(5)},
	{slowClientFault, slowCommits(false), secs(slowBurst)},
	{slowAllFault, slowCommits(true), secs(slowBurst)},
	{slowRenewFault, slowRenewals, slowRenewLength},
	{surgeFault, surgeSlow, secs(slowBurst)},
}

// surgeFault runs many operations at once on one client process whose
// writes are slow (issue 50): 16 more clients of each of its lock,
// election, semaphore and rwmutex workloads, each with its session on the
// process's one etcd client, while its writes are answered 0.5 s to
// TTL/2 late.
const surgeFault = "many operations at once under slow commits (one client process, +16 clients per workload, writes 0.5 s-TTL/2 late)"

// surgeSlow is surgeFault's inject: for slowBurst seconds, a delay picked
// at random every 3 s, with the surge's clients running throughout.
func surgeSlow(ctx context.Context, r *run, round int) (string, error) {
	w := r.workers[round%len(r.workers)]
	most := max(time.Duration(r.cfg.ttl)*time.Second/2, time.Second)
	var ds []string
	start := time.Now()
	for time.Since(start) < slowBurst*time.Second && ctx.Err() == nil {
		d := 500*time.Millisecond + rand.N(most-500*time.Millisecond)
		if err := w.setSlow(d.String() + " surge=16"); err != nil {
			return "", err
		}
		ds = append(ds, d.Round(100*time.Millisecond).String())
		hold(ctx, 3*time.Second)
	}
	if err := w.slow(0); err != nil {
		return "", err
	}
	r.mu.Lock()
	r.slowed = append(r.slowed, slowWindow{p: w.p, from: start, to: time.Now()})
	r.mu.Unlock()
	return fmt.Sprintf("worker %d, 16 more clients per workload: writes answered late by %s", w.p, strings.Join(ds, ", ")), nil
}

// slowRenewFault delays the answers to every client process's renewals
// (issue 50): a busy leader or a congested link. Renewals are still
// applied when etcd receives them; sessions must live on (the liveness
// checks) and no hold may outlive its lease (the safety checks).
const slowRenewFault = "renewal answers late to every client process (up to 2·TTL/3 − 1 s)"

// slowRenewLength is how long the slow-renewal fault lasts: two TTLs, at
// least 9 s, so that each session renews several times with late answers.
func slowRenewLength(r *run) time.Duration {
	return max(time.Duration(2*r.cfg.ttl)*time.Second, slowBurst*time.Second)
}

// slowRenewals delays every worker's renewal answers for
// slowRenewLength: a delay picked at random between 0.5 s and 2·TTL/3 −
// 1 s every TTL/3 (at least 1 s).
func slowRenewals(ctx context.Context, r *run, _ int) (string, error) {
	ttl := time.Duration(r.cfg.ttl) * time.Second
	most := max(2*ttl/3-time.Second, 600*time.Millisecond)
	set := func(d time.Duration) error {
		for _, w := range r.workers {
			if err := w.slowRenewals(d); err != nil {
				return err
			}
		}
		return nil
	}
	var ds []string
	start := time.Now()
	for time.Since(start) < slowRenewLength(r) && ctx.Err() == nil {
		d := 500*time.Millisecond + rand.N(most-500*time.Millisecond)
		if err := set(d); err != nil {
			return "", err
		}
		ds = append(ds, d.Round(100*time.Millisecond).String())
		hold(ctx, max(ttl/3, time.Second))
	}
	if err := set(0); err != nil {
		return "", err
	}
	return fmt.Sprintf("every worker: renewals answered late by %s", strings.Join(ds, ", ")), nil
}

// The slow-commit faults (issue 38): writes answered 0.5 to 5 s late,
// while reads, watches and keepalives are answered at once, the model of
// a cluster whose commits wait for a slow disk. A delayed write is still
// applied when its caller has given up on it (see slowwrite.Writes).
const (
	slowClientFault = "slow commits to one client process (writes answered 0.5-5 s late)"
	slowAllFault    = "slow commits to every client process (writes answered 0.5-5 s late)"
	slowBurst       = 9 // seconds a slow-commit fault lasts
)

// slowCommits makes the writes of one client process (all of them, with
// all) slow, in bursts: for slowBurst seconds, a delay picked at random
// between 0.5 s and 5 s every 3 s. Each process reads its delay from its
// file in the run's directory (see workerProc.slow).
func slowCommits(all bool) func(ctx context.Context, r *run, round int) (string, error) {
	return func(ctx context.Context, r *run, round int) (string, error) {
		ws := r.workers
		if !all {
			ws = ws[round%len(ws) : round%len(ws)+1]
		}
		set := func(d time.Duration) error {
			for _, w := range ws {
				if err := w.slow(d); err != nil {
					return err
				}
			}
			return nil
		}
		var ds []string
		start := time.Now()
		for time.Since(start) < slowBurst*time.Second && ctx.Err() == nil {
			d := 500*time.Millisecond + rand.N(4500*time.Millisecond)
			if err := set(d); err != nil {
				return "", err
			}
			ds = append(ds, d.Round(100*time.Millisecond).String())
			hold(ctx, 3*time.Second)
		}
		if err := set(0); err != nil {
			return "", err
		}
		who := "every worker"
		if !all {
			who = fmt.Sprintf("worker %d", ws[0].p)
		}
		r.mu.Lock()
		for _, w := range ws {
			r.slowed = append(r.slowed, slowWindow{p: w.p, from: start, to: time.Now()})
		}
		r.mu.Unlock()
		return fmt.Sprintf("%s: writes answered late by %s", who, strings.Join(ds, ", ")), nil
	}
}

// slowWindow is a time during which a worker's writes were slowed.
type slowWindow struct {
	p        int
	from, to time.Time
}

// halfOpenFault is the name of the half-open fault, whose windows the
// liveness checks use.
const halfOpenFault = "half-open connection (one member silent to a client without keepalive)"

// halfOpenLength is how long the half-open fault lasts: the longer of the
// liveness bounds of the core (liveBound) and of the recipes
// (recipesBound), and twice the TTL more, in which a lock that becomes
// free, a hold's key that is deleted or a barrier that opens must be
// noticed within its bound.
func halfOpenLength(r *run) time.Duration {
	return max(liveBound(r.cfg.ttl), recipesBound) + time.Duration(2*r.cfg.ttl)*time.Second
}

// halfOpen makes one connection of a client process silent without a
// reset, the shape of findings 1 and 2 of issue 27: the process dials
// with clientv3's default configuration (no gRPC keepalive), and its proxy
// to one member (a different one each round) blackholes, while its
// proxies to the others pass, so that its session's renewals go on
// succeeding through them. The process is the hold workload's holder's
// when that one dials without keepalive. A second into the fault, the
// hold workload's holder's key is deleted from outside, as etcdlock
// force-unlock does: its hold's Ctx must end, and its first waiter be
// granted, within the bound (see checkLiveness), whichever connection
// their watches are on.
func halfOpen(ctx context.Context, r *run, round int) (string, error) {
	p, who := r.holderProc(ctx, 0, "hold")
	if !defaultConfig(p) {
		var ps []int
		for _, w := range r.workers {
			if defaultConfig(w.p) {
				ps = append(ps, w.p)
			}
		}
		p, who = ps[rand.IntN(len(ps))], "a process without keepalive"
	}
	i := round % len(r.proxies[p])
	px := r.proxies[p][i]
	d := halfOpenLength(r)
	px.Blackhole()
	hold(ctx, time.Second)
	deleted := "no hold holder"
	if kv := r.holder(ctx, "hold"); kv != nil {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := r.ctl.Txn(dctx).
			If(clientv3.Compare(clientv3.CreateRevision(kv.Key), "=", kv.CreateRev)).
			Then(clientv3.OpDelete(kv.Key)).
			Commit()
		cancel()
		if err == nil && resp.Succeeded {
			r.mu.Lock()
			r.forced[forcedKey{kv.Key, kv.CreateRev}] = time.Now()
			r.mu.Unlock()
		}
		deleted = fmt.Sprintf("deleted the hold holder's key %s (%v)", kv.Key, err)
	}
	hold(ctx, d-time.Second)
	px.Heal()
	return fmt.Sprintf("worker %d (%s), member %s silent for %v; %s", p, who, r.clus.Members[i].Name, d, deleted), nil
}

// replaceMember removes a member from the cluster and adds a new, empty
// one at its address, while locks are held and waited, as an operator
// replaces a machine: the leader and a follower in turn.
func replaceMember(ctx context.Context, r *run, round int) (string, error) {
	i, l, err := r.inTurn(ctx, round)
	if err != nil {
		return "", err
	}
	old := r.clus.Members[i].Name
	if err := r.clus.Replace(ctx, i); err != nil {
		return old, err
	}
	return fmt.Sprintf("%s (leader %v) replaced by %s", old, i == l, r.clus.Members[i].Name), nil
}

// compactResume cuts one client process off from every member (its
// connections reset), compacts the key space while it is cut off, up to
// what the checker's watch has seen, and lets it reconnect: its watches
// resume from revisions that may be compacted away.
func compactResume(ctx context.Context, r *run, round int) (string, error) {
	p, wl := r.holderProc(ctx, round, "txn")
	for _, px := range r.proxies[p] {
		px.Drop()
	}
	hold(ctx, time.Second)
	rev := r.watch.safeCompactRev()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := r.ctl.Compact(cctx, rev, clientv3.WithCompactPhysical())
	cancel()
	hold(ctx, time.Second)
	for _, px := range r.proxies[p] {
		px.Heal()
	}
	return fmt.Sprintf("worker %d (%s) cut off, compacted to %d (%v)", p, wl, rev, err), nil
}

// injection is one fault injected.
type injection struct {
	kind, what string
	start, end time.Time
	err        error
}

// lastFault returns, for a time, which of the injections (in the order
// injected) was under way then ("during" its kind) or had ended last
// before it ("after" its kind), or "before any fault".
func lastFault(injected []injection) func(time.Time) string {
	return func(t time.Time) string {
		i := sort.Search(len(injected), func(i int) bool { return injected[i].start.After(t) }) - 1
		switch {
		case i < 0:
			return "before any fault"
		case t.After(injected[i].end):
			return "after " + injected[i].kind
		}
		return "during " + injected[i].kind
	}
}

// nemesis injects faults one after the other until its end time.
type nemesis struct {
	r      *run
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex // guards injected
	injected []injection
}

// startNemesis cycles through r.cfg.faults from start+warmup until calm
// before the end of the run, with a pause between faults for the cluster
// and clients to settle.
func startNemesis(r *run, start time.Time, warmup, calm time.Duration) *nemesis {
	ctx, cancel := context.WithCancel(context.Background())
	n := &nemesis{r: r, cancel: cancel, done: make(chan struct{})}
	end := start.Add(r.cfg.duration - calm)
	r.t.Cleanup(n.stop) // also when the test fails before finish stops it
	go func() {
		defer close(n.done)
		if !sleepCtx(ctx, time.Until(start.Add(warmup))) {
			return
		}
		for i := 0; ctx.Err() == nil; i++ {
			f := r.cfg.faults[i%len(r.cfg.faults)]
			if time.Now().Add(f.length(r)).After(end) {
				return
			}
			in := injection{kind: f.name, start: time.Now()}
			in.what, in.err = f.inject(ctx, r, i/len(r.cfg.faults))
			in.end = time.Now()
			n.mu.Lock()
			n.injected = append(n.injected, in)
			n.mu.Unlock()
			if in.err != nil {
				r.t.Errorf("nemesis: %s (%s): %v", in.kind, in.what, in.err)
				return
			}
			// Let the cluster settle: every member healthy, then a moment
			// for the clients to queue again.
			hctx, hcancel := context.WithTimeout(ctx, 2*time.Minute)
			err := r.clus.WaitHealthy(hctx)
			hcancel()
			if err != nil && ctx.Err() == nil {
				r.t.Errorf("nemesis: cluster did not recover after %s: %v", in.kind, err)
				return
			}
			if !sleepCtx(ctx, time.Second) {
				return
			}
		}
	}()
	return n
}

// stop ends the nemesis and waits for it; a fault in progress is healed
// first, since every inject heals before returning.
func (n *nemesis) stop() {
	n.cancel()
	<-n.done
}

func (n *nemesis) log() []injection {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]injection(nil), n.injected...)
}

// counts returns the faults injected successfully, by kind.
func (n *nemesis) counts() map[string]int {
	c := map[string]int{}
	for _, in := range n.log() {
		if in.err == nil {
			c[in.kind]++
		}
	}
	return c
}

// sleepCtx waits for d, or for ctx to end; it reports whether d passed.
// The nemesis holds each fault for a time: that is what a fault is, not a
// guess at when something happened.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// hold keeps a fault for d. The fault is healed even if the run ends
// meanwhile: callers heal after hold returns, whatever it returns.
func hold(ctx context.Context, d time.Duration) { sleepCtx(ctx, d) }

// leader waits up to 20 seconds for the cluster to agree on a leader.
func (r *run) leader(ctx context.Context) (int, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		if l := r.clus.Leader(ctx, r.ctl); l >= 0 {
			return l, nil
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			return -1, fmt.Errorf("no leader")
		}
	}
}

func killMember(leader bool) func(context.Context, *run, int) (string, error) {
	return func(ctx context.Context, r *run, _ int) (string, error) {
		l, err := r.leader(ctx)
		if err != nil {
			return "", err
		}
		i := l
		if !leader {
			i = (l + 1 + rand.IntN(len(r.clus.Members)-1)) % len(r.clus.Members)
		}
		m := r.clus.Members[i]
		m.Kill()
		hold(ctx, 2*time.Second)
		return fmt.Sprintf("%s (leader %v)", m.Name, i == l), m.Restart()
	}
}

// pauseMember stops the leader and a follower in turn for 3 seconds: long
// enough for the others to elect a new leader while the old one, frozen,
// still believes it leads.
func pauseMember(ctx context.Context, r *run, round int) (string, error) {
	i, l, err := r.inTurn(ctx, round)
	if err != nil {
		return "", err
	}
	m := r.clus.Members[i]
	m.Pause()
	hold(ctx, 3*time.Second)
	m.Resume()
	return fmt.Sprintf("%s (leader %v)", m.Name, i == l), nil
}

// inTurn returns the member a fault of round aims at, the leader in even
// rounds and a follower in odd ones, and the leader.
func (r *run) inTurn(ctx context.Context, round int) (i, leader int, err error) {
	l, err := r.leader(ctx)
	if err != nil {
		return -1, -1, err
	}
	if round%2 == 1 {
		return (l + 1) % len(r.clus.Members), l, nil
	}
	return l, l, nil
}

// proxyFault cuts one client process off from every member: a holder's
// process when there is one, so that the fault hits a hold.
func proxyFault(kind string) func(context.Context, *run, int) (string, error) {
	return func(ctx context.Context, r *run, round int) (string, error) {
		p, wl := r.holderProc(ctx, round, "txn")
		pxs := r.proxies[p]
		d := 0 * time.Second
		for _, px := range pxs {
			switch kind {
			case "delay":
				px.Delay(250 * time.Millisecond)
				d = 4 * time.Second
			case "drop":
				px.Drop()
				d = 3 * time.Second
			case "blackhole":
				px.Blackhole()
				d = time.Duration(r.cfg.ttl+2) * time.Second
			}
		}
		hold(ctx, d)
		for _, px := range pxs {
			px.Heal()
		}
		return fmt.Sprintf("worker %d (%s) for %v", p, wl, d), nil
	}
}

// pauseClient freezes a holder's process for longer than its TTL: its
// lease expires, another client takes the lock, and the frozen holder
// wakes up still believing it holds.
func pauseClient(ctx context.Context, r *run, round int) (string, error) {
	// The unguarded control first: its holder, frozen mid-hold, is what
	// the overlap count measures.
	p, wl := r.holderProc(ctx, round, "unguarded")
	w := r.workers[p]
	d := time.Duration(r.cfg.ttl+2) * time.Second
	w.signal(syscall.SIGSTOP)
	hold(ctx, d)
	w.signal(syscall.SIGCONT)
	return fmt.Sprintf("worker %d (%s) for %v", p, wl, d), nil
}

// revokeLease revokes a holder's lease, as an operator or another program
// might.
func revokeLease(ctx context.Context, r *run, round int) (string, error) {
	wl := r.rotate(round, "fence")
	kv := r.holder(ctx, wl)
	if kv == nil {
		return "no holder", nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := r.ctl.Revoke(rctx, clientv3.LeaseID(kv.Lease))
	return fmt.Sprintf("lease %x of %s holder (%v)", kv.Lease, wl, err), nil
}

// disturbWaiter takes a waiter out of a queue from outside, as an
// operator might: every other round it revokes the waiter's lease, else it
// deletes the waiter's key (etcdlock force-unlock). The waiter must learn
// it and never hold, and the one behind it must not be granted beside the
// holder.
func disturbWaiter(ctx context.Context, r *run, round int) (string, error) {
	wl := r.rotate(round, "txn")
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The first waiter: after the holders (limit of them for a semaphore).
	i := 1
	if wl == "semaphore" {
		i = semLimit
	}
	resp, err := r.ctl.Get(gctx, r.pfx+"/lock/"+wl+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(int64(i+1)))
	if err != nil || len(resp.Kvs) <= i {
		return "no " + wl + " waiter", nil
	}
	kv := resp.Kvs[i]
	if round%2 == 0 {
		_, err = r.ctl.Revoke(gctx, clientv3.LeaseID(kv.Lease))
		return fmt.Sprintf("revoked lease %x of a %s waiter (%v)", kv.Lease, wl, err), nil
	}
	_, err = r.ctl.Txn(gctx).
		If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
		Then(clientv3.OpDelete(string(kv.Key))).
		Commit()
	return fmt.Sprintf("deleted the key %s of a %s waiter (%v)", kv.Key, wl, err), nil
}

// compactDefrag compacts the keyspace while clients wait in the queues,
// up to what the checker's watch has already seen, and defragments every
// member.
func compactDefrag(ctx context.Context, r *run, _ int) (string, error) {
	// Wait, briefly, for a queue with waiters: a holder and one behind it.
	waiters := false
	for deadline := time.Now().Add(3 * time.Second); !waiters && time.Now().Before(deadline); {
		for _, wl := range r.cfg.workloads {
			gctx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := r.ctl.Get(gctx, r.pfx+"/lock/"+wl+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			cancel()
			if err == nil && resp.Count >= 2 {
				waiters = true
			}
		}
		if !waiters && !sleepCtx(ctx, 50*time.Millisecond) {
			break
		}
	}
	rev := r.watch.safeCompactRev()
	if rev <= 1 {
		return "nothing to compact", nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.ctl.Compact(cctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return fmt.Sprintf("compact %d: %v", rev, err), nil
	}
	var errs []error
	for _, m := range r.clus.Members {
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := r.ctl.Defragment(dctx, m.ClientURL)
		dcancel()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return fmt.Sprintf("compacted to %d with waiters=%v, defragmented (errors: %v)", rev, waiters, errs), nil
}

// restartCluster stops every member at once, with SIGTERM and SIGKILL in
// turn, and starts them all again.
func restartCluster(ctx context.Context, r *run, round int) (string, error) {
	how := "SIGKILL"
	if round%2 == 0 {
		how = fmt.Sprintf("SIGTERM (%d killed after 10 s)", r.clus.StopAll())
	} else {
		for _, m := range r.clus.Members {
			m.Kill()
		}
	}
	hold(ctx, time.Second)
	for _, m := range r.clus.Members {
		if err := m.Restart(); err != nil {
			return how, err
		}
	}
	return how, nil
}

// holder returns the key that holds workload wl's lock, or nil.
func (r *run) holder(ctx context.Context, wl string) *mvccKV {
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := r.ctl.Get(gctx, r.pfx+"/lock/"+wl+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		return nil
	}
	return &mvccKV{Key: string(resp.Kvs[0].Key), Lease: resp.Kvs[0].Lease, CreateRev: resp.Kvs[0].CreateRevision}
}

type mvccKV struct {
	Key       string
	Lease     int64
	CreateRev int64
}

// rotate returns the workload that round targets: every workload in turn,
// starting from first if the run has it.
func (r *run) rotate(round int, first string) string {
	start := max(0, slices.Index(r.cfg.workloads, first))
	return r.cfg.workloads[(start+round)%len(r.cfg.workloads)]
}

// holderProc returns the process of the holder of a workload's lock, found
// through the registry the workers keep, or a random process. The
// workload changes with round (see rotate), so that every workload's
// holder is hit in turn; it also says whose process it found.
func (r *run) holderProc(ctx context.Context, round int, first string) (int, string) {
	wl := r.rotate(round, first)
	if kv := r.holder(ctx, wl); kv != nil {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		resp, err := r.ctl.Get(gctx, fmt.Sprintf("%s/reg/%x", r.pfx, kv.Lease))
		if err == nil && len(resp.Kvs) == 1 {
			if p, err := strconv.Atoi(string(resp.Kvs[0].Value)); err == nil && p >= 0 && p < len(r.workers) {
				return p, wl + " holder"
			}
		}
	}
	return rand.IntN(len(r.workers)), "no " + wl + " holder found"
}
