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

func ExampleMutex_Lock() {
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
	m1 := concurrency.NewMutex(s1, "/example/lock")

	s2, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s2.Close()
	m2 := concurrency.NewMutex(s2, "/example/lock")

	ctx := context.Background()
	if err := m1.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("acquired lock for s1")

	locked := make(chan struct{})
	go func() {
		defer close(locked)
		if err := m2.Lock(ctx); err != nil {
			log.Fatal(err)
		}
	}()

	if err := m1.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released lock for s1")

	<-locked
	fmt.Println("acquired lock for s2")
	if err := m2.Unlock(ctx); err != nil {
		log.Fatal(err)
	}

	// Output:
	// acquired lock for s1
	// released lock for s1
	// acquired lock for s2
}

func ExampleMutex_TryLock() {
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
	m1 := concurrency.NewMutex(s1, "/example/trylock")
	m2 := concurrency.NewMutex(s2, "/example/trylock")

	ctx := context.Background()
	if err := m1.TryLock(ctx); err != nil {
		log.Fatal(err)
	}
	if err := m2.TryLock(ctx); errors.Is(err, concurrency.ErrLocked) {
		fmt.Println("s2 found the lock taken")
	}
	if err := m1.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	if err := m2.TryLock(ctx); err == nil {
		fmt.Println("s2 took the lock")
	}
	if err := m2.Unlock(ctx); err != nil {
		log.Fatal(err)
	}

	// Output:
	// s2 found the lock taken
	// s2 took the lock
}

// A storage service that receives writes from lock holders keeps a Fence:
// every write carries the writer's fencing token, and a write from a holder
// that has been superseded (it paused past its lease while another process
// took the lock) is refused.
func Example_fencing() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	var storage concurrency.Fence // inside the storage service
	write := func(token int64, data string) error {
		if err := storage.Check("report.csv", token); err != nil {
			return err
		}
		// ... write data ...
		return nil
	}

	ctx := context.Background()
	s1, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s1.Close()
	old := concurrency.NewMutex(s1, "/example/fencing")
	if err := old.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	oldToken := old.Token()
	fmt.Println("first holder writes:", write(oldToken, "a"))

	// The first holder stalls and loses its lease; here we end its session.
	s1.Orphan()
	if _, err := cli.Revoke(ctx, s1.Lease()); err != nil {
		log.Fatal(err)
	}

	s2, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s2.Close()
	next := concurrency.NewMutex(s2, "/example/fencing")
	if err := next.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("second holder writes:", write(next.Token(), "b"))

	// The first holder wakes up, still believing it holds the lock.
	err = write(oldToken, "stale")
	fmt.Println("first holder's late write refused:", errors.Is(err, concurrency.ErrStaleToken))
	if err := next.Unlock(ctx); err != nil {
		log.Fatal(err)
	}

	// Output:
	// first holder writes: <nil>
	// second holder writes: <nil>
	// first holder's late write refused: true
}

// Writes to etcd itself can be guarded by the hold: the transaction commits
// only if the lock key is still the one this Mutex acquired.
func ExampleMutex_Txn() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	ctx := context.Background()
	m := concurrency.NewMutex(s, "/example/txn")
	if err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := m.Txn(ctx).Then(clientv3.OpPut("/example/txn-counter", "1")).Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("written while held")

	// Someone deletes the lock key (an operator, or lease expiry).
	if _, err := cli.Delete(ctx, m.Key()); err != nil {
		log.Fatal(err)
	}
	_, err = m.Txn(ctx).Then(clientv3.OpPut("/example/txn-counter", "2")).Commit()
	fmt.Println("lock lost:", errors.Is(err, concurrency.ErrLockLost))

	resp, err := cli.Get(ctx, "/example/txn-counter")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("counter:", string(resp.Kvs[0].Value))
	m.Unlock(ctx)
	cli.Delete(ctx, "/example/txn-counter")

	// Output:
	// written while held
	// lock lost: true
	// counter: 1
}

// Do runs a function under the lock, with a context that ends if the lock
// is lost, and always unlocks.
func ExampleMutex_Do() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	m := concurrency.NewMutex(s, "/example/do")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = m.Do(ctx, func(ctx context.Context) error {
		// Long work checks ctx, or passes it to every call it makes.
		fmt.Println("working with token > 0:", m.Token() > 0)
		return ctx.Err()
	})
	fmt.Println("done:", err)

	// Output:
	// working with token > 0: true
	// done: <nil>
}
