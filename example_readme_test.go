package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// Lock a name, write to etcd only while the lock is held, and carry the
// fencing token to a resource outside etcd. The README shows this file
// (readme_test.go checks that it is the same).
func Example() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints(), // your cluster's, e.g. []string{"localhost:2379"}
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	// A session is a lease that the client keeps alive; its holds end with it.
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	ctx := context.Background()
	m := concurrency.NewMutex(s, "/example/report")
	if err := m.Lock(ctx); err != nil { // waits its turn, first come first served
		log.Fatal(err)
	}
	hold := m.Ctx() // ends as soon as the hold ends or may have ended

	// Commits only while m holds the lock; otherwise ErrLockLost, nothing written.
	_, err = m.Txn(ctx).Then(clientv3.OpPut("/example/report-owner", "host-a")).Commit()
	fmt.Println("written under the lock:", err == nil)

	// Writes outside etcd carry m.Token(); a Fence refuses tokens older than
	// the newest it has accepted, so a holder that paused past its lease
	// cannot overwrite its successor.
	var storage concurrency.Fence // inside the storage service
	fmt.Println("token accepted:", storage.Check("report.csv", m.Token()) == nil)

	if err := m.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	<-hold.Done()
	fmt.Println("hold ended by Unlock:", errors.Is(context.Cause(hold), concurrency.ErrLockReleased))

	// Output:
	// written under the lock: true
	// token accepted: true
	// hold ended by Unlock: true
}
