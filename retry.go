package concurrency

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// This file holds what the request layer (request.go) counts as a failure
// that may pass (transient), and the backoff between attempts of an
// operation that failed so.

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
// may be dead: a watch's stream asked for progress (see probe). What
// waits tries again, on another connection.
var errNoAnswer = errors.New("concurrency: no answer from etcd in time")
