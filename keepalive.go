package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/renew"
	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds a session's renewals: the loop that sends each on the
// cadence of renew.In, and moves the conservative deadline with each
// answer (see renew.DeadlineAfter). When a renewal is due, and the
// streams that the client's sessions renew on, are internal/renew's.

// maxRenewing is how many renewals of one session may wait for their
// answers at once (each is bounded by the deadline): enough for round
// trips up to two thirds of the TTL on the shortest cadence.
const maxRenewing = 4

// errRenewalUnanswered is, for the metrics, a renewal attempt that had no
// answer in time.
var errRenewalUnanswered = errors.New("concurrency: renewal not answered in time")

// renewResult is what one renewal of run's came to.
type renewResult struct {
	sent time.Time
	took time.Duration
	err  error
}

// run renews the lease on the cadence of renew.In, and sooner when asked
// through checkc, until the session ends; a renewal is sent whether or
// not the last has been answered, up to maxRenewing at once. After a
// failed renewal, with none other waiting, it retries every
// retryInterval at most, until the conservative deadline passes. It never
// waits on anything but its renewals, each bounded by the deadline, and
// returns once they have ended.
func (s *Session) run() {
	defer s.done.Done()
	r, release := useRenewer(s.client)
	defer release()
	k := s.newRenewing(r)
	defer k.stop() // before release: its renewals renew on r
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-k.expiry.C:
			if k.expired() {
				return
			}
			continue
		case res := <-k.results:
			if k.result(res) {
				return
			}
			continue
		case <-s.checkc:
		case <-k.next.C:
		}
		k.send()
	}
}

// renewing is the state of a session's run: its renewals waiting, and
// when the next is due.
type renewing struct {
	s        *Session
	r        *renew.Renewer
	results  chan renewResult
	wg       sync.WaitGroup // the renewals waiting
	waiting  int
	rtt      time.Duration // the last answered renewal's round trip
	lastSent time.Time
	nextAt   time.Time
	next     *time.Timer // fires at nextAt
	expiry   *time.Timer // fires at the deadline
}

// newRenewing starts the timers of s's run, which renews on r. The first
// renewal is due a cadence after the grant was sent (what the first
// deadline counts from), not after it was answered: a grant answered late
// must not leave the first renewal late too.
func (s *Session) newRenewing(r *renew.Renewer) *renewing {
	k := &renewing{s: s, r: r, results: make(chan renewResult, maxRenewing)}
	k.lastSent = s.Deadline().Add(-(s.ttl - renew.Margin(s.ttl)))
	k.nextAt = k.lastSent.Add(renew.Cadence(s.ttl, 0))
	k.next = time.NewTimer(time.Until(k.nextAt))
	k.expiry = time.NewTimer(time.Until(s.Deadline()))
	return k
}

// stop stops the timers and waits for the renewals still waiting.
func (k *renewing) stop() {
	k.next.Stop()
	k.expiry.Stop()
	k.wg.Wait()
}

// at moves the next renewal to t, if that is sooner.
func (k *renewing) at(t time.Time) {
	if t.Before(k.nextAt) {
		k.nextAt = t
		k.next.Reset(time.Until(t))
	}
}

// expired handles the expiry timer, and reports whether the session has
// ended: its deadline passed with no answer.
func (k *renewing) expired() bool {
	s := k.s
	if left := time.Until(s.Deadline()); left > 0 {
		// An answer moved the deadline as the timer fired; its result is
		// on its way.
		k.expiry.Reset(left)
		return false
	}
	// The renewals still waiting failed: none was answered in time (what
	// keepalive failures count, and alert on).
	for range k.waiting {
		s.ins.renewed(time.Time{}, errRenewalUnanswered)
	}
	s.ins.deadlinePassed()
	s.endLife(fmt.Errorf("%w: lease %x not renewed before its deadline", ErrSessionExpired, int64(s.id)))
	return true
}

// result takes what a renewal came to, and reports whether the session
// has ended: etcd no longer has the lease.
func (k *renewing) result(res renewResult) bool {
	s := k.s
	k.waiting--
	s.ins.renewed(res.sent, res.err)
	switch {
	case res.err == nil:
		// A round trip longer than the last brings the next renewal
		// forward, from the last one sent.
		k.rtt = res.took
		k.at(k.lastSent.Add(renew.Cadence(s.ttl, k.rtt)))
		k.expiry.Reset(time.Until(s.Deadline()))
		s.kickSweeper()
	case errors.Is(res.err, rpctypes.ErrLeaseNotFound):
		s.endLife(fmt.Errorf("%w: lease %x %w", ErrSessionExpired, int64(s.id), errLeaseLost))
		return true
	case k.waiting == 0:
		k.at(time.Now().Add(min(s.ttl/3, request.RetryInterval)))
	}
	return false
}

// send schedules the next renewal and sends one now, unless maxRenewing
// wait already.
func (k *renewing) send() {
	k.nextAt = time.Now().Add(renew.In(k.s.ttl, k.rtt))
	k.next.Reset(time.Until(k.nextAt))
	if k.waiting >= maxRenewing {
		return
	}
	k.lastSent = time.Now()
	k.waiting++
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		sent := time.Now()
		err := k.s.renew(k.r)
		k.results <- renewResult{sent: sent, took: time.Since(sent), err: err}
	}()
}

// useRenewer returns the renewer of client's sessions (see renew.Shared),
// counting one more session that renews with it until the returned
// function is called.
func useRenewer(client *clientv3.Client) (*renew.Renewer, func()) {
	return stateOf(client).renewers.Use(client)
}

// renewTimeout bounds one keepalive attempt (see renew.Timeout).
func (s *Session) renewTimeout() time.Duration { return renew.Timeout(s.ttl) }

// renew renews the lease on r, the stream that the client's sessions
// share (see renew.Renewer; on a stream of its own with a nil r), and,
// once etcd answers, moves the deadline to the send time of the renewal's
// first attempt plus the TTL granted, if that is later than the deadline
// now (renewals answered out of order move it only forward). It is asked
// as ask does, with renewTimeout as the wait: an attempt that waits
// longer has a second sent beside it, not instead of it, so that a
// cluster slow to answer (etcd's leader waits for its applies before it
// renews) is not taken for a dead connection. It waits at most until the
// deadline its answer would give. A renewal applied twice or late renews
// the lease again, later than the deadline counts.
func (s *Session) renew(r *renew.Renewer) error {
	sent := time.Now()
	// Bounded by the deadline its answer would give, not the one now: a
	// renewal sent while the last still waits moves the deadline past
	// the one now; the session ends at that one anyway if none comes.
	ctx, cancel := context.WithDeadline(s.ctx, deadlineAfter(sent, s.ttl))
	defer cancel()
	var attempts atomic.Int32 // a second attempt goes on a new stream (see renew.Renewer)
	resp, _, err := ask(ctx, s.client, s.renewTimeout(), request.Renew, func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		return renew.KeepAliveOnce(ctx, r, s.client, s.id, attempts.Add(1) > 1)
	})
	if err != nil {
		return err
	}
	if attempts.Load() > 1 {
		// Its first attempt waited past renewTimeout (a silent connection,
		// or a slow one): a failure of that attempt, as the metrics count
		// it, though another answered.
		s.ins.renewed(sent, errRenewalUnanswered)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := deadlineAfter(sent, time.Duration(resp.TTL)*time.Second); d.After(s.deadline) {
		s.deadline = d
	}
	return nil
}

// deadlineAfter is renew.DeadlineAfter: the conservative deadline for a
// renewal of a lease with the given TTL sent at sent.
func deadlineAfter(sent time.Time, ttl time.Duration) time.Time {
	return renew.DeadlineAfter(sent, ttl)
}
