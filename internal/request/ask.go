// Package request is the concurrency package's request layer: how it
// sends one request to etcd so that neither a slow cluster nor a silent
// connection makes it fail or hang (Ask), what counts as a failure that
// may pass (Transient), and the backoff between attempts of an operation
// that failed so (Backoff, Retry). It is the ground floor of the package
// above the contract, and uses none of the package's names: it takes a
// client and plain values.
package request

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A request that gets no answer is either slow (the cluster is slow to
// commit: a disk that fsyncs in seconds, a leader that is busy) or lost
// (it went to a connection that accepts bytes and says nothing: no reset,
// and clientv3's default configuration has no gRPC keepalive to find
// out). Its own latency cannot tell the two apart; other requests can.
// A request that was sent after it on the same client and has been
// answered shows that the client's connections answer requests of that
// kind faster than this one waited: it is lost, not slow. Requests
// answered recently show how long the cluster takes now. And a second
// attempt, sent on the client's next connection (its balancer is round
// robin), is answered in the time the cluster takes if the first's
// connection is silent. So an attempt is never cut short for being slow:
// a second one is sent beside it when the first has waited longer than
// the cluster has taken lately, the first answer of either is taken, and
// an attempt is given up only when the evidence says it is lost, or after
// a bound that doubles each time.

// maxInFlight is how many attempts of one request may wait at once.
const maxInFlight = 2

// giveUpAfter is how many liveness waits an attempt waits, with another
// attempt of the same request beside it, before it is given up without
// other evidence that it is lost; it doubles for each attempt given up,
// up to maxGiveUp. It is longer than etcd's own request timeout (7 s by
// default: the server answers a write it could not commit in that time
// with an error) for all but the shortest waits.
const (
	giveUpAfter = 4
	maxGiveUp   = 16
)

// Spec says where and how Ask sends a request.
type Spec struct {
	Client  *clientv3.Client
	Answers *Answers      // the client's: what its requests have shown lately
	Wait    time.Duration // the caller's liveness wait: how long an answer may take on a cluster that is not slow
	Class   int           // Read, Write or Renew
	// Own, if not nil, cancels the ctx Ask is given, which is then the
	// request's own (nothing else is sent on it, and its owner cancels
	// it once Ask returns) and ends when the client is closed: the first
	// attempt is sent on ctx as it is, with no context made for it (a
	// context and a context.AfterFunc on the client's: 4 to 7
	// allocations, issue 52), and the later ones on contexts made from
	// it. Ask cancels ctx only when it returns with attempts still
	// waiting; so a first attempt given up is cancelled only then.
	Own context.CancelFunc
}

// Ask sends a request to etcd with op, which sends one attempt of it on
// the context it is given, and returns the first answer of an attempt
// (its value or error) and how many attempts were sent. d, below, is
// spec.Wait.
//
// The first attempt is sent at once. If it has no answer after a random
// time between d/2 and d (so that attempts do not keep step with the
// client's other periodic requests), or after twice the time the
// client's last answered request of the class took, if longer (2d at
// most), a second attempt is sent beside it, on the client's next
// connection, and the first answer of either is taken. No more than
// maxInFlight attempts wait at once: the older one is given up, and
// another sent, only once it is shown lost (see Answers.lost: a later
// request of its kind was answered, or for a write a later read, while
// the cluster's writes lately took far less than it has waited), or has
// waited giveUpAfter times d, a bound that doubles each time, up to
// maxGiveUp times d. (An attempt given up whose answer comes all the same
// is taken.) An attempt that fails with a transient error (see
// Transient) while another waits leaves the answer to that one. When Ask
// returns, the attempts still waiting are cancelled and have ended.
//
// So a slow cluster is sent about one request more than its answers
// need, and a request on a silent connection is answered within about d
// once another connection answers. An attempt given up, or cancelled
// because another answered first, may still be applied by etcd, late, or
// beside the one that answered: op must be harmless applied twice, or
// after a later request of the caller (each caller says why it is).
// Ask returns ctx.Err() if ctx ends first, and an error matching
// ErrClientClosed (see ClientClosed) if the client is closed first: a
// closed client's requests fail with context.Canceled, which is no reason
// to try again.
//
// The first attempt runs on the caller's goroutine, with a timer armed
// for the time the second is due: a request answered in time (nearly
// all of them) costs no goroutine and no channel (issue 52: a goroutine
// per request cost 60 to 125 µs of client CPU per Lock and Unlock). If
// the timer fires first, its goroutine takes over (see call.late): it
// sends the second attempt and weighs the answers as above, and the
// caller's attempt, once it returns, hands its answer over.
func Ask[T any](ctx context.Context, spec Spec, op func(ctx context.Context) (T, error)) (v T, sent int, err error) {
	if err := ctx.Err(); err != nil {
		return v, 0, err
	}
	if spec.Client.Ctx().Err() != nil {
		return v, 0, ClientClosed(spec.Client)
	}
	c := calls.Get().(*call)
	c.ctx, c.Spec, c.op, c.slowPath = ctx, spec, op, askerOf[T]{}
	actx, cancel := ctx, spec.Own
	if spec.Own == nil {
		actx, cancel = context.WithCancel(ctx)
		defer cancel()
		// clientv3 retries a request that a closed connection failed; a
		// closed client's must end at once.
		defer context.AfterFunc(spec.Client.Ctx(), cancel)()
	}
	c.first = attempt{sent: now(), cancel: cancel}
	c.hedgeAt = c.hedge()
	c.t.Reset(c.hedgeAt)
	v, err = op(actx)
	if err == nil {
		spec.Answers.answered(spec.Class, c.first.sent)
	}
	c.mu.Lock()
	slow, k := c.slow, c.k
	c.answered = true
	c.mu.Unlock()
	if slow {
		return k.(*asker[T]).handOver(reply[T]{&c.first, v, err})
	}
	c.recycle()
	if err != nil && ctx.Err() != nil {
		return v, 1, ctx.Err()
	}
	if err != nil && spec.Client.Ctx().Err() != nil {
		return v, 1, ClientClosed(spec.Client)
	}
	return v, 1, err
}

// call is a request that Ask sends, while its first attempt is alone:
// what the hedge's timer needs to take over (see late). Calls are kept,
// each with its timer, in calls between requests, so that a request
// answered in time allocates nothing of Ask's own (a timer, the function
// it runs, the request's state: 3 allocations per request, issue 52;
// BenchmarkAskAnswered).
type call struct {
	t   *time.Timer // runs late when hedgeAt has passed
	ctx context.Context
	Spec
	op       any           // the op Ask was given: a func(context.Context) (T, error)
	slowPath asking        // makes the asker of the request's T (see late)
	first    attempt       // sent by the caller's goroutine
	hedgeAt  time.Duration // how long the first attempt waits alone (see hedge)

	mu       sync.Mutex // guards slow, answered and k
	slow     bool       // the hedge's timer fired first: its goroutine weighs the answers (see late)
	answered bool       // the first attempt has returned: no hedge from now on
	k        slowAsker  // the request's asker, once late took over
}

// A slowAsker weighs the attempts of a request whose first was late (see
// asker.run).
type slowAsker interface{ run() }

var calls = sync.Pool{New: func() any {
	c := &call{}
	c.t = time.AfterFunc(time.Hour, c.late)
	c.t.Stop()
	return c
}}

// recycle ends c, whose first attempt answered before its hedge was due:
// it is kept for another request unless its timer fired (late may still
// be running).
func (c *call) recycle() {
	if !c.t.Stop() {
		return
	}
	c.ctx, c.Spec, c.op, c.slowPath, c.first, c.answered = nil, Spec{}, nil, nil, attempt{}, false
	calls.Put(c)
}

// late runs, on the goroutine of the hedge's timer, when the first
// attempt has waited hedgeAt: unless it has just returned, it makes the
// request's asker, which sends a second attempt beside the first and
// weighs the answers (see weigh), then hands the request's answer to the
// caller.
func (c *call) late() {
	c.mu.Lock()
	if c.answered {
		c.mu.Unlock()
		return
	}
	c.slow = true
	k := c.slowPath.asker(c)
	c.k = k
	c.mu.Unlock()
	k.run()
}

// asker is one request that Ask sends, with its attempts, once its first
// was late.
type asker[T any] struct {
	*call
	op     func(ctx context.Context) (T, error)
	giveUp time.Duration // how long the older attempt waits before it is given up anyway

	replies chan reply[T]  // the attempts' answers, the first's from the caller's goroutine (see handOver)
	done    chan struct{}  // closed when the answer is settled: no reply is taken
	result  chan reply[T]  // the request's answer, to the caller
	wg      sync.WaitGroup // the attempts running, the first's included
	flight  []*attempt     // waiting, oldest first
	sent    int            // attempts sent
}

// asking makes the asker of a call whose first attempt is late, for the
// request's T: askerOf[T], a value of no size, which a call holds
// without an allocation (a generic function's value is a closure).
type asking interface{ asker(c *call) slowAsker }

type askerOf[T any] struct{}

func (askerOf[T]) asker(c *call) slowAsker {
	k := &asker[T]{
		call: c, op: c.op.(func(context.Context) (T, error)), giveUp: giveUpAfter * c.Wait,
		replies: make(chan reply[T]), done: make(chan struct{}), result: make(chan reply[T], 1),
		flight: []*attempt{&c.first}, sent: 1,
	}
	k.wg.Add(1) // the first attempt's: the caller's goroutine ends it (see handOver)
	return k
}

// attempt is one attempt of a request that Ask sends.
type attempt struct {
	sent   int64 // see now
	cancel context.CancelFunc
}

// reply is an attempt's answer.
type reply[T any] struct {
	a   *attempt
	v   T
	err error
}

// run weighs the answers (see weigh) and hands the request's to the
// caller.
func (k *asker[T]) run() {
	v, err := k.weigh()
	k.result <- reply[T]{v: v, err: err}
}

// handOver gives the answer of the first attempt, returned after the
// hedge's timer fired, to late's goroutine, and returns the request's.
func (k *asker[T]) handOver(r reply[T]) (T, int, error) {
	select {
	case k.replies <- r:
	case <-k.done:
	}
	k.wg.Done()
	res := <-k.result
	return res.v, k.sent, res.err
}

// weigh sends the second attempt, and more as check says, and returns
// the first answer that settles the request (see settle), ctx's error
// or the client's closing.
func (k *asker[T]) weigh() (v T, err error) {
	defer k.end()
	k.send()
	t := time.NewTimer(k.tick())
	defer t.Stop()
	for {
		select {
		case r := <-k.replies:
			if done, err := k.settle(r); done {
				return r.v, err
			}
		case <-t.C:
			k.check(k.hedgeAt)
			t.Reset(k.tick())
		case <-k.ctx.Done():
			return v, k.ctx.Err()
		case <-k.Client.Ctx().Done():
			return v, ClientClosed(k.Client)
		}
	}
}

// send sends one more attempt, on a goroutine of its own.
func (k *asker[T]) send() {
	actx, cancel := context.WithCancel(k.ctx)
	a := &attempt{sent: now(), cancel: cancel}
	k.flight = append(k.flight, a)
	k.sent++
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		v, err := k.op(actx)
		if err == nil {
			k.Answers.answered(k.Class, a.sent)
		}
		select {
		case k.replies <- reply[T]{a, v, err}:
		case <-k.done:
		}
	}()
}

// end cancels the attempts still waiting and waits for them to end.
func (k *asker[T]) end() {
	close(k.done)
	for _, a := range k.flight {
		a.cancel()
	}
	if k.Own != nil {
		k.Own() // the first attempt, also once given up (see drop)
	}
	k.wg.Wait()
}

// drop cancels a and takes it out of flight, and reports whether it was
// there: the answer of an attempt given up is not taken. A first attempt
// on a ctx of the request's own (Spec.Own) is left to end with the
// request: the later attempts are made from its ctx.
func (k *asker[T]) drop(a *attempt) bool {
	if a != &k.first || k.Own == nil {
		a.cancel()
	}
	for i, f := range k.flight {
		if f == a {
			k.flight = append(k.flight[:i], k.flight[i+1:]...)
			return true
		}
	}
	return false
}

// settle takes r, an attempt's answer, and reports whether it is the
// request's, with the error Ask returns.
func (k *asker[T]) settle(r reply[T]) (done bool, err error) {
	if !k.drop(r.a) && r.err != nil {
		return false, nil // given up: its error is its cancellation
	}
	if r.err != nil && k.ctx.Err() == nil && k.Client.Ctx().Err() != nil {
		return true, ClientClosed(k.Client)
	}
	if r.err == nil || !Transient(r.err) || len(k.flight) == 0 || k.ctx.Err() != nil {
		return true, r.err
	}
	return false, nil
}

// hedge is how long the first attempt waits before a second is sent
// beside it: a random time between d/2 and d, or longer if the class's
// answers took longer lately (see Ask).
//
// Twice the last answer's time, but never past 2d, so that a write or a
// read that the cluster answered slowly lately is not left on a silent
// connection for long. A renewal's is one and a half times the last
// renewal's, not bounded by d: renewals are a class of their own (a read
// that took seconds on a starved machine no longer delays a renewal's
// second attempt past the deadline), and a second attempt sent before a
// slow renewal's usual time only moves the client's renewals to a new
// stream (see the renewer), which delays the session's next ones, while
// it could not come back faster.
func (c *call) hedge() time.Duration {
	d := c.Wait
	hedge := d/2 + rand.N(d/2+1)
	late := min(2*c.Answers.recently(c.Class), 2*d)
	if c.Class == Renew {
		late = 3 * c.Answers.recently(c.Class) / 2
		// But early enough that a second attempt, on another connection,
		// can still be answered before the renewal's deadline (its ctx's):
		// after a spell of slow renewals, a connection that then goes
		// silent must not hold every renewal until the session ends.
		if dl, ok := c.ctx.Deadline(); ok {
			late = min(late, time.Until(dl)/2)
		}
	}
	return max(hedge, late)
}

// tick is when the next check comes: at a random time between d/8 and d/4
// after the last, so that what it sends does not keep step with the
// client's periodic requests: a session's renewals, each two picks of the
// balancer when one connection is silent, otherwise leave every attempt
// sent in step the silent connection.
func (c *call) tick() time.Duration {
	d := c.Wait
	return max(d/8+rand.N(d/8+1), 20*time.Millisecond)
}

// check sends a second attempt once the first has waited hedge, and gives
// up the older of two once it is shown lost or has waited giveUp, sending
// another instead.
func (k *asker[T]) check(hedge time.Duration) {
	waited := time.Duration(now() - k.flight[0].sent)
	switch {
	case len(k.flight) < maxInFlight && waited >= hedge:
		k.send()
	case len(k.flight) == maxInFlight && (waited >= k.giveUp || k.Answers.lost(k.Class, k.flight[0].sent, waited, time.Duration(now()-k.flight[1].sent), k.Wait)):
		k.drop(k.flight[0])
		k.giveUp = min(2*k.giveUp, maxGiveUp*k.Wait)
		k.send()
	}
}
