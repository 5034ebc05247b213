package recipes_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdrecipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// TestQueueExactlyOnce: producers and consumers at once, on clients of
// different members; every element comes out exactly once, in FIFO order
// per producer, and the queue is left empty.
func TestQueueExactlyOnce(t *testing.T) {
	pfx := etcdtest.Begin(t)
	const producers, consumers, each = 3, 3, 20
	var wg sync.WaitGroup
	for p := range producers {
		q := recipes.NewQueue(sharedClient(t), pfx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := q.EnqueueContext(t.Context(), fmt.Sprintf("%d/%03d", p, i)); err != nil {
					t.Errorf("Enqueue: %v", err)
					return
				}
			}
		}()
	}
	var (
		mu       sync.Mutex // guards got and progress
		got      = map[string]int{}
		progress = time.Now() // when got last grew
	)
	// Consumers stop when every element is out, or when none has come out
	// for stall (the checks below then say whether elements were lost or
	// left in the queue): the loop is bounded even if the queue is not
	// drained. Each Dequeue is bounded too, so consumers see the end: 2 s,
	// since under -race on a loaded machine a dequeue (a read and a
	// delete) has taken more than the 300 ms this test once gave it, and
	// then every attempt timed out.
	const stall = 30 * time.Second
	last := make([]map[int]int, consumers)
	for c := range consumers {
		q := recipes.NewQueue(sharedClient(t), pfx)
		last[c] = map[int]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				n, idle := len(got), time.Since(progress)
				mu.Unlock()
				if n >= producers*each {
					return
				}
				if idle > stall {
					t.Errorf("consumer %d: no element out for %v, %d of %d out", c, stall, n, producers*each)
					return
				}
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				v, err := q.DequeueContext(ctx)
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					continue
				}
				if err != nil {
					t.Errorf("Dequeue: %v", err)
					return
				}
				var p, i int
				fmt.Sscanf(v, "%d/%d", &p, &i)
				mu.Lock()
				got[v]++
				progress = time.Now()
				mu.Unlock()
				// One consumer sees one producer's elements in order.
				if prev, ok := last[c][p]; ok && i <= prev {
					t.Errorf("consumer %d got %s after %d/%03d", c, v, p, prev)
				}
				last[c][p] = i
			}
		}()
	}
	wg.Wait()
	for v, n := range got {
		if n != 1 {
			t.Errorf("%s dequeued %d times", v, n)
		}
	}
	if len(got) != producers*each {
		t.Errorf("dequeued %d distinct elements, want %d", len(got), producers*each)
	}
	if kvs := etcdtest.Keys(t, sharedClient(t), pfx); len(kvs) != 0 {
		t.Errorf("%d keys left in the queue", len(kvs))
	}
}

// TestDequeueCancelledNeverLoses: consumers whose contexts end at random
// moments, also in the middle of taking an element. Every element is
// either returned once or still in the queue: none lost, none twice.
func TestDequeueCancelledNeverLoses(t *testing.T) {
	pfx := etcdtest.Begin(t)
	const total = 60
	q := recipes.NewQueue(sharedClient(t), pfx)
	for i := range total {
		if err := q.Enqueue(fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu   sync.Mutex // guards got
		got  = map[string]int{}
		late int // elements returned after ctx ended, mid-claim
		wg   sync.WaitGroup
	)
	for range 4 {
		q := recipes.NewQueue(sharedClient(t), pfx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range total / 3 {
				// Round trips on the shared cluster take a few
				// milliseconds (under -race): deadlines of 0-20 ms end some calls in
				// the read and some in the delete.
				ctx, cancel := context.WithTimeout(t.Context(), time.Duration(rand.IntN(20000))*time.Microsecond)
				v, err := q.DequeueContext(ctx)
				ended := ctx.Err() != nil
				cancel()
				switch {
				case err == nil:
					mu.Lock()
					got[v]++
					if ended {
						late++
					}
					mu.Unlock()
				case errors.Is(err, context.DeadlineExceeded):
				default:
					t.Errorf("Dequeue: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	left := etcdtest.Keys(t, sharedClient(t), pfx)
	for _, kv := range left {
		got[string(kv.Value)]++
	}
	t.Logf("%d returned (%d of them after ctx ended mid-claim), %d left in the queue", total-len(left), late, len(left))
	for i := range total {
		if n := got[fmt.Sprint(i)]; n != 1 {
			t.Errorf("element %d: returned or left %d times, want once", i, n)
		}
	}
}

// TestDequeueEmptyContext: a Dequeue on an empty queue blocks, returns
// the context's error when it ends, and then wakes for a new element.
func TestDequeueEmptyContext(t *testing.T) {
	pfx := etcdtest.Begin(t)
	q := recipes.NewQueue(sharedClient(t), pfx)
	start := time.Now()
	if _, err := q.DequeueContext(bounded(t, 200*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dequeue on an empty queue = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Dequeue returned %v after its deadline", d)
	}
	var v string
	errc := async(t, func() (err error) { v, err = q.DequeueContext(bounded(t, 10*time.Second)); return err })
	notYet(t, errc, "Dequeue on an empty queue")
	if err := recipes.NewQueue(sharedClient(t), pfx).Enqueue("x"); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 5*time.Second, errc, "Dequeue"); err != nil || v != "x" {
		t.Fatalf("Dequeue = %q, %v, want x", v, err)
	}
}

// TestQueueSharedWithEtcds: elements are named as etcd's recipe names
// them, so each package's Queue takes the other's, in order.
func TestQueueSharedWithEtcds(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ours, theirs := recipes.NewQueue(c, pfx), etcdrecipe.NewQueue(c, pfx)
	for i, enq := range []func(string) error{ours.Enqueue, theirs.Enqueue, ours.Enqueue} {
		if err := enq(fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, deq := range []func() (string, error){theirs.Dequeue, ours.Dequeue, ours.Dequeue} {
		if v, err := deq(); err != nil || v != fmt.Sprint(i) {
			t.Fatalf("Dequeue %d = %q, %v", i, v, err)
		}
	}
}

// TestPriorityQueueOrderNoLeftovers: lowest priority number first, FIFO
// within a priority, and nothing left once drained (etcd's recipe leaves a
// "__" key per priority).
func TestPriorityQueueOrderNoLeftovers(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	q := recipes.NewPriorityQueue(c, pfx)
	in := []struct {
		v  string
		pr uint16
	}{{"b1", 2}, {"a1", 1}, {"b2", 2}, {"c1", 300}, {"a2", 1}, {"z1", 0}}
	for _, e := range in {
		if err := q.Enqueue(e.v, e.pr); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"z1", "a1", "a2", "b1", "b2", "c1"} {
		if v, err := q.DequeueContext(bounded(t, 5*time.Second)); err != nil || v != want {
			t.Fatalf("Dequeue = %q, %v, want %s", v, err, want)
		}
	}
	resp, err := c.Get(t.Context(), pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("%d keys left after draining", resp.Count)
	}
	if _, err := q.DequeueContext(bounded(t, 100*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dequeue on an empty queue = %v, want DeadlineExceeded", err)
	}
}

// TestDequeueCompactedWhileWaiting (issue 27, finding 3): a Dequeue waits
// on an empty queue; other keys are written and the history compacted;
// the consumer's connection drops, and its watch resumes from a compacted
// revision. Dequeue goes on waiting (it read the queue again) and returns
// the next element, for a Queue and a PriorityQueue; it used to return
// "mvcc: required revision has been compacted".
func TestDequeueCompactedWhileWaiting(t *testing.T) {
	clus := bridgeCluster(t)
	for _, kind := range []string{"Queue", "PriorityQueue"} {
		t.Run(kind, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			wc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
			pc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
			dequeue, enqueue := recipes.NewQueue(wc, pfx+"/q").DequeueContext, recipes.NewQueue(pc, pfx+"/q").EnqueueContext
			if kind == "PriorityQueue" {
				dequeue = recipes.NewPriorityQueue(wc, pfx+"/q").DequeueContext
				pq := recipes.NewPriorityQueue(pc, pfx+"/q")
				enqueue = func(ctx context.Context, v string) error { return pq.EnqueueContext(ctx, v, 7) }
			}
			var v string
			errc := async(t, func() (err error) { v, err = dequeue(bounded(t, 30*time.Second)); return err })
			notYet(t, errc, "Dequeue on an empty queue")
			compactNow(t, pc, pfx, 5)
			clus.Members[0].Bridge().DropConnections()
			notYet(t, errc, "Dequeue after its watch resumed into a compacted revision")
			if err := enqueue(t.Context(), "x"); err != nil {
				t.Fatal(err)
			}
			if err := within(t, 15*time.Second, errc, "Dequeue"); err != nil || v != "x" {
				t.Fatalf("Dequeue after compaction = %q, %v, want x", v, err)
			}
		})
	}
}
