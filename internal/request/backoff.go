package request

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds the backoff between attempts of an operation that
// failed for a reason that may pass (see Transient).

// RetryInterval is the longest wait between two attempts of an operation
// that failed for a reason that may pass: a keepalive, a wait's watch or
// read, a release.
const RetryInterval = 500 * time.Millisecond

// FirstRetry is the wait before the second attempt; each later wait
// doubles, up to RetryInterval.
const FirstRetry = 20 * time.Millisecond

// Backoff is a wait between attempts that doubles from FirstRetry up to
// RetryInterval, until Reset. The zero value is ready to use.
type Backoff struct{ d time.Duration }

// Sleep waits for the current backoff or for ctx to end, reports whether
// the wait passed, and doubles the next one.
func (b *Backoff) Sleep(ctx context.Context) bool {
	if b.d == 0 {
		b.d = FirstRetry
	}
	ok := SleepCtx(ctx, b.d)
	b.d = min(2*b.d, RetryInterval)
	return ok
}

// Pause is Sleep that also ends when client is closed.
func (b *Backoff) Pause(ctx context.Context, client *clientv3.Client) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(client.Ctx(), cancel)()
	return b.Sleep(ctx)
}

// Reset makes the next wait FirstRetry again. A nil b is left alone.
func (b *Backoff) Reset() {
	if b != nil {
		b.d = 0
	}
}

// Retry calls op until it returns an error that is not transient (nil
// included) or ctx ends, waiting FirstRetry, then twice as long each time
// up to RetryInterval, between attempts. It returns op's last error, or
// ctx's error joined with it when ctx ended first. op must be idempotent.
func Retry(ctx context.Context, op func() error) error {
	var b Backoff
	for {
		err := op()
		if !Transient(err) {
			return err
		}
		if !b.Sleep(ctx) {
			return errors.Join(ctx.Err(), err)
		}
	}
}

// SleepCtx waits for d or for ctx to end, and reports whether d passed.
func SleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Pause waits for d, for ctx to end or for client to be closed, and
// reports whether d passed.
func Pause(ctx context.Context, client *clientv3.Client, d time.Duration) bool {
	return (&Backoff{d: d}).Pause(ctx, client)
}
