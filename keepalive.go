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
)

// This file holds a session's renewals: when each is sent, and the
// conservative deadline that each answer moves. The stream they go on is
// in renewal.go.
//
// A renewal's answer moves the deadline to the renewal's send time plus
// the TTL, minus a margin (see deadlineAfter): etcd renewed the lease no
// earlier than it received the renewal. So the next renewal must be
// answered before that: if renewals were sent only once the last was
// answered, a round trip of a third of the TTL (a busy leader, a
// congested link) would end every session, while etcd's package, which
// counts from the answer and sends again every 500 ms until one comes,
// survives up to two thirds. Renewals are therefore sent on a cadence
// counted from the last one sent, not answered, with several waiting at
// once when the round trip is longer than the cadence, and the cadence
// shortened so that the next renewal's answer, if it takes what the last
// took, comes before the deadline (see renewIn). So a session survives
// renewal round trips under two thirds of the TTL (3.3 s at TTL 5, 10 s
// at TTL 15, 40 s at TTL 60), however suddenly they grew, as etcd's
// package does; while they stay long, the cadence keeps the next answers
// in time, with up to maxRenewing renewals waiting at once. The price is
// a cadence a margin shorter than a third of the TTL (19 s instead of 20
// at TTL 60).

// maxRenewing is how many renewals of one session may wait for their
// answers at once (each is bounded by the deadline): enough for round
// trips up to two thirds of the TTL on the shortest cadence.
const maxRenewing = 4

// renewSlack is how much earlier than needed, by the last round trip, a
// renewal is sent, for a round trip that grows and for the time an
// answer takes to move the deadline (under -race on a loaded 2-core
// machine, timers and goroutines ran up to half a second late).
const renewSlack = time.Second

// errRenewalUnanswered is, for the metrics, a renewal attempt that had no
// answer in time.
var errRenewalUnanswered = errors.New("concurrency: renewal not answered in time")

// renewResult is what one renewal of run's came to.
type renewResult struct {
	sent time.Time
	took time.Duration
	err  error
}

// run renews the lease on the cadence of renewIn, and sooner when asked
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
	results := make(chan renewResult, maxRenewing)
	var renewing sync.WaitGroup
	defer renewing.Wait() // before release: they renew on r
	waiting := 0
	var rtt time.Duration // the last answered renewal's round trip
	// The first renewal is due a cadence after the grant was sent (what
	// the first deadline counts from), not after it was answered: a
	// grant answered late must not leave the first renewal late too.
	lastSent := s.Deadline().Add(-(s.ttl - margin(s.ttl)))
	nextAt := lastSent.Add(s.cadence(0))
	next := time.NewTimer(time.Until(nextAt))
	defer next.Stop()
	// at moves the next renewal to t, if that is sooner.
	at := func(t time.Time) {
		if t.Before(nextAt) {
			nextAt = t
			next.Reset(time.Until(t))
		}
	}
	expiry := time.NewTimer(time.Until(s.Deadline()))
	defer expiry.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-expiry.C:
			if left := time.Until(s.Deadline()); left > 0 {
				// An answer moved the deadline as the timer fired; its
				// result is on its way.
				expiry.Reset(left)
				continue
			}
			// The renewals still waiting failed: none was answered in
			// time (what keepalive failures count, and alert on).
			for range waiting {
				s.ins.renewed(time.Time{}, errRenewalUnanswered)
			}
			s.ins.deadlinePassed()
			s.endLife(fmt.Errorf("%w: lease %x not renewed before its deadline", ErrSessionExpired, int64(s.id)))
			return
		case res := <-results:
			waiting--
			s.ins.renewed(res.sent, res.err)
			switch {
			case res.err == nil:
				// A round trip longer than the last brings the next
				// renewal forward, from the last one sent.
				rtt = res.took
				at(lastSent.Add(s.cadence(rtt)))
				expiry.Reset(time.Until(s.Deadline()))
				s.kickSweeper()
			case errors.Is(res.err, rpctypes.ErrLeaseNotFound):
				s.endLife(fmt.Errorf("%w: lease %x %w", ErrSessionExpired, int64(s.id), errLeaseLost))
				return
			case waiting == 0:
				at(time.Now().Add(min(s.ttl/3, retryInterval)))
			}
			continue
		case <-s.checkc:
		case <-next.C:
		}
		nextAt = time.Now().Add(s.renewIn(rtt))
		next.Reset(time.Until(nextAt))
		if waiting >= maxRenewing {
			continue
		}
		lastSent = time.Now()
		waiting++
		renewing.Add(1)
		go func() {
			defer renewing.Done()
			sent := time.Now()
			err := s.renew(r)
			results <- renewResult{sent: sent, took: time.Since(sent), err: err}
		}()
	}
}

// renewGrid is the grid of times that renewals are sent on: a renewal
// due at TTL/3 after the last is sent at the last multiple of renewGrid
// (of the wall clock) before that, so that the sessions of a process
// renew together, in bursts that a stream carries in a few writes and
// etcd's members read in a few wakeups, as etcd's package does (its
// lessor sends every renewal due each 500 ms). A renewal is so sent up to
// renewGrid early, never late.
const renewGrid = 500 * time.Millisecond

// renewIn is how long after now the next renewal is sent, for a last
// round trip of rtt: a third of the TTL minus the margin (see
// deadlineAfter), or less if a renewal sent then and answered in rtt
// would come less than renewSlack before the deadline of the one sent now
// (TTL minus the margin after it), though not under renewGrid; put on
// renewGrid unless that is too short for a grid (under 2 s).
//
// A third of the TTL minus the margin, not a third: when round trips grow
// at once, the renewal sent before the first late answer came must be
// answered before the deadline of the one before it, two thirds of the
// TTL after it, less the margin, from which it was sent a third minus the
// margin later: so a session survives a sudden round trip under two
// thirds of the TTL, what etcd's package survives.
func (s *Session) renewIn(rtt time.Duration) time.Duration {
	d := s.cadence(rtt)
	if d < 4*renewGrid {
		return d
	}
	return d - time.Duration(time.Now().Add(d).UnixNano()%int64(renewGrid))
}

// cadence is renewIn off the grid: how long after a renewal is sent the
// next is due, for a last round trip of rtt.
func (s *Session) cadence(rtt time.Duration) time.Duration {
	d := s.ttl/3 - margin(s.ttl)
	if late := s.ttl - margin(s.ttl) - rtt - renewSlack; late < d {
		d = max(late, renewGrid)
	}
	return d
}

// renewTimeout bounds one keepalive attempt, so that a renewal stuck on a
// dead connection is retried (on another connection) well before the
// deadline: a sixth of the TTL, between 100 ms and 5 s. With a TTL of 6 s a
// stuck attempt gives up after 1 s, leaving time for three more before the
// deadline.
func (s *Session) renewTimeout() time.Duration {
	return min(max(s.ttl/6, 100*time.Millisecond), 5*time.Second)
}

// renew renews the lease on r, the stream that the client's sessions
// share (see renewer; on a stream of its own with a nil r), and, once
// etcd answers, moves the deadline to the send time of the renewal's
// first attempt plus the TTL granted, if that is later than the deadline
// now (renewals answered out of order move it only forward). It is asked
// as ask does, with renewTimeout as the wait: an attempt that
// waits longer has a second sent beside it, not instead of it, so that a
// cluster slow to answer (etcd's leader waits for its applies before it
// renews) is not taken for a dead connection. It waits at most until
// the deadline its answer would give. A renewal applied twice or late renews the lease
// again, later than the deadline counts.
func (s *Session) renew(r *renewer) error {
	sent := time.Now()
	// Bounded by the deadline its answer would give, not the one now: a
	// renewal sent while the last still waits moves the deadline past
	// the one now; the session ends at that one anyway if none comes.
	ctx, cancel := context.WithDeadline(s.ctx, deadlineAfter(sent, s.ttl))
	defer cancel()
	var attempts atomic.Int32 // a second attempt goes on a new stream (see renewer.renew)
	resp, _, err := ask(ctx, s.client, s.renewTimeout(), classRenew, func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		return keepAliveOnce(ctx, r, s.client, s.id, attempts.Add(1) > 1)
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

// margin is the margin of deadlineAfter for a TTL of ttl: a tenth of it,
// 1 s at most.
func margin(ttl time.Duration) time.Duration { return min(ttl/10, time.Second) }

// deadlineAfter is the conservative deadline for a renewal of a lease with
// the given TTL sent at sent: the server restarted the TTL no earlier than it
// received the request. The margin covers clock-rate differences and the
// time the caller needs to react.
func deadlineAfter(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - margin(ttl))
}
