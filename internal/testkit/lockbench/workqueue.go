package lockbench

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdrecipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// This file holds the work queue workloads (issue 53): recipes.WorkQueue
// (put, claim, ack) beside etcd's recipe Queue (put, delete), drained by
// 1 to 64 consumers, and both under a consumer-crash fault.

// WorkQueueResult is one work queue row.
type WorkQueueResult struct {
	Impl      string
	Consumers int
	Items     int           // items put and done in the window
	Elapsed   time.Duration // from the first take to the last item done
	Counts    Counts        // the consumers' client traffic in the window
	// The crash workload: items never done (lost), and done twice.
	Crashes, Lost, Duplicated, Redelivered int
}

// PerSec is the items done per second.
func (r WorkQueueResult) PerSec() float64 { return float64(r.Items) / r.Elapsed.Seconds() }

// Requests is the unary requests and watch requests per item.
func (r WorkQueueResult) Requests() float64 {
	return float64(r.Counts.Unary+r.Counts.WatchReqs) / float64(r.Items)
}

// WorkQueue names the two implementations.
const (
	WQOurs = "WorkQueue (claim, AckTxn)"
	WQEtcd = "etcd recipe Queue (delete)"
)

// wqConsumer takes one item and reports its value and whether it was
// delivered before; done marks it finished (Ack; nothing for etcd's
// Queue, whose take is its end), crash drops it as a consumer that dies
// would.
type wqConsumer interface {
	take(ctx context.Context) (val string, again bool, done func(context.Context) error, err error)
	crash()
	close()
}

// WorkQueueDrain puts items under pfx (outside the window), and times
// consumers, each on a session of its own, taking and finishing them all.
// With crashEvery > 0, one take in crashEvery (at random) is a crash: the
// consumer drops the item, as a process that dies after taking it, and
// starts again on a new session; the run then lasts until every item is
// done or quiet passes with none done, and counts the items lost.
func WorkQueueDrain(ctx context.Context, env Env, impl, pfx string, consumers, items, crashEvery int, quiet time.Duration) (r WorkQueueResult, err error) {
	c := env.client(0)
	defer func() {
		err = errors.Join(err, cleanup(ctx, c, pfx, func(ctx context.Context) error {
			_, err := c.Delete(ctx, pfx+"/", clientv3.WithPrefix())
			return err
		}))
	}()
	if err := wqFill(ctx, c, impl, pfx, items); err != nil {
		return r, err
	}
	r = WorkQueueResult{Impl: impl, Consumers: consumers, Items: items}
	var (
		mu       sync.Mutex // guards done, last
		done     = map[string]int{}
		last     time.Time
		progress atomic.Int64
	)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	before := env.Counter.Snapshot()
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, consumers)
	var crashes, redelivered atomic.Int64
	var pending sync.WaitGroup // etcd's Dequeues, which take no ctx
	for i := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- wqConsume(wctx, env.client(i), impl, pfx, crashEvery, &pending, &crashes, &redelivered, func(v string) {
				mu.Lock()
				done[v]++
				last = time.Now()
				n := len(done)
				mu.Unlock()
				progress.Store(int64(n))
				if n == items && crashEvery == 0 {
					cancel()
				}
			})
		}()
	}
	go wqWatchdog(wctx, cancel, &progress, items, quiet)
	wg.Wait()
	r.Elapsed = last.Sub(start)
	if impl == WQEtcd {
		// Release the Dequeues still waiting (each takes one of these),
		// before the client closes under them: etcd's Dequeue then
		// dereferences a nil event.
		eq := etcdrecipe.NewQueue(c, pfx)
		for range consumers {
			err = errors.Join(err, eq.Enqueue("release"))
		}
		pending.Wait()
	}
	close(errc)
	for e := range errc {
		err = errors.Join(err, e)
	}
	r.Counts = env.Counter.Snapshot().Sub(before)
	r.Crashes, r.Redelivered = int(crashes.Load()), int(redelivered.Load())
	r.Lost = items - len(done)
	for _, n := range done {
		if n > 1 {
			r.Duplicated++
		}
	}
	return r, err
}

// wqWatchdog ends the run once every item is done or none was for quiet.
func wqWatchdog(ctx context.Context, cancel func(), progress *atomic.Int64, items int, quiet time.Duration) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	seen, at := int64(-1), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := progress.Load()
		if n == int64(items) || time.Since(at) > quiet {
			cancel()
			return
		}
		if n != seen {
			seen, at = n, time.Now()
		}
	}
}

// wqFill puts items values under pfx with impl's Put.
func wqFill(ctx context.Context, c *clientv3.Client, impl, pfx string, items int) error {
	q, err := recipes.NewWorkQueue(c, pfx)
	if err != nil {
		return err
	}
	eq := etcdrecipe.NewQueue(c, pfx)
	for i := range items {
		v := strconv.Itoa(i)
		if impl == WQOurs {
			_, err = q.Put(ctx, v)
		} else {
			err = eq.Enqueue(v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// wqConsume is one consumer: take, finish (or crash), until ctx ends.
func wqConsume(ctx context.Context, c *clientv3.Client, impl, pfx string, crashEvery int, pending *sync.WaitGroup, crashes, redelivered *atomic.Int64, finished func(string)) error {
	var cons wqConsumer
	defer func() {
		if cons != nil {
			cons.close()
		}
	}()
	for ctx.Err() == nil {
		if cons == nil {
			var err error
			if cons, err = newWQConsumer(c, impl, pfx, pending); err != nil {
				return err
			}
		}
		v, again, done, err := cons.take(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if again {
			redelivered.Add(1)
		}
		if crashEvery > 0 && rand.IntN(crashEvery) == 0 {
			crashes.Add(1)
			cons.crash()
			cons = nil
			continue
		}
		if err := done(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		finished(v)
	}
	return nil
}

func newWQConsumer(c *clientv3.Client, impl, pfx string, pending *sync.WaitGroup) (wqConsumer, error) {
	if impl == WQEtcd {
		return etcdConsumer{etcdrecipe.NewQueue(c, pfx), pending}, nil
	}
	s, err := concurrency.NewSession(c, concurrency.WithTTL(10))
	if err != nil {
		return nil, err
	}
	q, err := recipes.NewWorkQueue(c, pfx)
	if err != nil {
		s.Close()
		return nil, err
	}
	return &ourConsumer{q: q, s: s}, nil
}

type ourConsumer struct {
	q *recipes.WorkQueue
	s *concurrency.Session
}

func (o *ourConsumer) take(ctx context.Context) (string, bool, func(context.Context) error, error) {
	d, err := o.q.Take(ctx, o.s)
	if err != nil {
		return "", false, nil, err
	}
	return d.Value(), d.Count() > 1, func(ctx context.Context) error {
		_, err := d.AckTxn(ctx)
		return err
	}, nil
}

// crash revokes the session, as etcd does once a dead consumer's lease
// expires, without waiting for its TTL.
func (o *ourConsumer) crash() { o.s.Close() }
func (o *ourConsumer) close() { o.s.Close() }

type etcdConsumer struct {
	q       *etcdrecipe.Queue
	pending *sync.WaitGroup
}

func (e etcdConsumer) take(ctx context.Context) (string, bool, func(context.Context) error, error) {
	// etcd's Dequeue takes no context: it returns when an item comes, so
	// the consumer asks only while items remain (see wqWatchdog).
	type res struct {
		v   string
		err error
	}
	ch := make(chan res, 1)
	e.pending.Add(1)
	go func() {
		defer e.pending.Done()
		v, err := e.q.Dequeue()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, false, func(context.Context) error { return nil }, r.err
	case <-ctx.Done():
		return "", false, nil, ctx.Err()
	}
}

func (e etcdConsumer) crash() {}
func (e etcdConsumer) close() {}
