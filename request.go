package concurrency

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// This file is the request layer: how the package sends one request to
// etcd so that neither a slow cluster nor a silent connection makes it
// fail or hang (see ask).
//
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

// classes of requests, for the evidence that one is lost: a write
// (anything that goes through etcd's log: a put, a delete, a write
// transaction, a lease grant or revoke) is answered only once the cluster
// has committed it, which a slow disk delays; a read is not. A renewal
// (a keepalive) is answered by the leader's lessor, which a busy leader
// or a congested stream delays while reads, served by any member, are
// answered at once. So only a later write answered is evidence that a
// write is lost, only a later renewal that a renewal is, while any later
// request answered is evidence that a read is.
const (
	classRead = iota
	classWrite
	classRenew
	numClasses
)

// answers is what one client's requests have shown lately (see ask).
type answers struct {
	// sent is, by class, when the request sent last of those answered
	// was sent (nanoseconds since epoch, see now).
	sent [numClasses]atomic.Int64
	// took is, by class, how long the last answered request took, and
	// tookAt when it was answered (as sent).
	took   [numClasses]atomic.Int64
	tookAt [numClasses]atomic.Int64
}

// epoch is the origin of the monotonic times that answers keep.
var epoch = time.Now()

// now is the time since epoch, on the monotonic clock.
func now() int64 { return int64(time.Since(epoch)) }

// answersByClient holds each client's answers, until the client is
// closed.
var answersByClient sync.Map // *clientv3.Client → *answers

// answersOf returns client's answers.
func answersOf(client *clientv3.Client) *answers {
	if a, ok := answersByClient.Load(client); ok {
		return a.(*answers)
	}
	a, loaded := answersByClient.LoadOrStore(client, &answers{})
	if !loaded {
		context.AfterFunc(client.Ctx(), func() { answersByClient.Delete(client) })
	}
	return a.(*answers)
}

// answered records an answer to a request of class c sent at sent.
func (a *answers) answered(c int, sent int64) {
	t := now()
	for {
		old := a.sent[c].Load()
		if old >= sent || a.sent[c].CompareAndSwap(old, sent) {
			break
		}
	}
	a.took[c].Store(t - sent)
	a.tookAt[c].Store(t)
}

// lost reports whether an attempt of class c sent at sent, which has
// waited for waited, is most likely lost on a silent connection rather
// than slow, for a request whose liveness wait is d, and whose newer
// attempt, beside it, has waited for newer. Never before d. A request of
// its class (or, for a read, of any class) sent after it, by more
// than d/4, has been answered: the connections answer its kind faster.
// Or, for a write: a read sent after it has been answered (the
// connections answer), it has waited more than four times what the last
// write answered since it was sent took (with none, this says nothing),
// and its newer attempt has waited d too: a cluster that has just turned
// slow answers the older attempt first.
//
// Every piece of evidence is about the time since the attempt was sent:
// what other operations in flight on the client show. A write's latency
// measured before the attempt was sent (before the cluster turned slow)
// says nothing about it, and with other operations' reads answered
// meanwhile it gave up every write of a slow cluster before its answer
// came (issue 50: 12 to 14 writes per operation with 8 in flight).
func (a *answers) lost(c int, sent int64, waited, newer, d time.Duration) bool {
	if waited < d {
		return false
	}
	after := sent + int64(d/4)
	switch {
	case a.sent[c].Load() > after:
		return true
	case c == classRead:
		return a.sent[classWrite].Load() > after || a.sent[classRenew].Load() > after
	case c != classWrite:
		return false
	}
	r := a.answeredSince(classWrite, sent)
	return r > 0 && waited > 4*r && newer >= d && a.sent[classRead].Load() > after
}

// answeredSince is how long the last answered request of class c took,
// if it was answered after since (see now); 0 if it was not.
func (a *answers) answeredSince(c int, since int64) time.Duration {
	if a.tookAt[c].Load() > since {
		return time.Duration(a.took[c].Load())
	}
	return 0
}

// recentWindow is how long an answer's latency counts as what the
// cluster takes now.
const recentWindow = time.Minute

// recently is how long the last answered request of class c took, if it
// was answered within recentWindow; 0 if none was.
func (a *answers) recently(c int) time.Duration {
	if at := a.tookAt[c].Load(); at != 0 && now()-at < int64(recentWindow) {
		return time.Duration(a.took[c].Load())
	}
	return 0
}

// attempt is one attempt of a request that ask sends.
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

// ask sends a request to etcd with op, which sends one attempt of it on
// the context it is given, and returns the first answer of an attempt
// (its value or error) and how many attempts were sent. d is the
// caller's liveness wait (see liveness): how long an answer may take on a
// cluster that is not slow. c is the request's class (classRead,
// classWrite or classRenew).
//
// The first attempt is sent at once. If it has no answer after a random
// time between d/2 and d (so that attempts do not keep step with the
// client's other periodic requests), or after twice the time the
// client's last answered request of the class took, if longer (2d at
// most), a second
// attempt is sent beside it, on the client's next connection, and the
// first answer of either is taken. No more than maxInFlight attempts
// wait at once: the older one is given up, and another sent, only once
// it is shown lost (see answers.lost: a later request of its kind was
// answered, or for a write a later read, while the cluster's writes
// lately took far less than it has waited), or has waited giveUpAfter
// times d, a bound that doubles each time, up to maxGiveUp times d. (An
// attempt given up whose answer comes all the same is taken.) An attempt
// that fails with a transient error (see transient) while another waits
// leaves the answer to that one. When ask returns, the attempts still
// waiting are cancelled and have ended.
//
// So a slow cluster is sent about one request more than its answers
// need, and a request on a silent connection is answered within about d
// once another connection answers. An attempt given up, or cancelled
// because another answered first, may still be applied by etcd, late, or
// beside the one that answered: op must be harmless applied twice, or
// after a later request of the caller (each caller says why it is).
// ask returns ctx.Err() if ctx ends first, and an error matching
// ErrClientClosed (see clientClosed) if the client is closed first: a
// closed client's requests fail with context.Canceled, which is no reason
// to try again.
func ask[T any](ctx context.Context, client *clientv3.Client, d time.Duration, c int, op func(ctx context.Context) (T, error)) (v T, sent int, err error) {
	ans := answersOf(client)
	replies := make(chan reply[T])
	done := make(chan struct{})
	var wg sync.WaitGroup
	var flight []*attempt // waiting, oldest first
	send := func() {
		actx, cancel := context.WithCancel(ctx)
		a := &attempt{sent: now(), cancel: cancel}
		flight = append(flight, a)
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := op(actx)
			if err == nil {
				ans.answered(c, a.sent)
			}
			select {
			case replies <- reply[T]{a, v, err}:
			case <-done:
			}
		}()
	}
	defer func() {
		close(done)
		for _, a := range flight {
			a.cancel()
		}
		wg.Wait()
	}()
	// drop cancels a and takes it out of flight, and reports whether it
	// was there: the answer of an attempt given up is not taken.
	drop := func(a *attempt) bool {
		a.cancel()
		for i, f := range flight {
			if f == a {
				flight = append(flight[:i], flight[i+1:]...)
				return true
			}
		}
		return false
	}

	// Twice the last answer's time, but never past 2d, so that a write
	// or a read that the cluster answered slowly lately is not left on a
	// silent connection for long. A renewal's is one and a half times the
	// last renewal's, not bounded by d: renewals are a class of their own (a
	// read that took seconds on a starved machine no longer delays a
	// renewal's second attempt past the deadline), and a second attempt
	// sent before a slow renewal's usual time only moves the client's
	// renewals to a new stream (see renewer.renew), which delays the
	// session's next ones, while it could not come back faster.
	hedge := d/2 + rand.N(d/2+1)
	late := min(2*ans.recently(c), 2*d)
	if c == classRenew {
		late = 3 * ans.recently(c) / 2
		// But early enough that a second attempt, on another connection,
		// can still be answered before the renewal's deadline (its ctx's):
		// after a spell of slow renewals, a connection that then goes
		// silent must not hold every renewal until the session ends.
		if dl, ok := ctx.Deadline(); ok {
			late = min(late, time.Until(dl)/2)
		}
	}
	hedge = max(hedge, late)
	giveUp := giveUpAfter * d
	// Each check comes at a random time between d/8 and d/4 after the
	// last, so that what it sends does not keep step with the client's
	// periodic requests: a session's renewals, each two picks of the
	// balancer when one connection is silent, otherwise leave every
	// attempt sent in step the silent connection.
	tick := func() time.Duration { return max(d/8+rand.N(d/8+1), 20*time.Millisecond) }
	t := time.NewTimer(tick())
	defer t.Stop()
	send()
	for {
		select {
		case r := <-replies:
			if !drop(r.a) && r.err != nil {
				continue // given up: its error is its cancellation
			}
			if r.err != nil && ctx.Err() == nil && client.Ctx().Err() != nil {
				return r.v, sent, clientClosed(client)
			}
			if r.err == nil || !transient(r.err) || len(flight) == 0 || ctx.Err() != nil {
				return r.v, sent, r.err
			}
		case <-t.C:
			waited := time.Duration(now() - flight[0].sent)
			switch {
			case len(flight) < maxInFlight && waited >= hedge:
				send()
			case len(flight) == maxInFlight && (waited >= giveUp || ans.lost(c, flight[0].sent, waited, time.Duration(now()-flight[1].sent), d)):
				drop(flight[0])
				giveUp = min(2*giveUp, maxGiveUp*d)
				send()
			}
			t.Reset(tick())
		case <-ctx.Done():
			var zero T
			return zero, sent, ctx.Err()
		case <-client.Ctx().Done():
			var zero T
			return zero, sent, clientClosed(client)
		}
	}
}

// clientClosed is the error of a call whose client is closed: it matches
// ErrClientClosed and context.Canceled (what clientv3 returns for a
// closed client's requests).
func clientClosed(client *clientv3.Client) error {
	return fmt.Errorf("%w: %w", ErrClientClosed, context.Cause(client.Ctx()))
}

// rpcErr is err, of a request sent with etcd's gRPC API on ctx rather
// than through clientv3, as clientv3 returns it: etcd's own errors as
// rpctypes' values, and ctx's error when ctx ended.
func rpcErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return rpctypes.Error(err)
}

// What the request layer counts as a failure that may pass (transient),
// and the backoff between attempts of an operation that failed so.

// retryInterval is the longest wait between two attempts of an operation
// that failed for a reason that may pass: a keepalive, a wait's watch or
// read, a release.
const retryInterval = 500 * time.Millisecond

// firstRetry is the wait before the second attempt; each later wait
// doubles, up to retryInterval.
const firstRetry = 20 * time.Millisecond

// transient reports whether err is a failure of the cluster or of the
// connection that a later attempt may not meet: the member has no leader,
// the leader changed, the request timed out on the server, the connection
// failed or was reset (all gRPC Unavailable), or the server is too busy
// for now ("too many requests", ResourceExhausted: waiting is what fixes
// it), or no answer came in time on a connection that may be dead
// (errNoAnswer: a watch's stream asked for progress, see probe). Context errors, refusals (lease not found, permission denied,
// compaction) and everything else are not transient.
func transient(err error) bool {
	if errors.Is(err, errNoAnswer) {
		return true
	}
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	c := grpcCode(err)
	return c == codes.Unavailable || c == codes.ResourceExhausted
}

// grpcCode is the gRPC code of err: etcd's own errors carry theirs, others
// their status's.
func grpcCode(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	return status.Code(err)
}

// backoff is a wait between attempts that doubles from firstRetry up to
// retryInterval, until reset. The zero value is ready to use.
type backoff struct{ d time.Duration }

// sleep waits for the current backoff or for ctx to end, reports whether
// the wait passed, and doubles the next one.
func (b *backoff) sleep(ctx context.Context) bool {
	if b.d == 0 {
		b.d = firstRetry
	}
	ok := sleepCtx(ctx, b.d)
	b.d = min(2*b.d, retryInterval)
	return ok
}

// pause is sleep that also ends when client is closed.
func (b *backoff) pause(ctx context.Context, client *clientv3.Client) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(client.Ctx(), cancel)()
	return b.sleep(ctx)
}

// reset makes the next wait firstRetry again. A nil b is left alone.
func (b *backoff) reset() {
	if b != nil {
		b.d = 0
	}
}

// retry calls op until it returns an error that is not transient (nil
// included) or ctx ends, waiting firstRetry, then twice as long each time
// up to retryInterval, between attempts. It returns op's last error, or
// ctx's error joined with it when ctx ended first. op must be idempotent.
func retry(ctx context.Context, op func() error) error {
	var b backoff
	for {
		err := op()
		if !transient(err) {
			return err
		}
		if !b.sleep(ctx) {
			return errors.Join(ctx.Err(), err)
		}
	}
}

// sleepCtx waits for d or for ctx to end, and reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pause waits for d, for ctx to end or for client to be closed, and
// reports whether d passed.
func pause(ctx context.Context, client *clientv3.Client, d time.Duration) bool {
	return (&backoff{d: d}).pause(ctx, client)
}

// errNoAnswer says that etcd did not answer in time on a connection that
// may be dead: a watch's stream asked for progress (see probe). What
// waits tries again, on another connection.
var errNoAnswer = errors.New("concurrency: no answer from etcd in time")
