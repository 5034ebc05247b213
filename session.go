package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const defaultSessionTTL = 60

// retryInterval is the longest a session waits between two keepalive
// attempts after one has failed.
const retryInterval = 500 * time.Millisecond

// renewTimeout bounds one keepalive attempt, so that a renewal stuck on a
// dead connection is retried (on a new one) well before the deadline.
const renewTimeout = 5 * time.Second

// Session is a lease and the goroutine that keeps it alive. Keys that a
// Mutex or Election writes are attached to the lease, so they vanish when the
// lease ends: a hold lasts at most as long as its session.
//
// Unlike etcd's package, a Session renews its lease with its own keepalive
// loop so that it knows when each renewal was sent. It keeps a conservative
// deadline, the send time of the last answered keepalive plus the granted
// TTL minus a small margin, and ends (Done, Ctx) when that deadline passes
// without a renewal: before the server can expire the lease, not after.
//
// A Session is safe for use by several goroutines.
type Session struct {
	client *clientv3.Client
	opts   sessionOptions
	id     clientv3.LeaseID
	ttl    time.Duration // as granted by the server; fixed for the lease's life

	ctx    context.Context // cancelled, with a cause wrapping ErrSessionExpired, when the session ends
	cancel context.CancelCauseFunc
	donec  chan struct{} // closed when the keepalive goroutine has returned
	checkc chan struct{} // asks the keepalive goroutine to renew (and so check) the lease now

	mu       sync.Mutex // guards deadline, users and stale
	deadline time.Time
	users    map[string]int   // lock key -> Mutexes and Elections of this session using it
	stale    map[string]int64 // lock key -> create revision (0: unknown) of keys whose cleanup failed

	sweepMu sync.Mutex // serialises deleting unused keys with use
}

// NewSession grants a lease (or adopts the one given with WithLease) and
// starts keeping it alive. It blocks for one round trip to etcd, bounded by
// the context given with WithContext (default: the client's).
//
// It returns an error matching ErrNilClient for a nil client, ErrInvalidTTL
// for WithTTL(n) with n <= 0, and ErrLeaseNotFound when WithLease names a
// lease that does not exist; on error nothing is left running and no lease
// is granted.
func NewSession(client *clientv3.Client, opts ...SessionOption) (*Session, error) {
	if client == nil {
		return nil, ErrNilClient
	}
	o := sessionOptions{ttl: defaultSessionTTL, ctx: client.Ctx()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return nil, o.err
	}

	id := o.leaseID
	sent := time.Now()
	var granted int64
	if id == clientv3.NoLease {
		resp, err := client.Grant(o.ctx, int64(o.ttl))
		if err != nil {
			return nil, err
		}
		id, granted = resp.ID, resp.TTL
	} else {
		// etcd's package starts a keepalive on a missing lease and hands back a
		// session that is already dead; renewing once first gives a clear error.
		resp, err := client.KeepAliveOnce(o.ctx, id)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil, fmt.Errorf("%w: %x: %w", ErrLeaseNotFound, int64(id), err)
		}
		if err != nil {
			return nil, err
		}
		granted = resp.TTL
	}

	s := &Session{
		client: client,
		opts:   o,
		id:     id,
		ttl:    time.Duration(granted) * time.Second,
		donec:  make(chan struct{}),
		checkc: make(chan struct{}, 1),
		users:  make(map[string]int),
		stale:  make(map[string]int64),
	}
	// The session's context carries the caller's values but not its
	// cancellation: run cancels it itself, so that its cause always wraps
	// ErrSessionExpired.
	s.ctx, s.cancel = context.WithCancelCause(context.WithoutCancel(o.ctx))
	s.deadline = deadlineAfter(sent, s.ttl)
	go s.run()
	return s, nil
}

// Client is the etcd client that is attached to the session.
func (s *Session) Client() *clientv3.Client { return s.client }

// Lease is the lease ID for keys bound to the session.
func (s *Session) Lease() clientv3.LeaseID { return s.id }

// Ctx is the context attached to the session. It is cancelled when the
// session ends: its lease is revoked or expires, its conservative deadline
// passes without a renewal, its WithContext context ends, or Orphan or Close
// is called. context.Cause(s.Ctx()) says why and matches ErrSessionExpired.
func (s *Session) Ctx() context.Context { return s.ctx }

// Done returns a channel that is closed when the session ends, at the same
// moment as Ctx is cancelled.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Deadline returns the session's conservative deadline: the time before
// which the server cannot have expired the lease, as far as this client
// knows. The session ends when it passes without a renewal.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// Orphan stops renewing the lease without revoking it, and returns once the
// keepalive goroutine has stopped. Keys on the lease live on until it
// expires (or is adopted by another session with WithLease). This is useful
// when the connection state is unknown (a revoke could hang) or to hand the
// lease to another process.
func (s *Session) Orphan() {
	s.cancel(fmt.Errorf("%w: session orphaned", ErrSessionExpired))
	<-s.donec
}

// Close orphans the session and revokes its lease, which deletes every key
// attached to it. The revoke is bounded by the lease TTL and by the
// WithContext context: if that context has ended, the lease is left to
// expire and its error is returned. Closing a session whose lease is already
// gone, or closing twice, returns nil.
func (s *Session) Close() error {
	s.Orphan()
	// If the revoke takes longer than the TTL, the lease has expired anyway.
	ctx, cancel := context.WithTimeout(s.opts.ctx, s.ttl)
	defer cancel()
	_, err := s.client.Revoke(ctx, s.id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}

// run renews the lease every TTL/3, and sooner when asked through checkc,
// until the session ends. After a failed renewal it retries every
// retryInterval at most, until the conservative deadline passes.
func (s *Session) run() {
	defer close(s.donec)
	next := time.NewTimer(s.ttl / 3)
	defer next.Stop()
	expiry := time.NewTimer(time.Until(s.Deadline()))
	defer expiry.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.opts.ctx.Done():
			s.cancel(fmt.Errorf("%w: session context ended: %w", ErrSessionExpired, context.Cause(s.opts.ctx)))
			return
		case <-expiry.C:
			s.cancel(fmt.Errorf("%w: lease %x not renewed before its deadline", ErrSessionExpired, int64(s.id)))
			return
		case <-s.checkc:
		case <-next.C:
		}

		err := s.renew()
		switch {
		case err == nil:
			expiry.Reset(time.Until(s.Deadline()))
			next.Reset(s.ttl / 3)
			s.sweep()
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.cancel(fmt.Errorf("%w: lease %x revoked or expired", ErrSessionExpired, int64(s.id)))
			return
		default:
			next.Reset(min(s.ttl/3, retryInterval))
		}
	}
}

// renew sends one keepalive and, when it is answered, moves the deadline to
// the send time plus the TTL granted. One attempt waits at most
// renewTimeout, and never past the deadline.
func (s *Session) renew() error {
	sent := time.Now()
	ctx, cancel := context.WithDeadline(s.ctx, s.Deadline())
	defer cancel()
	ctx, cancel2 := context.WithTimeout(ctx, renewTimeout)
	defer cancel2()
	resp, err := s.client.KeepAliveOnce(ctx, s.id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := deadlineAfter(sent, time.Duration(resp.TTL)*time.Second); d.After(s.deadline) {
		s.deadline = d
	}
	return nil
}

// deadlineAfter is the conservative deadline for a renewal of a lease with
// the given TTL sent at sent: the server restarted the TTL no earlier than it
// received the request. The margin covers clock-rate differences and the
// time the caller needs to react.
func deadlineAfter(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - min(ttl/10, time.Second))
}

// check asks the keepalive goroutine to renew the lease now; a lease that is
// gone then ends the session. It never blocks.
func (s *Session) check() {
	select {
	case s.checkc <- struct{}{}:
	default:
	}
}

// cleanupTimeout bounds each attempt to delete a lock key after a failed or
// cancelled Lock (etcd #18082: etcd's package used the client's context and
// could hang while etcd was unreachable).
const cleanupTimeout = 5 * time.Second

// use records that a Mutex or Election of this session is about to write or
// wait on key, so that the session neither deletes it as stale nor lets a
// failed Lock on another Mutex sharing the key delete it.
func (s *Session) use(key string) {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[key]++
	delete(s.stale, key)
}

// unuse undoes use. With remove, and when no other user of this session is
// left on key, it also deletes key: by create revision rev, or by lease when
// rev is 0 (unknown). The delete uses a fresh context bounded by
// cleanupTimeout, because ctx may already be done. When it fails, the key is
// remembered and deleted after the next successful renewal, so that a lock
// key is never left behind for as long as the session lives.
func (s *Session) unuse(ctx context.Context, key string, rev int64, remove bool) {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	s.mu.Lock()
	s.users[key]--
	last := s.users[key] <= 0
	if last {
		delete(s.users, key)
	}
	s.mu.Unlock()
	if !remove || !last {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	// A closed client cannot delete anything: do not retry until the timeout.
	defer context.AfterFunc(s.client.Ctx(), cancel)()
	if err := s.deleteKey(ctx, key, rev); err != nil {
		s.mu.Lock()
		s.stale[key] = rev
		s.mu.Unlock()
		s.check()
	}
}

// sweep deletes the keys whose cleanup failed earlier.
func (s *Session) sweep() {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	s.mu.Lock()
	stale := make(map[string]int64, len(s.stale))
	for k, rev := range s.stale {
		stale[k] = rev
	}
	s.mu.Unlock()
	for key, rev := range stale {
		ctx, cancel := context.WithTimeout(s.ctx, cleanupTimeout)
		err := s.deleteKey(ctx, key, rev)
		cancel()
		if err != nil {
			return
		}
		s.mu.Lock()
		delete(s.stale, key)
		s.mu.Unlock()
	}
}

// deleteKey deletes key if it has create revision rev or, when rev is 0,
// if it is attached to this session's lease.
func (s *Session) deleteKey(ctx context.Context, key string, rev int64) error {
	if rev > 0 {
		_, err := deleteRev(ctx, s.client, key, rev)
		return err
	}
	_, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", s.id)).
		Then(clientv3.OpDelete(key)).
		Commit()
	return err
}

// deleteRev deletes key only if its create revision is rev, so that a late
// or retried delete never removes a newer incarnation of the same key (etcd
// #22082). A key that is already gone or newer is not an error.
// It reports whether it deleted the key.
func deleteRev(ctx context.Context, client *clientv3.Client, key string, rev int64) (bool, error) {
	resp, err := client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

type sessionOptions struct {
	ttl     int
	leaseID clientv3.LeaseID
	ctx     context.Context
	err     error // the first invalid option
}

// SessionOption configures a Session.
type SessionOption func(*sessionOptions)

// WithTTL sets the session's TTL in seconds (default 60). The server may
// grant more. A TTL of zero or less makes NewSession return an error matching
// ErrInvalidTTL; etcd's package silently kept the default instead.
func WithTTL(ttl int) SessionOption {
	return func(o *sessionOptions) {
		if ttl <= 0 && o.err == nil {
			o.err = fmt.Errorf("%w: WithTTL(%d)", ErrInvalidTTL, ttl)
		}
		o.ttl = ttl
	}
}

// WithLease makes the session adopt an existing lease instead of granting a
// new one, for example to reclaim a lock or leadership after a restart.
// NewSession renews it once and returns an error matching ErrLeaseNotFound if
// it no longer exists. WithTTL is ignored: the lease keeps its own TTL.
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
