package concurrency_test

import (
	"context"
	"fmt"
	"log"
	"sync"

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
