package concurrency

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The gate lets one goroutine in at a time, and a goroutine whose ctx ends
// while it waits, or as it is let in, neither loses the gate nor leaves it
// held: after many such ends, the gate is open.
func TestWaitGateHandedAsCtxEnds(t *testing.T) {
	var g gate
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.N(50))*time.Microsecond)
				in, err := g.enter(ctx, true)
				cancel()
				if in != (err == nil) {
					t.Errorf("enter = %v, %v", in, err)
					return
				}
				if !in {
					continue
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				inside.Add(-1)
				g.leave()
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Fatalf("at most %d goroutines were in at once, want 1", m)
	}
	if in, err := g.enter(context.Background(), false); !in || err != nil {
		t.Fatalf("enter after every goroutine left = %v, %v: the gate is held", in, err)
	}
	if in, _ := g.enter(context.Background(), false); in {
		t.Fatal("a second enter without wait got in")
	}
	g.leave()
}
