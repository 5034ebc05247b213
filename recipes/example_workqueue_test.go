package recipes_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

func ExampleWorkQueue() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()

	q, err := recipes.NewWorkQueue(cli, "/example/work", recipes.WithMaxDeliveries(3))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := q.Put(ctx, "resize", recipes.WithPriority(1)); err != nil {
		log.Fatal(err)
	}
	if _, err := q.Put(ctx, "urgent", recipes.WithPriority(0)); err != nil {
		log.Fatal(err)
	}

	// The consumer's claims live on its session: if the process dies, its
	// items are delivered again once the lease expires.
	s, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for range 2 {
		d, err := q.Take(ctx, s)
		if err != nil {
			log.Fatal(err)
		}
		// The effect and the acknowledgement commit together, only while
		// the claim holds: exactly once per item.
		_, err = d.AckTxn(ctx, clientv3.OpPut("/example/done/"+d.Value(), "ok"))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("done:", d.Value(), "delivery", d.Count())
	}
	// Output:
	// done: urgent delivery 1
	// done: resize delivery 1
}

func ExampleDelivery_Nack() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	s, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	q, err := recipes.NewWorkQueue(cli, "/example/retry", recipes.WithMaxDeliveries(2))
	if err != nil {
		log.Fatal(err)
	}
	id, err := q.Put(ctx, "flaky")
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		d, err := q.Take(ctx, s)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("attempt", d.Count(), "failed")
		// Give it back, to be tried again 100 ms later; the second
		// failure moves it to the dead letters.
		if err := d.Nack(ctx, 100*time.Millisecond); err != nil {
			log.Fatal(err)
		}
	}
	dead, err := q.DeadLetters(ctx, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dead letters:", len(dead), dead[0].Value, dead[0].Deliveries)
	if err := q.Purge(ctx, id); err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1 failed
	// attempt 2 failed
	// dead letters: 1 flaky 2
}
