package lockbench

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestZZKeysOnly(t *testing.T) {
	ctx := context.Background()
	_, cs := startCluster(ctx, t, 1, 1)
	c := cs[0]
	lease, err := c.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1000, 10000} {
		pfx := fmt.Sprintf("/ko%d/", n)
		if err := parallel(n, func(i int) error {
			_, err := c.Put(ctx, fmt.Sprintf("%s%016x", pfx, i), "", clientv3.WithLease(lease.ID))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		r, _ := c.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
		rev := r.Header.Revision
		for _, ko := range []bool{false, true} {
			opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2), clientv3.WithMaxCreateRev(rev - 1)}
			if ko {
				opts = append(opts, clientv3.WithKeysOnly())
			}
			const k = 30
			t0 := time.Now()
			for range k {
				if _, err := c.Get(ctx, pfx, opts...); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("n %d keysOnly %v: %v per read", n, ko, time.Since(t0)/k)
		}
	}
}
