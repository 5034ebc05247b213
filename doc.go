// Package concurrency is a drop-in replacement for etcd's
// go.etcd.io/etcd/client/v3/concurrency. Its locking half, Session, Mutex
// and Election, is rewritten with the same API, the same keys and the same
// queue order, so that a program compiles and behaves the same after
// changing only its import path, and so that this package, etcd's package
// and `etcdctl lock` exclude one another on the same lock name. Its
// software transactional memory (NewSTM and the names around it) is etcd's
// own, re-exported unchanged. On the same queue, wait and hold it adds what
// etcd's package lacks: Semaphore (at most n holders), RWMutex (readers
// share, writers are not starved), LockAll (several locks, all or none,
// without deadlock) and Lead (keep one leader running across session loss,
// restarts and shutdowns).
//
// # The contract
//
// A lock name is a queue of keys, one per session, each attached to its
// session's lease. The key with the smallest create revision holds the lock;
// the others wait in create-revision order, each watching only the key just
// before its own. Lock returns nil only after a linearizable read showed its
// key first in the queue at the revision of the returned header (never a
// serializable one: a member that lags could show a key already deleted at
// the leader), so at any etcd revision at most one session holds the lock,
// and holders follow one another in create-revision order. A Semaphore lets
// the oldest keys hold while their weights (1 each, unless AcquireN says
// otherwise) add up to at most its limit; an RWMutex reader needs no older writer, a
// writer no older key. A key that the session finds already in place (an
// earlier enqueue whose answer was lost wrote it) is judged by the same
// read and checks as a new one before it is used, and a Semaphore's or
// RWMutex's key is written only if the name's other keys allow it (their
// limit, their kind), so a refused client leaves nothing in the queue.
// Lock never returns nil once its ctx or its session has ended.
//
// A lock name is a prefix: the keys of the name "a" are "a/" and what
// follows, as in etcd's package. So the names "a" and "a/b" overlap: a
// Mutex named "a" also waits for the keys of a lock named "a/b", and a
// Semaphore or RWMutex named "a" refuses a name whose range holds another
// kind's key, such as those of "a/b" (ErrLockKind). Give locks names that
// are not prefixes of one another, as with etcd's package.
//
// A hold ends at Unlock, when its key is deleted by anyone, or when its
// lease ends: revoked, or expired because the session stopped renewing it
// (the process paused, the network failed). The last two can happen while
// the holder still believes it holds the lock, and no lock built on leases
// can prevent that; a hold is also a statement about the past the moment it
// is read. So:
//
//   - Mutex.Ctx is cancelled as soon as the hold ends or may have ended,
//     including when the session's conservative deadline (the send time of
//     the last answered keepalive plus the TTL, minus a margin of a tenth
//     of the TTL, 1 s at most) passes, which is before the server can
//     expire the lease. Renewals go out every third of the TTL less the
//     margin, counted from the last one sent, whether or not it has been
//     answered, and sooner while answers come late, so a session lives
//     through renewal round trips under two thirds of the TTL (3.3 s at
//     TTL 5, 10 s at TTL 15), however suddenly they grow, as etcd's
//     package's do.
//   - Ctx is cancelled by the session's goroutine, so a process that
//     resumes past the deadline (SIGSTOP, a paused VM) may run other
//     goroutines first and find Ctx alive for a moment: code that must
//     know at once compares Session.Deadline with time.Now, and writes
//     that must be safe are fenced (below). The fault soak sees this after
//     client pauses (RELIABILITY.md).
//   - etcd itself can end a lease sooner than its TTL says: a leader
//     that expired a lease and proposed its revoke, then lost its
//     leadership (a stalled disk, a starved or paused process), can have
//     that revoke applied after its successor renewed the lease
//     (etcd#15247, #12528; the check of leadership before the revoke
//     that etcd#16822 added narrows the window, it does not close it).
//     Then the hold's Ctx ends when its watch sees its key deleted, and
//     the session's at its next renewal, which finds no lease: the
//     fencing token and Txn below still protect what the holder writes.
//   - Mutex.Token is a fencing token, the create revision of the lock key:
//     it strictly increases from one holder to the next. A resource that
//     remembers the highest token it has seen and refuses older ones (Fence)
//     is safe even from a holder that paused past its lease.
//   - Mutex.Txn writes to etcd only if the hold is still current, checked by
//     the server in the same transaction as the write.
//
// No wait or hold trusts a connection that says nothing, and none takes
// a slow cluster for a dead connection. A connection can go silent
// without a reset (a NAT or firewall drops its state, a host stops
// answering): bytes are accepted and nothing comes back, and clientv3's
// default configuration has no gRPC keepalive to notice. A cluster can be
// slow: a disk whose fsync takes seconds delays every commit, while reads
// and keepalives are answered at once. A request's own latency cannot
// tell the two apart, so the package asks other requests. A request of
// the package whose first attempt has no answer after a sixth of its
// session's TTL (between 1 s and 5 s; half to all of it, at random), or
// after twice what the client's last answered request of its kind took,
// if longer (a third of the TTL at most), is sent again on the client's next connection, beside the
// first, not instead of it, and the first answer of either is taken. An
// attempt is given up, and another sent, only once a request of its kind
// (a write, for a write) sent after it has been answered, which shows
// that the connections answer and its own is silent, or after four
// sixths of the TTL, a bound that doubles each time; never more than two
// attempts of one request wait at once. So a request on a silent
// connection is answered about a sixth of the TTL after it was sent,
// once another connection answers, and a slow cluster is sent each write
// at most once more than etcd's package sends it, and usually once (the
// second attempt waits for twice the last write's time). gRPC's
// keepalive (clientv3.Config.DialKeepAliveTime) finds a silent
// connection too, and closes it, but not with clientv3's defaults, and
// clientv3 retries only what it knows to be safe; the package makes each
// of its writes safe to be applied twice, or late, after a later write
// of the same caller (each says why where it is sent: a transaction that
// compares the revisions it read, a lease grant whose ID the client
// picks, a delete by create revision). A watch that etcd has not created
// within a sixth of the TTL is opened again on a new stream;
// and every watch that a wait or a hold relies on asks its stream for
// progress after a third to a half of the TTL without a word (1 s to 30 s)
// and, if that goes unanswered for a sixth, opens a watch on the stream to
// make sure, and gives the stream up if that goes unanswered too. So a
// silent stream is given up within five sixths of the TTL (40 s at most)
// of the last word on it: with the default TTL of 60 s, a hold whose key is
// deleted while its watch's connection is silent ends within about 40 s of
// the deletion, plus the reads that find it gone (each sent again while
// the balancer picks the silent connection), and a waiter whose predecessor
// is gone is granted or told as soon; with a TTL of 6 s, within about 5 s.
// An idle stream costs about one progress request per third of the TTL,
// whatever the number of waits and holds on it (BENCHMARKS.md); behind
// etcd's gRPC proxy, which drops progress requests, each idle stream opens
// and closes one watch per third of the TTL instead.
//
// A lock used only for efficiency (doing work once rather than twice) needs
// none of these; a lock used for correctness needs fencing or guarded
// writes.
//
// # Weighted and resizable semaphores
//
// A Semaphore's key records both numbers it is judged by, in its value:
// the name's limit, then "/" and the key's weight unless it is 1 ("4" is
// one permit of 4, "4/3" three; Acquire writes what earlier versions
// wrote). So every client, Inspect and `etcdctl get` read them, and
// nothing else is stored. A key holds when the weights of every older key
// and its own add up to at most the limit: strictly FIFO, as
// golang.org/x/sync/semaphore.Weighted, so a request that does not fit
// blocks the smaller ones behind it and a large one is never starved. A
// weight of zero or less (ErrInvalidWeight) or above the limit
// (ErrWeightExceedsLimit) is refused before anything is written.
//
// The limit guard is one transaction that writes a new key only if every
// key of the name has the same limit: every value v of the name lies in
// the byte range that holds exactly the values written for that limit
// (etcd compares a range of keys with <, =, > or !=, not with a prefix of
// the value), or the name is empty. A Semaphore with another limit is
// refused without writing (ErrLimitMismatch), and so is a Semaphore of an
// earlier version of this package while a weighted key is in the queue:
// its guard compares every value with its bare limit, and could not count
// weights.
//
// Semaphore.SetLimit rewrites the value of every key of the name in one
// transaction, on condition that no key was created since its read and
// every key it read still has its create revision; otherwise it reads
// again. Each grant is decided by one linearizable read of the waiter's
// own key and the keys older than it, which sees every key before the
// resize or every key after it, and the waiter counts with the limit in
// its own key. Hence:
//
//   - no moment lets more in than the old or the new limit: a grant read
//     before the resize counts under the old limit, one after under the
//     new; a grant whose read raced the resize is a grant at the read's
//     revision, as any grant is;
//   - a smaller limit ends no hold: holders beyond it keep their permits
//     (their keys, tokens and guarded writes are untouched), and new
//     grants wait until the holders fit. A limit below the weight of a key
//     of the name is refused (ErrWeightExceedsLimit), so that no waiter
//     can be left heavier than the limit, blocking the queue;
//   - a larger limit lets waiters in at once: each waiter watches the
//     newest older key for its grant or deletion (rewritten too), and the
//     first waiter, which watches the name's deletions, watches its own
//     key's value as well;
//   - two resizes at once each apply whole (the second's conditions hold
//     after the first, which creates and deletes no key), and the last to
//     commit wins; a key created or deleted between a resize's read and
//     its write (a new waiter, a release, a lease revoked mid-resize)
//     fails the resize's condition, which reads again, so no key keeps an
//     old limit beside new ones;
//   - a refused or stale limit never locks correct clients out: a refused
//     resize writes nothing; a client still configured with the old limit
//     is refused without writing (ErrLimitMismatch) and stands in no
//     one's way; a Semaphore granted after a resize adopts its limit
//     (Limit); a client that starts later learns the name's limit from
//     Inspect.
//
// What it cannot promise: the limit lives in the keys, so it is forgotten
// when the last key goes, and the next user sets its own (a resize lasts
// while the name is in use); a name with as many keys as one transaction
// may hold operations or more (etcd's --max-txn-ops, 128 by default: one
// comparison per key and one more) cannot be resized;
// after a shrink, Inspect shows holders beyond the new limit as waiting
// (it judges by the current limit); a waiter whose older keys do not fit
// and whose newest older key was rewritten (by a resize, or by a grant
// after a wait) may be behind holders, and waits as the first waiter
// does, for any deletion on the name: after a resize of a name with n
// waiters, each release costs up to n reads (one per waiter that was
// there at the resize) until those waiters are granted; and a
// resize under constant arrivals retries until its ctx ends. Compaction
// does not matter to a resize (it reads, it does not watch), and waits
// survive it as any wait does.
//
// Lead runs the whole life of a leader on an Election: it campaigns, runs a
// function as the leader with the leadership's context, campaigns again on
// a new session after a loss, and resigns at once when it is done, so that
// a follower takes over in about one commit rather than one TTL.
//
// # Max hold
//
// WithMaxHold(d) bounds every hold taken on a session to d even while its
// process runs and renews the session (Redisson's leaseTime, and its
// expirable semaphore permits). Once a hold is granted, its key is moved,
// with the same create revision, value and place in the queue, to a lease
// of its own granted with a TTL of d rounded up to whole seconds and never
// renewed. So the fencing token (Token, the create revision) and guarded
// writes (Txn) are unchanged, and etcd's Mutex and `etcdctl lock` on the
// same name see an ordinary key: their waiters watch only for its
// deletion. The hold's Ctx is cancelled with cause ErrMaxHold at the send
// time of the lease's grant plus d, less a tenth of d (a second at most),
// and the holder then revokes the lease, which deletes the key; whenever
// the hold ends otherwise (release, loss, end of its session, Close), the
// lease is revoked too. Each hold costs one LeaseGrant and one transaction
// more before Lock returns, and one LeaseRevoke, in the background, when
// it ends. It applies to Mutex, Semaphore, RWMutex and Campaign (Proclaim
// keeps the key on the hold's lease), not to ResumeElection or Lead.
//
// What it cannot promise:
//
//   - d is a bound on the hold, not on the work: the work must watch Ctx
//     (or fence its writes) and stop, as after any loss.
//   - A holder that crashes or is cut off from etcd keeps the name until
//     the hold's lease expires, d after its grant, however short its
//     session's TTL: the key is no longer on the session's lease. For the
//     same reason, revoking the session's lease from outside frees the name
//     only once the session notices (at its next renewal, within a third of
//     its TTL) and revokes the hold's lease, or at d.
//   - etcd expires a lease on its leader's clock, in whole seconds, and a
//     new leader renews every lease for its full TTL: a key whose holder
//     cannot revoke it can outlive d by up to d, plus the election, when
//     etcd's leader changes meanwhile.
//   - Inspect shows the hold's own lease and its TTL left for the key, but
//     no Owner: the session's owner record is on the session's lease.
//   - Observers of an Election (Observe) may see the leader's key put once more,
//     with the same value, when it moves to its own lease.
//
// # Lock-delay
//
// WithLockDelay(d) makes a Mutex on the session that is granted the lock
// after a hold that ended by loss, rather than by its holder's release,
// wait d before Lock returns (Consul's lock-delay, Chubby's): the
// protection for a resource that cannot check a fencing token. etcd does
// not say why a key was deleted, so holders with lock-delay record it: a
// key per name under LockDelayPrefix, on no lease, holds the token of the
// last such holder, and its release writes "released" there in the same
// transaction as its delete. The next holder with lock-delay reads and
// replaces the record in one transaction at its grant, and counts as a
// loss a record not marked released. The keys it queued behind that are
// newer than the last release recorded (or any at all, without a record)
// recorded nothing; it judges them by their leases: a key deleted while
// its lease lives was released, one whose lease is gone was lost.
// A loss starts the delay in etcd, as a key on a lease of its own granted
// for d: every grant with lock-delay meanwhile waits for that key to go
// (TryLock misses with ErrLocked), so the delay ends on etcd's clock.
//
// What it cannot promise:
//
//   - A release by etcd's package, `etcdctl lock`, or a session without
//     WithLockDelay writes no record: it is told from a loss only by its
//     lease, read when the next grant is decided. A key of such a holder
//     deleted by someone else (`etcdctl del`, `etcdlock force-unlock`)
//     while its lease lives counts as a release, and is not delayed; a
//     release followed at once by the end of its session (the lease
//     revoked before the grant looks), a waiter whose session ended, and
//     a compacted revision count as a loss (the conservative side). One
//     whose hold began and ended before a holder with lock-delay queued,
//     on a name whose last record says released, is not seen at all: use
//     lock-delay on names whose users all set it.
//   - The delay runs from the grant that noticed the loss, not from the
//     loss, which nobody saw: at least d after it, more after a long
//     outage. Session.Close without Unlock counts as a loss.
//   - It bounds nothing for the lost holder itself: a holder paused past
//     d still writes after it. Only a fencing token or a guarded write
//     (Mutex.Txn) excludes that.
//   - As for every lease, etcd's leader renews the delay's lease when
//     leadership changes, which can lengthen a delay by up to d.
//   - It costs one transaction per grant, and a LeaseGrant and a write
//     per loss found; it applies to Mutex only (the other primitives
//     ignore it). The record (one small key per name) stays.
//
// # Yield requests
//
// RequestYield asks the holders of a name to let go (Curator's revocable
// locks; Kubernetes' coordinated leader election asks a leader to end its
// term). It writes, for each holder, the key YieldPrefix followed by the
// holder's key, whose value is the hold's token, attached to the holder's
// own lease, in one transaction that applies only while those holds are
// current. A hold whose session opted in (WithYield; Lead with
// WithLeadSession(WithYield())) watches that key once its Ctx is asked for, with the
// same liveness checks as every other watch (see above), and its Ctx
// ends with cause ErrYieldRequested; the holder then releases as after a
// loss (Do does, and Lead closes the term's session and campaigns again,
// behind the candidates already waiting). A request names one hold: the
// next hold of the same key (the same session locking again) is not
// asked by it.
//
// What it cannot promise:
//
//   - It is a request: a holder without WithYield, etcd's package and
//     `etcdctl lock` never see it, and RequestYield cannot tell them apart
//     (it returns whom it asked; Inspect shows YieldRequested).
//   - A holder that opted in but never asked for its Ctx (only Lock and
//     Unlock) keeps no watch, and so does not hear it.
//   - The hold ends at the holder: its key stays until the holder
//     releases it or its session ends, so a holder stuck in its work keeps
//     the lock (WithMaxHold bounds that).
//   - Writing the request needs write permission on YieldPrefix, and the
//     holder read permission there, on a cluster with authentication.
//
// # Health-driven release
//
// WithHealthCheck(interval, failures, check) makes a session run check
// every interval and, after failures failed checks in a row (an error, or
// no return within the interval), end and revoke its lease, so that every
// hold on it ends at once (Consul's session health checks): a stuck
// process stops holding locks although its keepalive goroutine is fine.
// The cause of the session's Ctx and of its holds' matches ErrUnhealthy
// and ErrSessionExpired (metrics: cause "unhealthy"); while checks fail
// short of the limit, a record beside the lease (HealthPrefix) lets
// Inspect show it (QueueKey.Health). Lead takes it as
// WithLeadSession(WithHealthCheck(...)) and campaigns again on a new
// session.
//
// What it cannot promise:
//
//   - It notices only what check tests, and only every interval: a holder
//     stays up to interval times failures (plus the revoke) after it
//     became unhealthy, and its work runs on until it watches its Ctx.
//   - When etcd cannot be reached, the revoke fails and the lease expires
//     after its TTL, as after a crash: the session ends here at once, but
//     others get the lock only then.
//   - check should return once its context ends: Close waits for it 1 s
//     at most. A check that never returns is counted as failing, once per
//     interval, and its goroutine stays until it does (after Close too).
//
// # Partitioned work
//
// Shards spreads the n shards of a named group over the processes that
// run it (Helix's partitions, a Kafka consumer group's), in the style of
// Lead: a member joins with ctx, its function runs once per shard it
// owns, with a context that ends when the shard is lost or handed over,
// and Shards returns when ctx ends, after releasing every shard.
//
// Each shard is a Mutex named group/shard/<i>, so its safety is the
// Mutex's and nothing new: at any revision at most one member holds it,
// its token (Shard.Token, the Mutex's) strictly increases from one owner
// to the next, and Shard.Txn writes only while the tenure lasts. What
// Shards adds is only the choice of which member queues for which shard.
// Members register as group/members/<lease ID in hex> on their session's
// lease, with their weight in the value; every member reads the group
// (members and shard queues, one read), keeps it from a watch (reading it
// again every third of its TTL, 20 s at most, and after a failure), and
// after events (plans at least 20 ms apart) computes the same plan:
// shares by weight, each within one of its exact share (largest
// remainders, ties to the older member); each member keeps the shards it
// owns up to its share; the surplus and the unowned shards go, in order,
// to the members below their share, as many as each lacks. A member
// queues only for the shards the plan gives it (no herd: a newcomer of a
// group of m members waits on about n/m keys, not n), and asks the owner
// of a shard it waits behind to hand it over with a yield request for
// that one hold (see Yield requests), never taking it: the owner's
// function ends with cause ErrYieldRequested and its release, one commit,
// grants the shard to the waiter. So, while membership is stable, the
// shards that move are exactly those needed.
//
// The decisions, and why:
//
//   - Shards takes a client, not a Session, as Lead does: a member whose
//     session ends (lease expired, revoked, failed health checks) joins
//     again on a new one, so a group stays served across etcd trouble
//     without the caller's help. Its options mirror Lead's
//     (WithShardSession, with any SessionOption for its sessions;
//     WithShardStatus) plus WithShardWeight.
//   - Operators and bystanders read a group without joining it:
//     InspectShards (members, weights, shares, owners), WatchShards (the
//     same after each change), `etcdlock shards --list`; each shard is an
//     ordinary lock name for Inspect and `etcdlock inspect`. WatchLeader
//     does the same for an election's leader.
//   - Causes are the package's own, matched with errors.Is:
//     ErrYieldRequested (handed over), ErrLockLost, ErrSessionExpired
//     (wrapping ErrUnhealthy), or ctx's cause when the member leaves.
//   - A function that returns nil keeps its shard, idle, until it goes; one
//     that returns an error ends the membership (as errgroup does) and
//     Shards returns it. Errors after the context ended are dropped, as
//     Lead drops them.
//   - A member leaving deletes its member key first, so that no plan gives
//     it shards, then ends its functions and releases each shard as its
//     function returns: about one commit per shard, in parallel, to a
//     member that already waits or queues at once.
//   - A function that ignores its context keeps running after its shard
//     went (to another member, if it was lost; nowhere, if it was asked to
//     yield, since it cannot release). ShardStatus.Check reports it with
//     ErrLeaderStuck, as LeaderStatus.Check reports a stuck term.
//
// What it cannot promise: a shard whose owner crashed is owned again once
// etcd expires the owner's lease (a TTL after its last renewal) and the
// next plan runs; a member cut off from etcd ends its functions at its
// session's conservative deadline, before that. A group has one shard
// count: a member of another count is refused when it joins
// (ErrInvalidShardCount); of two that join at the same moment with
// different counts, the younger by create revision sees the older after
// its own write and leaves with that error, and no member asks one of
// another count to yield. Counts and weights have maximums (MaxShardCount,
// MaxShardWeight), checked before anything is written; a member key that
// another process wrote is input: a weight above the maximum counts as the
// maximum, a value that does not parse makes no member, and nothing it
// holds makes a member, InspectShards or WatchShards panic (issue 49).
// The group watch is a plain clientv3 watch: a silent one delays a plan
// until the next periodic read. Members that know different revisions
// may plan differently for a moment; the plans agree once they read the
// same revision, and no disagreement can make two members own a shard. So
// members that start together may move a few shards more than once while
// they learn of one another (there is no initial delay, as Kafka's
// group.initial.rebalance.delay.ms); lockbench's rebalance group counts
// those moves.
//
// Time unowned, for operators: a member given WithMetrics (through
// WithShardSession) with a recorder that implements ShardMetricsRecorder
// (concurrencyprom's does) times each span in which it sees a shard
// without a member owner (its queue empty, or its holder's member key
// gone), from its own view of the group's keys, each end stamped when its watch or read shows it: late by
// the watch's delivery and at most one plan in progress, or by the backoff
// after a failed watch. A crashed owner's shards count as owned until etcd
// expires its lease, and a handover by yield as owned throughout (the
// waiter is granted at the release's revision): no member can see those
// gaps in the keys. Every member sees the same spans, so aggregate across
// members with max, never sum (concurrency_shard_unowned,
// concurrency_shard_unowned_seconds; docs/operators.md).
//
// # Differences from etcd's package
//
// Everything etcd's package documents holds here, and anything etcd's
// package accepts and does something sensible with is accepted here with
// the same effect. The exceptions are where etcd's behaviour is a bug:
//
//   - a waiter returns ErrSessionExpired as soon as its own session ends or
//     its key is deleted, rather than waiting for its predecessors and then
//     claiming the lock or leadership (etcd #19597, #11007);
//   - Unlock and Resign delete only the incarnation of the key they
//     acquired (#22082);
//   - cleanup after a failed Lock or Campaign is bounded in time and leaves
//     no key (#18082, #21128), also when its ctx ended while its write was
//     in flight: the write is sent again in the background to learn the
//     key's state, the key is deleted by revision (and, if the write cut
//     short may still land, by lease for a minute), and the call waits up
//     to a second for that;
//   - a wait survives compaction;
//   - a Mutex and an Election are safe for concurrent use (#7547);
//   - IsOwner does not hold while Lock waits (#12017), and Election.Rev is 0
//     unless the Election leads, so neither can pass for a fencing token;
//   - an empty lock name is refused with ErrInvalidPrefix: etcd's would
//     range over every key under "/";
//   - a second Lock on a held Mutex waits, as sync.Mutex does;
//   - Unlock, Resign and Close retry transient failures until their ctx
//     ends, and a failed Resign keeps the leadership (#22123);
//   - no wait, hold or request waits for ever on a connection that went
//     silent (see above): etcd's waiter stayed blocked on a free lock, and
//     its holder's Ctx alive after the key was deleted;
//   - NewSession gives up after the TTL asked for (10 s to a minute) when
//     etcd does not answer, with an error matching
//     context.DeadlineExceeded, where etcd's waited on the client's
//     context for ever (#19778).
//
// One signature differs from etcd 3.5's and 3.6's: Observe returns
// <-chan *clientv3.GetResponse, as etcd 3.7's does, where theirs returned
// <-chan clientv3.GetResponse. A Go method has one signature, and no build
// setting can follow the etcd version a program builds with (only
// promoting etcd's own Observe would, bringing back the bugs fixed here).
// The pointer suits 3.7, where GetResponse is a protobuf message that must
// not be copied (go vet reports a copied lock on every value received from
// a channel of values), and etcd 3.7's own callers need it; the usual
// `for resp := range e.Observe(ctx)` reading resp.Kvs and resp.Header
// compiles on every line. A 3.5 or 3.6 service that names the channel's
// type, or passes the channel to a function typed for it, fails to compile
// after swapping the import path, and changes that one line:
//
//	func follow(ch <-chan clientv3.GetResponse)  // etcd 3.5, 3.6
//	func follow(ch <-chan *clientv3.GetResponse) // this package, etcd 3.7
//
// (and writes *resp where it needs a clientv3.GetResponse value). The
// repository's docs/compatibility.md lists every API difference, which CI
// checks against each line.
//
// An Election's other fixes are listed on its type. Like etcd's, an
// orphaned session (Orphan) stays usable while someone else keeps its
// lease alive, and a session on a missing lease (WithLease) has ended:
// both refuse Lock and Campaign once the lease is gone, with
// ErrSessionExpired and ErrLeaseNotFound, writing nothing. Lock hands the
// lock from one holder to the next in about the time of one delete and one
// read, where etcd's package often waited for its server's 100 ms watch
// resync.
package concurrency
