package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// A holder that lets go when asked: its session opts in with WithYield,
// and anyone with a client may ask with RequestYield.
func ExampleRequestYield() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	s, err := concurrency.NewSession(cli, concurrency.WithYield())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, "/example/yield")

	ctx := context.Background()
	err = m.Do(ctx, func(hold context.Context) error {
		// Another process (here the same one, on a context of its own,
		// not the hold's) asks the holder to let go.
		asked, err := concurrency.RequestYield(ctx, cli, "/example/yield")
		if err != nil {
			return err
		}
		fmt.Println("holders asked:", len(asked))
		<-hold.Done() // the work stops when the hold ends
		return nil
	})
	// Do released the lock; its error says why the hold ended.
	fmt.Println("yielded:", errors.Is(err, concurrency.ErrYieldRequested))
	// Output:
	// holders asked: 1
	// yielded: true
}
