package concurrency_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	"github.com/seed-a9d410c6/concurrency/recipes"
)

// Issue 50: a closed client ends everything built on it at once. etcd's
// package ends its sessions within a millisecond of cli.Close(), since it
// renews on the client's context; ours ended on their own context only,
// up to a TTL later.

// closedWithin is how soon after cli.Close() everything built on the
// client must have ended.
const closedWithin = time.Second

// endsWithin fails the test unless done is closed within d of since.
func endsWithin(t *testing.T, done <-chan struct{}, since time.Time, d time.Duration, what string) {
	t.Helper()
	select {
	case <-done:
		if took := time.Since(since); took > d {
			t.Errorf("%s ended %v after Close, more than %v", what, took, d)
		}
	case <-time.After(d + 10*time.Second): // a generous bound, to report how late
		t.Fatalf("%s had not ended %v after Close", what, time.Since(since))
	}
}

// isClosed fails the test unless err matches ErrClientClosed.
func isClosed(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, concurrency.ErrClientClosed) {
		t.Errorf("%s: %v, want an error matching ErrClientClosed", what, err)
	}
}

// Sessions (50 WithContext, 10 without), a hold and a waiting Lock,
// WatchLeader, WatchShards and a recipe's wait (a barrier) on one client:
// all end within a second of its Close, with errors that say so.
func TestClosedClientEndsSessions(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := etcdtest.NewClient(t, etcdtest.Endpoints())
	var sessions []*concurrency.Session
	for i := range 60 {
		opts := []concurrency.SessionOption{concurrency.WithTTL(10)}
		if i < 50 {
			opts = append(opts, concurrency.WithContext(t.Context()))
		}
		sessions = append(sessions, newSession(t, c, opts...))
	}
	holder := concurrency.NewMutex(sessions[0], pfx+"/lock")
	if err := holder.Lock(t.Context()); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	waiter := concurrency.NewMutex(sessions[1], pfx+"/lock")
	// Each call notes when it returned: the test reads them one after
	// another, after Close has returned, which can take a while itself.
	var returned sync.Map // what -> time.Time
	timed := func(what string, f func() error) <-chan error {
		return async(t, func() error {
			err := f()
			returned.Store(what, time.Now())
			return err
		})
	}
	lockErr := timed("waiting Lock", func() error { return waiter.Lock(t.Context()) })
	etcdtest.WaitKeys(t, c, pfx+"/lock", 2)

	watchLeader := timed("WatchLeader", func() error {
		return concurrency.WatchLeader(t.Context(), c, pfx+"/election", func(concurrency.LeaderInfo) {})
	})
	watchShards := timed("WatchShards", func() error {
		return concurrency.WatchShards(t.Context(), c, pfx+"/shards", 4, func(*concurrency.ShardGroup) {})
	})
	// A recipe's wait: a barrier held by another client.
	other := sharedClient(t)
	if err := recipes.NewBarrier(other, pfx+"/barrier").HoldContext(t.Context()); err != nil {
		t.Fatalf("barrier Hold: %v", err)
	}
	barrierWait := timed("Barrier.WaitContext", func() error { return recipes.NewBarrier(c, pfx+"/barrier").WaitContext(t.Context()) })
	// A WorkQueue's Take on an empty queue, waiting in its line.
	wq, err := recipes.NewWorkQueue(c, pfx+"/work")
	if err != nil {
		t.Fatal(err)
	}
	take := timed("WorkQueue.Take", func() error { _, err := wq.Take(t.Context(), sessions[2]); return err })
	etcdtest.WaitKeys(t, c, pfx+"/work/wait", 1)

	closed := time.Now()
	c.Close()
	for i, s := range sessions {
		endsWithin(t, s.Done(), closed, closedWithin, "session")
		if cause := context.Cause(s.Ctx()); !errors.Is(cause, concurrency.ErrSessionExpired) || !errors.Is(cause, concurrency.ErrClientClosed) {
			t.Errorf("session %d: cause %v, want ErrSessionExpired and ErrClientClosed", i, cause)
		}
	}
	endsWithin(t, holder.Ctx().Done(), closed, closedWithin, "the hold")
	for what, errc := range map[string]<-chan error{"waiting Lock": lockErr, "WatchLeader": watchLeader, "WatchShards": watchShards, "Barrier.WaitContext": barrierWait, "WorkQueue.Take": take} {
		select {
		case err := <-errc:
			at, _ := returned.Load(what)
			if took := at.(time.Time).Sub(closed); took > closedWithin {
				t.Errorf("%s returned %v after Close, more than %v", what, took, closedWithin)
			}
			if what == "waiting Lock" {
				if !errors.Is(err, concurrency.ErrSessionExpired) {
					t.Errorf("%s: %v, want an error matching ErrSessionExpired", what, err)
				}
				continue
			}
			isClosed(t, err, what)
		case <-time.After(closedWithin + 10*time.Second):
			t.Fatalf("%s had not returned %v after Close", what, time.Since(closed))
		}
	}
	if err := recipes.NewBarrier(other, pfx+"/barrier").ReleaseContext(t.Context()); err != nil {
		t.Errorf("barrier Release: %v", err)
	}
	for _, s := range sessions {
		start := time.Now()
		isClosed(t, s.Close(), "Session.Close")
		if took := time.Since(start); took > closedWithin {
			t.Errorf("Session.Close on a closed client took %v", took)
		}
		// A closed client revokes nothing: revoke on another, to leave
		// nothing behind.
		if _, err := other.Revoke(t.Context(), s.Lease()); err != nil {
			t.Errorf("revoke: %v", err)
		}
	}
}

// Lead at TTL 30 whose client is closed while fn runs: fn's context ends
// and Lead returns within a second (it kept fn running as the leader for
// 28 s, and returned after 31 s); so does Shards.
func TestClosedClientEndsLead(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := etcdtest.NewClient(t, etcdtest.Endpoints())
	started := make(chan *term, 1)
	_, leadErr := goLead(t, c, pfx+"/election", "a", blockUntilDone("a", started), concurrency.WithLeadTTL(30))
	tm := nextTerm(t, started, 10*time.Second, "the first term")

	owning := make(chan context.Context, 4)
	shardsErr := async(t, func() error {
		return concurrency.Shards(t.Context(), c, pfx+"/shards", 1, func(ctx context.Context, _ concurrency.Shard) error {
			owning <- ctx
			<-ctx.Done()
			return ctx.Err()
		}, concurrency.WithShardTTL(30))
	})
	var shardCtx context.Context
	select {
	case shardCtx = <-owning:
	case <-time.After(20 * time.Second):
		t.Fatal("Shards owned no shard within 20 s")
	}

	closed := time.Now()
	c.Close()
	endsWithin(t, tm.ctx.Done(), closed, closedWithin, "fn's context")
	endsWithin(t, shardCtx.Done(), closed, closedWithin, "the shard's context")
	for what, errc := range map[string]<-chan error{"Lead": leadErr, "Shards": shardsErr} {
		select {
		case err := <-errc:
			if took := time.Since(closed); took > closedWithin {
				t.Errorf("%s returned %v after Close, more than %v", what, took, closedWithin)
			}
			isClosed(t, err, what)
		case <-time.After(closedWithin + 40*time.Second):
			t.Fatalf("%s had not returned %v after Close", what, time.Since(closed))
		}
	}
	// The keys stay until their leases expire: a closed client revokes
	// nothing. Delete them on another client, to leave nothing behind.
	other := sharedClient(t)
	for _, p := range []string{pfx + "/election", pfx + "/shards"} {
		if _, err := other.Delete(t.Context(), p+"/", clientv3.WithPrefix()); err != nil {
			t.Fatalf("delete %s: %v", p, err)
		}
	}
}
