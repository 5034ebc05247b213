package recipes

import (
	"context"

	"github.com/seed-a9d410c6/concurrency"
)

// RWMutex is etcd's recipe reader/writer lock, on this module's
// concurrency.RWMutex: readers share it, a writer is alone, writers are
// not starved, and each waiter watches one key (etcd's recipe had every
// waiter re-read the queue, etcd #16221). Its keys are
// concurrency.RWMutex's, not etcd's recipe's, so the two do not exclude
// each other on one name. Like etcd's, one RWMutex value holds one side at
// a time.
type RWMutex struct {
	m *concurrency.RWMutex
}

// NewRWMutex returns an RWMutex named prefix on session s. It does not
// talk to etcd.
func NewRWMutex(s *concurrency.Session, prefix string) *RWMutex {
	return &RWMutex{m: concurrency.NewRWMutex(s, prefix)}
}

// RLock takes the read side, as RLockContext with context.Background().
func (rwm *RWMutex) RLock() error { return rwm.m.RLock(context.Background()) }

// RLockContext blocks until the read side is held, ctx ends, or the
// session ends, as concurrency.RWMutex.RLock: on error nothing is held and
// no key is left.
func (rwm *RWMutex) RLockContext(ctx context.Context) error { return rwm.m.RLock(ctx) }

// Lock takes the write side, as LockContext with context.Background().
func (rwm *RWMutex) Lock() error { return rwm.m.Lock(context.Background()) }

// LockContext blocks until the write side is held, ctx ends, or the
// session ends, as concurrency.RWMutex.Lock: on error nothing is held and
// no key is left.
func (rwm *RWMutex) LockContext(ctx context.Context) error { return rwm.m.Lock(ctx) }

// RUnlock releases the read side, as RUnlockContext with
// context.Background().
func (rwm *RWMutex) RUnlock() error { return rwm.m.RUnlock(context.Background()) }

// RUnlockContext releases the read side, as concurrency.RWMutex.RUnlock.
func (rwm *RWMutex) RUnlockContext(ctx context.Context) error { return rwm.m.RUnlock(ctx) }

// Unlock releases the write side, as UnlockContext with
// context.Background().
func (rwm *RWMutex) Unlock() error { return rwm.m.Unlock(context.Background()) }

// UnlockContext releases the write side, as concurrency.RWMutex.Unlock.
func (rwm *RWMutex) UnlockContext(ctx context.Context) error { return rwm.m.Unlock(ctx) }

// RWMutex returns the concurrency.RWMutex underneath, for its fencing
// token, its hold's context and its guarded transactions.
func (rwm *RWMutex) RWMutex() *concurrency.RWMutex { return rwm.m }
