package concurrency_test

import (
	"context"
	"fmt"
	"log"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

func ExampleLead() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	// Cancel ctx to stop leading: Lead then cancels fn's context, waits for
	// fn, resigns at once and returns ctx's error.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var st concurrency.LeaderStatus      // for a health endpoint: st.Leading()
	var reports []concurrency.LeaderInfo // appended to by Lead's watcher only
	elected := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- concurrency.Lead(ctx, cli, "/example/lead", "10.0.0.1:8080",
			func(ctx context.Context, e *concurrency.Election) error {
				// Runs as the leader. ctx ends when the leadership ends or
				// may have ended; e.Txn writes only while it lasts, and
				// e.Rev() is the fencing token.
				_, err := e.Txn(ctx).Then(clientv3.OpPut("/example/lead-owner", "10.0.0.1:8080")).Commit()
				if err != nil {
					return err
				}
				close(elected)
				<-ctx.Done() // serve until told to stop
				return ctx.Err()
			},
			concurrency.WithLeadSession(concurrency.WithTTL(10)),
			concurrency.WithStatus(&st),
			concurrency.WithLeaderChanges(func(li concurrency.LeaderInfo) { reports = append(reports, li) }))
	}()

	<-elected
	leading, _ := st.Leading()
	fmt.Println("leading:", leading)

	cancel()
	fmt.Println("Lead:", <-done)
	leading, _ = st.Leading()
	fmt.Println("leading:", leading)

	// Lead has returned, so its watcher has made its last report: after
	// the resignation, there is no leader.
	fmt.Printf("last report: %+v\n", reports[len(reports)-1])
	cli.Delete(context.Background(), "/example/lead-owner")

	// Output:
	// leading: true
	// Lead: context canceled
	// leading: false
	// last report: {Key: Value: Rev:0}
}
