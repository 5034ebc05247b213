package main

import (
	"context"
	"fmt"
	"io"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/slowwrite"
)

// The slow group (issue 38): every operation of both packages on a client
// whose writes are answered -slow-write late while its reads, watches and
// keepalives are answered at once (slowwrite.Writes: the model of a
// cluster whose commits wait for a slow disk; a write whose caller gave up
// is still applied). Each trial opens a new client and runs every
// operation in turn, each bounded by -slow-timeout; a row counts the
// operations that succeeded, their mean time, and the writes the client
// sent for them (every attempt).

// slowOp is one operation of a trial, on the trial's state.
type slowOp struct {
	name string
	run  func(ctx context.Context, st *slowTrial) error
}

// slowTrial is the state of one trial of one package.
type slowTrial struct {
	c   *clientv3.Client
	pfx string
	ttl int

	ours struct {
		s   *concurrency.Session
		m   *concurrency.Mutex
		e   *concurrency.Election
		sem *concurrency.Semaphore
		rw  *concurrency.RWMutex
	}
	etcd struct {
		s *etcdconc.Session
		m *etcdconc.Mutex
		e *etcdconc.Election
	}
}

// slowOps are the operations of each package, in the order a trial runs
// them; a later one needs the earlier ones to have succeeded.
var slowOps = map[string][]slowOp{
	"ours": {
		{"NewSession", func(ctx context.Context, st *slowTrial) (err error) {
			st.ours.s, err = concurrency.NewSession(st.c, concurrency.WithTTL(st.ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
			return err
		}},
		{"Lock", func(ctx context.Context, st *slowTrial) error {
			st.ours.m = concurrency.NewMutex(st.ours.s, st.pfx+"/mutex")
			return st.ours.m.Lock(ctx)
		}},
		{"Unlock", func(ctx context.Context, st *slowTrial) error { return st.ours.m.Unlock(ctx) }},
		{"Campaign", func(ctx context.Context, st *slowTrial) error {
			st.ours.e = concurrency.NewElection(st.ours.s, st.pfx+"/election")
			return st.ours.e.Campaign(ctx, "a")
		}},
		{"Proclaim", func(ctx context.Context, st *slowTrial) error { return st.ours.e.Proclaim(ctx, "b") }},
		{"Resign", func(ctx context.Context, st *slowTrial) error { return st.ours.e.Resign(ctx) }},
		{"Semaphore.Acquire", func(ctx context.Context, st *slowTrial) error {
			st.ours.sem = concurrency.NewSemaphore(st.ours.s, st.pfx+"/semaphore", 2)
			return st.ours.sem.Acquire(ctx)
		}},
		{"Semaphore.SetLimit", func(ctx context.Context, st *slowTrial) error { return st.ours.sem.SetLimit(ctx, 3) }},
		{"Semaphore.Release", func(ctx context.Context, st *slowTrial) error { return st.ours.sem.Release(ctx) }},
		{"RWMutex.RLock", func(ctx context.Context, st *slowTrial) error {
			st.ours.rw = concurrency.NewRWMutex(st.ours.s, st.pfx+"/rwmutex")
			return st.ours.rw.RLock(ctx)
		}},
		{"RWMutex.RUnlock", func(ctx context.Context, st *slowTrial) error { return st.ours.rw.RUnlock(ctx) }},
		{"RWMutex.Lock", func(ctx context.Context, st *slowTrial) error { return st.ours.rw.Lock(ctx) }},
		{"RWMutex.Unlock", func(ctx context.Context, st *slowTrial) error { return st.ours.rw.Unlock(ctx) }},
		{"Session.Close", func(ctx context.Context, st *slowTrial) error { return st.ours.s.Close() }},
	},
	"etcd": {
		{"NewSession", func(ctx context.Context, st *slowTrial) (err error) {
			st.etcd.s, err = etcdconc.NewSession(st.c, etcdconc.WithTTL(st.ttl), etcdconc.WithContext(context.WithoutCancel(ctx)))
			return err
		}},
		{"Lock", func(ctx context.Context, st *slowTrial) error {
			st.etcd.m = etcdconc.NewMutex(st.etcd.s, st.pfx+"/mutex")
			return st.etcd.m.Lock(ctx)
		}},
		{"Unlock", func(ctx context.Context, st *slowTrial) error { return st.etcd.m.Unlock(ctx) }},
		{"Campaign", func(ctx context.Context, st *slowTrial) error {
			st.etcd.e = etcdconc.NewElection(st.etcd.s, st.pfx+"/election")
			return st.etcd.e.Campaign(ctx, "a")
		}},
		{"Proclaim", func(ctx context.Context, st *slowTrial) error { return st.etcd.e.Proclaim(ctx, "b") }},
		{"Resign", func(ctx context.Context, st *slowTrial) error { return st.etcd.e.Resign(ctx) }},
		{"Session.Close", func(ctx context.Context, st *slowTrial) error { return st.etcd.s.Close() }},
	},
}

// slowRow is what one operation of one package did over the trials.
type slowRow struct {
	ok, tried, writes int
	took              time.Duration // summed over the successes
}

// runSlow runs the slow group and prints its table.
func runSlow(ctx context.Context, cfg config, root string, w io.Writer) error {
	rows := map[string]map[string]*slowRow{"ours": {}, "etcd": {}}
	for trial := 0; trial < cfg.slowTrials; trial++ {
		// The packages take turns, so that the machine's drift falls on
		// both.
		for _, impl := range []string{"etcd", "ours"} {
			progress("slow writes (%v), %s, trial %d of %d", cfg.slowWrite, impl, trial+1, cfg.slowTrials)
			if err := slowTrialOf(ctx, cfg, fmt.Sprintf("%s/slow/%s/%d", root, impl, trial), impl, rows[impl]); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(w, "\n## Slow writes: every write answered %v late, reads at once (-only slow)\n\n", cfg.slowWrite)
	fmt.Fprintf(w, "Session TTL %d s; %d trials per package, each on a new client; each operation bounded by %v. Writes: every attempt the client sent (Put, DeleteRange, write Txn, LeaseGrant, LeaseRevoke), per operation.\n\n", cfg.slowTTL, cfg.slowTrials, cfg.slowTimeout)
	fmt.Fprintf(w, "| operation | ours: ok | ours: mean | ours: writes/op | etcd: ok | etcd: mean | etcd: writes/op |\n|---|---:|---:|---:|---:|---:|---:|\n")
	cell := func(r *slowRow) string {
		if r == nil {
			return "– | – | –"
		}
		mean, per := "–", "–"
		if r.ok > 0 {
			mean = (r.took / time.Duration(r.ok)).Round(10 * time.Millisecond).String()
		}
		if r.tried > 0 {
			per = fmt.Sprintf("%.2f", float64(r.writes)/float64(r.tried))
		}
		return fmt.Sprintf("%d/%d | %s | %s", r.ok, r.tried, mean, per)
	}
	for _, op := range slowOps["ours"] {
		fmt.Fprintf(w, "| %s | %s | %s |\n", op.name, cell(rows["ours"][op.name]), cell(rows["etcd"][op.name]))
	}
	return nil
}

// slowTrialOf runs one trial of impl's operations on a new client whose
// writes are slow, adding to rows.
func slowTrialOf(ctx context.Context, cfg config, pfx, impl string, rows map[string]*slowRow) error {
	sw := slowwrite.New()
	cs, closeClients, err := newClients(cfg.endpoints, 1, sw.Option)
	if err != nil {
		return err
	}
	defer func() {
		closeClients()
		sw.Wait()
	}()
	st := &slowTrial{c: cs[0], pfx: pfx, ttl: cfg.slowTTL}
	sw.Set(cfg.slowWrite)
	for _, op := range slowOps[impl] {
		r := rows[op.name]
		if r == nil {
			r = &slowRow{}
			rows[op.name] = r
		}
		octx, cancel := context.WithTimeout(ctx, cfg.slowTimeout)
		before, start := sw.Total(), time.Now()
		err := op.run(octx, st)
		took := time.Since(start)
		cancel()
		r.tried++
		r.writes += sw.Total() - before
		if err != nil {
			progress("  %s %s: %v after %v", impl, op.name, err, took.Round(time.Millisecond))
			break // the operations after it need it
		}
		r.ok++
		r.took += took
	}
	// Whatever failed, nothing may be left: revoke what is open, then
	// check the prefix, with writes fast again.
	sw.Set(0)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if st.ours.s != nil {
		st.ours.s.Close()
	}
	if st.etcd.s != nil {
		st.etcd.s.Close()
	}
	sw.Wait()
	resp, err := st.c.Get(cctx, pfx+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	if resp.Count != 0 {
		return fmt.Errorf("slow writes: %d keys left under %s/", resp.Count, pfx)
	}
	return nil
}
