package recipes_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// silentWatcher is what a client sees of a watch whose connection went
// half-open (bytes accepted, nothing back; clientv3 has no keepalive by
// default): the watch delivers nothing and never ends, until its context
// does. Reads still reach the cluster, as they do when the client has
// another endpoint. A bridge's Blackhole cannot be made to silence only
// the watch: the first chunk each way after it still goes through.
type silentWatcher struct{ clientv3.Watcher }

func (silentWatcher) Watch(ctx context.Context, _ string, _ ...clientv3.OpOption) clientv3.WatchChan {
	wc := make(chan clientv3.WatchResponse)
	go func() {
		<-ctx.Done()
		close(wc)
	}()
	return wc
}

// TestWaitSilentWatch (issue 27): a waiter's watch goes silent, and what
// it waits for happens. The wait's periodic read finds it, and the wait
// returns: a Barrier's release, a new element for a Dequeue, the count of
// a DoubleBarrier completed by another entrant. They used to wait for
// ever.
func TestWaitSilentWatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		// wait waits through c, whose watches are silent; happen makes
		// what it waits for happen, through another client.
		setup func(t *testing.T, pfx string, c *clientv3.Client) (wait func(context.Context) error, happen func() error)
	}{
		{"Barrier", func(t *testing.T, pfx string, c *clientv3.Client) (func(context.Context) error, func() error) {
			b := recipes.NewBarrier(sharedClient(t), pfx)
			if err := b.Hold(); err != nil {
				t.Fatal(err)
			}
			return recipes.NewBarrier(c, pfx).WaitContext, b.Release
		}},
		{"Queue", func(t *testing.T, pfx string, c *clientv3.Client) (func(context.Context) error, func() error) {
			return func(ctx context.Context) error {
					v, err := recipes.NewQueue(c, pfx).DequeueContext(ctx)
					if err == nil && v != "x" {
						t.Errorf("Dequeue = %q, want x", v)
					}
					return err
				}, func() error {
					return recipes.NewQueue(sharedClient(t), pfx).Enqueue("x")
				}
		}},
		{"DoubleBarrier", func(t *testing.T, pfx string, c *clientv3.Client) (func(context.Context) error, func() error) {
			a := recipes.NewDoubleBarrier(newSession(t, c), pfx, 2)
			b := recipes.NewDoubleBarrier(newSession(t, sharedClient(t)), pfx, 2)
			t.Cleanup(func() { // t.Context() has ended by now
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				errc := make(chan error, 1)
				go func() { errc <- a.LeaveContext(ctx) }()
				if err := b.LeaveContext(ctx); err != nil {
					t.Error(err)
				}
				if err := <-errc; err != nil {
					t.Errorf("A's Leave: %v", err)
				}
			})
			return a.EnterContext, func() error {
				etcdtest.WaitKeys(t, c, pfx+"/waiters", 1)
				return b.EnterContext(bounded(t, 10*time.Second))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			c.Watcher = silentWatcher{c.Watcher}
			wait, happen := tc.setup(t, pfx, c)
			errc := async(t, func() error { return wait(bounded(t, 30*time.Second)) })
			notYet(t, errc, "the wait")
			if err := happen(); err != nil {
				t.Fatal(err)
			}
			if err := within(t, 15*time.Second, errc, "the wait with a silent watch"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// silentOnce makes the first watch silent, as silentWatcher, and lets the
// next ones through.
type silentOnce struct {
	clientv3.Watcher
	used atomic.Bool
}

func (w *silentOnce) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	if w.used.CompareAndSwap(false, true) {
		return silentWatcher{}.Watch(ctx, key, opts...)
	}
	return w.Watcher.Watch(ctx, key, opts...)
}

// TestWaitEventsSilentWatch (issue 27): WaitEventsContext's watch goes
// silent, and the event it waits for happens. WaitEvents has no state to
// read: its stream, asked for progress, does not answer, so the watch is
// resumed anew from the revision it waits from, and the event is found.
// It used to wait for ever.
func TestWaitEventsSilentWatch(t *testing.T) {
	pfx := etcdtest.Begin(t)
	pc := sharedClient(t)
	resp, err := pc.Put(t.Context(), pfx+"/k", "v")
	if err != nil {
		t.Fatal(err)
	}
	c := sharedClient(t)
	c.Watcher = &silentOnce{Watcher: c.Watcher}
	var ev *clientv3.Event
	errc := async(t, func() (err error) {
		ev, err = recipes.WaitEventsContext(bounded(t, 40*time.Second), c, pfx+"/k", resp.Header.Revision+1, []mvccpb.Event_EventType{mvccpb.DELETE})
		return err
	})
	notYet(t, errc, "WaitEvents")
	if _, err := pc.Delete(t.Context(), pfx+"/k"); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 30*time.Second, errc, "WaitEvents with a silent watch"); err != nil || ev == nil || ev.Type != mvccpb.DELETE {
		t.Fatalf("WaitEvents = %v, %v, want the delete", ev, err)
	}
}
