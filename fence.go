package concurrency

import (
	"fmt"
	"sync"
)

// Fence is the check that a resource outside etcd makes on the fencing
// tokens (Mutex.Token, Election.Rev) that come with each write: it remembers
// the highest token it has accepted for each resource name and rejects
// older ones. With a Fence in front of its writes, a resource is safe even
// from a holder that paused past its lease while a newer holder took over:
// the newer holder's first write raises the bar, and every later write of
// the old holder fails.
//
// The zero Fence is ready to use. A Fence is safe for use by several
// goroutines. It keeps its state in memory: a resource that restarts must
// recover the highest token it accepted from its own durable state, for
// example by storing the token beside the data it guards.
type Fence struct {
	mu   sync.Mutex       // guards high
	high map[string]int64 // resource -> highest accepted token
}

// Check accepts token for resource if it is at least the highest token
// accepted so far for that resource, and remembers it. Equal tokens are
// accepted: one hold may write many times. It returns an error matching
// ErrStaleToken for an older token, or for a token that is not positive
// (Mutex.Token is 0 when the Mutex is not held). Check does not block.
func (f *Fence) Check(resource string, token int64) error {
	if token <= 0 {
		return fmt.Errorf("%w: token %d for %q is not a token (is the lock held?)", ErrStaleToken, token, resource)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if high := f.high[resource]; token < high {
		return fmt.Errorf("%w: token %d for %q, already accepted %d", ErrStaleToken, token, resource, high)
	}
	if f.high == nil {
		f.high = make(map[string]int64)
	}
	f.high[resource] = token
	return nil
}

// Highest returns the highest token accepted for resource, or 0.
func (f *Fence) Highest(resource string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.high[resource]
}
