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
	// ErrClaimUnknown is returned by Dequeue when the reply to the delete
	// that takes an element was lost (the connection failed during that one
	// request) and the element is gone: this call may or may not have
	// taken it. It wraps the error of the request. When ctx ends, Dequeue
	// never returns it: it waits for the reply instead (bounded).
	ErrClaimUnknown = errors.New("recipes: outcome of a dequeue unknown")
	// ErrNilSession is returned by the methods of a value made with a nil
	// session, and ErrNilClient by those of a value made with a nil client.
	ErrNilSession = errors.New("recipes: nil session")
	ErrNilClient  = errors.New("recipes: nil client")
)
