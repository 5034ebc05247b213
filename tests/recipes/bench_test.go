package recipes_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	etcdrecipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// queue is what this package's Queue and etcd's recipe Queue share.
type queue interface {
	Enqueue(string) error
	Dequeue() (string, error)
}

// BenchmarkQueue times one element through a queue (ns/op: Enqueue and
// Dequeue, 3 producers and 3 consumers, each on a client of its own, on
// the shared 3-member cluster), for this package and etcd's recipe in the
// same run.
func BenchmarkQueue(b *testing.B) {
	impls := []struct {
		name string
		new  func(b *testing.B, pfx string) queue
	}{
		{"ours", func(b *testing.B, pfx string) queue { return recipes.NewQueue(sharedClient(b), pfx) }},
		{"etcd", func(b *testing.B, pfx string) queue { return etcdrecipe.NewQueue(sharedClient(b), pfx) }},
	}
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			const producers, consumers = 3, 3
			pfx := etcdtest.Begin(b)
			var ps, cs []queue
			for range producers {
				ps = append(ps, im.new(b, pfx))
			}
			for range consumers {
				cs = append(cs, im.new(b, pfx))
			}
			b.ReportAllocs()
			b.ResetTimer()
			var (
				wg       sync.WaitGroup
				enq, deq atomic.Int64
				failed   atomic.Value
				fail     = func(err error) { failed.CompareAndSwap(nil, err) }
			)
			for _, q := range ps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := enq.Add(1); i <= int64(b.N); i = enq.Add(1) {
						if err := q.Enqueue(fmt.Sprint(i)); err != nil {
							fail(err)
							return
						}
					}
				}()
			}
			for _, q := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := deq.Add(1); i <= int64(b.N); i = deq.Add(1) {
						if _, err := q.Dequeue(); err != nil {
							fail(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			if err := failed.Load(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
