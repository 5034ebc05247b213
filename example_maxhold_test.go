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

// A hold bounded in time: its key is on a lease of its own that nobody
// renews, so etcd removes it after the max hold even if the holder is
// still running. The hold's Ctx ends first, with ErrMaxHold.
func ExampleWithMaxHold() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	s, err := concurrency.NewSession(cli, concurrency.WithMaxHold(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	m := concurrency.NewMutex(s, "/example/max-hold")
	ctx := context.Background()
	if err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	resp, err := cli.Get(ctx, m.Key())
	if err != nil {
		log.Fatal(err)
	}
	kv := resp.Kvs[0]
	fmt.Println("token is the key's create revision:", m.Token() == kv.CreateRevision)
	fmt.Println("key on the session's lease:", clientv3.LeaseID(kv.Lease) == s.Lease())

	<-m.Ctx().Done() // the work would watch this
	fmt.Println("hold ended by the max hold:", errors.Is(context.Cause(m.Ctx()), concurrency.ErrMaxHold))
	if err := m.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// token is the key's create revision: true
	// key on the session's lease: false
	// hold ended by the max hold: true
}
