package recipes

import "errors"

var (
	// ErrKeyExists is returned by Barrier.Hold when the barrier is already
	// held. The text is etcd's.
	ErrKeyExists = errors.New("key already exists")
	// ErrWaitMismatch is kept for etcd's API; nothing here returns it.
	ErrWaitMismatch = errors.New("unexpected wait result")
	// ErrTooManyClients is returned by DoubleBarrier.Enter when the barrier
	// already has its count of entrants; no key is left behind.
	ErrTooManyClients = errors.New("too many clients")
	// ErrNoWatcher is kept for etcd's API; nothing here returns it.
	ErrNoWatcher = errors.New("no watcher channel")
	// ErrClaimUnknown is returned by Dequeue, with the element's value,
	// when the reply to the delete that takes the element was lost (the
	// connection failed during that one request) and the element is gone:
	// this call may have taken it, or another Dequeue took it and returned
	// it too. The value is returned so that no element is ever lost; a
	// caller that processes it must tolerate that rare duplicate. It wraps
	// the error of the request. An ended ctx alone never causes it: Dequeue
	// waits for the reply instead (bounded).
	ErrClaimUnknown = errors.New("recipes: outcome of a dequeue unknown")
	// ErrNilSession is returned by the methods of a value made with a nil
	// session, and ErrNilClient by those of a value made with a nil client.
	ErrNilSession = errors.New("recipes: nil session")
	ErrNilClient  = errors.New("recipes: nil client")
)
