package renew

import "time"

// This file holds when a session renews its lease, and the conservative
// deadline that each answer moves.
//
// A renewal's answer moves the deadline to the renewal's send time plus
// the TTL, minus a margin (see DeadlineAfter): etcd renewed the lease no
// earlier than it received the renewal. So the next renewal must be
// answered before that: if renewals were sent only once the last was
// answered, a round trip of a third of the TTL (a busy leader, a
// congested link) would end every session, while etcd's package, which
// counts from the answer and sends again every 500 ms until one comes,
// survives up to two thirds. Renewals are therefore sent on a cadence
// counted from the last one sent, not answered, with several waiting at
// once when the round trip is longer than the cadence, and the cadence
// shortened so that the next renewal's answer, if it takes what the last
// took, comes before the deadline (see In). So a session survives
// renewal round trips under two thirds of the TTL (3.3 s at TTL 5, 10 s
// at TTL 15, 40 s at TTL 60), however suddenly they grew, as etcd's
// package does; while they stay long, the cadence keeps the next answers
// in time, with several renewals waiting at once. The price is a cadence
// a margin shorter than a third of the TTL (19 s instead of 20 at TTL
// 60).

// renewSlack is how much earlier than needed, by the last round trip, a
// renewal is sent, for a round trip that grows and for the time an
// answer takes to move the deadline (under -race on a loaded 2-core
// machine, timers and goroutines ran up to half a second late).
const renewSlack = time.Second

// renewGrid is the grid of times that renewals are sent on: a renewal
// due at TTL/3 after the last is sent at the last multiple of renewGrid
// (of the wall clock) before that, so that the sessions of a process
// renew together, in bursts that a stream carries in a few writes and
// etcd's members read in a few wakeups, as etcd's package does (its
// lessor sends every renewal due each 500 ms). A renewal is so sent up to
// renewGrid early, never late.
const renewGrid = 500 * time.Millisecond

// In is how long after now a session with the given TTL sends its next
// renewal, for a last round trip of rtt: a third of the TTL minus the
// margin (see DeadlineAfter), or less if a renewal sent then and answered
// in rtt would come less than renewSlack before the deadline of the one
// sent now (TTL minus the margin after it), though not under renewGrid;
// put on renewGrid unless that is too short for a grid (under 2 s).
//
// A third of the TTL minus the margin, not a third: when round trips grow
// at once, the renewal sent before the first late answer came must be
// answered before the deadline of the one before it, two thirds of the
// TTL after it, less the margin, from which it was sent a third minus the
// margin later: so a session survives a sudden round trip under two
// thirds of the TTL, what etcd's package survives.
func In(ttl, rtt time.Duration) time.Duration {
	d := Cadence(ttl, rtt)
	if d < 4*renewGrid {
		return d
	}
	return d - time.Duration(time.Now().Add(d).UnixNano()%int64(renewGrid))
}

// Cadence is In off the grid: how long after a renewal is sent the next
// is due, for a session with the given TTL and a last round trip of rtt.
func Cadence(ttl, rtt time.Duration) time.Duration {
	d := ttl/3 - Margin(ttl)
	if late := ttl - Margin(ttl) - rtt - renewSlack; late < d {
		d = max(late, renewGrid)
	}
	return d
}

// Timeout bounds one keepalive attempt of a session with the given TTL,
// so that a renewal stuck on a dead connection is retried (on another
// connection) well before the deadline: a sixth of the TTL, between 100
// ms and 5 s. With a TTL of 6 s a stuck attempt gives up after 1 s,
// leaving time for three more before the deadline.
func Timeout(ttl time.Duration) time.Duration {
	return min(max(ttl/6, 100*time.Millisecond), 5*time.Second)
}

// Margin is the margin of DeadlineAfter for a TTL of ttl: a tenth of it,
// 1 s at most.
func Margin(ttl time.Duration) time.Duration { return min(ttl/10, time.Second) }

// DeadlineAfter is the conservative deadline for a renewal of a lease with
// the given TTL sent at sent: the server restarted the TTL no earlier than
// it received the request. The margin covers clock-rate differences and
// the time the caller needs to react.
func DeadlineAfter(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - Margin(ttl))
}
