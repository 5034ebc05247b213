package concurrency

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A goroutine whose ctx ends as it is handed the gate hands it on: the
// next waiter goes in, and the gate is neither lost nor held by two. Its
// ctx ends first, then, before it can take the owner's mutex, it is handed
// the gate.
func TestReviewWaitGateHandedAsCtxEnds(t *testing.T) {
	var mu sync.Mutex
	var g gate
	if in, err := g.enter(&mu, context.Background(), false); !in || err != nil {
		t.Fatalf("enter on an open gate = %v, %v", in, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	quitter := make(chan error, 1)
	go func() {
		_, err := g.enter(&mu, ctx, true)
		quitter <- err
	}()
	waitQueued(t, &mu, &g, 1)
	stayer := make(chan error, 1)
	go func() {
		_, err := g.enter(&mu, context.Background(), true)
		stayer <- err
	}()
	waitQueued(t, &mu, &g, 2)
	mu.Lock()
	cancel()
	g.leave() // to the quitter, whose ctx has ended
	mu.Unlock()
	if err := <-quitter; !errors.Is(err, context.Canceled) {
		t.Fatalf("enter whose ctx ended = %v, want context.Canceled", err)
	}
	select {
	case err := <-stayer:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second waiter was not let in within 10 s: the gate was lost")
	}
	mu.Lock()
	defer mu.Unlock()
	if !g.in || g.queue != nil {
		t.Fatalf("with the second waiter in, the gate is in=%v, queue=%v", g.in, g.queue)
	}
}

// waitQueued polls until n goroutines wait for g.
func waitQueued(t *testing.T, mu *sync.Mutex, g *gate, n int) {
	t.Helper()
	for range 10000 {
		mu.Lock()
		k := 0
		for w := g.queue; w != nil; w = w.next {
			k++
		}
		mu.Unlock()
		if k == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d goroutines never waited for the gate", n)
}
