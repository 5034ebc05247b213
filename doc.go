// Package concurrency is a drop-in replacement for the locking half of
// etcd's go.etcd.io/etcd/client/v3/concurrency: Session, Mutex and
// Election, with the same API, the same keys and the same queue order, so
// that a program compiles and behaves the same after changing only its
// import path, and so that this package, etcd's package and `etcdctl lock`
// exclude one another on the same lock name.
//
// # The contract
//
// A lock name is a queue of keys, one per session, each attached to its
// session's lease. The key with the smallest create revision holds the lock;
// the others wait in create-revision order, each watching only the key just
// before its own. Lock returns nil only after a linearizable read showed its
// key first in the queue, so at any etcd revision at most one session holds
// the lock, and holders follow one another in create-revision order.
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
//     the last answered keepalive plus the TTL, minus a margin) passes,
//     which is before the server can expire the lease.
//   - Mutex.Token is a fencing token, the create revision of the lock key:
//     it strictly increases from one holder to the next. A resource that
//     remembers the highest token it has seen and refuses older ones (Fence)
//     is safe even from a holder that paused past its lease.
//   - Mutex.Txn writes to etcd only if the hold is still current, checked by
//     the server in the same transaction as the write.
//
// A lock used only for efficiency (doing work once rather than twice) needs
// none of these; a lock used for correctness needs fencing or guarded
// writes.
//
// Lead runs the whole life of a leader on an Election: it campaigns, runs a
// function as the leader with the leadership's context, campaigns again on
// a new session after a loss, and resigns at once when it is done, so that
// a follower takes over in about one commit rather than one TTL.
//
// # Differences from etcd's package
//
// Everything etcd's package documents holds here, except where it was a
// bug: a waiter returns as soon as its own session ends or its key is
// deleted (etcd #19597); Unlock deletes only the incarnation of the key it
// acquired (#22082); cleanup after a failed Lock is bounded in time
// (#18082); a wait survives compaction; a Mutex is safe for concurrent use;
// WithLease on a missing lease is an error; IsOwner does not hold while Lock
// waits (#12017); WithTTL(n) with n <= 0 is an error rather than silently
// the default. An Election's fixes are listed on its type. A session that
// has ended (orphaned, closed, expired) refuses Lock and Campaign with
// ErrSessionExpired, where etcd's let them write keys on a lease nobody
// renews. Lock hands the lock from one holder to the next in about the time
// of one delete and one read, where etcd's package often waited for its
// server's 100 ms watch resync.
package concurrency
