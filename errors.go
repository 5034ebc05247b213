package concurrency

import (
	"errors"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// Errors returned by this package. Match them with errors.Is: most are
// returned wrapped, with the key, lease or revision they concern.
//
// ErrLocked, ErrSessionExpired, ErrLockReleased, ErrElectionNotLeader and
// ErrElectionNoLeader keep the exact text of etcd's package, so that programs (and logs) that compare the strings keep
// working after the import path is swapped.
var (
	// ErrLocked is returned by TryLock when another session holds the lock,
	// or when this Mutex is already held or being locked by another goroutine.
	ErrLocked = errors.New("mutex: Locked by another session")

	// ErrSessionExpired is returned when the session's lease is gone or can no
	// longer be trusted: revoked, expired, not renewed before its conservative
	// deadline, or closed. It is also the context.Cause of a Session's Ctx
	// (which Orphan ends too, though the session stays usable while its
	// lease lives), and of a hold's Ctx when the hold ended because its
	// session did.
	ErrSessionExpired = errors.New("mutex: session is expired")

	// ErrLockReleased is returned by Unlock when the Mutex is not held, and is
	// the context.Cause of a hold's Ctx after Unlock.
	ErrLockReleased = errors.New("mutex: lock has already been released")

	// ErrLockLost means that a hold ended without Unlock: its lock key was
	// deleted or its lease revoked. It is the error of a guarded transaction
	// (Mutex.Txn) that did not commit, and the context.Cause of Mutex.Ctx when
	// the lock key disappeared.
	ErrLockLost = errors.New("concurrency: lock lost")

	// ErrStaleToken is returned by Fence.Check for a token older than one the
	// Fence has already accepted for the same resource.
	ErrStaleToken = errors.New("concurrency: stale fencing token")

	// ErrNilClient is returned by NewSession when the client is nil.
	ErrNilClient = errors.New("concurrency: nil client")

	// ErrNilSession is returned by the methods of a Mutex or Election created
	// with a nil Session.
	ErrNilSession = errors.New("concurrency: nil session")

	// ErrInvalidTTL reports a TTL of zero or less where one is required, as
	// in etcdlock's --ttl. NewSession does not return it: as etcd's does, it
	// ignores WithTTL(n) with n <= 0 and logs a warning.
	ErrInvalidTTL = errors.New("concurrency: TTL must be positive")

	// ErrInvalidPrefix is returned by the methods of a Mutex or Election
	// created with an empty prefix: its range ("/") would take in every lock
	// whose name begins with "/".
	ErrInvalidPrefix = errors.New("concurrency: empty lock prefix")

	// ErrLeaseNotFound is returned, with ErrSessionExpired and etcd's own
	// rpctypes.ErrLeaseNotFound, by Lock, TryLock and Campaign when etcd
	// refused to attach a key to the session's lease because the lease does
	// not exist: a session adopted (WithLease) a missing lease, or an
	// orphaned session's lease expired. Nothing was written.
	ErrLeaseNotFound = errors.New("concurrency: lease not found")

	// ErrElectionNotLeader is returned by Proclaim when the Election is not
	// the leader: Campaign has not won, Resign was called, or the leader key
	// is gone. It is also returned, wrapped, by Campaign, Proclaim and Resign
	// of an Election that ResumeElection was given a key outside the
	// election or a revision that is not positive.
	ErrElectionNotLeader = errors.New("election: not leader")

	// ErrNilFunc is returned by Lead when the function to run as the leader
	// is nil.
	ErrNilFunc = errors.New("concurrency: nil function")

	// ErrInvalidLimit is returned by the methods of a Semaphore created with
	// a limit of zero or less.
	ErrInvalidLimit = errors.New("concurrency: semaphore limit must be positive")

	// ErrInvalidWeight is returned by Semaphore.AcquireN and TryAcquireN
	// for a weight of zero or less.
	ErrInvalidWeight = errors.New("concurrency: semaphore weight must be positive")

	// ErrWeightExceedsLimit is returned by Semaphore.AcquireN and
	// TryAcquireN for a weight above the Semaphore's limit, which could
	// never be granted, and by Semaphore.SetLimit for a limit below the
	// weight of a key of the name. Nothing is written.
	ErrWeightExceedsLimit = errors.New("concurrency: semaphore weight exceeds its limit")

	// ErrLimitMismatch is returned by Semaphore.Acquire and TryAcquire when
	// the semaphore's name is in use with another limit: the first user of a
	// name sets its limit, for as long as any key of the name exists.
	ErrLimitMismatch = errors.New("concurrency: semaphore limit differs from the one in use")

	// ErrLockKind is returned by the methods of a Semaphore or RWMutex when
	// its name is in use by another kind of lock (a Mutex, an Election, a
	// Semaphore or an RWMutex): their keys would mean something else to it.
	ErrLockKind = errors.New("concurrency: lock name is in use by another kind of lock")

	// ErrElectionNoLeader is returned by Leader when the election has no
	// candidate, and so no leader.
	ErrElectionNoLeader = errors.New("election: no leader")

	// ErrDuplicateName is returned by LockAll and UnlockAll when two of
	// the Mutexes given are distinct values with one lock name: on two
	// sessions they would wait for each other for ever, and on one they
	// would share a key.
	ErrDuplicateName = errors.New("concurrency: two locks of one name")

	// ErrLeaderStuck is returned by LeaderStatus.Check when a Lead's term
	// outlived its leadership: it still says leading past its session's
	// conservative deadline, or its fn still runs after the leadership
	// ended.
	ErrLeaderStuck = errors.New("concurrency: leader stuck")

	// ErrInvalidOwner is returned by NewSession and Lead when the Owner
	// given WithOwner or WithLeadOwner is too large to record (its JSON
	// is over 1 KiB).
	ErrInvalidOwner = errors.New("concurrency: invalid owner")

	// ErrMaxHold is the context.Cause of a hold's Ctx when the hold reached
	// the longest time its session allows (WithMaxHold): the hold ended
	// although its holder still ran and renewed its session. Its key is
	// gone or going, on a lease of its own that was never renewed.
	ErrMaxHold = errors.New("concurrency: hold reached its maximum duration")

	// ErrInvalidMaxHold is returned by NewSession for WithMaxHold(d) with
	// d under a second: etcd's leases count whole seconds.
	ErrInvalidMaxHold = errors.New("concurrency: max hold must be at least a second")

	// ErrYieldRequested is the context.Cause of a hold's Ctx when
	// RequestYield asked the hold to let go and its session opted in
	// (WithYield). The hold's key stays until its holder releases it.
	ErrYieldRequested = errors.New("concurrency: yield requested")

	// ErrInvalidLockDelay is returned by NewSession for WithLockDelay(d)
	// with d < 0.
	ErrInvalidLockDelay = errors.New("concurrency: lock delay must not be negative")

	// ErrUnhealthy is wrapped, with ErrSessionExpired, by the cause of a
	// session's Ctx (and of its holds') when its health checks failed
	// (WithHealthCheck) and it ended and revoked its lease.
	ErrUnhealthy = errors.New("concurrency: health checks failed")

	// ErrInvalidHealthCheck is returned by NewSession for WithHealthCheck
	// with an interval of zero or less, fewer than one failure, or a nil
	// check.
	ErrInvalidHealthCheck = errors.New("concurrency: invalid health check")

	// ErrNotHeld is returned by RequestYield when nobody holds the name.
	ErrNotHeld = errors.New("concurrency: lock is not held")

	// ErrInvalidShardCount is returned by Shards, InspectShards and
	// WatchShards for a shard count of zero or less or above
	// MaxShardCount, and by Shards when an older live member of the group
	// runs it with another count: the two would not agree on the shares.
	ErrInvalidShardCount = errors.New("concurrency: invalid shard count")

	// ErrInvalidShardWeight is returned by Shards for WithShardWeight(w)
	// with w <= 0 or w > MaxShardWeight.
	ErrInvalidShardWeight = errors.New("concurrency: invalid shard weight")

	// ErrClientClosed is wrapped, with context.Canceled, by the error of
	// every call whose etcd client was closed (clientv3.Client.Close)
	// before or while it ran: Lead, Shards, WatchLeader, WatchShards, a
	// wait, a request. A session whose client is closed ends at once (with
	// or without WithContext): the cause of its Ctx, and of its holds',
	// wraps ErrSessionExpired and ErrClientClosed. Nothing is revoked or
	// deleted: the keys stay until the lease expires. (The request layer,
	// internal/request, defines it: the same value.)
	ErrClientClosed = request.ErrClientClosed
)

// errLeaseLost is wrapped by the causes that say the lease is gone from the
// server (revoked or expired), as opposed to a session that ended on its
// own (deadline, Close): it tells lost_lease from session_expired, and from
// lost_key_deleted when a hold's key was deleted with its lease.
var errLeaseLost = errors.New("revoked or expired")
