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
func Ask[T any](ctx context.Context, spec Spec, op func(ctx context.Context) (T, error)) (v T, sent int, err error) {
	k := &asker[T]{ctx: ctx, Spec: spec, op: op, replies: make(chan reply[T]), done: make(chan struct{}), giveUp: giveUpAfter * spec.Wait}
	defer k.end()
	hedge := k.hedge()
	t := time.NewTimer(k.tick())
	defer t.Stop()
	k.send()
	for {
		select {
		case r := <-k.replies:
			if done, err := k.settle(r); done {
				return r.v, k.sent, err
			}
		case <-t.C:
			k.check(hedge)
			t.Reset(k.tick())
		case <-ctx.Done():
			var zero T
			return zero, k.sent, ctx.Err()
		case <-spec.Client.Ctx().Done():
			var zero T
			return zero, k.sent, ClientClosed(spec.Client)
		}
	}
}

// asker is one request that Ask sends, with its attempts.
type asker[T any] struct {
	ctx context.Context
	Spec
	op      func(ctx context.Context) (T, error)
	replies chan reply[T]
	done    chan struct{} // closed when Ask returns: no reply is taken
	wg      sync.WaitGroup
	flight  []*attempt    // waiting, oldest first
	sent    int           // attempts sent
	giveUp  time.Duration // how long the older attempt waits before it is given up anyway
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

// send sends one more attempt.
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
	k.wg.Wait()
}

// drop cancels a and takes it out of flight, and reports whether it was
// there: the answer of an attempt given up is not taken.
func (k *asker[T]) drop(a *attempt) bool {
	a.cancel()
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
func (k *asker[T]) hedge() time.Duration {
	d := k.Wait
	hedge := d/2 + rand.N(d/2+1)
	late := min(2*k.Answers.recently(k.Class), 2*d)
	if k.Class == Renew {
		late = 3 * k.Answers.recently(k.Class) / 2
		// But early enough that a second attempt, on another connection,
		// can still be answered before the renewal's deadline (its ctx's):
		// after a spell of slow renewals, a connection that then goes
		// silent must not hold every renewal until the session ends.
		if dl, ok := k.ctx.Deadline(); ok {
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
func (k *asker[T]) tick() time.Duration {
	d := k.Wait
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
