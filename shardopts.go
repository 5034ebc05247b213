package concurrency

import (
	"context"
	"fmt"
	"time"
)

// This file holds the options of Shards: its own (WithShardWeight,
// WithShardStatus), the options of its members' sessions (WithShardSession,
// and WithShardTTL), and the deprecated wrappers of single session
// options.

type shardOptions struct {
	weight  int
	status  *ShardStatus
	err     error           // the first invalid option
	session []SessionOption // given to each of the member's sessions (WithShardSession)

	// Set by settle, once all options are applied, from session:
	ttl     int                  // the sessions' TTL
	unowned ShardMetricsRecorder // WithMetrics's recorder, if it has the shard methods
}

// ShardOption configures Shards.
type ShardOption func(*shardOptions)

// settle sets what Shards reads of its sessions' options.
func (o *shardOptions) settle() {
	so := termOptions(o.session)
	o.ttl = so.ttl
	if sr, ok := so.metrics.(ShardMetricsRecorder); ok {
		o.unowned = sr
	}
}

// WithShardWeight sets the member's weight (default 1, at most
// MaxShardWeight): its share of the shards is n times its weight over the
// sum of the live members' weights, rounded so that the shares add up to
// n. A weight of zero or less, or above MaxShardWeight, makes Shards
// return an error matching ErrInvalidShardWeight before it writes
// anything.
func WithShardWeight(w int) ShardOption {
	return func(o *shardOptions) {
		if (w <= 0 || w > MaxShardWeight) && o.err == nil {
			o.err = fmt.Errorf("%w: WithShardWeight(%d) (1 to %d)", ErrInvalidShardWeight, w, MaxShardWeight)
		}
		o.weight = w
	}
}

// WithShardSession gives opts to each of the member's sessions, after
// those of earlier WithShardSession options (a later option of a kind
// wins, as in NewSession). Each does for a member's session what it does
// for any:
//
//   - WithTTL sets the sessions' TTL (default 60 s, as WithLeadSession
//     explains): how long the shards of a member that crashed stay owned
//     by it before the others take them over; a TTL of zero or less is
//     ignored, as NewSession does;
//   - WithHealthCheck: when the checks fail, the session ends and its
//     lease is revoked, so every shard of the member goes to the others at
//     once, and fn's contexts end with a cause matching ErrUnhealthy;
//     Shards then joins again on a new session, whose checks start afresh;
//   - WithOwner has each session record the owner, so that Inspect and
//     InspectShards show who owns each shard; an Owner too large to record
//     makes Shards return an error matching ErrInvalidOwner at once;
//   - WithMetrics: each shard is a Mutex named group/shard/<i> (kind
//     "mutex"), so with concurrencyprom the shards this process owns are
//     concurrency_lock_holders, the shards it handed over are
//     concurrency_lock_holds_ended_total{cause="yielded"} (and those it
//     lost, the other causes), the shards it took over are
//     concurrency_lock_acquisitions_total, and
//     concurrency_lock_wait_seconds is how long each took from queueing to
//     grant; per shard with WithLockNameLabel, else summed over the
//     process's mutexes. If the recorder also implements
//     ShardMetricsRecorder (concurrencyprom.Metrics does), the member also
//     times the spans in which it sees a shard of the group without a
//     member owning it, from its own view of the group's keys
//     (ShardMetricsRecorder says exactly what is measured, with what
//     error, and what no member can see): with concurrencyprom,
//     concurrency_shard_unowned{group} is how many shards it sees unowned
//     now and concurrency_shard_unowned_seconds{group} a histogram of the
//     spans. Every member sees the same spans: aggregate over members with
//     max, not sum;
//   - WithTracerProvider has the sessions record the spans of the shards'
//     Mutexes (concurrency.acquire, concurrency.hold, concurrency.release).
//
// Any other SessionOption does for each member's session what it does for
// any session (each shard is a Mutex on it). WithLease and WithContext are
// overridden: each session needs a new lease, and Shards' own ctx, not the
// session's, says when to stop (the sessions carry ctx's values).
// WithYield is always given: a member hands its shards over when asked.
// An option NewSession would refuse (an Owner too large, a bad
// WithHealthCheck, WithMaxHold or WithLockDelay) makes Shards return its
// error, matching the option's sentinel, before any round trip.
func WithShardSession(opts ...SessionOption) ShardOption {
	return withShardSession("WithShardSession", opts)
}

// withShardSession is WithShardSession, reporting an option no session
// would take under the name of the option that gave it.
func withShardSession(option string, opts []SessionOption) ShardOption {
	return func(o *shardOptions) {
		if err := termOptionsErr(option, opts); err != nil && o.err == nil {
			o.err = err
		}
		o.session = append(o.session, opts...)
	}
}

// WithShardTTL sets the TTL in seconds of the member's session (default
// 60, as WithLeadSession explains), as WithShardSession(WithTTL(ttl)) does,
// except that a TTL of zero or less makes Shards return an error matching
// ErrInvalidTTL.
//
// Deprecated: use WithShardSession(WithTTL(ttl)), which ignores a TTL of
// zero or less (with a warning in the client's log) as NewSession does.
func WithShardTTL(ttl int) ShardOption {
	return func(o *shardOptions) {
		if ttl <= 0 && o.err == nil {
			o.err = fmt.Errorf("%w: WithShardTTL(%d)", ErrInvalidTTL, ttl)
		}
		WithShardSession(WithTTL(ttl))(o)
	}
}

// WithShardStatus has Shards record in st which shards this member owns
// and whether a fn outlived its shard (ShardStatus.Check). st may be read
// from any goroutine; pass it to one Shards at a time. A nil st is ignored
// (the default).
func WithShardStatus(st *ShardStatus) ShardOption {
	return func(o *shardOptions) { o.status = st }
}

// WithShardHealthCheck gives each of the member's sessions WithHealthCheck
// (see WithShardSession).
//
// Deprecated: use WithShardSession(WithHealthCheck(interval, failures, check)).
func WithShardHealthCheck(interval time.Duration, failures int, check func(ctx context.Context) error) ShardOption {
	return withShardSession("WithShardHealthCheck", []SessionOption{WithHealthCheck(interval, failures, check)})
}

// WithShardOwner has each of the member's sessions record o, as WithOwner
// does (see WithShardSession). An Owner too large to record makes Shards
// return an error matching ErrInvalidOwner at once.
//
// Deprecated: use WithShardSession(WithOwner(o)).
func WithShardOwner(o Owner) ShardOption {
	return withShardSession("WithShardOwner", []SessionOption{WithOwner(o)})
}

// WithShardMetrics has each of the member's sessions report to r, as
// WithMetrics does, and times the spans of unowned shards if r implements
// ShardMetricsRecorder (see WithShardSession). A nil r is ignored (the
// default).
//
// Deprecated: use WithShardSession(WithMetrics(r)).
func WithShardMetrics(r MetricsRecorder) ShardOption { return WithShardSession(WithMetrics(r)) }
