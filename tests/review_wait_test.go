package concurrency_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/etcdtest"
)

// The wait's rewrite for heap per waiter (issue 30), reviewed: one probe
// per watch stream, the session's list of its waits' watches, the gate
// that excludes a Mutex's own goroutines.

// A Mutex excludes its own goroutines "as sync.Mutex does". Its channel of
// one token handed the Mutex to the goroutines waiting for it in turn (a
// channel's senders wait in order); the gate that replaced it wakes them
// all at Unlock and lets in whoever comes first, and the goroutine that
// unlocked comes first when it locks again at once: the one waiting may
// wait for ever while another goroutine of the Mutex loops.
func TestReviewWaitGateStarvation(t *testing.T) {
	pfx := etcdtest.Begin(t)
	s := newSession(t, sharedClient(t))
	m := concurrency.NewMutex(s, pfx)
	ctx := t.Context()
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	errc := async(t, func() error {
		if err := m.Lock(ctx); err != nil {
			return err
		}
		close(got)
		return m.Unlock(ctx)
	})
	const rounds = 100
	n := 0
	for ; n < rounds; n++ {
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
		default:
			continue
		}
		break
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, errc, "the second goroutine's Lock"); err != nil {
		t.Fatal(err)
	}
	if n == rounds {
		t.Errorf("a goroutine waiting for a Mutex was let in only after %d Unlocks of another goroutine that locked again at once", rounds)
	}
}

// slowWatches is, for a client, a watch stream that behaves as one behind
// etcd's gRPC proxy (progress requests go unanswered: here they are not
// sent) on a slow link (once delay is set, each message received waits
// that long). It counts the watch streams the client opens and tells when
// a progress request was asked for.
type slowWatches struct {
	streams atomic.Int64
	delay   atomic.Int64 // time.Duration
	asked   chan time.Time
}

func (sw *slowWatches) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions,
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || method != "/etcdserverpb.Watch/Watch" {
				return cs, err
			}
			sw.streams.Add(1)
			return slowWatchStream{cs, sw}, nil
		}))
}

type slowWatchStream struct {
	grpc.ClientStream
	sw *slowWatches
}

func (s slowWatchStream) SendMsg(m any) error {
	if r, ok := m.(*pb.WatchRequest); ok && r.GetProgressRequest() != nil {
		select {
		case s.sw.asked <- time.Now():
		default:
		}
		return nil
	}
	return s.ClientStream.SendMsg(m)
}

func (s slowWatchStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if d := time.Duration(s.sw.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	return err
}

// A stream whose progress requests go unanswered (etcd's gRPC proxy
// drops them) is confirmed alive by the probe's own watch, which clientv3
// creates behind the stream's other creations, one at a time. When
// waiters open their watches just before the probe's, on a slow link, the
// probe's waits behind them for longer than wait, while their creations
// are answered, one by one: the stream is heard from, and must not be
// given up (doc.go: creation is not silence). Given up, every wait on it
// reads again and watches anew on a new stream.
func TestReviewWaitProbeBehindCreations(t *testing.T) {
	pfx := etcdtest.Begin(t)
	sw := &slowWatches{asked: make(chan time.Time, 1)}
	c := sharedClient(t, sw.option)
	other := sharedClient(t)
	holder := concurrency.NewMutex(newSession(t, other), pfx)
	if err := holder.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The first waiter's TTL of 3 s sets the probe's: it asks after 1 to
	// 1.5 s of silence, and confirms with a watch 1 s later. The others,
	// with a TTL of 30 s, give up a creation after 5 s.
	const waiters = 5
	var sessions [waiters]*concurrency.Session
	for i := range sessions {
		sessions[i] = newSession(t, c, concurrency.WithTTL(min(3+27*i, 30)))
	}
	// The waiters' context outlives the test's, for them to take the lock
	// in turn at cleanup.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	var errcs []<-chan error
	lock := func(i int) {
		m := concurrency.NewMutex(sessions[i], pfx)
		errcs = append(errcs, async(t, func() error {
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(context.Background())
		}))
	}
	release := func() {
		sw.delay.Store(0)
		holder.Unlock(context.Background())
		for _, errc := range errcs {
			if err := within(t, 20*time.Second, errc, "a waiter"); err != nil {
				t.Error(err)
			}
		}
	}
	defer release()
	lock(0)
	etcdtest.WaitKeys(t, other, pfx, 2)
	var asked time.Time
	select {
	case asked = <-sw.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("no progress request within 10 s of silence")
	}
	if n := sw.streams.Load(); n != 1 {
		t.Fatalf("%d watch streams before the test, want 1", n)
	}
	// The probe confirms at asked+1s: the waiters' creations go first,
	// and none is answered before it.
	time.Sleep(time.Until(asked.Add(700 * time.Millisecond)))
	sw.delay.Store(int64(500 * time.Millisecond))
	for i := 1; i < waiters; i++ {
		lock(i)
	}
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) && sw.streams.Load() == 1 {
		time.Sleep(50 * time.Millisecond)
	}
	if n := sw.streams.Load(); n != 1 {
		t.Errorf("the client opened %d watch streams: a stream heard from every 500 ms was given up as silent", n)
	}
}
