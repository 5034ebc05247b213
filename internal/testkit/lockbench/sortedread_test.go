package lockbench

import (
	"context"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkSortedRead times the read that places a key in a queue of n
// (by create revision, newest first, a limit, a create-revision bound), as
// this package sends it since issue 42 (keys alone) and before (with
// values), on an embedded v3.7 member: etcd reads every key of the range
// to sort it, from its in-memory index when values are not asked for.
//
//	go test -run '^$' -bench SortedRead ./internal/lockbench/
func BenchmarkSortedRead(b *testing.B) {
	ctx := context.Background()
	_, cs := startCluster(ctx, b, 1, 1)
	c := cs[0]
	for _, n := range []int{1000, 10000} {
		pfx := fmt.Sprintf("/sorted-read/%d/", n)
		if err := parallel(n, func(i int) error {
			_, err := c.Put(ctx, fmt.Sprintf("%s%016x", pfx, i), "")
			return err
		}); err != nil {
			b.Fatal(err)
		}
		r, err := c.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		for _, keysOnly := range []bool{false, true} {
			b.Run(fmt.Sprintf("queue=%d/keysOnly=%v", n, keysOnly), func(b *testing.B) {
				opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
					clientv3.WithLimit(2), clientv3.WithMaxCreateRev(r.Header.Revision - 1)}
				if keysOnly {
					opts = append(opts, clientv3.WithKeysOnly())
				}
				for b.Loop() {
					if _, err := c.Get(ctx, pfx, opts...); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		if _, err := c.Delete(ctx, pfx, clientv3.WithPrefix()); err != nil {
			b.Fatal(err)
		}
	}
}
