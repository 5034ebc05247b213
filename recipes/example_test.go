package recipes_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

func ExampleQueue_DequeueContext() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	q := recipes.NewQueue(cli, "/example/jobs")
	for _, job := range []string{"resize", "upload"} {
		if err := q.EnqueueContext(context.Background(), job); err != nil {
			log.Fatal(err)
		}
	}
	for {
		// A consumer that gives up after a while: an element is either
		// returned or left in the queue, never lost.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		job, err := q.DequeueContext(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			fmt.Println("queue empty")
			return
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("job:", job)
	}
	// Output:
	// job: resize
	// job: upload
	// queue empty
}

func ExampleBarrier_WaitContext() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()

	b := recipes.NewBarrier(cli, "/example/barrier")
	if err := b.HoldContext(ctx); err != nil {
		log.Fatal(err)
	}
	released := make(chan error)
	go func() {
		// Another process waits, watching only the barrier's key.
		released <- recipes.NewBarrier(cli, "/example/barrier").WaitContext(ctx)
	}()

	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	fmt.Println("wait while held:", recipes.NewBarrier(cli, "/example/barrier").WaitContext(wctx))

	if err := b.ReleaseContext(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("wait after release:", <-released)
	// Output:
	// wait while held: context deadline exceeded
	// wait after release: <nil>
}

func ExampleDoubleBarrier_EnterContext() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Three workers start a phase together and finish it together.
	done := make(chan string, 3)
	for i := range 3 {
		go func() {
			s, err := concurrency.NewSession(cli)
			if err != nil {
				log.Fatal(err)
			}
			defer s.Close()
			b := recipes.NewDoubleBarrier(s, "/example/phase", 3)
			if err := b.EnterContext(ctx); err != nil {
				log.Fatal(err)
			}
			// ... all three run here at once ...
			if err := b.LeaveContext(ctx); err != nil {
				log.Fatal(err)
			}
			done <- fmt.Sprint("worker ", i, " done")
		}()
	}
	for range 3 {
		<-done
	}
	fmt.Println("all left together")
	// Output:
	// all left together
}
