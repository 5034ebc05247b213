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
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
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
	err = recipes.NewBarrier(cli, "/example/barrier").WaitContext(wctx)
	fmt.Println("waits while held:", errors.Is(err, context.DeadlineExceeded))

	if err := b.ReleaseContext(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("wait after release:", <-released)
	// Output:
	// waits while held: true
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

func ExamplePriorityQueue_DequeueContext() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	ctx := context.Background()
	q := recipes.NewPriorityQueue(cli, "/example/pq")
	// Lower numbers come out first; equal ones in the order they came in.
	for _, e := range []struct {
		val string
		pr  uint16
	}{{"backup", 5}, {"page on-call", 0}, {"rotate logs", 5}} {
		if err := q.EnqueueContext(ctx, e.val, e.pr); err != nil {
			log.Fatal(err)
		}
	}
	for range 3 {
		v, err := q.DequeueContext(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(v)
	}
	// Output:
	// page on-call
	// backup
	// rotate logs
}

func ExampleRWMutex_RLockContext() {
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
	r1 := recipes.NewRWMutex(s1, "/example/rw")
	r2 := recipes.NewRWMutex(s2, "/example/rw")
	// Readers share the lock.
	if err := r1.RLockContext(ctx); err != nil {
		log.Fatal(err)
	}
	if err := r2.RLockContext(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("two readers inside")
	if err := r1.RUnlockContext(ctx); err != nil {
		log.Fatal(err)
	}
	if err := r2.RUnlockContext(ctx); err != nil {
		log.Fatal(err)
	}
	// A writer excludes everyone.
	if err := r1.LockContext(ctx); err != nil {
		log.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = r2.RLockContext(tctx)
	cancel()
	fmt.Println("reader while a writer holds:", errors.Is(err, context.DeadlineExceeded))
	if err := r1.UnlockContext(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// two readers inside
	// reader while a writer holds: true
}

func ExampleCountDownLatch() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	ctx := context.Background()
	l := recipes.NewCountDownLatch(cli, "/example/latch")
	if err := l.Start(ctx, 3); err != nil {
		log.Fatal(err)
	}
	opened := make(chan struct{})
	go func() {
		defer close(opened)
		if err := l.Wait(ctx); err != nil {
			log.Fatal(err)
		}
	}()
	for range 3 { // three workers report done
		if err := l.CountDown(ctx); err != nil {
			log.Fatal(err)
		}
	}
	<-opened
	n, err := l.Count(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("latch open, count", n)
	// Output:
	// latch open, count 0
}
