package concurrency_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

func TestFenceCheck(t *testing.T) {
	var f concurrency.Fence
	steps := []struct {
		resource string
		token    int64
		stale    bool
	}{
		{"a", 10, false},
		{"a", 10, false}, // the same hold writes again
		{"a", 12, false},
		{"a", 11, true},
		{"b", 11, false}, // resources are independent
		{"a", 0, true},   // not held
		{"a", -5, true},
		{"a", 13, false},
	}
	for i, st := range steps {
		err := f.Check(st.resource, st.token)
		if got := errors.Is(err, concurrency.ErrStaleToken); got != st.stale || (!st.stale && err != nil) {
			t.Fatalf("step %d: Check(%q, %d) = %v, want stale=%v", i, st.resource, st.token, err, st.stale)
		}
	}
	if f.Highest("a") != 13 || f.Highest("b") != 11 || f.Highest("c") != 0 {
		t.Fatalf("Highest = %d %d %d", f.Highest("a"), f.Highest("b"), f.Highest("c"))
	}
}

func TestFenceConcurrent(t *testing.T) {
	var f concurrency.Fence
	var wg sync.WaitGroup
	for g := int64(0); g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(1); i <= 1000; i++ {
				f.Check("r", i*8+g) // stale ones are rejected, which is fine
			}
		}()
	}
	wg.Wait()
	if h := f.Highest("r"); h < 8000 {
		t.Fatalf("highest = %d, want at least 8000", h)
	}
}

// A holder that lost its lock (here: its key deleted, as by lease expiry
// during a pause) is refused by the Fence once the next holder has written.
func TestFenceStaleHolder(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	var store concurrency.Fence
	old := concurrency.NewMutex(newSession(t, c), pfx)
	if err := old.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	oldToken := old.Token()
	if err := store.Check("file", oldToken); err != nil {
		t.Fatal(err)
	}
	// The old holder "pauses"; its key goes away and a new holder comes in.
	if _, err := c.Delete(t.Context(), old.Key()); err != nil {
		t.Fatal(err)
	}
	next := concurrency.NewMutex(newSession(t, c), pfx)
	if err := next.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if next.Token() <= oldToken {
		t.Fatalf("new token %d not above old %d", next.Token(), oldToken)
	}
	if err := store.Check("file", next.Token()); err != nil {
		t.Fatal(err)
	}
	// The old holder wakes up and writes with its token.
	if err := store.Check("file", oldToken); !errors.Is(err, concurrency.ErrStaleToken) {
		t.Fatalf("stale holder's write = %v, want ErrStaleToken", err)
	}
	old.Unlock(t.Context())
	if err := next.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
