// Command worker is one client process of the fault tests in package
// faults: it runs lock and election workloads with this module's
// concurrency package against an etcd cluster for a fixed time, and writes
// what it did, with etcd revisions and fencing tokens, as a history of JSON
// lines (see internal/historycheck). The test starts several of them, and
// pauses, partitions and resumes them.
//
// Every loop is bounded by -duration; after it, calls still running get
// -grace to return, after which the process records them as stuck and
// exits with status 3. It exits with status 0 once it has closed its
// sessions and client and checked that no goroutine of the library is left.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/seed-a9d410c6/concurrency"
	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/slowwrite"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

var (
	endpoints = flag.String("endpoints", "", "comma-separated etcd client URLs")
	proc      = flag.Int("proc", 0, "number of this process among the workers")
	pfx       = flag.String("pfx", "/faults", "key prefix of the run")
	workloads = flag.String("workloads", "txn,fence,unguarded,election,lead,semaphore,rwmutex", "workloads to run")
	clients   = flag.Int("clients", 2, "clients (each with its own session) per workload")
	ttl       = flag.Int("ttl", 3, "session TTL in seconds")
	duration  = flag.Duration("duration", 30*time.Second, "how long to run")
	grace     = flag.Duration("grace", 30*time.Second, "how long calls may take to return after the run")
	work      = flag.Duration("work", 10*time.Millisecond, "time a holder spends between its read and its write")
	holdFor   = flag.Duration("hold", 20*time.Second, "how long a holder of the hold workload keeps its lock when its Ctx does not end")
	keepalive = flag.Bool("keepalive", true, "dial with a gRPC keepalive of 1 s; false: clientv3's default configuration, with none")
	store     = flag.String("store", "", "unix socket of the external store")
	out       = flag.String("out", "", "history file to write")
	slowFile  = flag.String("slow", "", "file holding the delay of this process's writes (a Go duration; missing or empty: none), then optionally renew= and the delay of its renewals' answers, re-read every 100 ms: the slow-commit fault of issue 38 and the slow-renewal fault of issue 50")
)

func main() {
	flag.Parse()
	os.Exit(run())
}

// Keys of the run, under -pfx. The test reads the same names.
func lockName(wl string) string { return *pfx + "/lock/" + wl }

// maxHold is the max hold of the maxhold workload's sessions: short, so
// that many holds end by it during a run.
const maxHold = 2 * time.Second

func counterKey() string     { return *pfx + "/counter" }
func opKey(id string) string { return *pfx + "/ops/" + id }

// The cancel workload's guarded counter and its key per increment.
func cancelCounter() string        { return *pfx + "/cancel/counter" }
func cancelOpKey(id string) string { return *pfx + "/cancel/ops/" + id }

// The semaphore workload's keys: the owner of each permit slot, and a
// guarded counter per slot with a key per increment, as for counterKey.
func slotKey(i int) string       { return fmt.Sprintf("%s/sem/slot/%d", *pfx, i) }
func slotCounter(i int) string   { return fmt.Sprintf("%s/sem/counter/%d", *pfx, i) }
func slotOpKey(id string) string { return *pfx + "/sem/ops/" + id }

// The rwmutex workload's counter, which writers increment and readers read.
func rwCounter() string        { return *pfx + "/rw/counter" }
func rwOpKey(id string) string { return *pfx + "/rw/ops/" + id }

// SemLimit is the semaphore workload's limit; the test checks with the
// same.
const semLimit = 2

func regKey(id clientv3.LeaseID) string {
	return fmt.Sprintf("%s/reg/%x", *pfx, int64(id))
}

func run() int {
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer f.Close()
	h := hc.NewWriter(f)
	defer h.Flush()

	// A client with a gRPC keepalive notices a silent connection by itself;
	// one with clientv3's default configuration (-keepalive=false) does
	// not, and relies on the library's own bounds (issue 27).
	cfg := clientv3.Config{
		Endpoints:   strings.Split(*endpoints, ","),
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	}
	if *keepalive {
		cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = time.Second, time.Second
	}
	sw := slowwrite.New()
	sw.Option(&cfg)
	sr := slowwrite.NewRenewals()
	sr.Option(&cfg)
	cli, err := clientv3.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w := &worker{cli: cli, h: h, st: newStoreClient(*store)}
	sg := &surge{w: w, workloads: strings.Split(*workloads, ",")}
	stopSlow := followSlow(sw, sr, sg.set, *slowFile)

	// runCtx ends the workloads; lifeCtx bounds the sessions and their
	// final revokes, so that Close still revokes after the run.
	runCtx, cancelRun := context.WithTimeout(context.Background(), *duration)
	defer cancelRun()
	lifeCtx, cancelLife := context.WithTimeout(context.Background(), *duration+*grace)
	defer cancelLife()
	w.run, w.life = runCtx, lifeCtx

	var wg sync.WaitGroup
	for _, wl := range strings.Split(*workloads, ",") {
		for g := 0; g < *clients; g++ {
			c := &client{worker: w, wl: wl, name: fmt.Sprintf("p%d.%s.%d", *proc, wl, g)}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.loop()
			}()
		}
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	status := 0
	select {
	case <-done:
	case <-lifeCtx.Done():
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		h.Record(hc.Op{Type: hc.Info, F: hc.FStuck, Proc: *proc, Client: fmt.Sprintf("p%d", *proc),
			Err: fmt.Sprintf("clients still running %v after the run ended", *grace)})
		os.Stderr.Write(buf[:n])
		h.Flush()
		return 3
	}
	stopSlow()
	sg.set(0)
	sg.wg.Wait() // ended with runCtx, or just now
	cli.Close()
	sw.Wait() // writes held back fail at once on the closed client
	w.st.close()
	if leaked := leaks(5 * time.Second); leaked != "" {
		h.Record(hc.Op{Type: hc.Info, F: hc.FLeak, Proc: *proc, Client: fmt.Sprintf("p%d", *proc), Err: leaked})
		status = 4
	}
	h.Record(hc.Op{Type: hc.OK, F: hc.FExit, Proc: *proc, Client: fmt.Sprintf("p%d", *proc),
		ID: fmt.Sprintf("writes=%d slowed=%d", sw.Total(), sw.Slowed())})
	if err := h.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return status
}

type worker struct {
	cli       *clientv3.Client
	h         *hc.Writer
	st        *storeClient
	run, life context.Context
}

// client is one logical client: a goroutine with its own session, which
// runs one workload in a loop.
type client struct {
	*worker
	wl   string
	name string
	sess *concurrency.Session
	seq  int
	lim  int // wsemaphore: the name's limit as this client last learned it; 0 before
}

func (c *client) rec(op hc.Op) {
	op.Workload, op.Proc, op.Client = c.wl, *proc, c.name
	c.h.Record(op)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// session returns a live session, replacing one that has ended; nil once
// the run is over.
func (c *client) session() *concurrency.Session {
	if c.sess != nil && c.sess.Ctx().Err() == nil {
		return c.sess
	}
	c.closeSession()
	for c.run.Err() == nil {
		c.rec(hc.Op{Type: hc.Invoke, F: hc.FSession})
		// NewSession's grant is bounded by the session's own context: the
		// process's life, not the run, so that Close can revoke after it.
		// Every session records its owner, as etcdlock's do, so that the
		// extra put (given a third of the TTL) runs under the faults too;
		// the record must go with the lease.
		opts := []concurrency.SessionOption{concurrency.WithTTL(*ttl), concurrency.WithContext(c.life),
			concurrency.WithOwner(concurrency.ProcessOwner(fmt.Sprintf("faults worker %d", *proc)))}
		switch c.wl {
		case "maxhold":
			opts = append(opts, concurrency.WithMaxHold(maxHold))
		case "yield":
			opts = append(opts, concurrency.WithYield())
		}
		s, err := concurrency.NewSession(c.cli, opts...)
		if err != nil {
			c.rec(hc.Op{Type: hc.Fail, F: hc.FSession, Err: errText(err)})
			sleep(c.run, 200*time.Millisecond)
			continue
		}
		c.rec(hc.Op{Type: hc.OK, F: hc.FSession, Lease: int64(s.Lease())})
		// The registry tells the test which process holds a lease, so that
		// it can pause a holder. It is best-effort: a put that fails only
		// makes that holder harder to find.
		ctx, cancel := context.WithTimeout(c.run, 2*time.Second)
		c.cli.Put(ctx, regKey(s.Lease()), strconv.Itoa(*proc), clientv3.WithLease(s.Lease()))
		cancel()
		c.sess = s
		return s
	}
	return nil
}

// closeSession revokes the session's lease, so that its keys go at once.
func (c *client) closeSession() {
	if c.sess == nil {
		return
	}
	c.sess.Close()
	c.sess = nil
}

func (c *client) loop() {
	if c.wl == "lead" {
		c.lead()
		return
	}
	if c.wl == "shards" { // shards.go
		c.shards()
		return
	}
	defer c.closeSession()
	for c.run.Err() == nil {
		s := c.session()
		if s == nil {
			return
		}
		var err error
		switch c.wl {
		case "election":
			err = c.elect(s)
		case "semaphore":
			err = c.semaphore(s)
		case "wsemaphore":
			err = c.weighted(s)
		case "rwmutex":
			err = c.rwmutex(s)
		case "cancel":
			err = c.cancelled(s)
		case "hold", "maxhold", "yield":
			err = c.hold(s)
		case "queue", "pqueue":
			err = c.queue()
		case "barrier":
			err = c.barrier()
		case "dbarrier":
			err = c.doubleBarrier(s)
		case "latch":
			err = c.latch()
		case "workq": // workq.go
			err = c.workQueue(s)
		default:
			err = c.lock(s)
		}
		if err != nil {
			// Errors are in the history; back off a little so that an
			// unreachable cluster is not hammered.
			sleep(c.run, 50*time.Millisecond)
		}
	}
}

const (
	lockTimeout = 30 * time.Second
	opTimeout   = 5 * time.Second
)

// lock runs one round of a lock workload: Lock, the workload's step, and
// Unlock. The step deliberately does not look at the hold's Ctx: what it
// writes must be kept safe by the guard (Txn) or the fence alone.
func (c *client) lock(s *concurrency.Session) error {
	m := concurrency.NewMutex(s, lockName(c.wl))
	token, err := c.acquire(s, m)
	if err != nil {
		return err
	}

	switch c.wl {
	case "txn":
		c.increment(token, m.Txn)
	case "fence":
		c.storeUpdate("fenced", token)
	case "unguarded":
		c.storeUpdate("raw", token)
	}

	return c.release(hc.FUnlock, token, m.Unlock)
}

// acquire locks m, waiting at most lockTimeout, and records the call;
// it returns the hold's token.
func (c *client) acquire(s *concurrency.Session, m *concurrency.Mutex) (int64, error) {
	ctx, cancel := context.WithTimeout(c.run, lockTimeout)
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FLock, Lease: int64(s.Lease())})
	err := m.Lock(ctx)
	cancel()
	if err != nil {
		c.rec(hc.Op{Type: hc.Fail, F: hc.FLock, Err: errText(err)})
		return 0, err
	}
	token := m.Token()
	c.rec(hc.Op{Type: hc.OK, F: hc.FLock, Lease: int64(s.Lease()), Key: m.Key(), Token: token, Rev: m.Header().Revision})
	return token, nil
}

// cancelled runs one round of the cancel workload: every other Lock has a
// timeout of 0 to 2 ms, so that its ctx ends while its enqueue is in
// flight or just after (the write may land after the call gave up), or
// early in its wait; the others wait as the txn workload does. A hold
// makes a guarded increment of the workload's own counter and unlocks.
func (c *client) cancelled(s *concurrency.Session) error {
	m := concurrency.NewMutex(s, lockName(c.wl))
	timeout := lockTimeout
	if rand.IntN(2) == 0 {
		timeout = time.Duration(rand.IntN(2001)) * time.Microsecond
	}
	ctx, cancel := context.WithTimeout(c.run, timeout)
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FLock, Lease: int64(s.Lease())})
	err := m.Lock(ctx)
	cancel()
	if err != nil {
		c.rec(hc.Op{Type: hc.Fail, F: hc.FLock, Err: errText(err)})
		if errors.Is(err, context.DeadlineExceeded) && c.run.Err() == nil {
			return nil // expected: no backoff
		}
		return err
	}
	token := m.Token()
	c.rec(hc.Op{Type: hc.OK, F: hc.FLock, Lease: int64(s.Lease()), Key: m.Key(), Token: token, Rev: m.Header().Revision})
	c.seq++
	c.incrementAt(cancelCounter(), cancelOpKey, fmt.Sprintf("%s.%d", c.name, c.seq), token, m.Txn)
	return c.release(hc.FUnlock, token, m.Unlock)
}

// hold runs one round of the hold workload: Lock, then keep the lock
// until the hold's Ctx ends or -hold passes (longer than twice the
// half-open checks' bound, so that a key deleted early in a hold is
// checked), and Unlock. It records when
// and why the hold ended (FHeld: ok with the Ctx's cause when the Ctx
// ended, info when the time ran out with the Ctx still live), so that the
// checker can tell how long a hold outlived a key deleted from outside.
func (c *client) hold(s *concurrency.Session) error {
	m := concurrency.NewMutex(s, lockName(c.wl))
	token, err := c.acquire(s, m)
	if err != nil {
		return err
	}
	t := time.NewTimer(*holdFor)
	if c.wl == "yield" {
		// Another client would ask; here the holder's own client does,
		// through etcd, 0.2 s to 1 s into the hold, so that the request
		// reaches the hold's watch under the faults.
		yctx, ycancel := context.WithCancel(c.run)
		done := make(chan struct{})
		go func() {
			defer close(done)
			sleep(yctx, 200*time.Millisecond+time.Duration(rand.IntN(800))*time.Millisecond)
			if yctx.Err() == nil {
				ctx, cancel := context.WithTimeout(yctx, opTimeout)
				concurrency.RequestYield(ctx, c.cli, lockName(c.wl))
				cancel()
			}
		}()
		defer func() {
			ycancel()
			<-done
		}()
	}
	select {
	case <-m.Ctx().Done():
		c.rec(hc.Op{Type: hc.OK, F: hc.FHeld, Key: m.Key(), Token: token, Err: errText(context.Cause(m.Ctx()))})
	case <-t.C:
		c.rec(hc.Op{Type: hc.Info, F: hc.FHeld, Key: m.Key(), Token: token, Err: "held for " + holdFor.String()})
	case <-c.run.Done():
		c.rec(hc.Op{Type: hc.Info, F: hc.FHeld, Key: m.Key(), Token: token, Err: "the run ended"})
	}
	t.Stop()
	return c.release(hc.FUnlock, token, m.Unlock)
}

// queueKey is the prefix of the queue and priority queue workloads.
func queueKey(wl string) string { return *pfx + "/" + wl }

// queue runs one round of the queue workload (a recipes.Queue) or the
// pqueue workload (a recipes.PriorityQueue, priorities 0 to 3): enqueue a
// value unique to the run, then dequeue one, each bounded. The history
// says which values were enqueued (ok; info when the outcome is unknown)
// and which were dequeued (ok with the value; info with the value when
// Dequeue returned ErrClaimUnknown, the documented case in which another
// Dequeue may have returned it too). The checker adds the elements left
// at the end: none may be lost, none returned twice outside that case.
func (c *client) queue() error {
	c.seq++
	val := fmt.Sprintf("%s.%d", c.name, c.seq)
	var enq func(context.Context) error
	var deq func(context.Context) (string, error)
	if c.wl == "pqueue" {
		q := recipes.NewPriorityQueue(c.cli, queueKey(c.wl))
		pr := uint16(rand.IntN(4))
		enq = func(ctx context.Context) error { return q.EnqueueContext(ctx, val, pr) }
		deq = q.DequeueContext
	} else {
		q := recipes.NewQueue(c.cli, queueKey(c.wl))
		enq = func(ctx context.Context) error { return q.EnqueueContext(ctx, val) }
		deq = q.DequeueContext
	}
	ctx, cancel := context.WithTimeout(c.run, opTimeout)
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FEnq, ID: val})
	err := enq(ctx)
	cancel()
	if err != nil {
		// An enqueue cut short may or may not have added the element.
		c.rec(hc.Op{Type: hc.Info, F: hc.FEnq, ID: val, Err: errText(err)})
	} else {
		c.rec(hc.Op{Type: hc.OK, F: hc.FEnq, ID: val})
	}
	ctx, cancel = context.WithTimeout(c.run, opTimeout)
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FDeq})
	got, derr := deq(ctx)
	cancel()
	switch {
	case derr == nil:
		c.rec(hc.Op{Type: hc.OK, F: hc.FDeq, ID: got})
	case errors.Is(derr, recipes.ErrClaimUnknown):
		c.rec(hc.Op{Type: hc.Info, F: hc.FDeq, ID: got, Err: errText(derr)})
	default:
		// No element taken: DequeueContext promises it when ctx ends,
		// and for any other error before its delete.
		c.rec(hc.Op{Type: hc.Fail, F: hc.FDeq, Err: errText(derr)})
	}
	if err != nil {
		return err
	}
	return nil
}

// Functions of the barrier workloads' histories. ID is the round
// (client and number), the same in every op of a round.
const (
	fBHold    = "bhold"    // Barrier.Hold
	fBRelease = "brelease" // Barrier.Release
	fBWait    = "bwait"    // Barrier.Wait
	fDBEnter  = "dbenter"  // DoubleBarrier.Enter
	fDBLeave  = "dbleave"  // DoubleBarrier.Leave
	fDBRound  = "dbround"  // end of a double-barrier round: ok if its session lived throughout
	fLStart   = "lstart"   // CountDownLatch.Start
	fLCount   = "lcount"   // CountDownLatch.CountDown
	fLWait    = "lwait"    // CountDownLatch.Wait
)

// barrierParties is how many goroutines of a round wait on a barrier or
// a latch, count down a latch, or enter a double barrier.
const barrierParties = 3

// recAs records op as done by part of client c, for the goroutines of a
// round that run beside each other: each has its own name in the history.
func (c *client) recAs(part string, op hc.Op) {
	op.Workload, op.Proc, op.Client = c.wl, *proc, c.name+"/"+part
	c.h.Record(op)
}

// call records f's invoke and its outcome (ok, or info with the error,
// the outcome of a write cut short being unknown) as part of c.
func (c *client) call(part, f, id string, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(c.run, lockTimeout)
	defer cancel()
	c.recAs(part, hc.Op{Type: hc.Invoke, F: f, ID: id})
	err := fn(ctx)
	if err != nil {
		c.recAs(part, hc.Op{Type: hc.Info, F: f, ID: id, Err: errText(err)})
	} else {
		c.recAs(part, hc.Op{Type: hc.OK, F: f, ID: id})
	}
	return err
}

// parties runs fn(i) for i < n on goroutines named part+i and waits.
func parties(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}

// roundKey is the key of a round of a barrier workload, under -pfx.
func (c *client) roundKey() (key, id string) {
	c.seq++
	id = fmt.Sprintf("%s.%d", c.name, c.seq)
	return fmt.Sprintf("%s/%s/%s", *pfx, c.wl, id), id
}

// barrier runs one round of the barrier workload: Hold a barrier of its
// own, let barrierParties goroutines Wait on it, Release it after -work.
// No Wait may return before the Release was called (released early);
// in a half-open window, none long after it returned (late).
func (c *client) barrier() error {
	key, id := c.roundKey()
	b := recipes.NewBarrier(c.cli, key)
	if err := c.call("h", fBHold, id, b.HoldContext); err != nil {
		c.dropKey(key)
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		parties(barrierParties, func(i int) {
			c.call(fmt.Sprint("w", i), fBWait, id, b.WaitContext)
		})
	}()
	sleep(c.run, *work)
	err := c.call("h", fBRelease, id, b.ReleaseContext)
	if err != nil {
		c.dropKey(key)
	}
	wg.Wait()
	return err
}

// dropKey deletes a round's key after a failure, so that no barrier or
// latch is left closed (bounded by the process's life).
func (c *client) dropKey(key string) {
	ctx, cancel := context.WithTimeout(c.life, opTimeout)
	defer cancel()
	c.cli.Delete(ctx, key, clientv3.WithPrefix())
}

// doubleBarrier runs one round of the dbarrier workload: barrierParties
// goroutines Enter a DoubleBarrier of that count, on the client's
// session, and Leave it. No Enter may return before the last entrant
// called Enter, and, in a round whose session lived throughout, no Leave
// before the last one called Leave.
func (c *client) doubleBarrier(s *concurrency.Session) error {
	key, id := c.roundKey()
	var failed atomic.Bool
	parties(barrierParties, func(i int) {
		b := recipes.NewDoubleBarrier(s, key, barrierParties)
		part := fmt.Sprint("e", i)
		if c.call(part, fDBEnter, id, b.EnterContext) != nil {
			failed.Store(true)
			return
		}
		sleep(c.run, *work)
		if c.call(part, fDBLeave, id, b.LeaveContext) != nil {
			failed.Store(true)
		}
	})
	typ, why := hc.OK, c.livedThroughout(s)
	if why != "" {
		typ = hc.Info
	}
	c.recAs("r", hc.Op{Type: typ, F: fDBRound, ID: id, Err: why})
	if failed.Load() {
		c.dropKey(key)
		return errors.New("a party of the round failed")
	}
	return nil
}

// Why a double-barrier round's session may not have lived throughout it
// (the text of its dbround info, before any ": ").
const (
	roundSessionEnded = "session ended"
	roundDeadline     = "deadline passed"
	roundLeaseGone    = "lease gone before the deadline"
	roundUnconfirmed  = "lease not confirmed"
)

// livedThroughout reports why s may not have lived through the round that
// has just ended, or "" if it did. Its Ctx alone does not tell: in a
// process resumed from SIGSTOP past the deadline, the goroutines run in
// any order, so the round can see its keys gone with the lease and end
// before the session's loop notices its deadline; and etcd can end a
// lease before the session's deadline (a revoke by a deposed leader,
// applied after its successor renewed the lease: etcd#15247, #12528). A
// lease ends once, with its keys, so one that etcd still has after the
// round lived throughout it.
func (c *client) livedThroughout(s *concurrency.Session) string {
	if s.Ctx().Err() != nil {
		return roundSessionEnded
	}
	if !time.Now().Before(s.Deadline()) {
		return roundDeadline
	}
	ctx, cancel := context.WithTimeout(c.life, opTimeout)
	defer cancel()
	resp, err := c.cli.TimeToLive(ctx, s.Lease())
	switch {
	case err != nil:
		return roundUnconfirmed + ": " + err.Error()
	case resp.TTL >= 0: // -1: etcd has no such lease
		return ""
	case s.Ctx().Err() != nil || !time.Now().Before(s.Deadline()):
		return roundDeadline
	}
	return fmt.Sprintf("%s: lease %x, the session's deadline %v ahead", roundLeaseGone, int64(s.Lease()), time.Until(s.Deadline()).Round(time.Millisecond))
}

// latch runs one round of the latch workload: Start a latch of its own
// with barrierParties counts, let barrierParties goroutines Wait on it and
// barrierParties others CountDown, after -work. No Wait may return before
// the last CountDown was called (released early); in a half-open window,
// none long after the last CountDown returned (late).
func (c *client) latch() error {
	key, id := c.roundKey()
	l := recipes.NewCountDownLatch(c.cli, key)
	if err := c.call("s", fLStart, id, func(ctx context.Context) error { return l.Start(ctx, barrierParties) }); err != nil {
		c.dropKey(key)
		return err
	}
	var failed atomic.Bool
	parties(2*barrierParties, func(i int) {
		if i < barrierParties {
			c.call(fmt.Sprint("w", i), fLWait, id, l.Wait)
			return
		}
		sleep(c.run, *work)
		if c.call(fmt.Sprint("c", i), fLCount, id, l.CountDown) != nil {
			failed.Store(true)
		}
	})
	if failed.Load() {
		c.dropKey(key)
		return errors.New("a count-down failed")
	}
	return nil
}

// release ends a hold with unlock (Mutex.Unlock or Election.Resign),
// trying three times; after that it gives the hold up with its session:
// revoking the lease deletes the key, or the lease expires. A failure
// once the session has ended is not tried again: the hold ended with the
// session, its key goes with the lease at a time this client cannot know,
// and a second Resign would return nil at once for an Election that is no
// longer the leader (as documented), which says nothing of the key.
func (c *client) release(f string, token int64, unlock func(context.Context) error) error {
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(c.life, opTimeout)
		c.rec(hc.Op{Type: hc.Invoke, F: f, Token: token})
		err := unlock(ctx)
		cancel()
		if err == nil {
			c.rec(hc.Op{Type: hc.OK, F: f, Token: token})
			return nil
		}
		c.rec(hc.Op{Type: hc.Info, F: f, Token: token, Err: errText(err)})
		if try == 2 || c.life.Err() != nil || c.sess == nil || c.sess.Ctx().Err() != nil {
			c.closeSession()
			return err
		}
	}
}

// increment adds one to the guarded counter: a plain read, then a write
// of read+1 through the guarded transaction, with a key named after the
// increment so that the checker can tell which increments committed.
func (c *client) increment(token int64, txn func(context.Context) clientv3.Txn) {
	c.seq++
	c.incrementAt(counterKey(), opKey, fmt.Sprintf("%s.%d", c.name, c.seq), token, txn)
}

// incrementAt is increment on the counter key counter, with the key
// opKey(id) for the increment.
func (c *client) incrementAt(counter string, opKey func(string) string, id string, token int64, txn func(context.Context) clientv3.Txn) {
	ctx, cancel := context.WithTimeout(c.life, opTimeout)
	defer cancel()
	resp, err := c.cli.Get(ctx, counter)
	if err != nil {
		return
	}
	var v int64
	if len(resp.Kvs) == 1 {
		v, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	}
	sleep(ctx, *work)
	val := strconv.FormatInt(v+1, 10)
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FIncr, ID: id, Token: token, Value: v + 1})
	tr, err := txn(ctx).Then(clientv3.OpPut(counter, val), clientv3.OpPut(opKey(id), val)).Commit()
	c.recGuarded(hc.Op{ID: id, Token: token, Value: v + 1}, tr, err)
}

// semaphore runs one round of the semaphore workload: Acquire a permit,
// claim a free slot (one of semLimit), increment the slot's counter, both
// through Semaphore.Txn, and Release. A slot is free when the key that
// owned it last is gone, so that with at most semLimit holders one always
// is (the key of that holding: its name and create revision, since a
// session's next acquisition reuses the name); two holders of one slot,
// which more than semLimit holders would
// need, would lose increments of its counter, and none free is recorded
// as a failed claim with errNoSlot.
func (c *client) semaphore(s *concurrency.Session) error {
	m := concurrency.NewSemaphore(s, lockName(c.wl), semLimit)
	ctx, cancel := context.WithTimeout(c.run, lockTimeout)
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FLock, Lease: int64(s.Lease())})
	err := m.Acquire(ctx)
	cancel()
	if err != nil {
		c.rec(hc.Op{Type: hc.Fail, F: hc.FLock, Err: errText(err)})
		return err
	}
	token := m.Token()
	c.rec(hc.Op{Type: hc.OK, F: hc.FLock, Lease: int64(s.Lease()), Key: m.Key(), Token: token, Rev: m.Header().Revision})
	if slot := c.claimSlot(m.Key(), token, m.Txn); slot >= 0 {
		c.seq++
		c.incrementAt(slotCounter(slot), slotOpKey, fmt.Sprintf("%d/%s.%d", slot, c.name, c.seq), token, m.Txn)
	}
	return c.release(hc.FUnlock, token, m.Release)
}

// wsemLimits are the limits the wsemaphore workload resizes its name
// between (SetLimit); its weights go from 1 to the smaller.
var wsemLimits = [2]int{3, 5}

// FResize is a resize of the wsemaphore workload: Value is the limit set.
const fResize = "resize"

// weighted runs one round of the wsemaphore workload: one round in eight
// resizes the name to the other limit (SetLimit); the others AcquireN a
// weight from 1 to 3, increment a guarded counter through Semaphore.Txn,
// and Release. The test checks each grant against the keys' weights and
// limits (their values) at the revision of the read that granted it, and
// that the holders never held more than the limit under which the newest
// of them was granted.
func (c *client) weighted(s *concurrency.Session) error {
	if c.lim == 0 {
		c.lim = wsemLimits[0]
	}
	m := concurrency.NewSemaphore(s, lockName(c.wl), c.lim)
	if rand.IntN(8) == 0 {
		n := wsemLimits[0]
		if c.lim == n {
			n = wsemLimits[1]
		}
		ctx, cancel := context.WithTimeout(c.run, opTimeout)
		c.rec(hc.Op{Type: hc.Invoke, F: fResize, Value: int64(n)})
		err := m.SetLimit(ctx, n)
		cancel()
		if err != nil {
			c.rec(hc.Op{Type: hc.Fail, F: fResize, Value: int64(n), Err: errText(err)})
			return err
		}
		c.rec(hc.Op{Type: hc.OK, F: fResize, Value: int64(n)})
		c.lim = n
		return nil
	}
	w := 1 + rand.IntN(3)
	ctx, cancel := context.WithTimeout(c.run, lockTimeout)
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FLock, Lease: int64(s.Lease()), Value: int64(w)})
	err := m.AcquireN(ctx, w)
	cancel()
	if err != nil {
		c.rec(hc.Op{Type: hc.Fail, F: hc.FLock, Value: int64(w), Err: errText(err)})
		if errors.Is(err, concurrency.ErrLimitMismatch) {
			c.learnLimit()
		}
		return err
	}
	c.lim = m.Limit()
	token := m.Token()
	c.rec(hc.Op{Type: hc.OK, F: hc.FLock, Lease: int64(s.Lease()), Key: m.Key(), Token: token, Rev: m.Header().Revision, Value: int64(w)})
	c.seq++
	c.incrementAt(*pfx+"/wsem/counter", func(id string) string { return *pfx + "/wsem/ops/" + id }, fmt.Sprintf("%s.%d", c.name, c.seq), token, m.Txn)
	return c.release(hc.FUnlock, token, m.Release)
}

// learnLimit sets c.lim to the limit of the wsemaphore name's oldest key,
// as a client refused with ErrLimitMismatch would (a resize happened).
func (c *client) learnLimit() {
	ctx, cancel := context.WithTimeout(c.run, opTimeout)
	defer cancel()
	q, err := concurrency.Inspect(ctx, c.cli, lockName(c.wl))
	if err == nil && len(q.Keys) > 0 && q.Keys[0].Limit > 0 {
		c.lim = q.Keys[0].Limit
	}
}

// errNoSlot is the failure of a claim that found every slot owned by a
// live key other than its own, all at one revision, with its own key live
// too: more than semLimit holders at that revision.
const errNoSlot = "no free slot"

// claimSlot claims, with a guarded transaction, a slot whose owner (a key
// at a create revision) is gone, for key at token; it returns the slot, or
// -1. Each pass reads every slot and
// its owner at one revision; a claim that loses a race (another holder
// claimed the slot, or its owner changed, after that revision) reads
// again. Only a pass that finds no free slot at its revision records
// errNoSlot: a claim that saw slot 0 taken and then slot 1, each at its
// own time, could see two holders that never held together (slot 0 freed
// again meanwhile), a false alarm that slow commits made likely.
func (c *client) claimSlot(key string, token int64, txn func(context.Context) clientv3.Txn) int {
	ctx, cancel := context.WithTimeout(c.life, opTimeout)
	defer cancel()
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FSlot, Token: token})
	info := func(err error) int {
		c.rec(hc.Op{Type: hc.Info, F: hc.FSlot, Token: token, Err: errText(err)})
		return -1
	}
	for pass := 0; pass < 20; pass++ {
		resp, err := c.cli.Get(ctx, slotKey(0))
		if err != nil {
			return info(err)
		}
		at := clientv3.WithRev(resp.Header.Revision)
		free, cmp := -1, []clientv3.Cmp(nil)
		for i := 0; i < semLimit && free < 0; i++ {
			if i > 0 {
				if resp, err = c.cli.Get(ctx, slotKey(i), at); err != nil {
					return info(err)
				}
			}
			if len(resp.Kvs) == 0 {
				free, cmp = i, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(slotKey(i)), "=", 0)}
				break
			}
			// The owner is a key and its create revision (the holder's
			// token): a session's key has one name from one acquisition
			// to the next, and the same name created again (a waiter,
			// perhaps) is not the holder that claimed the slot.
			var owner string
			var ownerRev int64
			if _, err := fmt.Sscanf(string(resp.Kvs[0].Value), "%s %d", &owner, &ownerRev); err != nil {
				return info(fmt.Errorf("slot %d: bad owner %q: %w", i, resp.Kvs[0].Value, err))
			}
			live, err := c.cli.Get(ctx, owner, at)
			if err != nil {
				return info(err)
			}
			if len(live.Kvs) == 0 || live.Kvs[0].CreateRevision != ownerRev {
				free, cmp = i, []clientv3.Cmp{
					clientv3.Compare(clientv3.ModRevision(slotKey(i)), "=", resp.Kvs[0].ModRevision),
					clientv3.Compare(clientv3.CreateRevision(owner), "!=", ownerRev),
				}
			}
		}
		if free < 0 {
			// Every slot owned by a live key at this revision: more
			// than semLimit holders if this key was live there too.
			own, err := c.cli.Get(ctx, key, at, clientv3.WithCountOnly())
			switch {
			case err != nil:
				return info(err)
			case own.Count == 0:
				c.rec(hc.Op{Type: hc.Fail, F: hc.FSlot, Token: token, Err: "own key gone"})
				return -1
			}
			c.rec(hc.Op{Type: hc.Fail, F: hc.FSlot, Token: token, Err: errNoSlot})
			return -1
		}
		tr, err := txn(ctx).If(cmp...).Then(clientv3.OpPut(slotKey(free), fmt.Sprintf("%s %d", key, token))).Commit()
		switch {
		case errors.Is(err, concurrency.ErrLockLost):
			c.rec(hc.Op{Type: hc.Fail, F: hc.FSlot, Token: token, Err: errText(err)})
			return -1
		case err != nil:
			return info(err)
		case tr.Succeeded:
			c.rec(hc.Op{Type: hc.OK, F: hc.FSlot, Token: token, Value: int64(free), Rev: tr.Header.Revision})
			return free
		}
	}
	c.rec(hc.Op{Type: hc.Fail, F: hc.FSlot, Token: token, Err: "lost every race for a slot"})
	return -1
}

// rwmutex runs one round of the rwmutex workload: a writer one round in
// three, which increments the rwmutex counter through RWMutex.Txn, and
// otherwise a reader, which reads the counter twice through RWMutex.Txn,
// with a pause between: no writer may write in between.
func (c *client) rwmutex(s *concurrency.Session) error {
	m := concurrency.NewRWMutex(s, lockName(c.wl))
	write := rand.IntN(3) == 0
	lock, unlock := m.RLock, m.RUnlock
	if write {
		lock, unlock = m.Lock, m.Unlock
	}
	ctx, cancel := context.WithTimeout(c.run, lockTimeout)
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FLock, Lease: int64(s.Lease())})
	err := lock(ctx)
	cancel()
	if err != nil {
		c.rec(hc.Op{Type: hc.Fail, F: hc.FLock, Err: errText(err)})
		return err
	}
	token := m.Token()
	// RWMutex has no Header: the hold's first guarded operation dates it.
	c.rec(hc.Op{Type: hc.OK, F: hc.FLock, Lease: int64(s.Lease()), Key: m.Key(), Token: token})
	if write {
		c.seq++
		c.incrementAt(rwCounter(), rwOpKey, fmt.Sprintf("%s.%d", c.name, c.seq), token, m.Txn)
	} else {
		for i := 0; i < 2; i++ {
			if i > 0 {
				sleep(c.life, *work)
			}
			c.seq++
			id := fmt.Sprintf("%s.%d", c.name, c.seq)
			rctx, rcancel := context.WithTimeout(c.life, opTimeout)
			c.rec(hc.Op{Type: hc.Invoke, F: hc.FRRead, ID: id, Token: token})
			tr, err := m.Txn(rctx).Then(clientv3.OpGet(rwCounter())).Commit()
			rcancel()
			op := hc.Op{F: hc.FRRead, ID: id, Token: token}
			switch {
			case err == nil:
				op.Type, op.Rev = hc.OK, tr.Header.Revision
				if kvs := tr.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
					op.Value, _ = strconv.ParseInt(string(kvs[0].Value), 10, 64)
				}
			case errors.Is(err, concurrency.ErrLockLost):
				op.Type, op.Err = hc.Fail, err.Error()
			default:
				op.Type, op.Err = hc.Info, err.Error()
			}
			c.rec(op)
		}
	}
	return c.release(hc.FUnlock, token, unlock)
}

// recGuarded records the outcome of a guarded transaction: ok with the
// commit's revision; fail when it matched ErrLockLost, which promises that
// nothing was written; info for any other error (a time-out, a lost
// answer), after which the write may or may not have committed.
func (c *client) recGuarded(op hc.Op, tr *clientv3.TxnResponse, err error) {
	op.F = hc.FIncr
	switch {
	case err == nil:
		op.Type, op.Rev = hc.OK, tr.Header.Revision
	case errors.Is(err, concurrency.ErrLockLost):
		op.Type, op.Err = hc.Fail, err.Error()
	default:
		op.Type, op.Err = hc.Info, err.Error()
	}
	c.rec(op)
}

// storeUpdate reads the external store's resource and writes read+1 to
// it, passing the fencing token with both (the raw resource ignores it).
func (c *client) storeUpdate(res string, token int64) {
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FRead, Token: token})
	v, err := c.st.do("read", res, token, 0, 0, "", c.name)
	if err != nil {
		c.rec(hc.Op{Type: failType(err), F: hc.FRead, Token: token, Err: errText(err)})
		return
	}
	c.rec(hc.Op{Type: hc.OK, F: hc.FRead, Token: token, Value: v})
	sleep(c.life, *work)
	c.seq++
	id := fmt.Sprintf("%s.%d", c.name, c.seq)
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FWrite, ID: id, Token: token, Value: v + 1})
	if _, err := c.st.do("write", res, token, v, v+1, id, c.name); err != nil {
		c.rec(hc.Op{Type: failType(err), F: hc.FWrite, ID: id, Token: token, Value: v + 1, Err: errText(err)})
		return
	}
	c.rec(hc.Op{Type: hc.OK, F: hc.FWrite, ID: id, Token: token, Value: v + 1})
}

// elect runs one round of the election workload: Campaign, a read of the
// leader, a guarded write of the term, and Resign.
func (c *client) elect(s *concurrency.Session) error {
	e := concurrency.NewElection(s, lockName("election"))
	ctx, cancel := context.WithTimeout(c.run, lockTimeout)
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FCampaign, Lease: int64(s.Lease())})
	err := e.Campaign(ctx, c.name)
	cancel()
	if err != nil {
		c.rec(hc.Op{Type: hc.Fail, F: hc.FCampaign, Err: errText(err)})
		return err
	}
	term := e.Rev()
	c.rec(hc.Op{Type: hc.OK, F: hc.FCampaign, Lease: int64(s.Lease()), Key: e.Key(), Token: term, Rev: e.Header().Revision})

	lctx, lcancel := context.WithTimeout(c.life, opTimeout)
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FLeader})
	resp, err := e.Leader(lctx)
	lcancel()
	if err != nil {
		c.rec(hc.Op{Type: hc.Info, F: hc.FLeader, Err: errText(err)})
	} else {
		kv := resp.Kvs[0]
		c.rec(hc.Op{Type: hc.OK, F: hc.FLeader, Key: string(kv.Key), Token: kv.CreateRevision, Rev: resp.Header.Revision})
	}

	// The leader's guarded write: the term, and a key per write, as for
	// the counter; the checker places each commit inside its term.
	c.seq++
	id := fmt.Sprintf("%s.%d", c.name, c.seq)
	tctx, tcancel := context.WithTimeout(c.life, opTimeout)
	c.rec(hc.Op{Type: hc.Invoke, F: hc.FIncr, ID: id, Token: term})
	tr, err := e.Txn(tctx).Then(clientv3.OpPut(*pfx+"/term", strconv.FormatInt(term, 10))).Commit()
	tcancel()
	c.recGuarded(hc.Op{ID: id, Token: term}, tr, err)

	return c.release(hc.FResign, term, e.Resign)
}

// leadWrites is how many guarded writes a term of the lead workload makes
// before its fn returns, which makes Lead resign, so that terms also end
// without faults.
const leadWrites = 3

// lead runs the lead workload: concurrency.Lead for the whole run, started
// again each time fn returns. Lead manages the sessions; each term is
// recorded as a won campaign, and its guarded writes as increments, so
// that the checker places every write inside its term: at most one fn is
// the leader at any revision.
func (c *client) lead() {
	fn := func(ctx context.Context, e *concurrency.Election) error {
		term := e.Rev()
		c.rec(hc.Op{Type: hc.OK, F: hc.FCampaign, Key: e.Key(), Token: term, Rev: e.Header().Revision})
		// Register the lease (the key's last part), as session() does.
		if id, err := strconv.ParseInt(e.Key()[strings.LastIndexByte(e.Key(), '/')+1:], 16, 64); err == nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			c.cli.Put(rctx, regKey(clientv3.LeaseID(id)), strconv.Itoa(*proc), clientv3.WithLease(clientv3.LeaseID(id)))
			cancel()
		}
		for i := 0; i < leadWrites && ctx.Err() == nil; i++ {
			// The write does not look at ctx: the guard alone keeps it
			// inside the term.
			c.seq++
			id := fmt.Sprintf("%s.%d", c.name, c.seq)
			tctx, cancel := context.WithTimeout(c.life, opTimeout)
			c.rec(hc.Op{Type: hc.Invoke, F: hc.FIncr, ID: id, Token: term})
			tr, err := e.Txn(tctx).Then(clientv3.OpPut(*pfx+"/leadterm", strconv.FormatInt(term, 10))).Commit()
			cancel()
			c.recGuarded(hc.Op{ID: id, Token: term}, tr, err)
			sleep(ctx, *work)
		}
		return nil
	}
	for c.run.Err() == nil {
		err := concurrency.Lead(c.run, c.cli, lockName(c.wl), c.name, fn, concurrency.WithLeadTTL(*ttl))
		if err != nil && c.run.Err() == nil {
			c.rec(hc.Op{Type: hc.Info, F: hc.FCampaign, Err: errText(err)})
			sleep(c.run, 50*time.Millisecond)
		}
	}
}

// errStale is the store's refusal of a stale token: a definite failure.
var errStale = errors.New("store: stale token")

func failType(err error) string {
	if errors.Is(err, errStale) {
		return hc.Fail
	}
	return hc.Info
}

// storeClient talks to the test's external store over a unix socket.
type storeClient struct {
	hc *http.Client
}

func newStoreClient(sock string) *storeClient {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	return &storeClient{hc: &http.Client{Transport: tr, Timeout: opTimeout}}
}

func (s *storeClient) close() { s.hc.CloseIdleConnections() }

// do calls the store's op ("read" or "write") and returns the value it
// answered.
func (s *storeClient) do(op, res string, token, read, value int64, id, client string) (int64, error) {
	q := url.Values{
		"res": {res}, "token": {strconv.FormatInt(token, 10)},
		"read": {strconv.FormatInt(read, 10)}, "value": {strconv.FormatInt(value, 10)},
		"id": {id}, "client": {client},
	}
	resp, err := s.hc.Post("http://store/"+op+"?"+q.Encode(), "text/plain", nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	case http.StatusConflict:
		return 0, fmt.Errorf("%w: %s", errStale, b)
	default:
		return 0, fmt.Errorf("store: %s: %s", resp.Status, b)
	}
}

// sleep waits for d or for ctx to end.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// libFrames mark goroutines of the library and of the etcd client that
// must all be gone once the sessions and the client are closed.
var libFrames = []string{
	"github.com/seed-a9d410c6/concurrency.",
	"go.etcd.io/etcd/client/v3.",
	"google.golang.org/grpc.(*ClientConn)",
	"google.golang.org/grpc.(*addrConn)",
	"google.golang.org/grpc/internal/transport.(*http2Client)",
}

// leaks waits up to d for the library's goroutines to end and returns the
// stacks of those left, or "".
func leaks(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "main.leaks(") {
				continue
			}
			for _, f := range libFrames {
				if strings.Contains(g, f) {
					left = append(left, g)
					break
				}
			}
		}
		if len(left) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("%d goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// surge runs, on demand, more clients of the workloads that take many
// at once (issue 50: many operations at once on one client of a slow
// cluster), each with its own session on the worker's one client, until
// asked for none or the run ends.
type surge struct {
	w         *worker
	workloads []string
	stop      context.CancelFunc // nil while none runs
	round     int
	wg        sync.WaitGroup
}

// surgeWorkloads are the workloads whose clients a surge adds.
var surgeWorkloads = []string{"txn", "election", "semaphore", "rwmutex"}

// set runs n more clients of each of surgeWorkloads that the worker runs
// (0: none). It is called from followSlow's goroutine only.
func (sg *surge) set(n int) {
	switch {
	case n == 0 && sg.stop != nil:
		sg.stop()
		sg.stop = nil
	case n > 0 && sg.stop == nil:
		ctx, cancel := context.WithCancel(sg.w.run)
		sg.stop = cancel
		sg.round++
		wk := *sg.w
		wk.run = ctx
		for _, wl := range sg.workloads {
			if !slices.Contains(surgeWorkloads, wl) {
				continue
			}
			for g := range n {
				c := &client{worker: &wk, wl: wl, name: fmt.Sprintf("p%d.%s.surge%d.%d", *proc, wl, sg.round, g)}
				sg.wg.Add(1)
				go func() {
					defer sg.wg.Done()
					c.loop()
				}()
			}
		}
	}
}

// followSlow sets the delay of sw's writes, of sr's renewal answers, and
// the clients of a surge, from the file at path every 100 ms, until the
// returned stop is called; with path "", it does nothing. The file holds
// the writes' delay (a Go duration; missing or empty: none), then
// optionally "renew=" and the renewal answers' delay, and "surge=" and
// how many more clients of each workload to run (issue 50).
func followSlow(sw *slowwrite.Writes, sr *slowwrite.Renewals, surge func(int), path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			var d, renew time.Duration
			n := 0
			if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
				for _, f := range strings.Fields(string(b)) {
					if v, ok := strings.CutPrefix(f, "renew="); ok {
						renew, _ = time.ParseDuration(v)
					} else if v, ok := strings.CutPrefix(f, "surge="); ok {
						n, _ = strconv.Atoi(v)
						n = min(max(n, 0), 64)
					} else {
						d, _ = time.ParseDuration(f)
					}
				}
			}
			sw.Set(d)
			sr.Set(renew)
			surge(n)
			select {
			case <-done:
				sw.Set(0)
				sr.Set(0)
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
