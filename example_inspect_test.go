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

func ExampleInspect() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()

	// Two holders of a semaphore with 2 permits, and one waiter, on a
	// session that tells operators who it is (ProcessOwner fills in this
	// host and process; the example writes its own to print the same each
	// run).
	owner := concurrency.Owner{Host: "worker-7", PID: 4242, Label: "nightly-report"}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(30), concurrency.WithOwner(owner))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop() // the third waits until then
	for range 3 {
		m := concurrency.NewSemaphore(s, "/example/inspect", 2)
		wg.Add(1)
		go func() { defer wg.Done(); m.Acquire(wctx) }()
	}

	// Inspect reads, and changes nothing: poll until the three keys are in.
	var q *concurrency.Queue
	for q == nil || len(q.Keys) < 3 {
		if q, err = concurrency.Inspect(ctx, cli, "/example/inspect"); err != nil {
			log.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, k := range q.Keys {
		fmt.Printf("%d %s/%d holds=%v ttl-left=%v owner=%q\n", k.Position, k.Kind, k.Limit, k.Holds, k.TTL > 0 && k.TTL <= 30, k.Owner)
	}
	fmt.Println("holders:", len(q.Holders()), "waiters:", len(q.Waiters()))

	// Output:
	// 0 semaphore/2 holds=true ttl-left=true owner="nightly-report pid 4242 on worker-7"
	// 1 semaphore/2 holds=true ttl-left=true owner="nightly-report pid 4242 on worker-7"
	// 2 semaphore/2 holds=false ttl-left=true owner="nightly-report pid 4242 on worker-7"
	// holders: 2 waiters: 1
}
