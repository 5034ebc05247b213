package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

func ExampleElection_Campaign() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	// Two sessions, as two processes would have.
	s1, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s1.Close()
	e1 := concurrency.NewElection(s1, "/example/election")

	s2, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s2.Close()
	e2 := concurrency.NewElection(s2, "/example/election")

	ctx := context.Background()
	if err := e1.Campaign(ctx, "e1"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("elected e1")

	// While e1 leads, e2's Campaign waits: here until its deadline.
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = e2.Campaign(tctx, "e2")
	cancel()
	fmt.Println("e2 waits while e1 leads:", errors.Is(err, context.DeadlineExceeded))

	elected := make(chan error, 1)
	go func() { elected <- e2.Campaign(ctx, "e2") }()

	// Resign hands the leadership to the next candidate, if any.
	token := e1.Rev()
	if err := e1.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	if err := <-elected; err != nil {
		log.Fatal(err)
	}
	resp, err := e2.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("elected", string(resp.Kvs[0].Value))
	// Rev is a fencing token: each leader's is larger than the last one's.
	fmt.Println("newer token:", e2.Rev() > token)
	if err := e2.Resign(ctx); err != nil {
		log.Fatal(err)
	}

	// Output:
	// elected e1
	// e2 waits while e1 leads: true
	// elected e2
	// newer token: true
}

func ExampleElection_Observe() {
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
	leader := concurrency.NewElection(s1, "/example/observe")

	// Anyone can follow an election, without being a candidate.
	s2, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s2.Close()
	follower := concurrency.NewElection(s2, "/example/observe")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaders := follower.Observe(ctx)

	if err := leader.Campaign(ctx, "10.0.0.1:8080"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader at", string((<-leaders).Kvs[0].Value))
	if err := leader.Proclaim(ctx, "10.0.0.1:9090"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader at", string((<-leaders).Kvs[0].Value))

	// When the leader resigns and no one else runs, Observe posts nothing;
	// Leader tells that there is no leader.
	if err := leader.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = follower.Leader(ctx)
	fmt.Println("no leader:", errors.Is(err, concurrency.ErrElectionNoLeader))

	// Ending ctx stops Observe, which then closes the channel.
	cancel()
	for range leaders {
	}

	// Output:
	// leader at 10.0.0.1:8080
	// leader at 10.0.0.1:9090
	// no leader: true
}
