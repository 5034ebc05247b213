package concurrency_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// A pool of workers in one process shares one session; a Semaphore lets at
// most two of them, across every process using the name, run at once.
func ExampleSemaphore() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	var mu sync.Mutex
	running, most := 0, 0
	var wg sync.WaitGroup
	for range 5 {
		sem := concurrency.NewSemaphore(s, "/example/semaphore", 2)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := sem.Do(context.Background(), func(ctx context.Context) error {
				mu.Lock()
				running++
				most = max(most, running)
				mu.Unlock()
				// ... the work, with sem.Token() as its fencing token ...
				mu.Lock()
				running--
				mu.Unlock()
				return nil
			})
			if err != nil {
				log.Fatal(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println("at most two at once:", most <= 2)
	// Output: at most two at once: true
}

// Readers share an RWMutex; a writer has it alone.
func ExampleRWMutex() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	s1, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s1.Close()
	s2, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s2.Close()

	ctx := context.Background()
	reader1 := concurrency.NewRWMutex(s1, "/example/rwmutex")
	reader2 := concurrency.NewRWMutex(s2, "/example/rwmutex")
	if err := reader1.RLock(ctx); err != nil {
		log.Fatal(err)
	}
	if err := reader2.RLock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("two readers in")

	writer := concurrency.NewRWMutex(s2, "/example/rwmutex")
	fmt.Println("writer while readers are in:", writer.TryLock(ctx))
	reader1.RUnlock(ctx)
	reader2.RUnlock(ctx)
	if err := writer.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer in")
	writer.Unlock(ctx)
	// Output:
	// two readers in
	// writer while readers are in: mutex: Locked by another session
	// writer in
}

// LockAll takes several locks, all or none, in an order that cannot
// deadlock with another process locking the same names in another order.
func ExampleLockAll() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	ctx := context.Background()
	from := concurrency.NewMutex(s, "/example/account/42")
	to := concurrency.NewMutex(s, "/example/account/7")
	if err := concurrency.LockAll(ctx, from, to); err != nil {
		log.Fatal(err)
	}
	fmt.Println("both accounts locked")
	if err := concurrency.UnlockAll(ctx, from, to); err != nil {
		log.Fatal(err)
	}
	// Output: both accounts locked
}

// Jobs take as many permits of a shared budget as they need: a job of
// weight 3 and one of weight 1 fit a limit of 4 together; a job of weight 2
// does not fit until they leave, and one heavier than the limit is refused.
// Inspect shows each key's weight.
func ExampleSemaphore_AcquireN() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const name = "/example/weighted"

	big := concurrency.NewSemaphore(s, name, 4)
	small := concurrency.NewSemaphore(s, name, 4)
	if err := big.AcquireN(ctx, 3); err != nil {
		log.Fatal(err)
	}
	if err := small.Acquire(ctx); err != nil { // one permit
		log.Fatal(err)
	}
	more := concurrency.NewSemaphore(s, name, 4)
	fmt.Println("weight 2 now:", more.TryAcquireN(ctx, 2))
	fmt.Println("weight 5:", more.AcquireN(ctx, 5))

	q, err := concurrency.Inspect(ctx, cli, name)
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range q.Keys {
		fmt.Printf("weight %d of %d, value %q, holds %v\n", k.Weight, k.Limit, k.Value, k.Holds)
	}
	big.Release(ctx)
	small.Release(ctx)
	fmt.Println("weight 2 later:", more.TryAcquireN(ctx, 2), more.Weight())
	more.Release(ctx)
	// Output:
	// weight 2 now: mutex: Locked by another session
	// weight 5: concurrency: semaphore weight exceeds its limit: weight 5, limit 4
	// weight 3 of 4, value "4/3", holds true
	// weight 1 of 4, value "4", holds true
	// weight 2 later: <nil> 2
}

// A semaphore's limit changes while it is in use: a larger one lets the
// waiters in at once; a smaller one ends no hold, and new grants wait
// until the holders fit.
func ExampleSemaphore_SetLimit() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const name = "/example/resizable"

	a := concurrency.NewSemaphore(s, name, 1)
	if err := a.Acquire(ctx); err != nil {
		log.Fatal(err)
	}
	b := concurrency.NewSemaphore(s, name, 1)
	granted := make(chan error)
	go func() { granted <- b.Acquire(ctx) }()
	// Wait (5 s at most) until b's key is queued behind a's.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		q, err := concurrency.Inspect(ctx, cli, name)
		if err != nil {
			log.Fatal(err)
		}
		if len(q.Keys) == 2 {
			break
		}
		if time.Now().After(deadline) {
			log.Fatal("b's key was not queued")
		}
	}
	if err := a.SetLimit(ctx, 2); err != nil {
		log.Fatal(err)
	}
	fmt.Println("b after growing to 2:", <-granted)

	if err := a.SetLimit(ctx, 1); err != nil {
		log.Fatal(err)
	}
	fmt.Println("a's hold after shrinking to 1:", a.Ctx().Err())
	c := concurrency.NewSemaphore(s, name, 1)
	fmt.Println("a new permit meanwhile:", c.TryAcquire(ctx))
	a.Release(ctx)
	b.Release(ctx)
	fmt.Println("once both left:", c.TryAcquire(ctx))
	c.Release(ctx)
	// Output:
	// b after growing to 2: <nil>
	// a's hold after shrinking to 1: <nil>
	// a new permit meanwhile: mutex: Locked by another session
	// once both left: <nil>
}
