package concurrency_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// Readers share, a writer excludes everyone, and a writer that queued is
// not overtaken by readers that came after it; readers queued behind one
// writer enter together when it leaves.
func TestRWMutexOrder(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	rw := func() *concurrency.RWMutex { return concurrency.NewRWMutex(newSession(t, c), pfx) }
	r1, r2 := rw(), rw()
	if err := r1.RLock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r2.TryRLock(t.Context()); err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	w := rw()
	if err := w.TryLock(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock with readers in = %v, want ErrLocked", err)
	}
	werr := async(t, func() error { return w.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 3)
	// A reader after the queued writer waits for it.
	late1, late2 := rw(), rw()
	if err := late1.TryRLock(t.Context()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryRLock behind a queued writer = %v, want ErrLocked", err)
	}
	l1 := async(t, func() error { return late1.RLock(t.Context()) })
	l2 := async(t, func() error { return late2.RLock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx, 5)

	if err := r1.RUnlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-werr:
		t.Fatalf("the writer got in (%v) while a reader held", err)
	default:
	}
	if err := r2.RUnlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, werr, "writer"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-l1:
		t.Fatalf("a reader got in (%v) while the writer held", err)
	default:
	}
	if err := w.RUnlock(t.Context()); !errors.Is(err, concurrency.ErrLockReleased) {
		t.Fatalf("RUnlock of a held write side = %v, want ErrLockReleased", err)
	}
	if err := w.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i, errc := range []<-chan error{l1, l2} {
		if err := within(t, 10*time.Second, errc, "reader"); err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
	}
	late1.RUnlock(t.Context())
	late2.RUnlock(t.Context())
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

// Under a mix of readers and writers, a writer never overlaps anyone, and
// everyone gets through.
func TestRWMutexExclusion(t *testing.T) {
	pfx := etcdtest.Begin(t)
	var readers, writers, overlaps atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for i := range 6 {
		m := concurrency.NewRWMutex(newSession(t, sharedClient(t)), pfx)
		write := i%3 == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				var err error
				if write {
					if err = m.Lock(ctx); err == nil {
						if writers.Add(1) != 1 || readers.Load() != 0 {
							overlaps.Add(1)
						}
						writers.Add(-1)
						err = m.Unlock(ctx)
					}
				} else if err = m.RLock(ctx); err == nil {
					readers.Add(1)
					if writers.Load() != 0 {
						overlaps.Add(1)
					}
					time.Sleep(time.Millisecond)
					readers.Add(-1)
					err = m.RUnlock(ctx)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d times a writer overlapped another holder", n)
	}
}

func TestRWMutexBadInput(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	if err := concurrency.NewRWMutex(nil, pfx).RLock(t.Context()); !errors.Is(err, concurrency.ErrNilSession) {
		t.Errorf("nil session: %v", err)
	}
	if err := concurrency.NewRWMutex(s, "").Lock(t.Context()); !errors.Is(err, concurrency.ErrInvalidPrefix) {
		t.Errorf("empty name: %v", err)
	}
	m := concurrency.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := concurrency.NewRWMutex(newSession(t, c), pfx).TryLock(t.Context()); !errors.Is(err, concurrency.ErrLockKind) {
		t.Errorf("an RWMutex on a Mutex's name = %v, want ErrLockKind", err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 1 {
		t.Errorf("%d keys, want the Mutex's", n)
	}
	m.Unlock(t.Context())
}

// A reader, which counts only writers, still refuses a name that another
// kind of lock holds.
func TestRWMutexReaderOnMutexName(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	m := concurrency.NewMutex(newSession(t, c), pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(t.Context())
	if err := concurrency.NewRWMutex(newSession(t, c), pfx).TryRLock(t.Context()); !errors.Is(err, concurrency.ErrLockKind) {
		t.Fatalf("TryRLock on a name a Mutex holds = %v, want ErrLockKind", err)
	}
	if err := concurrency.NewRWMutex(newSession(t, c), pfx).RLock(t.Context()); !errors.Is(err, concurrency.ErrLockKind) {
		t.Fatalf("RLock on a name a Mutex holds = %v, want ErrLockKind", err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 1 {
		t.Fatalf("%d keys, want the Mutex's", n)
	}
}
