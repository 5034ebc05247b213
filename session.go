package concurrency

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

const defaultSessionTTL = 60

// Session is a lease and the goroutine that keeps it alive. Keys that a
// Mutex or Election writes are attached to the lease, so they vanish when the
// lease ends: a hold lasts at most as long as its lease.
//
// Unlike etcd's package, a Session renews its lease with its own keepalive
// loop so that it knows when each renewal was sent. It keeps a conservative
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
	settling sync.WaitGroup // enqueues awaited, and max-hold leases revoked, in the background (see settledEnqueue, hold.bound)
	sweeping sync.WaitGroup // the cleanup goroutine, while it runs (see kickSweeper)
	checkc   chan struct{}  // asks the keepalive goroutine to renew (and so check) the lease now
	sweepc   chan struct{}  // asks the cleanup goroutine to delete leftover keys

	mu        sync.Mutex // guards deadline, keys, closing and sweeperOn
	deadline  time.Time
	closing   bool   // Close has begun: no goroutine starts in the background
	sweeperOn bool   // the cleanup goroutine runs
	keys      keySet // lock keys this session uses or must clean up

	ins *instruments // metrics and tracer; nil without (see metrics.go)

	watchMu sync.Mutex // guards watches
	// watches are the open watches of the session's waits, linked by
	// their inSession: the end of its life ends them (see endWatches).
	watches *watch
}

// keyState is what a session knows of one of its lock keys.
type keyState struct {
	users int32 // Mutexes and Elections of this session using the key (int32: with stale, one word)
	// stale: deleting the key failed; the cleanup goroutine retries, by
	// create revision rev (0: by lease).
	stale bool
	rev   int64
	// suspect: until then, an enqueue of the key whose outcome is unknown
	// may still be applied by etcd; while nobody uses the key, the cleanup
	// goroutine deletes it by lease after each renewal (see acquire).
	suspect time.Time
	// deleting is closed when a delete of the key in flight ends; nil when
	// none is. A use waits for it, so that no new user adopts an
	// incarnation that is being deleted.
	deleting chan struct{}
}

// keySet is a session's lock keys and their state. A session mostly uses
// one key at a time: that one is kept without a map (a map of one key
// cost about 200 bytes per session in use), and a map is made once a
// second key is used at the same time. The zero value is empty. The
// session's mu guards it.
type keySet struct {
	first  string    // a key, if firstK is not nil
	firstK *keyState // the state of first; nil if none
	more   map[string]*keyState
}

func (ks *keySet) get(key string) *keyState {
	if ks.firstK != nil && ks.first == key {
		return ks.firstK
	}
	return ks.more[key]
}

// put adds key, which the set does not have, with state k.
func (ks *keySet) put(key string, k *keyState) {
	if ks.firstK == nil {
		ks.first, ks.firstK = key, k
		return
	}
	if ks.more == nil {
		ks.more = make(map[string]*keyState)
	}
	ks.more[key] = k
}

func (ks *keySet) del(key string) {
	if ks.firstK != nil && ks.first == key {
		ks.first, ks.firstK = "", nil
		return
	}
	delete(ks.more, key)
}

// all yields each key and its state; the loop may delete the key it is
// given.
func (ks *keySet) all() iter.Seq2[string, *keyState] {
	return func(yield func(string, *keyState) bool) {
		if ks.firstK != nil && !yield(ks.first, ks.firstK) {
			return
		}
		for key, k := range ks.more {
			if !yield(key, k) {
				return
			}
		}
	}
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
	if client == nil {
		return nil, ErrNilClient
	}
	o := sessionOptions{ttl: defaultSessionTTL, ctx: client.Ctx()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxHold != 0 && o.maxHold < time.Second {
		return nil, fmt.Errorf("%w: WithMaxHold(%v)", ErrInvalidMaxHold, o.maxHold)
	}
	if o.lockDelay < 0 {
		return nil, fmt.Errorf("%w: WithLockDelay(%v)", ErrInvalidLockDelay, o.lockDelay)
	}
	if o.health != nil {
		if err := o.health.valid(); err != nil {
			return nil, err
		}
	}
	if o.badTTL {
		client.GetLogger().Warn("concurrency: WithTTL(): TTL should be > 0, keeping the current TTL", zap.Int("ttl", o.ttl))
	}

	var record string
	if o.owner != nil {
		r, err := ownerRecord(*o.owner)
		if err != nil {
			return nil, err
		}
		record = r
	}

	id := o.leaseID
	sent := time.Now()
	var granted int64
	var missing error
	// Unlike etcd's (#19778), the first round trip never waits forever
	// for a cluster that does not answer: it is asked as every request of
	// a session is (see ask), and bounded by newSessionTimeout.
	wait := livenessFor(time.Duration(o.ttl) * time.Second).wait
	gctx, cancel := context.WithTimeoutCause(o.ctx, newSessionTimeout(o.ttl),
		fmt.Errorf("%w: NewSession: etcd did not answer within %v", context.DeadlineExceeded, newSessionTimeout(o.ttl)))
	defer cancel()
	if id == clientv3.NoLease {
		var err error
		id, granted, err = grantLease(gctx, client, wait, int64(o.ttl))
		if err != nil {
			return nil, sessionStartErr(gctx, err)
		}
	} else {
		// Renew the adopted lease once, to learn its TTL (and so the
		// deadline) before anything is attached to it. A renewal applied
		// twice or late only renews again.
		resp, _, err := ask(gctx, client, wait, classRead, func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
			return client.KeepAliveOnce(ctx, id)
		})
		err = sessionStartErr(gctx, err)
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			missing = fmt.Errorf("%w: lease %x: %w: %w", ErrSessionExpired, int64(id), ErrLeaseNotFound, err)
		case err != nil:
			return nil, err
		default:
			granted = resp.TTL
		}
	}

	s := &Session{
		client: client,
		opts:   o,
		id:     id,
		ttl:    time.Duration(granted) * time.Second,
		checkc: make(chan struct{}, 1),
		sweepc: make(chan struct{}, 1),
		ins:    newInstruments(o.metrics, o.tracerProvider),
	}
	// The session's contexts carry the caller's values but not its
	// cancellation: the session cancels them itself, so that their cause
	// always wraps ErrSessionExpired.
	life, endLife := context.WithCancelCause(context.WithoutCancel(o.ctx))
	s.life = life
	s.endLife = func(cause error) {
		endLife(cause)
		s.endWatches()
	}
	s.ctx, s.cancel = context.WithCancelCause(s.life)
	s.deadline = deadlineAfter(sent, s.ttl)
	if missing != nil {
		s.endLife(missing)
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
	stop := context.AfterFunc(o.ctx, func() {
		s.endLife(fmt.Errorf("%w: session context ended: %w", ErrSessionExpired, context.Cause(o.ctx)))
	})
	context.AfterFunc(s.life, func() { stop() })
	if o.health != nil {
		s.done.Add(1)
		go s.checkHealth(o.health)
	}
	return s, nil
}

// addWatch lists w, an open watch of one of the session's waits, so that
// the end of the session's life ends it, and reports whether it did: not
// once that life has ended.
func (s *Session) addWatch(w *watch) bool {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.life.Err() != nil {
		return false
	}
	push(&s.watches, w, sessionLinks)
	return true
}

// dropWatch takes w, listed by addWatch, off the session's watches.
func (s *Session) dropWatch(w *watch) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	unlink(&s.watches, w, sessionLinks)
}

// endWatches ends the open watches of the session's waits, once its life
// has ended (see endLife): their waits return the life's cause. One list
// per session, not a context.AfterFunc per watch (128 bytes per waiter),
// nor a second channel in each watch's wait (see watchUntil).
func (s *Session) endWatches() {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	for w := s.watches; w != nil; w = w.inSession.next {
		w.cancel()
	}
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
// passes without a renewal, its WithContext context ends, or Orphan or Close
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
// whose lease is already gone, or closing twice, returns nil.
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
	// If the revoke takes longer than the TTL, the lease has expired anyway.
	ctx, cancel := context.WithTimeout(s.opts.ctx, s.ttl)
	defer cancel()
	return s.revokeLease(ctx, s.id)
}

// run renews the lease every TTL/3, and sooner when asked through checkc,
// until the session ends. After a failed renewal it retries every
// retryInterval at most, until the conservative deadline passes. It never
// waits on anything but a renewal, itself bounded by renewTimeout.
func (s *Session) run() {
	defer s.done.Done()
	next := time.NewTimer(s.ttl / 3)
	defer next.Stop()
	expiry := time.NewTimer(time.Until(s.Deadline()))
	defer expiry.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-expiry.C:
			s.ins.deadlinePassed()
			s.endLife(fmt.Errorf("%w: lease %x not renewed before its deadline", ErrSessionExpired, int64(s.id)))
			return
		case <-s.checkc:
		case <-next.C:
		}

		sent := time.Now()
		err := s.renew()
		s.ins.renewed(sent, err)
		switch {
		case err == nil:
			expiry.Reset(time.Until(s.Deadline()))
			next.Reset(s.ttl / 3)
			s.kickSweeper()
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.endLife(fmt.Errorf("%w: lease %x %w", ErrSessionExpired, int64(s.id), errLeaseLost))
			return
		default:
			next.Reset(min(s.ttl/3, retryInterval))
		}
	}
}

// renewTimeout bounds one keepalive attempt, so that a renewal stuck on a
// dead connection is retried (on another connection) well before the
// deadline: a sixth of the TTL, between 100 ms and 5 s. With a TTL of 6 s a
// stuck attempt gives up after 1 s, leaving time for three more before the
// deadline.
func (s *Session) renewTimeout() time.Duration {
	return min(max(s.ttl/6, 100*time.Millisecond), 5*time.Second)
}

// renew renews the lease and, once etcd answers, moves the deadline to
// the send time of the renewal's first attempt plus the TTL granted. It
// is asked as ask does, with renewTimeout as the wait: an attempt that
// waits longer has a second sent beside it, not instead of it, so that a
// cluster slow to answer (etcd's leader waits for its applies before it
// renews) is not taken for a dead connection. It waits until the
// deadline at most. A renewal applied twice or late renews the lease
// again, later than the deadline counts.
func (s *Session) renew() error {
	sent := time.Now()
	ctx, cancel := context.WithDeadline(s.ctx, s.Deadline())
	defer cancel()
	resp, _, err := ask(ctx, s.client, s.renewTimeout(), classRead, func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		return s.client.KeepAliveOnce(ctx, s.id)
	})
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

// live is how long the session's waits and holds trust a silent
// connection (see liveness).
func (s *Session) live() liveness { return livenessFor(s.ttl) }

// get is a linearizable read of key, asked as ask does.
func (s *Session) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, _, err := sessionAsk(ctx, s, classRead, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return s.client.Get(ctx, key, opts...)
	})
	return resp, err
}

// deadlineAfter is the conservative deadline for a renewal of a lease with
// the given TTL sent at sent: the server restarted the TTL no earlier than it
// received the request. The margin covers clock-rate differences and the
// time the caller needs to react.
func deadlineAfter(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - min(ttl/10, time.Second))
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

// startSettling counts an enqueue that may be awaited in the background
// (see settledEnqueue), unless Close has begun; the enqueue's goroutine
// calls s.settling.Done.
func (s *Session) startSettling() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.settling.Add(1)
	return true
}

// grantFor grants a lease of its own for d, rounded up to whole seconds,
// that nobody renews (a max hold's, a lock-delay's), as grantLease does.
func (s *Session) grantFor(ctx context.Context, d time.Duration) (clientv3.LeaseID, error) {
	id, _, err := grantLease(ctx, s.client, s.live().wait, int64((d+time.Second-1)/time.Second))
	return id, err
}

// grantLease grants a lease of ttl seconds and returns its ID and the TTL
// granted. The ID is picked here, at random, not by etcd, so that every
// attempt of the grant (see ask) asks for the same lease: an attempt that
// etcd applies after another was applied is refused (the lease exists)
// and grants nothing, so no lease is granted that nobody knows of. An
// attempt refused so after another was sent counts as granted, and the
// lease's TTL is read; a refusal of the only attempt sent is an ID that
// another client picked, and another ID is tried. An attempt applied
// after the lease was revoked grants it anew, with no key, until its TTL
// runs out. Transient failures (see transient) are retried until ctx
// ends.
//
// A client without a gRPC connection of its own (clientv3.NewCtxClient, as
// etcd's v3client serves an embedded server in process, with no network
// between) cannot send a grant with an ID: its one attempt is sent
// through its Lease, as etcd's package sends it.
func grantLease(ctx context.Context, client *clientv3.Client, d time.Duration, ttl int64) (clientv3.LeaseID, int64, error) {
	conn := client.ActiveConnection()
	if conn == nil {
		var resp *clientv3.LeaseGrantResponse
		err := retry(ctx, func() (err error) {
			resp, err = client.Grant(ctx, ttl)
			return err
		})
		if err != nil {
			return 0, 0, err
		}
		return resp.ID, resp.TTL, nil
	}
	lc := pb.NewLeaseClient(conn)
	for {
		id := clientv3.LeaseID(rand.Int64N(math.MaxInt64-1) + 1)
		var resp *pb.LeaseGrantResponse
		var sent int
		err := retry(ctx, func() (err error) {
			var n int
			resp, n, err = ask(ctx, client, d, classWrite, func(ctx context.Context) (*pb.LeaseGrantResponse, error) {
				resp, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: ttl, ID: int64(id)})
				return resp, rpcErr(ctx, err)
			})
			sent += n
			return err
		})
		switch {
		case err == nil:
			return id, resp.TTL, nil
		case errors.Is(err, rpctypes.ErrLeaseExist) && sent > 1:
			ttlResp, _, err := ask(ctx, client, d, classRead, func(ctx context.Context) (*clientv3.LeaseTimeToLiveResponse, error) {
				return client.TimeToLive(ctx, id)
			})
			if err != nil {
				return 0, 0, err
			}
			return id, ttlResp.GrantedTTL, nil
		case errors.Is(err, rpctypes.ErrLeaseExist):
			continue
		default:
			return 0, 0, err
		}
	}
}

// revoke revokes lease, a max hold's (see hold.bound), within
// cleanupTimeout; if it fails, the lease expires by itself. A revoke
// applied twice or late finds the lease gone.
func (s *Session) revoke(lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.opts.ctx), cleanupTimeout)
	defer cancel()
	defer context.AfterFunc(s.client.Ctx(), cancel)() // a closed client revokes nothing
	_ = s.revokeLease(ctx, lease)
}

// revokeLease revokes lease, retried while etcd is unreachable, until ctx
// ends. A lease already gone is no error.
func (s *Session) revokeLease(ctx context.Context, lease clientv3.LeaseID) error {
	err := retry(ctx, func() error {
		_, _, err := sessionAsk(ctx, s, classWrite, func(ctx context.Context) (*clientv3.LeaseRevokeResponse, error) {
			return s.client.Revoke(ctx, lease)
		})
		return err
	})
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}

// leaseGone ends the session's life after etcd refused a write because the
// lease does not exist, and returns the error for the caller.
func (s *Session) leaseGone(err error) error {
	err = fmt.Errorf("%w: lease %x: %w: %w", ErrSessionExpired, int64(s.id), ErrLeaseNotFound, err)
	s.endLife(err)
	return err
}

// cleanupTimeout bounds each attempt to delete a lock key after a failed or
// cancelled Lock (etcd #18082: etcd's package used the client's context and
// could hang while etcd was unreachable).
const cleanupTimeout = 5 * time.Second

// lateApplyWindow is how long after an enqueue of unknown outcome the
// session keeps deleting the key whenever nobody uses it (at least a TTL):
// etcd applies or drops a proposal within its request timeout (7 s by
// default) plus a leader election, far less than this.
const lateApplyWindow = time.Minute

// use records that a Mutex or Election of this session is about to write or
// wait on key, so that the session neither deletes it as stale nor lets a
// failed Lock on another Mutex sharing the key delete it. If a delete of key
// is in flight and wait is true, use first waits for it to end (at most
// cleanupTimeout), or returns ctx's error if ctx ends first, in which case
// the key is not used.
func (s *Session) use(ctx context.Context, key string, wait bool) error {
	for {
		s.mu.Lock()
		k := s.keys.get(key)
		if k == nil {
			k = &keyState{}
			s.keys.put(key, k)
		}
		if d := k.deleting; d != nil && wait {
			s.mu.Unlock()
			select {
			case <-d:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		k.users++
		k.stale = false
		s.mu.Unlock()
		return nil
	}
}

// cleanup says what unuse does with a key that no other user of the session
// is left on.
type cleanup int

const (
	keep        cleanup = iota // leave it: it was released, or is still held
	deleteNow                  // delete it before returning, within cleanupTimeout
	deleteLater                // leave it to the cleanup goroutine
)

// unuse undoes use. When no other user of this session is left on key, it
// keeps, deletes or hands to the cleanup goroutine the key as then says: by
// create revision rev, or by lease when rev is 0 (unknown). A delete now uses
// a fresh context bounded by cleanupTimeout, because ctx may already be
// done; no lock is held while it runs. When it fails, the key is deleted by
// the cleanup goroutine once etcd answers again, so that a lock key is never
// left behind for as long as the session lives.
func (s *Session) unuse(ctx context.Context, key string, rev int64, then cleanup) {
	s.mu.Lock()
	k := s.keys.get(key)
	k.users--
	if k.users > 0 || then == keep {
		s.forgetLocked(key, k)
		s.mu.Unlock()
		return
	}
	if then == deleteLater {
		k.stale, k.rev = true, rev
		s.mu.Unlock()
		s.check()
		s.kickSweeper()
		return
	}
	k.deleting = make(chan struct{})
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	// A closed client cannot delete anything: do not retry until the timeout.
	defer context.AfterFunc(s.client.Ctx(), cancel)()
	err := s.deleteKey(ctx, key, rev)
	s.deleted(key, rev, err)
	if err != nil {
		s.check()
		s.kickSweeper()
	}
}

// deleted ends a delete of key that unuse or sweep started: on failure the
// key is left stale, for the cleanup goroutine.
func (s *Session) deleted(key string, rev int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys.get(key)
	close(k.deleting)
	k.deleting = nil
	if err != nil && k.users == 0 {
		k.stale, k.rev = true, rev
	} else if err == nil && k.rev == rev {
		k.stale = false
	}
	s.forgetLocked(key, k)
}

// forgetLocked drops the state of key once nothing is left to do for it.
// The caller holds s.mu.
func (s *Session) forgetLocked(key string, k *keyState) {
	if k.users <= 0 && !k.stale && k.deleting == nil && time.Now().After(k.suspect) {
		s.keys.del(key)
	}
}

// suspect marks key, whose enqueue failed with an unknown outcome, for the
// cleanup goroutine (see lateApplyWindow).
func (s *Session) suspect(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.keys.get(key); k != nil {
		k.suspect = time.Now().Add(max(lateApplyWindow, s.ttl))
	}
	s.kickLocked()
}

// kickSweeper asks the cleanup goroutine to run, and starts it if keys
// are left to delete and it does not run. It never blocks.
func (s *Session) kickSweeper() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kickLocked()
}

// kickLocked is kickSweeper; the caller holds s.mu.
func (s *Session) kickLocked() {
	if s.sweeperOn {
		select {
		case s.sweepc <- struct{}{}:
		default:
		}
		return
	}
	if s.closing || s.life.Err() != nil || !s.pendingLocked(time.Now()) {
		return
	}
	s.sweeperOn = true
	s.sweeping.Add(1)
	go s.sweeper()
}

// pendingLocked reports whether a key is left to delete: stale, or
// suspect until a time after now. The caller holds s.mu.
func (s *Session) pendingLocked(now time.Time) bool {
	for _, k := range s.keys.all() {
		if k.stale || now.Before(k.suspect) {
			return true
		}
	}
	return false
}

// suspectSweep is how often the cleanup goroutine deletes suspect keys
// again while any is suspect, so that a late-applied enqueue leaves its
// key for about that long, whatever the TTL.
const suspectSweep = time.Second

// sweeper is the cleanup goroutine: it runs while keys are left to delete
// (see kickSweeper), and deletes the keys whose cleanup failed and the
// suspect keys nobody uses at once, then every suspectSweep, when asked,
// and after each renewal, until none is left or the session's life ends.
// It goes on after Orphan, as the session stays usable (etcd's Lock
// service orphans its sessions): a key left by a failed Lock must not stay
// for the life of a lease that someone else renews.
func (s *Session) sweeper() {
	defer s.sweeping.Done()
	tick := time.NewTimer(suspectSweep)
	defer tick.Stop()
	for {
		s.sweep()
		s.mu.Lock()
		if s.life.Err() != nil || !s.pendingLocked(time.Now()) {
			s.sweeperOn = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		tick.Reset(suspectSweep)
		select {
		case <-s.life.Done():
		case <-s.sweepc:
		case <-tick.C:
		}
	}
}

// sweep deletes, one at a time, each unused key that is stale or suspect.
// It stops at the first failure: the sweeper tries again. A suspect key is
// deleted by lease, and stays suspect until its window passes.
func (s *Session) sweep() {
	now := time.Now()
	s.mu.Lock()
	var keys []string
	for key, k := range s.keys.all() {
		if k.users <= 0 && (k.stale || now.Before(k.suspect)) {
			keys = append(keys, key)
		} else {
			s.forgetLocked(key, k)
		}
	}
	s.mu.Unlock()
	for _, key := range keys {
		rev, ok := s.startSweep(key, now)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(s.life, cleanupTimeout)
		err := s.deleteKey(ctx, key, rev)
		cancel()
		s.deleted(key, rev, err)
		if err != nil {
			return
		}
	}
}

// startSweep marks key as being deleted by sweep, if it still needs to be,
// and returns the create revision to delete it by (0: by lease).
func (s *Session) startSweep(key string, now time.Time) (rev int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys.get(key)
	if k == nil || k.users > 0 || k.deleting != nil || !k.stale && !now.Before(k.suspect) {
		return 0, false
	}
	k.deleting = make(chan struct{})
	if k.stale {
		return k.rev, true
	}
	return 0, true
}

// deleteKey deletes key if it has create revision rev or, when rev is 0,
// if it is attached to this session's lease: then it reads the key first,
// and deletes it by the create revision read, so that a delete applied
// late never removes a later key of the same name on the same lease (a
// new hold's). While it runs, no user of the session writes the key (see
// use), so the key it reads is one of an enqueue of unknown outcome.
func (s *Session) deleteKey(ctx context.Context, key string, rev int64) error {
	if rev == 0 {
		resp, err := s.get(ctx, key)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 || clientv3.LeaseID(resp.Kvs[0].Lease) != s.id {
			return nil
		}
		rev = resp.Kvs[0].CreateRevision
	}
	_, err := s.deleteRev(ctx, key, rev)
	return err
}

// deleteRev deletes key only if its create revision is rev, so that a late
// or retried delete never removes a newer incarnation of the same key (etcd
// #22082). A key that is already gone or newer is not an error.
// It reports whether it deleted the key. It is asked as ask does; a key
// that an attempt finds gone when more than one was sent was then most
// likely deleted by another, and counts as deleted.
//
// The operations also, if any, are applied in the same transaction as the
// delete (a lock-delay's release mark, see markReleased): applied twice or
// late, they are applied only with the delete, which finds the key gone.
func (s *Session) deleteRev(ctx context.Context, key string, rev int64, also ...clientv3.Op) (bool, error) {
	ops := append([]clientv3.Op{clientv3.OpDelete(key)}, also...)
	resp, sent, err := sessionAsk(ctx, s, classWrite, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(ops...).
			Commit()
	})
	if err != nil {
		return false, err
	}
	return resp.Succeeded || sent > 1, nil
}

// setIfRev sets the value of key to val, on lease (the session's, or a
// max hold's), if key still has create revision rev and mod revision
// mod: a value it sets is never set back by an attempt of an earlier
// write applied late, nor by one of its own attempts applied twice. It is
// asked as ask does. If the key's mod revision is not mod (mod 0: not
// known, read first), it tries again with the key's: a key whose value
// and lease are val and lease already counts as set. It returns the mod
// revision of the key with val and the header of the last answer, and ok
// false if the key is gone or another's (create revision not rev).
func (s *Session) setIfRev(ctx context.Context, key string, rev, mod int64, val string, lease clientv3.LeaseID) (newMod int64, hdr *pb.ResponseHeader, ok bool, err error) {
	if mod == 0 {
		resp, err := s.get(ctx, key)
		if err != nil {
			return 0, nil, false, err
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != rev {
			return 0, resp.Header, false, nil
		}
		mod = resp.Kvs[0].ModRevision
	}
	for {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", rev), clientv3.Compare(clientv3.ModRevision(key), "=", mod)}
		resp, _, err := sessionAsk(ctx, s, classWrite, func(ctx context.Context) (*clientv3.TxnResponse, error) {
			return s.client.Txn(ctx).If(cmps...).
				Then(clientv3.OpPut(key, val, clientv3.WithLease(lease))).
				Else(clientv3.OpGet(key)).
				Commit()
		})
		if err != nil {
			return 0, nil, false, err
		}
		if resp.Succeeded {
			return resp.Header.Revision, resp.Header, true, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != rev {
			return 0, resp.Header, false, nil
		}
		if string(kvs[0].Value) == val && clientv3.LeaseID(kvs[0].Lease) == lease {
			return kvs[0].ModRevision, resp.Header, true, nil
		}
		mod = kvs[0].ModRevision
	}
}

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
