package concurrency_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// After a hold ends by loss rather than by release, the next holder with
// lock-delay is granted only the delay later: the previous holder, if it
// still runs without knowing, has that long to stop.
func ExampleWithLockDelay() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	const delay = 2 * time.Second
	ctx := context.Background()

	s1, err := concurrency.NewSession(cli, concurrency.WithLockDelay(delay))
	if err != nil {
		log.Fatal(err)
	}
	defer s1.Close()
	if err := concurrency.NewMutex(s1, "/example/lock-delay").Lock(ctx); err != nil {
		log.Fatal(err)
	}
	// The first holder is lost: here its lease is revoked from outside.
	if _, err := cli.Revoke(ctx, s1.Lease()); err != nil {
		log.Fatal(err)
	}
	lost := time.Now()

	s2, err := concurrency.NewSession(cli, concurrency.WithLockDelay(delay))
	if err != nil {
		log.Fatal(err)
	}
	defer s2.Close()
	m2 := concurrency.NewMutex(s2, "/example/lock-delay")
	if err := m2.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted after the lock-delay:", time.Since(lost) >= delay)
	// Released, not lost: the next holder is granted at once.
	if err := m2.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// granted after the lock-delay: true
}
