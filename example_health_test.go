package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// A session that ends when its process is no longer healthy, although its
// keepalive goroutine would go on renewing: after 2 failed checks in a
// row it revokes its lease, and every hold on it ends at once.
func ExampleWithHealthCheck() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	var stuck atomic.Bool // the service's own view of itself
	check := func(ctx context.Context) error {
		if stuck.Load() {
			return errors.New("work queue not drained for 5 minutes")
		}
		return nil
	}
	s, err := concurrency.NewSession(cli, concurrency.WithHealthCheck(100*time.Millisecond, 2, check))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, "/example/health")
	if err := m.Lock(context.Background()); err != nil {
		log.Fatal(err)
	}

	stuck.Store(true)
	<-m.Ctx().Done()
	fmt.Println("hold ended, unhealthy:", errors.Is(context.Cause(m.Ctx()), concurrency.ErrUnhealthy))
	// Output:
	// hold ended, unhealthy: true
}
