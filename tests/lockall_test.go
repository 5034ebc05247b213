package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// Sessions that lock overlapping sets, given in opposite orders, never
// deadlock: LockAll takes them in one global order.
func TestLockAllNoDeadlock(t *testing.T) {
	pfx := etcdtest.Begin(t)
	names := []string{pfx + "/a", pfx + "/b", pfx + "/c"}
	const sessions = 4
	var done atomic.Int64
	errc := make(chan error, sessions)
	for i := range sessions {
		s := newSession(t, sharedClient(t))
		var ms []*concurrency.Mutex
		for j := range names {
			// Every other session lists the names backwards.
			name := names[j]
			if i%2 == 1 {
				name = names[len(names)-1-j]
			}
			ms = append(ms, concurrency.NewMutex(s, name))
		}
		go func() {
			for r := range 5 {
				if err := concurrency.LockAll(t.Context(), ms...); err != nil {
					errc <- fmt.Errorf("session %d, round %d: LockAll: %w", i, r, err)
					return
				}
				if err := concurrency.UnlockAll(t.Context(), ms...); err != nil {
					errc <- fmt.Errorf("session %d, round %d: UnlockAll: %w", i, r, err)
					return
				}
				done.Add(1)
			}
			errc <- nil
		}()
	}
	// A deadlock is a stall: no session gets all three for 15 s.
	if err := awaitWorkers(t, errc, sessions, &done, 15*time.Second); err != nil {
		t.Fatal(err)
	}
}

// All or none: when one lock cannot be had, LockAll releases those it took.
func TestLockAllNone(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	other := concurrency.NewMutex(newSession(t, c), pfx+"/b")
	if err := other.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	s := newSession(t, c)
	a, b := concurrency.NewMutex(s, pfx+"/a"), concurrency.NewMutex(s, pfx+"/b")
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := concurrency.LockAll(ctx, b, a); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockAll = %v, want DeadlineExceeded", err)
	}
	if a.Token() != 0 || b.Token() != 0 {
		t.Fatal("LockAll failed but holds a lock")
	}
	for _, name := range []string{pfx + "/a", pfx + "/b"} {
		if n := len(etcdtest.Keys(t, c, name)); n != map[bool]int{true: 1, false: 0}[name == pfx+"/b"] {
			t.Fatalf("%d keys under %s after the failed LockAll", n, name)
		}
	}
	other.Unlock(t.Context())
	if err := concurrency.LockAll(t.Context(), a, b, a); err != nil {
		t.Fatalf("LockAll with a repeated Mutex: %v", err)
	}
	if err := concurrency.UnlockAll(t.Context(), a, b); err != nil {
		t.Fatal(err)
	}
	if err := concurrency.LockAll(t.Context(), a, nil); !errors.Is(err, concurrency.ErrNilSession) {
		t.Fatalf("LockAll with a nil Mutex = %v, want ErrNilSession", err)
	}
	if err := concurrency.LockAll(t.Context(), a, concurrency.NewMutex(s, "")); !errors.Is(err, concurrency.ErrInvalidPrefix) {
		t.Fatalf("LockAll with an empty name = %v, want ErrInvalidPrefix", err)
	}
	if a.Token() != 0 {
		t.Fatalf("LockAll with bad input locked %s", a.Key())
	}
}
