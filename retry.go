package concurrency

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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
// (errNoAnswer, see answered). Context errors, refusals (lease not found, permission denied,
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

// errNoAnswer says that etcd did not answer in time on a connection that
// may be dead: one attempt of a request (see answered), or a watch's
// stream asked for progress (see probe). What waits tries again, on
// another connection.
var errNoAnswer = errors.New("concurrency: no answer from etcd in time")

// answered calls op, which sends one request to etcd on the context it is
// given, until it gets an answer: each attempt may wait d at most, and one
// that gets none is sent again, until ctx ends. So no request waits on a
// connection that accepts bytes and says nothing (a half-open connection:
// no reset, and clientv3's default configuration has no gRPC keepalive):
// the next attempt goes, through the client's round-robin balancer, to the
// next connection. Each attempt waits a random time between d/2 and d, so
// that the attempts do not keep step with other periodic requests of the
// client (a session's renewals every third of its TTL took every other
// pick of the balancer, and left each attempt the silent connection). The
// bound does not grow from one attempt to the next: with two connections,
// one silent, each attempt has an even chance of the silent one, and
// doubling bounds made a waiter's read take 15 s and more. The cost is on
// a cluster whose commits take longer than d/2 (at least 0.5 s): it is
// sent the same request again until one attempt is answered in time. op must be safe to apply twice: an attempt given up on
// may still be applied. It returns op's last error (ctx's, if ctx ended).
func answered(ctx context.Context, d time.Duration, op func(ctx context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, d/2+rand.N(d/2+1))
		err := op(actx)
		late := actx.Err() != nil
		cancel()
		if err == nil || !late || ctx.Err() != nil {
			return err
		}
	}
}
