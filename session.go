package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/watch"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds the session: a lease, the goroutine that renews it and
// the conservative deadline that ends the session before etcd can expire
// it. Its lock keys are in sessionkeys.go, its options in sessionopts.go,
// the grant of its lease in lease.go.

const defaultSessionTTL = 60

// Session is a lease and the goroutine that keeps it alive. Keys that a
// Mutex or Election writes are attached to the lease, so they vanish when the
// lease ends: a hold lasts at most as long as its lease.
//
// Unlike etcd's package, a Session renews its lease with its own keepalive
// loop (on a stream that all sessions of its client share, as etcd's
// package does) so that it knows when each renewal was sent. It keeps a conservative
// deadline, the send time of the last answered keepalive plus the granted
// TTL minus a small margin, and ends (Done, Ctx) when that deadline passes
// without a renewal: before the server can expire the lease, not after. The
// goroutine that renews never waits on anything else: deleting keys left
// over from failed or cancelled calls is done by a second goroutine, which
// runs only while such keys are left.
//
// A Session is safe for use by several goroutines.
type Session struct {
	client *clientv3.Client
	opts   sessionOptions
	id     clientv3.LeaseID
	ttl    time.Duration // as granted by the server; fixed for the lease's life

	// life is cancelled, with a cause wrapping ErrSessionExpired, when the
	// lease is gone or can no longer be trusted: revoked, expired, not
	// renewed before the conservative deadline while this session renewed
	// it, the WithContext context ended, or Close. Waits and holds end with
	// it. Orphan does not end it: the lease is someone else's to renew.
	life    context.Context
	endLife context.CancelCauseFunc
	// ctx is Ctx and Done: life, also cancelled by Orphan, as in etcd's
	// package.
	ctx    context.Context
	cancel context.CancelCauseFunc

	done     sync.WaitGroup // the keepalive goroutine, and the health checks' (WithHealthCheck)
	settling sync.WaitGroup // enqueues awaited, and max-hold leases revoked, in the background (see resettle, hold.bound)
	sweeping sync.WaitGroup // the cleanup goroutine, while it runs (see kickSweeper)
	checkc   chan struct{}  // asks the keepalive goroutine to renew (and so check) the lease now
	sweepc   chan struct{}  // asks the cleanup goroutine to delete leftover keys

	mu        sync.Mutex // guards deadline, keys, closing and sweeperOn
	deadline  time.Time
	closing   bool   // Close has begun: no goroutine starts in the background
	sweeperOn bool   // the cleanup goroutine runs
	keys      keySet // lock keys this session uses or must clean up

	ins *instruments // metrics and tracer; nil without (see metrics.go)
}

// NewSession grants a lease (or adopts the one given with WithLease) and
// starts keeping it alive. It blocks for one round trip to etcd (two
// WithOwner), bounded by the context given with WithContext (default: the
// client's) and, unlike etcd's (#19778), by the TTL asked for (at least
// 10 s, at most a minute): if etcd has not answered by then, it returns an error matching
// context.DeadlineExceeded. An attempt that gets no answer within a sixth
// of the TTL (1 s to 5 s) has a second sent beside it, on the client's
// next connection, and the first answer is taken (see ask); both ask for
// the same lease ID, picked here, so etcd grants one lease, however many
// attempts it applies (see grantLease).
//
// It returns an error matching ErrNilClient for a nil client; on error
// nothing is left running and no lease is granted (a lease granted before
// the context ended during the owner record's put is revoked, or, if that
// fails too, expires after its TTL). As in etcd's package,
// WithLease on a lease that does not exist (etcd's election service passes
// lease -1 to sessions that only read) gives a session that has already
// ended: Leader and Observe work on it, while Lock and Campaign return an
// error matching ErrSessionExpired and ErrLeaseNotFound and write nothing.
func NewSession(client *clientv3.Client, opts ...SessionOption) (*Session, error) {
	o, record, err := sessionOptionsFor(client, opts)
	if err != nil {
		return nil, err
	}
	// Unlike etcd's (#19778), the first round trip never waits forever
	// for a cluster that does not answer: it is asked as every request of
	// a session is (see ask), and bounded by newSessionTimeout.
	gctx, cancel := context.WithTimeoutCause(o.ctx, newSessionTimeout(o.ttl),
		fmt.Errorf("%w: NewSession: etcd did not answer within %v", context.DeadlineExceeded, newSessionTimeout(o.ttl)))
	defer cancel()
	l, err := grantSession(gctx, client, o)
	if err != nil {
		return nil, err
	}
	return startSession(gctx, client, o, l, record)
}

// grantedLease is what NewSession's first round trip learned of the
// session's lease.
type grantedLease struct {
	id      clientv3.LeaseID
	ttl     time.Duration // as granted by the server; 0 for a missing lease
	sent    time.Time     // when the round trip began: the deadline counts from it
	missing error         // WithLease on a lease that does not exist: the session has ended
}

// grantSession is NewSession's first round trip, bounded by gctx: it
// grants the session's lease, or renews the one given with WithLease once,
// to learn its TTL (and so the deadline) before anything is attached to
// it. A lease that does not exist is no error: it is reported in missing.
func grantSession(gctx context.Context, client *clientv3.Client, o sessionOptions) (grantedLease, error) {
	l := grantedLease{id: o.leaseID, sent: time.Now()}
	wait := watch.LivenessFor(time.Duration(o.ttl) * time.Second).Wait
	if l.id == clientv3.NoLease {
		id, granted, err := grantLease(gctx, client, wait, int64(o.ttl))
		if err != nil {
			return l, sessionStartErr(gctx, err)
		}
		l.id, l.ttl = id, time.Duration(granted)*time.Second
		return l, nil
	}
	// A renewal applied twice or late only renews again.
	resp, _, err := ask(gctx, client, wait, request.Renew, func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		return client.KeepAliveOnce(ctx, l.id)
	})
	err = sessionStartErr(gctx, err)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		l.missing = fmt.Errorf("%w: lease %x: %w: %w", ErrSessionExpired, int64(l.id), ErrLeaseNotFound, err)
	case err != nil:
		return l, err
	default:
		l.ttl = time.Duration(resp.TTL) * time.Second
	}
	return l, nil
}

// startSession makes the session on lease l and starts it: its keepalive
// goroutine, then its owner record (WithOwner, written within gctx), its
// end with WithContext's context or the client, and its health checks
// (WithHealthCheck). A session on a missing lease starts nothing: it has
// ended. If the owner record cannot be written, the session ends, its
// goroutine stops, and the error is returned.
func startSession(gctx context.Context, client *clientv3.Client, o sessionOptions, l grantedLease, record string) (*Session, error) {
	s := &Session{
		client: client,
		opts:   o,
		id:     l.id,
		ttl:    l.ttl,
		checkc: make(chan struct{}, 1),
		sweepc: make(chan struct{}, 1),
		ins:    newInstruments(o.metrics, o.tracerProvider),
	}
	// The session's contexts carry the caller's values but not its
	// cancellation: the session cancels them itself, so that their cause
	// always wraps ErrSessionExpired.
	life, endLife := context.WithCancelCause(context.WithoutCancel(o.ctx))
	s.life, s.endLife = life, endLife
	s.ctx, s.cancel = context.WithCancelCause(s.life)
	s.deadline = deadlineAfter(l.sent, s.ttl)
	if l.missing != nil {
		s.endLife(l.missing)
		return s, nil
	}
	// The lease is renewed from here on, so that an owner record slow to
	// be written (a slow cluster) delays NewSession, not the renewals.
	s.done.Add(1)
	go s.run()
	if o.owner != nil {
		if err := s.recordOwner(o.ctx, gctx, record); err != nil {
			s.endLife(fmt.Errorf("%w: NewSession's context ended", ErrSessionExpired))
			s.done.Wait()
			return nil, err
		}
	}
	s.endWith(o.ctx)
	if o.health != nil {
		s.done.Add(1)
		go s.checkHealth(o.health)
	}
	return s, nil
}

// endWith ends the session's life when ctx (WithContext's) ends, or when
// its client is closed, whichever comes first: a closed client renews
// nothing, whatever the session's own context (etcd's package ends its
// sessions with the client too, since it renews on the client's context).
func (s *Session) endWith(ctx context.Context) {
	closed := func() {
		s.endLife(fmt.Errorf("%w: %w", ErrSessionExpired, request.ClientClosed(s.client)))
	}
	stopClient := context.AfterFunc(s.client.Ctx(), closed)
	stop := context.AfterFunc(ctx, func() {
		if s.client.Ctx().Err() != nil {
			closed()
			return
		}
		s.endLife(fmt.Errorf("%w: session context ended: %w", ErrSessionExpired, context.Cause(ctx)))
	})
	context.AfterFunc(s.life, func() { stop(); stopClient() })
}

// newSessionTimeout bounds NewSession's first round trip for a session
// asking for a TTL of ttl seconds: the TTL, at least 10 s (a first
// connection may take that long) and a minute at most.
func newSessionTimeout(ttl int) time.Duration {
	return min(max(time.Duration(ttl)*time.Second, 10*time.Second), time.Minute)
}

// sessionStartErr is err, NewSession's first request's, with the cause
// when its bound (see newSessionTimeout) rather than the caller's context
// ended it.
func sessionStartErr(gctx context.Context, err error) error {
	if err != nil && gctx.Err() != nil && context.Cause(gctx) != gctx.Err() {
		return context.Cause(gctx)
	}
	return err
}

// Client is the etcd client that is attached to the session.
func (s *Session) Client() *clientv3.Client { return s.client }

// Lease is the lease ID for keys bound to the session.
func (s *Session) Lease() clientv3.LeaseID { return s.id }

// Ctx is the context attached to the session. It is cancelled when the
// session ends: its lease is revoked or expires, its conservative deadline
// passes without a renewal, its WithContext context ends, its client is
// closed (the cause then matches ErrClientClosed too), or Orphan or Close
// is called. context.Cause(s.Ctx()) says why and matches ErrSessionExpired.
func (s *Session) Ctx() context.Context { return s.ctx }

// Done returns a channel that is closed when the session ends, at the same
// moment as Ctx is cancelled.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Deadline returns the session's conservative deadline: the time before
// which the server cannot have expired the lease, as far as this client
// knows. The session ends when it passes without a renewal. After Orphan it
// is the last deadline computed, and ends nothing.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// Orphan stops renewing the lease without revoking it, and returns once the
// keepalive goroutine has stopped; it does not wait on the network. Keys
// that failed or cancelled calls left to delete are still deleted, by a
// goroutine that ends when none is left or at Close. Keys
// on the lease live on until the lease expires or is revoked, and the lease
// may be kept alive by someone else: a process that adopts it with
// WithLease, or a remote client (etcd's Lock and Election services orphan
// sessions on leases their callers renew).
//
// As in etcd's package, Done is closed and Ctx cancelled, but the session
// stays usable while its lease lives: Lock, TryLock, Campaign, Proclaim,
// Resign, Unlock, Leader and Observe work as before. Once the lease is gone,
// Lock and Campaign fail with an error matching ErrSessionExpired and
// ErrLeaseNotFound and leave no key. A hold on an orphaned session (Mutex.Ctx,
// Election.Ctx) has no conservative deadline, since nobody here renews the
// lease: it ends when its key is deleted, which the hold's watch sees
// (ErrLockLost), when the lease expires or is revoked, or at Close.
func (s *Session) Orphan() {
	s.cancel(fmt.Errorf("%w: session orphaned", ErrSessionExpired))
	s.done.Wait()
}

// Close ends the session and revokes its lease, which deletes every key
// attached to it. The revoke is retried while etcd is unreachable, bounded
// by the lease TTL and by the WithContext context: if that ends first, the
// lease is left to expire and the error is returned. Closing a session
// whose lease is already gone, or closing twice, returns nil. Closing a
// session whose client is closed returns at once, with an error matching
// ErrClientClosed: the lease is left to expire.
func (s *Session) Close() error {
	s.endLife(fmt.Errorf("%w: session closed", ErrSessionExpired))
	s.Orphan()
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.settling.Wait() // ended with the session's life: the revoke deletes their keys
	s.sweeping.Wait()
	if s.ttl == 0 {
		return nil // WithLease on a missing lease: nothing to revoke
	}
	if s.client.Ctx().Err() != nil {
		return request.ClientClosed(s.client) // it revokes nothing
	}
	// If the revoke takes longer than the TTL, the lease has expired anyway.
	ctx, cancel := context.WithTimeout(s.opts.ctx, s.ttl)
	defer cancel()
	return s.revokeLease(ctx, s.id)
}

// live is how long the session's waits and holds trust a silent
// connection (see liveness).
func (s *Session) live() liveness {
	if s.ttl == 0 {
		return watch.LivenessFor(defaultSessionTTL * time.Second) // WithLease on a missing lease: no TTL known
	}
	return watch.LivenessFor(s.ttl)
}

// sessionAsk is ask on the session's client, with its liveness wait.
func sessionAsk[T any](ctx context.Context, s *Session, c int, op func(ctx context.Context) (T, error)) (T, int, error) {
	return ask(ctx, s.client, s.live().Wait, c, op)
}

// ownAsk is sessionAsk on a ctx of the request's own, which cancel
// cancels and which ends with the session's life, so when the client is
// closed (see request.Spec.Own).
func ownAsk[T any](ctx context.Context, cancel context.CancelFunc, s *Session, c int, op func(ctx context.Context) (T, error)) (T, int, error) {
	sp := spec(s.client, s.live().Wait, c)
	sp.Own = cancel
	return request.Ask(ctx, sp, op)
}

// get is a linearizable read of key, asked as ask does.
func (s *Session) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, _, err := sessionAsk(ctx, s, request.Read, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return s.client.Get(ctx, key, opts...)
	})
	return resp, err
}

// check asks the keepalive goroutine to renew the lease now; a lease that is
// gone then ends the session. It never blocks, and does nothing once the
// session no longer renews (orphaned or ended).
func (s *Session) check() {
	select {
	case s.checkc <- struct{}{}:
	default:
	}
}

// startSettling counts an enqueue that is awaited in the background
// (see resettle), unless Close has begun; the enqueue's goroutine calls
// s.settling.Done.
func (s *Session) startSettling() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.settling.Add(1)
	return true
}

// leaseGone ends the session's life after etcd refused a write because the
// lease does not exist, and returns the error for the caller.
func (s *Session) leaseGone(err error) error {
	err = fmt.Errorf("%w: lease %x: %w: %w", ErrSessionExpired, int64(s.id), ErrLeaseNotFound, err)
	s.endLife(err)
	return err
}
