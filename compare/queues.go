package compare

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdrecipe "go.etcd.io/etcd/client/v3/experimental/recipes"
	"go.uber.org/zap"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// This file holds the work queues side by side (issue 53): this module's
// recipes.WorkQueue, etcd's recipe Queue and the Redis reliable-queue
// pattern (BLMOVE from the queue to the consumer's processing list, LREM
// from it as the acknowledgement), the same items through the same
// consumers, with and without a consumer-crash fault.

// The queues.
const (
	QWorkQueue = "workqueue" // recipes.WorkQueue: claim on the session, AckTxn
	QEtcdQueue = "etcdqueue" // etcd's experimental/recipes Queue: Dequeue deletes
	QRedis     = "redisrq"   // Redis: LPUSH, BLMOVE to a processing list, LREM
)

// Queues lists them in table order.
var Queues = []string{QWorkQueue, QEtcdQueue, QRedis}

// QueueLabel names a queue in tables.
func QueueLabel(q string) string {
	switch q {
	case QWorkQueue:
		return "this module's recipes.WorkQueue (claim, AckTxn)"
	case QEtcdQueue:
		return "etcd's recipe Queue (Dequeue deletes)"
	}
	return "Redis reliable queue (BLMOVE, LREM; no reaper)"
}

// QueueResult is one queue's run.
type QueueResult struct {
	Queue      string
	Consumers  int
	Items      int           // items put
	Done       int           // distinct items done
	Elapsed    time.Duration // from the first put to the last item done
	P50, P99   time.Duration // put to done
	Crashes    int           // takes dropped by a crashing consumer
	Lost       int           // items put and never done
	Duplicated int           // items done twice
}

// queueOps are one consumer's calls on one queue.
type queueOps interface {
	put(ctx context.Context, v string) error
	// take returns an item's value and its acknowledgement; crash ends
	// the consumer as a process that dies holding what it took.
	take(ctx context.Context) (string, func(context.Context) error, error)
	crash()
	close()
}

// RunQueue puts items values (one producer, as fast as it can) while
// consumers take and acknowledge them, on queue q at the servers addrs,
// until every item is done or quiet passes with none done. With crashEvery
// > 0, one take in crashEvery (at random) is a crash: the consumer drops
// the item and starts again as a new consumer.
func RunQueue(ctx context.Context, q string, addrs []string, name string, consumers, items, crashEvery int, quiet time.Duration) (QueueResult, error) {
	mk, closeAll, err := queueFactory(q, addrs, name)
	if err != nil {
		return QueueResult{}, err
	}
	defer closeAll()
	r := QueueResult{Queue: q, Consumers: consumers, Items: items}
	var (
		mu     sync.Mutex // guards done, lat, last
		done   = map[string]int{}
		lat    []time.Duration
		last   time.Time
		count  atomic.Int64
		crashN atomic.Int64
	)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, consumers+1)
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- consumeQueue(wctx, mk, crashEvery, &crashN, func(v string) {
				now := time.Now()
				put, _ := strconv.ParseInt(v[strings.IndexByte(v, '@')+1:], 10, 64)
				mu.Lock()
				done[v]++
				lat = append(lat, now.Sub(time.Unix(0, put)))
				last = now
				n := len(done)
				mu.Unlock()
				count.Store(int64(n))
			})
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		errc <- produce(wctx, mk, items)
	}()
	waitQuiet(wctx, cancel, &count, items, quiet)
	wg.Wait()
	close(errc)
	for e := range errc {
		err = errors.Join(err, e)
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		r.P50, r.P99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	r.Elapsed, r.Crashes, r.Done = last.Sub(start), int(crashN.Load()), len(done)
	r.Lost = items - len(done)
	for _, n := range done {
		if n > 1 {
			r.Duplicated++
		}
	}
	return r, err
}

// produce puts items values "i@putnanos".
func produce(ctx context.Context, mk func() (queueOps, error), items int) error {
	p, err := mk()
	if err != nil {
		return err
	}
	defer p.close()
	for i := range items {
		if err := p.put(ctx, fmt.Sprintf("%d@%d", i, time.Now().UnixNano())); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}

// waitQuiet returns once every item is done, or none was for quiet, and
// then ends the run.
func waitQuiet(ctx context.Context, cancel func(), count *atomic.Int64, items int, quiet time.Duration) {
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	seen, at := int64(-1), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := count.Load()
		if n == int64(items) || time.Since(at) > quiet {
			return
		}
		if n != seen {
			seen, at = n, time.Now()
		}
	}
}

// consumeQueue is one consumer: take, acknowledge (or crash), until ctx
// ends.
func consumeQueue(ctx context.Context, mk func() (queueOps, error), crashEvery int, crashes *atomic.Int64, finished func(string)) error {
	var c queueOps
	defer func() {
		if c != nil {
			c.close()
		}
	}()
	for ctx.Err() == nil {
		if c == nil {
			var err error
			if c, err = mk(); err != nil {
				return err
			}
		}
		v, ack, err := c.take(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if v == "" {
			continue // a Redis BLMOVE that timed out
		}
		if crashEvery > 0 && rand.IntN(crashEvery) == 0 {
			crashes.Add(1)
			c.crash()
			c = nil
			continue
		}
		if err := ack(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		finished(v)
	}
	return nil
}

// queueFactory returns what makes a consumer (or the producer) of queue q,
// and what closes the connections they share.
func queueFactory(q string, addrs []string, name string) (func() (queueOps, error), func(), error) {
	if q == QRedis {
		rc := redis.NewClient(&redis.Options{Addr: addrs[0], PoolSize: 128})
		var n atomic.Int64
		return func() (queueOps, error) {
			return &redisQueue{c: rc, q: name, proc: fmt.Sprintf("%s/processing/%d", name, n.Add(1))}, nil
		}, func() { rc.Close() }, nil
	}
	var eps []string
	for _, a := range addrs {
		eps = append(eps, "http://"+a)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, err
	}
	if q == QEtcdQueue {
		pending := &sync.WaitGroup{}
		eq := etcdrecipe.NewQueue(cli, name)
		return func() (queueOps, error) { return &etcdQueue{q: eq, pending: pending}, nil }, func() {
			// Release the Dequeues still waiting (they take no ctx)
			// before the client closes under them.
			for range 256 {
				if waitTimeout(pending, 0) {
					break
				}
				eq.Enqueue("release@0")
				waitTimeout(pending, 20*time.Millisecond)
			}
			cli.Close()
		}, nil
	}
	wq, err := recipes.NewWorkQueue(cli, name)
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return func() (queueOps, error) {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
		if err != nil {
			return nil, err
		}
		return &workQueue{q: wq, s: s}, nil
	}, func() { cli.Close() }, nil
}

// waitTimeout waits for wg at most d, and reports whether it is done.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

type workQueue struct {
	q *recipes.WorkQueue
	s *concurrency.Session
}

func (w *workQueue) put(ctx context.Context, v string) error { _, err := w.q.Put(ctx, v); return err }
func (w *workQueue) take(ctx context.Context) (string, func(context.Context) error, error) {
	d, err := w.q.Take(ctx, w.s)
	if err != nil {
		return "", nil, err
	}
	return d.Value(), d.Ack, nil
}

// crash revokes the session, as etcd does once a dead consumer's lease
// expires (here without waiting for its TTL).
func (w *workQueue) crash() { w.s.Close() }
func (w *workQueue) close() { w.s.Close() }

type etcdQueue struct {
	q       *etcdrecipe.Queue
	pending *sync.WaitGroup
}

func (e *etcdQueue) put(ctx context.Context, v string) error { return e.q.Enqueue(v) }
func (e *etcdQueue) take(ctx context.Context) (string, func(context.Context) error, error) {
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
		if r.v == "release@0" {
			return "", nil, ctx.Err()
		}
		return r.v, func(context.Context) error { return nil }, r.err
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}
}
func (e *etcdQueue) crash() {}
func (e *etcdQueue) close() {}

// redisQueue is the reliable-queue pattern of Redis's documentation: the
// item moves atomically to the consumer's own processing list, and the
// acknowledgement removes it there. What a crashed consumer held stays in
// its processing list until a reaper (not run here) puts it back.
type redisQueue struct {
	c       *redis.Client
	q, proc string
}

func (r *redisQueue) put(ctx context.Context, v string) error { return r.c.LPush(ctx, r.q, v).Err() }
func (r *redisQueue) take(ctx context.Context) (string, func(context.Context) error, error) {
	v, err := r.c.BLMove(ctx, r.q, r.proc, "RIGHT", "LEFT", time.Second).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	return v, func(ctx context.Context) error { return r.c.LRem(ctx, r.proc, 1, v).Err() }, nil
}
func (r *redisQueue) crash() {}
func (r *redisQueue) close() {}
