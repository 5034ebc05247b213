package recipes_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// A put whose answer was lost is swept (deleted) if it turns up late on the
// session's lease; with a value, only the put of that value is, and another
// put of the key on the same lease (a WorkQueue's next claim of the same
// item by the same session) is left alone. Before the claim's nonce, the
// sweep deleted whatever claim of the item the session made next, and the
// item went to a second consumer while the first still worked on it.
func TestSweepLateTakesOnlyItsOwnPut(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pfx := "/test/TestSweepLateTakesOnlyItsOwnPut/" + time.Now().Format("150405.000000000") + "/"
	defer cli.Delete(context.Background(), pfx, clientv3.WithPrefix())
	put := func(key, val string) {
		t.Helper()
		if _, err := cli.Put(context.Background(), key, val, clientv3.WithLease(s.Lease())); err != nil {
			t.Fatal(err)
		}
	}
	count := func(key string) int64 {
		t.Helper()
		resp, err := cli.Get(context.Background(), key, clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}

	// The late put itself, of the awaited value: swept.
	recipes.SweepLate(s, pfx+"late", "lost")
	put(pfx+"late", "lost")
	deadline := time.Now().Add(10 * time.Second)
	for count(pfx+"late") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the late put of the awaited value was not swept")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Another put of the key on the same lease: kept (and the sweep ends
	// on seeing it, since a guarded claim cannot apply after another).
	recipes.SweepLate(s, pfx+"next", "lost")
	put(pfx+"next", "next claim")
	for range 50 {
		if count(pfx+"next") != 1 {
			t.Fatal("another put of the key on the session's lease was swept")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
