package request

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// These tests drive Ask's attempts with an op that stands for one attempt
// (it answers, or waits for its context), to check how Ask schedules and
// ends them: what etcd does with the requests is the test module's
// (tests/halfopen_test.go, tests/slow_test.go). The client only gives Ask
// its context: it dials a loopback port nobody listens on, and is never
// sent a request.

// idleClient is a client that is never sent a request, closed with the
// test.
func idleClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// attempts is an op whose attempts block until their context ends,
// except those that answer says to answer at once; it counts the
// attempts that ran and those still running.
type attempts struct {
	answer  func(n int) bool // whether the n-th attempt (from 1) answers at once
	started atomic.Int32
	running atomic.Int32
	mu      sync.Mutex
	ended   []error // the context errors of the attempts that waited, as they ended
}

func (a *attempts) op(ctx context.Context) (int, error) {
	n := int(a.started.Add(1))
	a.running.Add(1)
	defer a.running.Add(-1)
	if a.answer(n) {
		return n, nil
	}
	<-ctx.Done()
	a.mu.Lock()
	a.ended = append(a.ended, ctx.Err())
	a.mu.Unlock()
	return 0, ctx.Err()
}

func spec(t *testing.T, c *clientv3.Client) Spec {
	return Spec{Client: c, Answers: &Answers{}, Wait: 100 * time.Millisecond, Class: Write}
}

// An attempt answered in time is the only one sent.
func TestAskAnsweredAtOnce(t *testing.T) {
	a := &attempts{answer: func(int) bool { return true }}
	sp := spec(t, idleClient(t))
	for range 100 {
		v, sent, err := Ask(context.Background(), sp, a.op)
		if err != nil || v != int(a.started.Load()) || sent != 1 {
			t.Fatalf("Ask = %d, %d, %v; want the attempt's answer, 1 sent", v, sent, err)
		}
	}
	if got := a.started.Load(); got != 100 {
		t.Fatalf("%d attempts for 100 requests", got)
	}
}

// A first attempt left unanswered (a silent connection) gets a second one
// beside it, whose answer is taken; the first is cancelled and has ended
// when Ask returns.
func TestAskHedgesAnUnansweredAttempt(t *testing.T) {
	a := &attempts{answer: func(n int) bool { return n == 2 }}
	start := time.Now()
	v, sent, err := Ask(context.Background(), spec(t, idleClient(t)), a.op)
	if err != nil || v != 2 || sent != 2 {
		t.Fatalf("Ask = %d, %d, %v; want the second attempt's answer, 2 sent", v, sent, err)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("the second attempt was sent after %v, before the hedge (d/2 at least)", took)
	}
	if r := a.running.Load(); r != 0 {
		t.Errorf("%d attempts still running after Ask returned", r)
	}
	if len(a.ended) != 1 || !errors.Is(a.ended[0], context.Canceled) {
		t.Errorf("the first attempt ended with %v, want cancelled", a.ended)
	}
}

// A first attempt that answers after the second was sent is taken, and
// the second cancelled.
func TestAskTakesTheFirstAttemptLate(t *testing.T) {
	release := make(chan struct{})
	var second atomic.Bool
	op := func(ctx context.Context) (int, error) {
		if second.CompareAndSwap(false, true) {
			<-release
			return 1, nil
		}
		close(release) // the second attempt lets the first answer
		<-ctx.Done()
		return 0, ctx.Err()
	}
	v, sent, err := Ask(context.Background(), spec(t, idleClient(t)), op)
	if err != nil || v != 1 || sent != 2 {
		t.Fatalf("Ask = %d, %d, %v; want the first attempt's answer, 2 sent", v, sent, err)
	}
}

// A ctx that ends while attempts wait ends Ask with ctx's error, before
// and after the second attempt is sent, with every attempt ended.
func TestAskCtxEndsMidRequest(t *testing.T) {
	for _, after := range []time.Duration{10 * time.Millisecond, 250 * time.Millisecond} {
		a := &attempts{answer: func(int) bool { return false }}
		ctx, cancel := context.WithTimeout(context.Background(), after)
		_, _, err := Ask(ctx, spec(t, idleClient(t)), a.op)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("after %v: Ask returned %v, want the deadline", after, err)
		}
		if r := a.running.Load(); r != 0 {
			t.Errorf("after %v: %d attempts still running after Ask returned", after, r)
		}
		if after > 200*time.Millisecond && a.started.Load() < 2 {
			t.Errorf("after %v: %d attempts sent, want a second one", after, a.started.Load())
		}
	}
}

// A client closed while attempts wait ends Ask at once with
// ErrClientClosed, before and after the second attempt is sent.
func TestAskClientClosedMidRequest(t *testing.T) {
	for _, after := range []time.Duration{10 * time.Millisecond, 250 * time.Millisecond} {
		c := idleClient(t)
		a := &attempts{answer: func(int) bool { return false }}
		time.AfterFunc(after, func() { c.Close() })
		_, _, err := Ask(context.Background(), spec(t, c), a.op)
		if !errors.Is(err, ErrClientClosed) {
			t.Errorf("closed after %v: Ask returned %v, want ErrClientClosed", after, err)
		}
		if r := a.running.Load(); r != 0 {
			t.Errorf("closed after %v: %d attempts still running after Ask returned", after, r)
		}
	}
	// A closed client's request is not sent.
	c := idleClient(t)
	c.Close()
	a := &attempts{answer: func(int) bool { return true }}
	if _, sent, err := Ask(context.Background(), spec(t, c), a.op); !errors.Is(err, ErrClientClosed) || sent != 0 {
		t.Errorf("on a closed client Ask = %d sent, %v; want none, ErrClientClosed", sent, err)
	}
}

// A transient failure of one attempt while another waits leaves the
// answer to that one, or to the next sent beside it.
func TestAskTransientFailureLeavesTheOther(t *testing.T) {
	var n atomic.Int32
	op := func(ctx context.Context) (int, error) {
		switch i := n.Add(1); i {
		case 1:
			<-ctx.Done()
			return 0, ctx.Err()
		case 2:
			return 0, ErrNoAnswer // transient
		default:
			return int(i), nil
		}
	}
	v, sent, err := Ask(context.Background(), spec(t, idleClient(t)), op)
	if err != nil || v != 3 || sent != 3 {
		t.Fatalf("Ask = %d, %d, %v; want the third attempt's answer, 3 sent", v, sent, err)
	}
}

// A first answer that comes about when the hedge is due (either may win
// the race) is the answer, once: each request returns one attempt's
// answer, with every attempt ended, and no goroutine of the request (the
// hedge's, a second attempt's) is left once they have all returned.
func TestAskAnswerRacesTheHedge(t *testing.T) {
	sp := Spec{Client: idleClient(t), Answers: &Answers{}, Wait: 2 * time.Millisecond, Class: Write}
	before := runtime.NumGoroutine()
	var running atomic.Int32
	hedged := 0
	for i := range 300 {
		var n atomic.Int32
		op := func(ctx context.Context) (int, error) {
			running.Add(1)
			defer running.Add(-1)
			a := int(n.Add(1))
			if a == 1 { // answers about when the hedge is due (1 to 4 ms)
				select {
				case <-time.After(time.Duration(i%9) * 500 * time.Microsecond):
					return a, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
			return a, nil
		}
		v, sent, err := Ask(context.Background(), sp, op)
		if err != nil || v < 1 || v > sent || sent < 1 || sent > 2 || int(n.Load()) != sent {
			t.Fatalf("request %d: Ask = %d, %d sent, %v (%d attempts ran)", i, v, sent, err, n.Load())
		}
		hedged += sent - 1
		if r := running.Load(); r != 0 {
			t.Fatalf("request %d: %d attempts still running after Ask returned", i, r)
		}
	}
	t.Logf("%d of 300 requests hedged", hedged) // about 60 on an idle machine: both sides win the race
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left after the requests, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}

// A request on a ctx of its own (Spec.Own) sends its first attempt on
// that ctx, and leaves it to its owner when it is answered in time.
func TestAskOwnedCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sp := spec(t, idleClient(t))
	sp.Own = cancel
	var got context.Context
	v, sent, err := Ask(ctx, sp, func(actx context.Context) (int, error) {
		got = actx
		return 1, nil
	})
	if err != nil || v != 1 || sent != 1 {
		t.Fatalf("Ask = %d, %d, %v; want the attempt's answer, 1 sent", v, sent, err)
	}
	if got != ctx || ctx.Err() != nil {
		t.Errorf("the attempt was sent on %v, and ctx ended with %v; want ctx itself, not ended", got, ctx.Err())
	}
}

// On a ctx of the request's own, a first attempt given up (after
// giveUpAfter liveness waits beside another) is not cancelled, since the
// later attempts are made from its ctx: it ends when the request does,
// with the owner's cancellation.
func TestAskOwnedFirstAttemptGivenUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sp := spec(t, idleClient(t))
	sp.Own = cancel
	a := &attempts{answer: func(n int) bool { return n == 3 }}
	var alive bool // ctx lived when the third attempt was sent
	op := func(actx context.Context) (int, error) {
		if a.started.Load() == 2 {
			alive = ctx.Err() == nil
		}
		return a.op(actx)
	}
	v, sent, err := Ask(ctx, sp, op)
	if err != nil || v != 3 || sent != 3 {
		t.Fatalf("Ask = %d, %d, %v; want the third attempt's answer, 3 sent", v, sent, err)
	}
	if !alive {
		t.Errorf("ctx was cancelled when the first attempt was given up")
	}
	if r := a.running.Load(); r != 0 || ctx.Err() == nil {
		t.Errorf("%d attempts running after Ask returned, ctx ended with %v; want none, cancelled", r, ctx.Err())
	}
}

// A ctx of the request's own that its owner ends (the session's life)
// ends the request with its error, before and after the second attempt is
// sent, with every attempt ended.
func TestAskOwnedCtxEnds(t *testing.T) {
	for _, after := range []time.Duration{10 * time.Millisecond, 250 * time.Millisecond} {
		ctx, cancel := context.WithCancel(context.Background())
		sp := spec(t, idleClient(t))
		sp.Own = cancel
		a := &attempts{answer: func(int) bool { return false }}
		time.AfterFunc(after, cancel)
		_, _, err := Ask(ctx, sp, a.op)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("after %v: Ask returned %v, want ctx's error", after, err)
		}
		if r := a.running.Load(); r != 0 {
			t.Errorf("after %v: %d attempts still running after Ask returned", after, r)
		}
	}
}

// BenchmarkAskAnswered is the request layer's own cost for a request
// answered in time: what Ask adds to each request that a Lock or Unlock
// sends, on a ctx made for it and on one of the request's own (Spec.Own,
// the enqueue's). Issue 52: 11 allocations and a goroutine before the
// first attempt moved to the caller's goroutine, 7 and none after; with
// the request's state and its timer kept between requests (call), 4 on
// a ctx made for it (its context and the context.AfterFunc on the
// client's), none on its own.
func BenchmarkAskAnswered(b *testing.B) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	op := func(context.Context) (int, error) { return 1, nil }
	for _, own := range []context.CancelFunc{nil, cancel} {
		name := "ctx=made"
		if own != nil {
			name = "ctx=own"
		}
		b.Run(name, func(b *testing.B) {
			sp := Spec{Client: c, Answers: &Answers{}, Wait: time.Second, Class: Write, Own: own}
			b.ReportAllocs()
			for range b.N {
				if _, _, err := Ask(ctx, sp, op); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
