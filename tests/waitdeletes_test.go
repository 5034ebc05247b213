package concurrency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
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
func TestWaitGateStarvation(t *testing.T) {
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
	// Once hangAfter is set, the next created response received is
	// told on created, and from then on nothing is received until
	// release is closed: the stream goes silent.
	hangAfter, hung atomic.Bool
	created         chan time.Time
	release         chan struct{}
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
	if s.sw.hung.Load() {
		<-s.sw.release
	}
	if r, ok := m.(*pb.WatchResponse); ok && r.Created && s.sw.hangAfter.Load() && !s.sw.hung.Swap(true) {
		s.sw.created <- time.Now()
	}
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
func TestWaitProbeBehindCreations(t *testing.T) {
	pfx := etcdtest.Begin(t)
	sw := &slowWatches{asked: make(chan time.Time, 1), created: make(chan time.Time, 1), release: make(chan struct{})}
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

// The probe serves the most demanding watch of its stream: one opened
// with a shorter liveness than the stream's others (a session of a
// shorter TTL on the same client) has its stream given up within 1.5
// idle + 2 wait of its own, from the last word on the stream, even if it
// is created while the probe waits, with the others' longer wait, for
// the answer to a progress request (here unanswered, as behind etcd's
// gRPC proxy). Here a waiter of TTL 30 s (idle 10 s, wait 5 s) has the
// stream asked for progress; a waiter of TTL 3 s (idle 1 s, wait 1 s) is
// created just after, and the stream goes silent at once: it must be
// given up within 3.5 s, not when the 5 s of the first waiter's wait are
// over.
func TestWaitShorterLivenessJoinsAsked(t *testing.T) {
	pfx := etcdtest.Begin(t)
	sw := &slowWatches{asked: make(chan time.Time, 1), created: make(chan time.Time, 1), release: make(chan struct{})}
	c := sharedClient(t, sw.option)
	other := sharedClient(t)
	hs := newSession(t, other)
	var holders []*concurrency.Mutex
	for _, name := range []string{pfx + "/long", pfx + "/short"} {
		m := concurrency.NewMutex(hs, name)
		if err := m.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		holders = append(holders, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	var errcs []<-chan error
	lock := func(ttl int, name string) {
		m := concurrency.NewMutex(newSession(t, c, concurrency.WithTTL(ttl)), name)
		errcs = append(errcs, async(t, func() error {
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(context.Background())
		}))
	}
	defer func() {
		close(sw.release)
		for _, m := range holders {
			m.Unlock(context.Background())
		}
		for _, errc := range errcs {
			if err := within(t, 20*time.Second, errc, "a waiter"); err != nil {
				t.Error(err)
			}
		}
	}()
	lock(30, pfx+"/long")
	etcdtest.WaitKeys(t, other, pfx+"/long", 2)
	select {
	case <-sw.asked:
	case <-time.After(20 * time.Second):
		t.Fatal("no progress request within 20 s of silence")
	}
	sw.hangAfter.Store(true)
	lock(3, pfx+"/short")
	var last time.Time
	select {
	case last = <-sw.created:
	case <-time.After(5 * time.Second):
		t.Fatal("the second waiter's watch was not created within 5 s")
	}
	const bound = 3500*time.Millisecond + time.Second // 1.5 idle + 2 wait, and slack
	for time.Since(last) < 10*time.Second && sw.streams.Load() == 1 {
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(last)
	t.Logf("the silent stream was given up %v after its last word", took)
	if n := sw.streams.Load(); n == 1 || took > bound {
		t.Errorf("the silent stream was given up %v after its last word (%d streams opened), want within %v (1.5 idle + 2 wait of the waiter of TTL 3 s, and slack)", took, n, bound)
	}
}

// The gate's hand-over under cancellation: goroutines of one Mutex wait
// for it while another holds; one of them gives up (its ctx ends) as the
// holder unlocks, and may be handed the gate as it gives up. Each Lock
// returns, one goroutine at a time holds, and the others are let in.
func TestWaitGateCancelHandsOn(t *testing.T) {
	pfx := etcdtest.Begin(t)
	m := concurrency.NewMutex(newSession(t, sharedClient(t)), pfx)
	ctx := t.Context()
	var inside atomic.Int32
	lock := func(ctx context.Context) error {
		if err := m.Lock(ctx); err != nil {
			return err
		}
		if n := inside.Add(1); n != 1 {
			t.Errorf("%d goroutines of one Mutex hold it", n)
		}
		inside.Add(-1)
		return m.Unlock(context.Background())
	}
	for range 20 {
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		gctx, giveUp := context.WithCancel(ctx)
		quitter := async(t, func() error { return lock(gctx) })
		stayer := async(t, func() error { return lock(ctx) })
		giveUp()
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := within(t, 10*time.Second, quitter, "the Lock whose ctx ended"); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock whose ctx ended = %v, want nil or context.Canceled", err)
		}
		if err := within(t, 10*time.Second, stayer, "the Lock that waits on"); err != nil {
			t.Fatal(err)
		}
	}
}
