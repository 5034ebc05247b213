package recipes_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// newWorkQueue makes the WorkQueue of name, failing the test on error.
func newWorkQueue(t testing.TB, c *clientv3.Client, name string, opts ...recipes.WorkQueueOption) *recipes.WorkQueue {
	t.Helper()
	q, err := recipes.NewWorkQueue(c, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// put puts val, failing the test on error.
func put(t testing.TB, q *recipes.WorkQueue, val string, opts ...recipes.PutOption) string {
	t.Helper()
	id, err := q.Put(t.Context(), val, opts...)
	if err != nil {
		t.Fatalf("Put %q: %v", val, err)
	}
	return id
}

// take takes an item within d, failing the test otherwise.
func take(t testing.TB, q *recipes.WorkQueue, s *concurrency.Session, d time.Duration) *recipes.Delivery {
	t.Helper()
	dl, err := q.Take(bounded(t, d), s)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return dl
}

// empty asserts that Take finds nothing ready within d.
func empty(t testing.TB, q *recipes.WorkQueue, s *concurrency.Session, d time.Duration) {
	t.Helper()
	dl, err := q.Take(bounded(t, d), s)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take = %v, %v; want nothing ready", dl, err)
	}
}

// noKeysLeft asserts that nothing is left under pfx.
func noKeysLeft(t testing.TB, c *clientv3.Client, pfx string) {
	t.Helper()
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
		t.Errorf("%d keys left under %s, first %s", len(kvs), pfx, kvs[0].Key)
	}
}

// TestWorkQueuePriorityOrderAck: items come out lowest priority number
// first, FIFO within one; Ack leaves no key behind, waiters included.
func TestWorkQueuePriorityOrderAck(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	q := newWorkQueue(t, c, pfx)
	s := newSession(t, c)
	for _, p := range []struct {
		v  string
		pr uint16
	}{{"c", 5}, {"a", 1}, {"b", 3}, {"a2", 1}} {
		put(t, q, p.v, recipes.WithPriority(p.pr))
	}
	var got []string
	for range 4 {
		d := take(t, q, s, 10*time.Second)
		if d.Count() != 1 || d.Token() <= 0 {
			t.Errorf("%s: count %d token %d", d.Value(), d.Count(), d.Token())
		}
		got = append(got, d.Value())
		if err := d.Ack(t.Context()); err != nil {
			t.Fatal(err)
		}
		if d.Ctx().Err() == nil {
			t.Error("Ctx still alive after Ack")
		}
	}
	if strings.Join(got, ",") != "a,a2,b,c" {
		t.Errorf("order %v, want a,a2,b,c", got)
	}
	empty(t, q, s, 300*time.Millisecond)
	noKeysLeft(t, c, pfx)
}

// TestWorkQueueConsumerCrash: a consumer whose session ends without an
// Ack (closed, or its lease revoked from outside) loses its claim, and the
// item is delivered to another consumer, counted; never while the first
// claim lives.
func TestWorkQueueConsumerCrash(t *testing.T) {
	for _, how := range []string{"close", "revoke"} {
		t.Run(how, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			q := newWorkQueue(t, c, pfx)
			a, b := newSession(t, c), newSession(t, sharedClient(t))
			put(t, q, "job")
			d := take(t, q, a, 10*time.Second)
			empty(t, q, b, 500*time.Millisecond) // claimed while a lives
			if how == "close" {
				a.Close()
			} else if _, err := c.Revoke(t.Context(), a.Lease()); err != nil {
				t.Fatal(err)
			}
			// The delivery's Ctx ends with its session, before any Ack
			// says the claim is lost.
			etcdtest.Eventually(t, 5*time.Second, func() bool { return d.Ctx().Err() != nil }, "Ctx of the lost delivery alive")
			if !errors.Is(context.Cause(d.Ctx()), recipes.ErrClaimLost) {
				t.Errorf("cause %v", context.Cause(d.Ctx()))
			}
			d2 := take(t, q, b, 10*time.Second)
			if d2.ID() != d.ID() || d2.Count() != 2 || d2.Token() <= d.Token() {
				t.Errorf("redelivery: id %s count %d token %d, first %s token %d", d2.ID(), d2.Count(), d2.Token(), d.ID(), d.Token())
			}
			if err := d.Ack(t.Context()); !errors.Is(err, recipes.ErrClaimLost) {
				t.Errorf("Ack of a lost claim = %v, want ErrClaimLost", err)
			}
			if err := d2.Ack(t.Context()); err != nil {
				t.Fatal(err)
			}
			noKeysLeft(t, c, pfx)
		})
	}
}

// TestWorkQueueCutOffConsumer: a consumer cut off from the cluster keeps
// its claim until etcd expires its lease, then the item goes to another
// consumer, and the first one's Ack, once it is back, changes nothing.
func TestWorkQueueCutOffConsumer(t *testing.T) {
	clus := bridgeCluster(t)
	pfx := etcdtest.Begin(t)
	ca := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	cb := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL, clus.Members[2].GRPCURL})
	qa, qb := newWorkQueue(t, ca, pfx), newWorkQueue(t, cb, pfx)
	a, err := concurrency.NewSession(ca, concurrency.WithTTL(2))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newSession(t, cb)
	put(t, qb, "job")
	d := take(t, qa, a, 10*time.Second)
	etcdtest.Cut(t, clus.Members[0])
	start := time.Now()
	d2 := take(t, qb, b, 20*time.Second)
	if time.Since(start) < time.Second {
		t.Errorf("redelivered after %v, before the 2 s lease could expire", time.Since(start))
	}
	clus.Members[0].Bridge().Unblackhole()
	ctx := bounded(t, 20*time.Second)
	if _, err := d.AckTxn(ctx, clientv3.OpPut(pfx+"-effect/a", "x")); !errors.Is(err, recipes.ErrClaimLost) {
		t.Errorf("AckTxn of the cut-off consumer = %v, want ErrClaimLost", err)
	}
	if _, err := d2.AckTxn(ctx, clientv3.OpPut(pfx+"-effect/b", "x")); err != nil {
		t.Fatal(err)
	}
	if kvs := etcdtest.Keys(t, cb, pfx+"-effect"); len(kvs) != 1 || string(kvs[0].Key) != pfx+"-effect/b" {
		t.Errorf("effects %v, want b's only", kvs)
	}
	noKeysLeft(t, cb, pfx)
}

// TestWorkQueueNackDelayDeadLetters: Nack redelivers (after its delay),
// the delivery limit moves the item to the dead letters in the same
// transaction, and operators requeue and purge them.
func TestWorkQueueNackDelayDeadLetters(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	q := newWorkQueue(t, c, pfx, recipes.WithMaxDeliveries(3))
	s := newSession(t, c)
	id := put(t, q, "job", recipes.WithDedupID("job-1"))
	d := take(t, q, s, 10*time.Second)
	if err := d.Nack(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	d = take(t, q, s, 10*time.Second)
	if d.Count() != 2 {
		t.Errorf("count after Nack %d, want 2", d.Count())
	}
	start := time.Now()
	if err := d.Nack(t.Context(), 700*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	d = take(t, q, s, 10*time.Second)
	if el := time.Since(start); el < 700*time.Millisecond || d.Count() != 3 {
		t.Errorf("redelivered after %v (delay 700ms), count %d want 3", el, d.Count())
	}
	if err := d.Nack(t.Context(), 0); err != nil { // the third: dead
		t.Fatal(err)
	}
	empty(t, q, s, 300*time.Millisecond)
	dead, err := q.DeadLetters(t.Context(), 0)
	if err != nil || len(dead) != 1 || dead[0].ID != id || dead[0].Deliveries != 3 || dead[0].Value != "job" {
		t.Fatalf("DeadLetters = %+v, %v", dead, err)
	}
	if _, err := q.Put(t.Context(), "again", recipes.WithDedupID("job-1")); !errors.Is(err, recipes.ErrDuplicate) {
		t.Errorf("Put of a dead letter's dedup id = %v, want ErrDuplicate", err)
	}
	if err := q.Requeue(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	d = take(t, q, s, 10*time.Second)
	if d.Count() != 1 || d.ID() != id {
		t.Errorf("requeued: count %d id %s", d.Count(), d.ID())
	}
	if err := d.Nack(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	// A Take that finds the item delivered 3 times buries it too.
	for range 2 {
		if err := take(t, q, s, 10*time.Second).Nack(t.Context(), 0); err != nil {
			t.Fatal(err)
		}
	}
	empty(t, q, s, 300*time.Millisecond)
	if err := q.Purge(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if err := q.Purge(t.Context(), id); !errors.Is(err, recipes.ErrNotFound) {
		t.Errorf("second Purge = %v, want ErrNotFound", err)
	}
	noKeysLeft(t, c, pfx)
	put(t, q, "again", recipes.WithDedupID("job-1")) // the id is free
}

// TestWorkQueueBuryOnTake: an item whose last allowed delivery's claim
// ended without a Nack (its consumer's session closed) is moved to the
// dead letters by the next Take, which delivers it no more.
func TestWorkQueueBuryOnTake(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	q := newWorkQueue(t, c, pfx, recipes.WithMaxDeliveries(1))
	a, b := newSession(t, c), newSession(t, c)
	id := put(t, q, "poison")
	take(t, q, a, 10*time.Second)
	a.Close() // the claim goes with the lease: delivered once, not acked
	empty(t, q, b, time.Second)
	dead, err := q.DeadLetters(t.Context(), 0)
	if err != nil || len(dead) != 1 || dead[0].ID != id || dead[0].Deliveries != 1 {
		t.Fatalf("dead letters = %+v, %v; want %s delivered once", dead, err, id)
	}
	if err := q.Purge(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	noKeysLeft(t, c, pfx)
}

// TestWorkQueueDelayAndDedup: a delayed item is not taken before its time
// (by this process's clock), a waiting consumer's timer takes it then; a
// dedup id is refused while its item is in the queue, free after Ack.
func TestWorkQueueDelayAndDedup(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	q := newWorkQueue(t, c, pfx)
	s := newSession(t, c)
	start := time.Now()
	id := put(t, q, "later", recipes.WithDelay(time.Second), recipes.WithDedupID("x"))
	if id2, err := q.Put(t.Context(), "dup", recipes.WithDedupID("x")); !errors.Is(err, recipes.ErrDuplicate) || id2 != id {
		t.Errorf("duplicate Put = %s, %v; want %s, ErrDuplicate", id2, err, id)
	}
	st, err := q.Stats(t.Context())
	if err != nil || st.Delayed != 1 || st.Ready != 0 {
		t.Errorf("Stats = %+v, %v", st, err)
	}
	d := take(t, q, s, 10*time.Second)
	if el := time.Since(start); el < time.Second || d.Value() != "later" {
		t.Errorf("took %q after %v, delay 1s", d.Value(), el)
	}
	if err := d.Ack(t.Context()); err != nil {
		t.Fatal(err)
	}
	put(t, q, "again", recipes.WithDedupID("x")) // freed by the Ack
	if err := take(t, q, s, 10*time.Second).Ack(t.Context()); err != nil {
		t.Fatal(err)
	}
	noKeysLeft(t, c, pfx)
}

// TestWorkQueueBadInput: every bad input gets its sentinel before anything
// is written.
func TestWorkQueueBadInput(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	for _, tc := range []struct {
		name string
		opts []recipes.WorkQueueOption
		want error
	}{
		{"", nil, recipes.ErrInvalidName},
		{pfx, []recipes.WorkQueueOption{recipes.WithMaxDeliveries(0)}, recipes.ErrInvalidLimit},
		{pfx, []recipes.WorkQueueOption{recipes.WithMaxDeliveries(-1)}, recipes.ErrInvalidLimit},
		{pfx, []recipes.WorkQueueOption{recipes.WithProcessingLimit(0)}, recipes.ErrInvalidLimit},
		{pfx, []recipes.WorkQueueOption{recipes.WithProcessingLimit(25 * time.Hour)}, recipes.ErrInvalidLimit},
		{pfx, []recipes.WorkQueueOption{recipes.WithMaxRequestBytes(-5)}, recipes.ErrInvalidLimit},
	} {
		if _, err := recipes.NewWorkQueue(c, tc.name, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("NewWorkQueue(%q) = %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := recipes.NewWorkQueue(nil, pfx); !errors.Is(err, recipes.ErrNilClient) {
		t.Errorf("nil client: %v", err)
	}
	q := newWorkQueue(t, c, pfx)
	s := newSession(t, c)
	for _, tc := range []struct {
		val  string
		opt  recipes.PutOption
		want error
	}{
		{"x", recipes.WithDelay(-time.Second), recipes.ErrInvalidDelay},
		{"x", recipes.WithDelay(recipes.MaxDelay + time.Second), recipes.ErrInvalidDelay},
		{"x", recipes.WithDelay(time.Duration(1<<63 - 1)), recipes.ErrInvalidDelay},
		{strings.Repeat("x", recipes.DefaultMaxRequestBytes), nil, recipes.ErrItemTooLarge},
		// The dedup id travels in the put, its key and the compare: an
		// item that fits alone does not fit with a long one.
		{strings.Repeat("x", recipes.DefaultMaxRequestBytes-3000), recipes.WithDedupID(strings.Repeat("d", 1000)), recipes.ErrItemTooLarge},
		{"x", recipes.WithDedupID(strings.Repeat("d", 1025)), recipes.ErrInvalidName},
	} {
		opts := []recipes.PutOption{}
		if tc.opt != nil {
			opts = append(opts, tc.opt)
		}
		if _, err := q.Put(t.Context(), tc.val, opts...); !errors.Is(err, tc.want) {
			t.Errorf("Put = %v, want %v", err, tc.want)
		}
	}
	if _, err := q.Take(t.Context(), nil); !errors.Is(err, recipes.ErrNilSession) {
		t.Errorf("Take(nil session) = %v", err)
	}
	put(t, q, "x")
	d := take(t, q, s, 10*time.Second)
	for _, delay := range []time.Duration{-time.Second, recipes.MaxDelay + 1} {
		if err := d.Nack(t.Context(), delay); !errors.Is(err, recipes.ErrInvalidDelay) {
			t.Errorf("Nack(%v) = %v", delay, err)
		}
	}
	if err := d.Ack(t.Context()); err != nil { // the bad Nack changed nothing
		t.Fatal(err)
	}
	noKeysLeft(t, c, pfx)

	// A name in use by a lock (a prefix of the lock's keys), or a queue
	// whose name is a prefix of this one's: refused, nothing written.
	m := concurrency.NewMutex(s, pfx+"/lock")
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(context.Background())
	for _, name := range []string{pfx, pfx + "/lock"} {
		q := newWorkQueue(t, c, name)
		if _, err := q.Put(t.Context(), "x"); !errors.Is(err, recipes.ErrNameInUse) {
			t.Errorf("Put on %q beside a lock = %v, want ErrNameInUse", name, err)
		}
		if _, err := q.Take(bounded(t, 5*time.Second), s); !errors.Is(err, recipes.ErrNameInUse) {
			t.Errorf("Take on %q beside a lock = %v, want ErrNameInUse", name, err)
		}
	}
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 1 {
		t.Errorf("%d keys under the name, want the lock's only", len(kvs))
	}
	sub := newWorkQueue(t, c, pfx+"/q/item") // inside the keys of queue pfx/q
	put(t, sub, "x")
	if _, err := newWorkQueue(t, c, pfx+"/q").Take(bounded(t, 5*time.Second), s); !errors.Is(err, recipes.ErrNameInUse) {
		t.Errorf("Take of a queue whose keys hold another queue = %v, want ErrNameInUse", err)
	}
}

// TestWorkQueueProcessingLimit: a consumer that lives but hangs loses its
// claim after the processing limit (etcd's lease TTL), its Ctx says so,
// and the item goes to another consumer.
func TestWorkQueueProcessingLimit(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	q := newWorkQueue(t, c, pfx, recipes.WithProcessingLimit(time.Second))
	s := newSession(t, c)
	put(t, q, "job")
	start := time.Now()
	d := take(t, q, s, 10*time.Second)
	d2 := take(t, q, newSession(t, c), 20*time.Second)
	if el := time.Since(start); el < time.Second || d2.Count() != 2 {
		t.Errorf("redelivered after %v (limit 1s), count %d", el, d2.Count())
	}
	<-d.Ctx().Done()
	if !errors.Is(context.Cause(d.Ctx()), recipes.ErrClaimLost) {
		t.Errorf("cause %v", context.Cause(d.Ctx()))
	}
	if err := d.Ack(t.Context()); !errors.Is(err, recipes.ErrClaimLost) {
		t.Errorf("late Ack = %v", err)
	}
	if err := d2.Ack(t.Context()); err != nil {
		t.Fatal(err)
	}
	noKeysLeft(t, c, pfx)
}

// TestWorkQueueAckTxnExactlyOnce: consumers that crash at random (their
// session closed without Ack, mid-item) and survivors that add each item's
// value to a counter key in AckTxn: every item is acknowledged, and the
// effects are applied exactly once per item.
func TestWorkQueueAckTxnExactlyOnce(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	q := newWorkQueue(t, c, pfx)
	const items = 40
	for i := range items {
		put(t, q, fmt.Sprint(i))
	}
	var wg sync.WaitGroup
	var acked atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; acked.Load() < items && n < 200; n++ {
				s, err := concurrency.NewSession(c, concurrency.WithTTL(10))
				if err != nil {
					t.Error(err)
					return
				}
				d, err := q.Take(bounded(t, 2*time.Second), s)
				if err != nil {
					s.Close()
					continue
				}
				if (n+w)%3 == 0 { // crash: the session ends, no Ack
					s.Close()
					continue
				}
				_, err = d.AckTxn(t.Context(), clientv3.OpPut(pfx+"-effect/"+d.Value(), fmt.Sprint(d.Token())))
				if err == nil {
					acked.Add(1)
				} else if !errors.Is(err, recipes.ErrClaimLost) {
					t.Error(err)
				}
				s.Close()
			}
		}()
	}
	wg.Wait()
	if acked.Load() != items {
		t.Fatalf("%d of %d acknowledged", acked.Load(), items)
	}
	effects := etcdtest.Keys(t, c, pfx+"-effect")
	if len(effects) != items {
		t.Errorf("%d effects, want %d", len(effects), items)
	}
	for _, kv := range effects {
		if kv.Version != 1 {
			t.Errorf("effect %s applied %d times", kv.Key, kv.Version)
		}
	}
	noKeysLeft(t, c, pfx)
}

// countingClient returns a client of the shared cluster that counts its
// unary requests (reads, writes, lease calls) and its watch streams.
func countingClient(t testing.TB, n *atomic.Int64) *clientv3.Client {
	return etcdtest.NewClient(t, etcdtest.Endpoints(), func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if !strings.Contains(method, "LeaseKeepAlive") {
					n.Add(1)
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			}))
	})
}

// TestWorkQueueNoHerd: with 1, 8 and 64 consumers waiting, one Put
// costs the waiting consumers about the same number of requests: only the
// first in line watches the queue, the others each their predecessor.
func TestWorkQueueNoHerd(t *testing.T) {
	// Each count in a subtest of its own, so that its sessions and client
	// are closed before its leak check, not after the next count's.
	cost := func(waiters int) (spent int64) {
		t.Run(fmt.Sprintf("%d waiters", waiters), func(t *testing.T) { spent = waitingCost(t, waiters) })
		return spent
	}
	one := cost(1)
	for _, n := range []int{8, 64} {
		many := cost(n)
		t.Logf("requests for one delivery: %d with 1 waiter, %d with %d", one, many, n)
		if many > one+8 {
			t.Errorf("one Put cost %d requests with %d waiters, %d with 1: a herd", many, n, one)
		}
	}
}

// waitingCost returns how many requests the consumers waiting in a
// queue's line spend on one Put and its delivery.
func waitingCost(t *testing.T, waiters int) int64 {
	pfx := etcdtest.Begin(t)
	var n atomic.Int64
	c := countingClient(t, &n)
	q := newWorkQueue(t, c, pfx)
	prod := newWorkQueue(t, sharedClient(t), pfx)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := make(chan *recipes.Delivery, waiters)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range waiters {
		s := newSession(t, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, err := q.Take(ctx, s); err == nil {
				got <- d
			}
		}()
	}
	etcdtest.Eventually(t, 20*time.Second, func() bool { return len(etcdtest.Keys(t, sharedClient(t), pfx+"/wait")) == waiters },
		"%d waiters not in line", waiters)
	time.Sleep(300 * time.Millisecond) // let the line's reads settle
	before := n.Load()
	put(t, prod, "job")
	d := <-got
	// The line moves up: the taker's key goes, the next becomes first.
	etcdtest.Eventually(t, 20*time.Second, func() bool { return len(etcdtest.Keys(t, sharedClient(t), pfx+"/wait")) == waiters-1 },
		"line did not move")
	time.Sleep(300 * time.Millisecond)
	spent := n.Load() - before
	if err := d.Ack(t.Context()); err != nil {
		t.Fatal(err)
	}
	return spent
}

// TestWorkQueueCompactedWhileWaiting: Takes wait on an empty queue (one
// first in line, one behind it); the history is compacted and their
// connection dropped, so their watches resume from a compacted revision.
// They go on waiting (they read again), and a Put is taken, and then a
// second one: the line still moves.
func TestWorkQueueCompactedWhileWaiting(t *testing.T) {
	clus := bridgeCluster(t)
	pfx := etcdtest.Begin(t)
	wc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	pc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
	q, prod := newWorkQueue(t, wc, pfx+"/q"), newWorkQueue(t, pc, pfx+"/q")
	got := make(chan string, 2)
	for range 2 {
		s := newSession(t, wc)
		async(t, func() error {
			d, err := q.Take(bounded(t, 60*time.Second), s)
			if err != nil {
				return err
			}
			got <- d.Value()
			return d.Ack(t.Context())
		})
	}
	etcdtest.Eventually(t, 20*time.Second, func() bool { return len(etcdtest.Keys(t, pc, pfx+"/q/wait")) == 2 }, "Takes not in line")
	compactNow(t, pc, pfx, 5)
	clus.Members[0].Bridge().DropConnections()
	for _, v := range []string{"a", "b"} {
		put(t, prod, v)
		select {
		case g := <-got:
			if g != v {
				t.Errorf("took %q, want %q", g, v)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%q not taken after the compaction", v)
		}
	}
	etcdtest.Eventually(t, 10*time.Second, func() bool { return len(etcdtest.Keys(t, pc, pfx+"/q")) == 0 }, "keys left")
}

// TestWorkQueueDeadFirstWaiter: the first in the waiting line is a
// process that hangs with its lease alive (here a waiter key that nobody
// serves). A Take behind it still gets a new item, by its read every 5 s,
// not after the hung process's TTL.
func TestWorkQueueDeadFirstWaiter(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	q := newWorkQueue(t, c, pfx)
	hung := newSession(t, c)
	if _, err := c.Put(t.Context(), fmt.Sprintf("%s/wait/%x/00000000", pfx, int64(hung.Lease())), "", clientv3.WithLease(hung.Lease())); err != nil {
		t.Fatal(err)
	}
	s := newSession(t, c)
	var got string
	errc := async(t, func() error {
		d, err := q.Take(bounded(t, 30*time.Second), s)
		if err != nil {
			return err
		}
		got = d.Value()
		return d.Ack(t.Context())
	})
	etcdtest.Eventually(t, 10*time.Second, func() bool { return len(etcdtest.Keys(t, c, pfx+"/wait")) == 2 }, "Take not in line")
	start := time.Now()
	put(t, q, "job")
	if err := within(t, 15*time.Second, errc, "Take behind a hung first waiter"); err != nil || got != "job" {
		t.Fatalf("Take = %q, %v", got, err)
	}
	t.Logf("taken after %v behind a hung first waiter", time.Since(start).Round(time.Millisecond))
	hung.Close()
	noKeysLeft(t, c, pfx)
}

// TestWorkQueueTakeOnRevokedLease: a Take on a session whose lease was
// revoked from outside, before the session noticed, fails with the root
// package's ErrSessionExpired, with an item ready or none, and leaves
// nothing behind.
func TestWorkQueueTakeOnRevokedLease(t *testing.T) {
	for _, ready := range []bool{true, false} {
		t.Run(fmt.Sprint("ready=", ready), func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			q := newWorkQueue(t, c, pfx)
			if ready {
				put(t, q, "job")
			}
			s := newSession(t, c)
			if _, err := c.Revoke(t.Context(), s.Lease()); err != nil {
				t.Fatal(err)
			}
			if d, err := q.Take(bounded(t, 20*time.Second), s); !errors.Is(err, concurrency.ErrSessionExpired) {
				t.Fatalf("Take = %v, %v; want ErrSessionExpired", d, err)
			}
			n := 0
			if ready {
				n = 1 // the item, unclaimed
			}
			if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != n {
				t.Errorf("%d keys left, want %d", len(kvs), n)
			}
		})
	}
}
