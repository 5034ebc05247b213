package concurrency

import (
	"context"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Mutex is a distributed lock on etcd: the drop-in counterpart of etcd's
// concurrency.Mutex, with the same keys, so that the two packages and
// `etcdctl lock` exclude one another on the same name.
//
// The lock belongs to the Session: its key is the lock name, "/", and the
// session's lease ID in hex. Two Mutexes on the same session and name share
// that key, as in etcd's package: once one holds the lock, Lock on the other
// returns at once, and Unlock on either releases it for both.
//
// A Mutex is safe for use by several goroutines, and excludes them as
// sync.Mutex does: while one goroutine holds (or is acquiring) a Mutex, Lock
// from another goroutine waits for Unlock and TryLock returns ErrLocked.
// Unlock may be called from any goroutine. (etcd's Mutex had data races
// here; a second Lock on a held Mutex returned at once.)
type Mutex struct {
	holder
	key string // the lock name, "/", and the session's lease ID in hex
}

// NewMutex returns a Mutex for the lock named pfx on session s. It does not
// talk to etcd. A nil session or an empty name is reported by the Mutex's
// methods, with ErrNilSession or ErrInvalidPrefix.
func NewMutex(s *Session, pfx string) *Mutex {
	m := &Mutex{holder: holder{s: s}}
	if s != nil {
		m.pfx, m.key = prefixedKey(pfx, s.Lease())
	} else {
		m.pfx = prefix(pfx)
	}
	created(s, m.pfx, kindMutex)
	return m
}

// Lock blocks until the lock is held by this Mutex, ctx ends, or the session
// ends. Uncontended, it takes one round trip. Waiters queue in the order of
// their keys' create revisions, and each watches only its predecessor.
//
// If ctx ends first, Lock returns an error matching ctx.Err(); if the
// session ends or its key is deleted first, an error matching
// ErrSessionExpired. On any error the Mutex is not held and its key has been
// deleted, within a bounded time even if etcd cannot be reached (after
// which the session deletes it once etcd answers again).
func (m *Mutex) Lock(ctx context.Context) error {
	return m.lock(ctx, mutexRule(m.pfx), m.key, "", true, validate(m.s, m.pfx))
}

// TryLock takes the lock if it is free (or already held by this session
// through another Mutex) and otherwise returns ErrLocked at once, after
// deleting the key it wrote. It takes one round trip when the lock is free,
// two when it is not. It also returns ErrLocked, without talking to etcd,
// while another goroutine holds or is acquiring this Mutex.
func (m *Mutex) TryLock(ctx context.Context) error {
	return m.lock(ctx, mutexRule(m.pfx), m.key, "", false, validate(m.s, m.pfx))
}

// Unlock releases the lock: it deletes the lock key if, and only if, it is
// still the incarnation this Mutex acquired (its create revision matches),
// so that a late or retried Unlock never releases a newer hold of the same
// session (etcd #22082). A key that is already gone, because the lease
// expired or someone deleted it, is not an error: the lock is released
// either way, and Ctx tells whether it was lost before.
//
// Unlock returns ErrLockReleased if the Mutex is not held. If the delete
// fails (ctx ended, etcd unreachable), Unlock returns the error and the
// Mutex stays held, so that Unlock can be retried; once the session has
// ended, it is released locally anyway, and the key goes with the lease.
func (m *Mutex) Unlock(ctx context.Context) error {
	if err := validate(m.s, m.pfx); err != nil {
		return err
	}
	return m.unlock(ctx)
}

// IsOwner returns a comparison that holds, in a transaction, only while this
// Mutex holds the lock: the lock key still has the create revision it was
// acquired with. Before the lock is held, while Lock is still waiting, and
// after Unlock it never holds (in etcd's package it held while Lock was
// still waiting, etcd #12017). Mutex.Txn builds it in.
func (m *Mutex) IsOwner() clientv3.Cmp { return m.isOwner() }

// Key returns the lock key while the Mutex holds the lock or waits for it,
// and "" otherwise.
func (m *Mutex) Key() string { return m.keyNow() }

// Header is the response header of the read that showed the lock held, or
// nil before the first Lock.
func (m *Mutex) Header() *pb.ResponseHeader { return m.header() }

// Token returns the fencing token of the current hold, the create revision
// of the lock key, or 0 when the Mutex is not held. Tokens strictly increase
// from one holder of a lock name to the next, whether the holders use this
// package, etcd's or `etcdctl lock`. Pass the token to every resource the
// lock protects and have it reject older tokens (see Fence).
func (m *Mutex) Token() int64 { return m.token() }

// Ctx returns a context for the current hold. It is cancelled as soon as
// the hold ends or may have ended: Unlock (cause ErrLockReleased), deletion
// of the lock key by anyone, including the server when the lease is revoked
// or expires (ErrLockLost), or the end of the session, including its
// conservative deadline passing without a renewal (ErrSessionExpired).
// context.Cause tells which. When the Mutex is not held it returns an
// already cancelled context.
//
// Ctx starts a watch on the lock key, the first time it is called for a
// hold: a loss is then noticed within milliseconds, and when the loss was a
// revoked or expired lease, the session ends at once too. A hold whose Ctx
// is never called keeps no watch on the server (as with etcd's package): its
// session notices a revoked lease at its next renewal, within TTL/3, and its
// guarded writes (Txn) fail as soon as the key is gone.
func (m *Mutex) Ctx() context.Context { return m.ctx() }

// Txn returns a transaction that commits only while this Mutex holds the
// lock. Its If, Then and Else run as usual inside a transaction guarded by
// IsOwner; if the hold is gone when it reaches etcd, Commit returns an error
// matching ErrLockLost and nothing is written. The response of a commit
// that succeeded is the caller's own: Succeeded and Responses are those of
// the caller's If, Then and Else. The guard is fixed when Txn is called.
func (m *Mutex) Txn(ctx context.Context) clientv3.Txn { return m.txn(ctx) }

// Do locks m, runs fn with a context that ends when ctx ends or the hold
// does, and unlocks, also when fn panics (the panic then goes on). The
// unlock uses a fresh context bounded by cleanupTimeout, so it runs even if
// ctx has ended. Do returns fn's error, joined with an error matching
// ErrLockLost or ErrSessionExpired if the hold ended before fn returned
// (fn's writes may then not have been exclusive) and with Unlock's error if
// it failed. Even then m is no longer held when Do returns: the session
// deletes the key in the background once etcd answers.
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return m.do(ctx, m.Lock, fn)
}

type lockerMutex struct{ *Mutex }

// Lock calls Mutex.Lock with the client's context and panics with the
// error, as etcd's does, so that a recover can match it with errors.Is.
func (lm *lockerMutex) Lock() {
	if err := lm.Mutex.Lock(lm.ctx()); err != nil {
		panic(err)
	}
}

// Unlock calls Mutex.Unlock with the client's context and panics with the
// error.
func (lm *lockerMutex) Unlock() {
	if err := lm.Mutex.Unlock(lm.ctx()); err != nil {
		panic(err)
	}
}

func (lm *lockerMutex) ctx() context.Context {
	if lm.s == nil {
		return context.Background() // Lock reports ErrNilSession
	}
	return lm.s.Client().Ctx()
}

// NewLocker returns a sync.Locker backed by a Mutex on session s.
//
// Its Lock and Unlock PANIC on any error, with the error as the panic value,
// as etcd's do: when the session
// ends, when etcd cannot be reached, when the client is closed. Lock waits
// with no deadline but the client's. Prefer a Mutex, whose methods take a
// context and return errors; a nil session or empty name panics at the
// first Lock.
func NewLocker(s *Session, pfx string) sync.Locker {
	return &lockerMutex{NewMutex(s, pfx)}
}
