package concurrency_test

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

func ExampleShards() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	// work runs once per shard a member owns: ctx ends when the shard is
	// handed over or lost (context.Cause says which) or the member leaves.
	work := func(ctx context.Context, sh concurrency.Shard) error {
		// Writes through sh.Txn apply only while this member owns the
		// shard; sh.Token() fences anything outside etcd.
		_, err := sh.Txn(ctx).Then(clientv3.OpPut("/example/shards-owner/"+strconv.Itoa(sh.ID()), strconv.FormatInt(sh.Token(), 10))).Commit()
		if err != nil {
			return err
		}
		<-ctx.Done()
		// context.Cause(ctx) matches ErrYieldRequested when the shard was
		// handed to a member that joined, ErrLockLost or
		// ErrSessionExpired when it was lost, and is the member's own
		// ctx's cause when it leaves.
		return ctx.Err()
	}

	// Two members of a group of 8 shards, as two replicas would run them.
	join := func(ctx context.Context, st *concurrency.ShardStatus) <-chan error {
		done := make(chan error, 1)
		go func() {
			done <- concurrency.Shards(ctx, cli, "/example/shards", 8, work,
				concurrency.WithShardSession(concurrency.WithTTL(10)), concurrency.WithShardStatus(st))
		}()
		return done
	}
	var a, b concurrency.ShardStatus
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	doneA := join(ctxA, &a)
	waitOwned(&a, 8)
	fmt.Println("a alone owns", len(a.Owned()))

	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	doneB := join(ctxB, &b)
	waitOwned(&a, 4)
	waitOwned(&b, 4)
	fmt.Println("after b joined: a owns", len(a.Owned()), "and b owns", len(b.Owned()))

	cancelB() // b leaves: its shards go back to a, one commit each
	fmt.Println("b:", <-doneB)
	waitOwned(&a, 8)
	fmt.Println("after b left: a owns", len(a.Owned()))

	cancelA()
	fmt.Println("a:", <-doneA)
	cli.Delete(context.Background(), "/example/shards-owner/", clientv3.WithPrefix())

	// Output:
	// a alone owns 8
	// after b joined: a owns 4 and b owns 4
	// b: context canceled
	// after b left: a owns 8
	// a: context canceled
}

// waitOwned waits until st owns k shards, for 20 s at most.
func waitOwned(st *concurrency.ShardStatus, k int) {
	for deadline := time.Now().Add(20 * time.Second); len(st.Owned()) != k && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}
