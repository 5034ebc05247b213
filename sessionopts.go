package concurrency

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// This file holds the options of NewSession, all ten: the lease (WithTTL,
// WithLease, WithContext), the holds (WithMaxHold, WithLockDelay), the
// observers (WithMetrics, WithTracerProvider), the owner record
// (WithOwner, see owner.go), yield requests (WithYield, see yield.go) and
// health checks (WithHealthCheck, see health.go).

type sessionOptions struct {
	ttl     int
	badTTL  bool // WithTTL was given a TTL of zero or less, ignored
	leaseID clientv3.LeaseID
	ctx     context.Context

	metrics        MetricsRecorder      // WithMetrics
	tracerProvider trace.TracerProvider // WithTracerProvider
	owner          *Owner               // WithOwner; nil: no owner record
	maxHold        time.Duration        // WithMaxHold; 0: a hold lasts as long as its session
	yield          bool                 // WithYield: holds end when RequestYield asks
	lockDelay      time.Duration        // WithLockDelay; 0: none
	health         *healthCheck         // WithHealthCheck; nil: none
}

// sessionOptionsFor checks NewSession's client and options, and returns
// the options, with their defaults, and the owner record to write
// (WithOwner; "" without). An invalid option gives its error (see each
// option); a TTL that WithTTL ignored is logged through the client's
// logger.
func sessionOptionsFor(client *clientv3.Client, opts []SessionOption) (sessionOptions, string, error) {
	if client == nil {
		return sessionOptions{}, "", ErrNilClient
	}
	o := sessionOptions{ttl: defaultSessionTTL, ctx: client.Ctx()}
	for _, opt := range opts {
		opt(&o)
	}
	record, err := o.check()
	if err != nil {
		return o, "", err
	}
	if o.badTTL {
		client.GetLogger().Warn("concurrency: WithTTL(): TTL should be > 0, keeping the current TTL", zap.Int("ttl", o.ttl))
	}
	return o, record, nil
}

// check returns the error, matching its option's sentinel, of an option
// NewSession refuses, and the owner record to write ("" without
// WithOwner). Lead and Shards call it before their first term, so that
// an option no session would take ends them at once.
func (o *sessionOptions) check() (string, error) {
	if o.maxHold != 0 && o.maxHold < time.Second {
		return "", fmt.Errorf("%w: WithMaxHold(%v)", ErrInvalidMaxHold, o.maxHold)
	}
	if o.lockDelay < 0 {
		return "", fmt.Errorf("%w: WithLockDelay(%v)", ErrInvalidLockDelay, o.lockDelay)
	}
	if o.health != nil {
		if err := o.health.valid(); err != nil {
			return "", err
		}
	}
	if o.owner == nil {
		return "", nil
	}
	return ownerRecord(*o.owner)
}

// SessionOption configures a Session.
type SessionOption func(*sessionOptions)

// WithTTL sets the session's TTL in seconds (default 60). The server may
// grant more. As in etcd's package, a TTL of zero or less is ignored (the
// TTL set before, or the default, is kept), and NewSession logs a warning
// through the client's logger.
func WithTTL(ttl int) SessionOption {
	return func(o *sessionOptions) {
		if ttl <= 0 {
			o.badTTL = true
			return
		}
		o.ttl = ttl
	}
}

// WithLease makes the session adopt an existing lease instead of granting a
// new one, for example to reclaim a lock or leadership after a restart.
// NewSession renews it once, to learn its TTL; if the lease does not exist,
// the session has already ended (see NewSession). WithTTL is ignored: the
// lease keeps its own TTL.
//
// Sessions on one lease share their Mutex and Election keys (the name and
// the lease ID), as in etcd's package: a Lock on one of them adopts the key
// that another holds, and a Lock that fails deletes a key that no user of
// its own session holds, so it can end the other session's hold on that
// name (ErrLockLost, as after a force-unlock). Do not use one lock name
// from two live sessions on one lease; Semaphore and RWMutex keys are
// unique to each value and are not shared.
func WithLease(leaseID clientv3.LeaseID) SessionOption {
	return func(o *sessionOptions) { o.leaseID = leaseID }
}

// WithContext sets the context of the session instead of the client's. It
// bounds NewSession and Close; when it ends, the session ends too (Done is
// closed), so it is the session's lifetime, not a timeout for NewSession
// alone. If it ends before Close revokes the lease, the lease is left to
// expire. A nil context keeps the default.
func WithContext(ctx context.Context) SessionOption {
	return func(o *sessionOptions) {
		if ctx != nil {
			o.ctx = ctx
		}
	}
}

// WithMaxHold bounds every hold taken on the session (Mutex, Semaphore,
// RWMutex, Election) to d, even while the process runs and renews its
// session (Redisson's leaseTime). Once the hold is granted, its key is
// moved, with the same create revision (so the same fencing token), value
// and place in the queue, to a lease of its own granted with a TTL of d
// rounded up to whole seconds and never renewed: etcd removes the key when
// that lease expires, whatever the holder does. The hold's Ctx is cancelled
// with cause ErrMaxHold at the send time of the grant plus d, less a tenth
// of d (a second at most), and its lease is then revoked, which deletes
// the key. Each hold costs one more LeaseGrant and one more write before
// Lock returns, and one LeaseRevoke, in the background, when it ends.
// With WithLockDelay, a Mutex's max hold begins once its lock-delay is
// over: during the delay its key stays on the session's lease, so that
// nobody else is granted within the delay.
//
// The default, 0, bounds nothing: a hold lasts as long as its session. A d
// under a second makes NewSession return an error matching
// ErrInvalidMaxHold. See the package documentation for what it cannot
// promise.
func WithMaxHold(d time.Duration) SessionOption {
	return func(o *sessionOptions) { o.maxHold = d }
}

// WithMetrics has the session, and every Mutex, Election, Semaphore and
// RWMutex on it, report to r. A nil r is ignored (the default: no metrics,
// and no call of any recorder). For Prometheus metrics, r is a
// concurrencyprom.Metrics (module
// github.com/seed-a9d410c6/concurrency/prometheus).
func WithMetrics(r MetricsRecorder) SessionOption {
	return func(o *sessionOptions) { o.metrics = r }
}

// WithTracerProvider has the session, and every lock on it, record spans
// with tp: one per acquisition (concurrency.acquire), one per hold
// (concurrency.hold) and one per release (concurrency.release); for Lead,
// one per term (concurrency.lead.term). A nil tp is ignored (the default: no spans). The
// global provider (otel.GetTracerProvider) is never used unless it is
// passed here: a library should not emit spans its user did not ask for.
func WithTracerProvider(tp trace.TracerProvider) SessionOption {
	return func(o *sessionOptions) { o.tracerProvider = tp }
}

// WithLockDelay makes a Mutex on the session wait d before Lock returns
// when the hold before it may have ended by loss rather than by release
// (Consul's lock-delay, 15 s by default there; Chubby's lock-delay): the
// protection for a resource that cannot check a fencing token, so that
// the writes of a holder that lost its lock without knowing (a pause, a
// partition) have time to end before the next holder begins. Releases of
// such a Mutex (Unlock, Do) mark the name's record (see LockDelayPrefix)
// in the same transaction as their delete, so the next holder is granted
// at once after them. A hold before it that ended otherwise (its lease
// expired or revoked, its key deleted by someone else, Session.Close
// without Unlock) counts as a loss: the grant waits. A hold that records
// nothing (etcd's package, `etcdctl lock`, a session without
// WithLockDelay) is judged by its lease: a key deleted while its lease
// lives counts as released (whether its holder or someone else deleted
// it), one whose lease is gone as a loss. The wait begins when the grant is decided, not at the loss,
// which nobody saw: it is at least d after it. While it waits, the key
// holds in etcd, so nobody else is granted; ctx ending or the session
// ending releases it, and Lock returns their error.
//
// It costs a read and a transaction per grant (the record is read before
// it is written, so that it is written only with the delay it calls for,
// see delayGrant), a lease grant per delay started, and one small key per
// lock name that stays; a grant that queued behind a hold that recorded nothing
// also reads the name at its key's creation revision and looks up the
// lease of each key older than its own there. It applies to Mutex (Lock, TryLock, Do, LockAll); the other
// primitives ignore it. The default, 0, is off; d < 0 makes NewSession
// return an error matching ErrInvalidLockDelay.
func WithLockDelay(d time.Duration) SessionOption {
	return func(o *sessionOptions) { o.lockDelay = d }
}

// WithOwner has NewSession record o as the owner of every key the session
// writes (see OwnerPrefix): one put attached to the lease, in the same
// call, after the lease is granted or adopted. Without it (the default), a
// session writes nothing but its lock keys, as etcd's package does. The
// keys themselves are unchanged: a Mutex key stays empty and interoperates
// with etcd's package and etcdctl lock.
//
// The record only informs: if its put is refused (no permission on
// OwnerPrefix), fails, or takes more than a third of the TTL (it never
// delays the first renewal), the session goes on without it, Inspect shows
// no owner for its keys, and NewSession logs a warning through the
// client's logger. Only the end of NewSession's context during the put
// fails NewSession, as during the grant; it then revokes the lease it
// granted, or, on a lease adopted WithLease, deletes the record if it is
// still the one it may have written. An Owner whose JSON is larger than 1
// KiB gives an error matching ErrInvalidOwner before any round trip.
// Sessions sharing a lease (WithLease) share one record: the last written
// wins.
func WithOwner(o Owner) SessionOption {
	return func(so *sessionOptions) { so.owner = &o }
}

// WithYield makes every hold taken on the session (Mutex, Semaphore,
// RWMutex, Campaign) let go when RequestYield asks it to: its Ctx is
// cancelled with cause ErrYieldRequested, and the holder then releases it
// as after a loss (Do does). The key stays until the holder releases it,
// or its session ends; the release (Unlock, Resign, Release, Do) deletes
// the request in the same transaction as the key. A request for a hold
// that ended otherwise stays on its lease until the session ends. A hold
// watches for requests only once its Ctx was
// asked for, as it watches its key: one more watch per hold, on the same
// stream. The default is off: requests are ignored.
func WithYield() SessionOption {
	return func(o *sessionOptions) { o.yield = true }
}

// WithHealthCheck makes the session run check every interval, each call
// with a context that ends after interval, and end after failures checks
// in a row failed (Consul's session health checks): a check fails when it
// returns an error, or has not returned when its context ends (then no
// other call starts until it returns, and each interval it is still
// running counts as one more failure). The session then ends, with a
// cause matching ErrUnhealthy and ErrSessionExpired (Ctx, and the Ctx of
// every hold on it: the metrics' cause "unhealthy"), and revokes its lease
// (within 5 s; if etcd cannot be reached, the lease expires after its
// TTL), so that every key of the session goes at once. A check that
// succeeds resets the count.
//
// check runs in a goroutine of the session and should return once its
// context ends: Close and Orphan wait for it, but for at most
// healthCloseWait (1 s), since a check stuck for good is what the option
// is for; one that ignores its context is left running in its goroutine,
// which ends when it returns. The checks stop when the
// session ends or is orphaned. An interval of zero or less, failures
// below 1 or a nil check make NewSession return an error matching
// ErrInvalidHealthCheck.
func WithHealthCheck(interval time.Duration, failures int, check func(ctx context.Context) error) SessionOption {
	return func(o *sessionOptions) { o.health = &healthCheck{interval: interval, failures: failures, check: check} }
}
