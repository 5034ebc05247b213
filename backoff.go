package concurrency

import (
	"errors"
	"math/rand/v2"
	"time"
)

// This file holds the retry backoff that the runners (Lead, Shards, their
// watches) share, and join, by which they report what went wrong in a
// term: both on the request layer's floor, below every runner, so that no
// runner takes them from another.

// Backoff between two tries of a runner (a campaign, a join, a read of a
// group or of an election's keys) after a failure: it starts at
// retryMinBackoff, doubles up to retryMaxBackoff, and is reset once a try
// has lasted retryMaxBackoff (or, for a watch, once a read worked). Each
// wait is drawn at random from its upper half, so that candidates that
// failed together do not return together.
const (
	retryMinBackoff = 100 * time.Millisecond
	retryMaxBackoff = 5 * time.Second
)

// retryBackoff is one runner's backoff, used by one goroutine.
type retryBackoff struct {
	d time.Duration // the next wait's upper bound; 0 before the first
}

// next returns how long to wait before the next try, and doubles the
// bound for the one after it.
func (b *retryBackoff) next() time.Duration {
	if b.d == 0 {
		b.d = retryMinBackoff
	}
	d := jittered(b.d)
	b.d = min(2*b.d, retryMaxBackoff)
	return d
}

// reset starts the backoff again from retryMinBackoff.
func (b *retryBackoff) reset() { b.d = retryMinBackoff }

// resetAfter starts the backoff again if the try lasted retryMaxBackoff.
func (b *retryBackoff) resetAfter(lasted time.Duration) {
	if lasted >= retryMaxBackoff {
		b.reset()
	}
}

// jittered is half to all of d, at random, so that candidates that failed
// together do not retry together.
func jittered(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// join is errors.Join, but returns a single error unchanged, so that a
// runner returns fn's error or ctx.Err() itself when nothing else went
// wrong.
func join(errs ...error) error {
	var one error
	n := 0
	for _, err := range errs {
		if err != nil {
			one = err
			n++
		}
	}
	if n <= 1 {
		return one
	}
	return errors.Join(errs...)
}
