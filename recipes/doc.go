// Package recipes is a drop-in replacement for etcd's
// go.etcd.io/etcd/client/v3/experimental/recipes: Barrier, DoubleBarrier,
// Queue, PriorityQueue, RWMutex, WaitEvents and WaitPrefixEvents, with the
// same names and signatures, taking this module's *concurrency.Session
// where etcd's take etcd's.
//
// etcd's calls take no context and block until they are done, forever if
// the server is unreachable. Every blocking call here has a variant that
// takes a context first, named as the standard library names them
// (WaitContext, EnterContext, DequeueContext, ...); the methods without a
// context run with context.Background() and so block as etcd's do. When
// ctx ends, a call returns an error that matches ctx.Err() with errors.Is,
// and says in its comment what it leaves behind. A wait whose client is
// closed returns within a second an error matching
// concurrency.ErrClientClosed and context.Canceled.
//
// What differs from etcd's package, and why:
//   - Every waiter watches one key where the algorithm allows it (a
//     Barrier's key, a DoubleBarrier's ready key or one neighbour). A
//     waiting Dequeue has to watch the whole queue, since any new element
//     is for it.
//   - The waits of Barrier, CountDownLatch, DoubleBarrier and Dequeue are
//     decided by reading what they wait for, not by the watch alone: each
//     reads again when its watch cannot resume (the revision is
//     compacted), when the watch ends (a lost leader, a restart), and
//     every 5 s while the watch delivers nothing, each read with a
//     deadline, so a connection gone silent (half-open, which clientv3
//     without keepalive never notices) cannot hide an event that has
//     happened once any endpoint answers. A Barrier or latch key released
//     and raised again meanwhile is told from the one first seen by its
//     create revision; the DoubleBarrier entrant that completes the count
//     marks the waiting entrants' keys with the ready key, so a release
//     is found even when the ready key came and went with its writer's
//     lease. WaitEvents, which has no state to read, resumes a watch that
//     ends from the last revision seen (etcd's returns a nil event then),
//     and returns ErrCompacted if that revision is gone; a watch silent
//     for 5 s is asked for progress, and resumed anew if no word comes.
//   - A write is never cut short by ctx: etcd may apply a write after its
//     caller gave up. When ctx ends while one is in flight, the call
//     waits for the answer (up to 3 s more) and reports what was done:
//     Hold, Release, Enqueue, Start and CountDown return nil if applied,
//     and a DoubleBarrier's Enter deletes its key by revision, so a
//     cancelled Enter leaves no entrant to complete someone else's count.
//   - Dequeue takes the oldest element by create revision with a delete
//     guarded by its mod revision, so two Dequeues never take one element;
//     the delete is not cut short by ctx, so an element is either returned
//     or left in the queue (see Queue.DequeueContext).
//   - A PriorityQueue keeps no "__" base key per priority (etcd's leaks
//     one for every priority ever used): its order within a priority is
//     the create revision.
//   - RWMutex is this module's concurrency.RWMutex (no herd, etcd #16221),
//     so it does not exclude etcd's recipe RWMutex on the same name: their
//     keys differ.
//
// WorkQueue is not in etcd's package: a queue whose items are claimed,
// not deleted, when taken. A claim is a key on the consumer's session
// lease, so an item comes back when its consumer's lease ends and never
// while it lives; Ack, AckTxn and Nack are fenced by the claim; items have
// priorities, delays (by the clients' clocks), deduplication ids, a
// delivery limit and dead letters. docs/semantics.md says what its
// "exactly once" covers.
//
// Keys are compatible with etcd's where the two can meet: a Queue's
// elements and a Barrier's key are named as etcd's, so the two packages'
// values on one name work together.
package recipes
