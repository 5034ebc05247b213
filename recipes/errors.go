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

	// ErrInvalidName is returned by NewWorkQueue for an empty name, and by
	// WorkQueue.Put for a deduplication id over 1 KiB.
	ErrInvalidName = errors.New("recipes: invalid name")
	// ErrNameInUse is returned by a WorkQueue's calls when a key under its
	// name is not a work queue's: another primitive uses the name, or a
	// prefix of it. Nothing is written.
	ErrNameInUse = errors.New("recipes: name in use by another primitive")
	// ErrInvalidLimit is returned by NewWorkQueue for a limit of zero or
	// less, or over its documented maximum.
	ErrInvalidLimit = errors.New("recipes: invalid limit")
	// ErrInvalidDelay is returned by WorkQueue.Put and Delivery.Nack for a
	// negative delay or one over MaxDelay; nothing is written.
	ErrInvalidDelay = errors.New("recipes: invalid delay")
	// ErrItemTooLarge is returned by WorkQueue.Put for an item that would
	// not fit in one etcd request (see WithMaxRequestBytes); nothing is
	// written.
	ErrItemTooLarge = errors.New("recipes: item too large")
	// ErrDuplicate is returned by WorkQueue.Put, with the id of the item
	// already there, when an item put with the same deduplication id is
	// still in the queue; nothing is written.
	ErrDuplicate = errors.New("recipes: duplicate item")
	// ErrClaimLost is returned by Delivery.Ack, AckTxn and Nack when the
	// delivery's claim is gone (its session's lease expired or was
	// revoked, its processing limit passed, or it was acknowledged
	// already): nothing was changed, and the item is, or was, delivered
	// again. It is also the context.Cause of a Delivery's Ctx then.
	ErrClaimLost = errors.New("recipes: delivery's claim lost")
	// ErrAckUnknown is returned by Delivery.Ack, AckTxn and Nack when the
	// reply to the write was lost and its outcome could not be settled:
	// the item is gone, acknowledged by this call or by another consumer
	// after this claim was lost. It wraps the write's error.
	ErrAckUnknown = errors.New("recipes: outcome of an acknowledgement unknown")
	// ErrNotFound is returned by WorkQueue.Requeue and Purge for a dead
	// letter that is not there.
	ErrNotFound = errors.New("recipes: not found")
)
