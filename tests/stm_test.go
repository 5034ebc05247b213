package concurrency_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// The STM and Isolation names are etcd's own, so values pass between the
// two packages. STMOption is this package's own: etcd exports its option
// type only from v3.7.
var (
	_ etcdconc.Isolation                                                                                        = concurrency.SerializableSnapshot
	_ func(*clientv3.Client, func(etcdconc.STM) error, ...concurrency.STMOption) (*clientv3.TxnResponse, error) = concurrency.NewSTM
)

// Concurrent transfers between two accounts, each in an STM transaction,
// keep the total, and none is lost: a counter that every transfer
// increments ends at the number of transfers. The clients read from
// different members, so serializable reads can be stale and conflicts are
// frequent. ReadCommitted is left out: it never retries for a conflict, so
// concurrent transfers lose updates by design (with etcd's package as with
// this one); TestSTMConflict shows that behaviour deterministically.
func TestSTMTransfer(t *testing.T) {
	levels := []struct {
		name string
		opts []concurrency.STMOption
	}{
		{"SerializableSnapshot", nil}, // NewSTM's default
		{"Serializable", []concurrency.STMOption{concurrency.WithIsolation(concurrency.Serializable)}},
		{"RepeatableReads", []concurrency.STMOption{concurrency.WithIsolation(concurrency.RepeatableReads)}},
	}
	const (
		workers   = 4
		transfers = 10 // per worker
		start     = 100
	)
	for _, lvl := range levels {
		t.Run(lvl.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			a, b, n := pfx+"/a", pfx+"/b", pfx+"/n"
			eps := etcdtest.Endpoints()
			setup := etcdtest.NewClient(t, eps)
			for _, k := range []string{a, b} {
				if _, err := setup.Put(t.Context(), k, strconv.Itoa(start)); err != nil {
					t.Fatal(err)
				}
			}

			var wg sync.WaitGroup
			errc := make(chan error, workers)
			// A commit that fails with a leader change or a request
			// timeout may have been applied: such transfers are counted as unknown and done
			// again, so that each worker makes transfers that succeed.
			var unknown atomic.Int64
			for w := range workers {
				c := etcdtest.NewClient(t, eps[w%len(eps):w%len(eps)+1])
				// A linearizable read brings the worker's member up to the
				// set-up writes, which its serializable reads must see.
				if _, err := c.Get(t.Context(), b); err != nil {
					t.Fatal(err)
				}
				from, to := a, b
				if w%2 == 1 {
					from, to = b, a
				}
				opts := append([]concurrency.STMOption{concurrency.WithAbortContext(t.Context())}, lvl.opts...)
				if w == 0 {
					opts = append(opts, concurrency.WithPrefetch(a, b, n))
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for done := 0; done < transfers; {
						_, err := concurrency.NewSTM(c, func(stm concurrency.STM) error {
							src, err := strconv.Atoi(stm.Get(from))
							if err != nil {
								return fmt.Errorf("%s: %w", from, err)
							}
							dst, err := strconv.Atoi(stm.Get(to))
							if err != nil {
								return fmt.Errorf("%s: %w", to, err)
							}
							count, _ := strconv.Atoi(stm.Get(n)) // "" (0) before the first transfer
							x := rand.IntN(src/2 + 1)
							stm.Put(from, strconv.Itoa(src-x))
							stm.Put(to, strconv.Itoa(dst+x))
							stm.Put(n, strconv.Itoa(count+1))
							return nil
						}, opts...)
						switch {
						case err == nil:
							done++
						case (errors.Is(err, rpctypes.ErrLeaderChanged) || errors.Is(err, rpctypes.ErrTimeout)) && unknown.Load() < transfers:
							// A loaded machine's raft elected a new leader, or
							// did not commit within etcd's request timeout: the
							// commit may yet be applied.
							unknown.Add(1)
						default:
							errc <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatalf("NewSTM: %v", err)
			}

			sum := 0
			for _, k := range []string{a, b} {
				resp, err := setup.Get(t.Context(), k)
				if err != nil {
					t.Fatal(err)
				}
				v, err := strconv.Atoi(string(resp.Kvs[0].Value))
				if err != nil || v < 0 {
					t.Fatalf("%s = %q", k, resp.Kvs[0].Value)
				}
				sum += v
			}
			if sum != 2*start {
				t.Errorf("sum of balances = %d, want %d", sum, 2*start)
			}
			resp, err := setup.Get(t.Context(), n)
			if err != nil {
				t.Fatal(err)
			}
			got := -1
			if len(resp.Kvs) == 1 {
				got, _ = strconv.Atoi(string(resp.Kvs[0].Value))
			}
			if lo, hi := workers*transfers, workers*transfers+int(unknown.Load()); got < lo || got > hi {
				t.Errorf("transfer count = %d, want %d to %d (%d commits of unknown outcome): a transfer was lost or doubled", got, lo, hi, unknown.Load())
			}
		})
	}
}

// A write between an attempt's read and its commit makes every level but
// ReadCommitted run apply again; ReadCommitted commits over it.
func TestSTMConflict(t *testing.T) {
	for _, tc := range []struct {
		iso     concurrency.Isolation
		name    string
		retries bool
	}{
		{concurrency.SerializableSnapshot, "SerializableSnapshot", true},
		{concurrency.Serializable, "Serializable", true},
		{concurrency.RepeatableReads, "RepeatableReads", true},
		{concurrency.ReadCommitted, "ReadCommitted", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := etcdtest.Begin(t) + "/k"
			// One member: its serializable reads see the writes it answered.
			c := etcdtest.NewClient(t, etcdtest.Endpoints()[:1])
			if _, err := c.Put(t.Context(), key, "v"); err != nil {
				t.Fatal(err)
			}
			attempts := 0
			_, err := concurrency.NewSTM(c, func(stm concurrency.STM) error {
				attempts++
				if attempts > 10 {
					return fmt.Errorf("apply ran %d times", attempts)
				}
				v := stm.Get(key)
				if attempts == 1 {
					if _, err := c.Put(t.Context(), key, "other"); err != nil {
						return err
					}
				}
				stm.Put(key, v+"+1")
				return nil
			}, concurrency.WithIsolation(tc.iso), concurrency.WithAbortContext(t.Context()))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Get(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			got := string(resp.Kvs[0].Value)
			if tc.retries {
				// A serializable read of a lagging member may retry more than once.
				if attempts < 2 || got != "other+1" {
					t.Errorf("after a conflicting write: %d attempts, value %q; want a retry and %q", attempts, got, "other+1")
				}
			} else if attempts != 1 || got != "v+1" {
				t.Errorf("ReadCommitted: %d attempts, value %q; want 1 and %q", attempts, got, "v+1")
			}
		})
	}
}
