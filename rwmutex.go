package concurrency

import (
	"context"
	"fmt"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RWMutex is a reader/writer lock on etcd, on the same queue, wait and hold
// as Mutex: any number of readers or one writer hold it at once. Its keys
// are the name, "/", then "r/" for a reader or "w/" for a writer, then the
// session's lease ID and a number unique in the process, in hex.
//
// Readers and writers queue together in create-revision order, so writers
// are not starved: a reader waits only for the nearest older writer (and
// watches only its key), a writer for the nearest older key of either kind.
// Readers queued behind the same writer watch its key and enter together
// when it goes. etcd's recipe had every waiter re-read the queue on each
// change, no context, no fencing and no loss signal (etcd #6408, #16221);
// here each hold has a fencing token, a guarded transaction and a context
// cancelled when it is lost, as a Mutex's hold has.
//
// An RWMutex value holds at most one side at a time: like a Mutex, it
// excludes the goroutines of its process, so a Lock or RLock waits while
// another goroutine holds or acquires either side through the same value.
// Several RWMutexes on one session each hold their own lock. It is safe for
// use by several goroutines.
type RWMutex struct {
	holder
	id string // the session's lease ID and a number unique in the process
}

// NewRWMutex returns an RWMutex named pfx on session s. It does not talk
// to etcd. A nil session or an empty name is reported by its methods, with
// ErrNilSession or ErrInvalidPrefix.
func NewRWMutex(s *Session, pfx string) *RWMutex {
	m := &RWMutex{holder: newHolder(s, pfx)}
	if s != nil {
		m.id = fmt.Sprintf("%x-%x", int64(s.Lease()), valueID())
	}
	created(s, m.pfx, kindRead, kindWrite)
	return m
}

// rule is the rule of a writer (write) or a reader.
func (m *RWMutex) rule(write bool) rule {
	r := mutexRule(m.pfx)
	r.kind = kindWrite
	if !write {
		// A reader counts only writers; the keys of other kinds of lock
		// (hex lease IDs sort before "r/") it checks apart.
		r.over = m.pfx + "w/"
		r.foreign = m.pfx + "r/"
		r.kind = kindRead
	}
	r.check = func(older []*mvccpb.KeyValue) error {
		for _, kv := range older {
			if k := string(kv.Key[len(m.pfx):]); !strings.HasPrefix(k, "r/") && !strings.HasPrefix(k, "w/") {
				return fmt.Errorf("%w: %q is not an RWMutex's key", ErrLockKind, kv.Key)
			}
		}
		return nil
	}
	// No key of the name outside its readers and writers: the three ranges
	// around "r/" and "w/" are empty.
	others := [][2]string{{m.pfx, m.pfx + "r/"}, {m.pfx + "r0", m.pfx + "w/"}, {m.pfx + "w0", clientv3.GetPrefixRangeEnd(m.pfx)}}
	var empty []clientv3.Cmp
	r.refused = nil
	for _, o := range others {
		empty = append(empty, clientv3.Compare(clientv3.CreateRevision(o[0]), "=", 0).WithRange(o[1]))
		r.refused = append(r.refused, clientv3.OpGet(o[0], clientv3.WithRange(o[1]), clientv3.WithLimit(1), clientv3.WithKeysOnly()))
	}
	r.guard = func(then, refused []clientv3.Op) clientv3.Op { return clientv3.OpTxn(empty, then, refused) }
	r.refuse = func(rs []*pb.ResponseOp) error {
		for _, r := range rs {
			if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
				return fmt.Errorf("%w: %q is not an RWMutex's key", ErrLockKind, kvs[0].Key)
			}
		}
		return fmt.Errorf("%w: a key of %q is not an RWMutex's", ErrLockKind, m.pfx)
	}
	return r
}

// side is the key of a writer (write) or a reader.
func (m *RWMutex) side(write bool) string {
	if write {
		return m.pfx + "w/" + m.id
	}
	return m.pfx + "r/" + m.id
}

// RLock blocks until this RWMutex holds the read side, ctx ends, or the
// session ends: once no writer older than its key is left. Errors are as
// Mutex.Lock's, and ErrLockKind if the name is in use by another kind of
// lock; on any error nothing is held and the key has been deleted.
func (m *RWMutex) RLock(ctx context.Context) error {
	return m.lock(ctx, m.rule(false), m.side(false), "", true, validate(m.s, m.pfx))
}

// TryRLock takes the read side if no writer holds or waits, and otherwise
// returns ErrLocked at once, after deleting the key it wrote.
func (m *RWMutex) TryRLock(ctx context.Context) error {
	return m.lock(ctx, m.rule(false), m.side(false), "", false, validate(m.s, m.pfx))
}

// Lock blocks until this RWMutex holds the write side, ctx ends, or the
// session ends: once no key older than its own is left. Errors are as
// RLock's.
func (m *RWMutex) Lock(ctx context.Context) error {
	return m.lock(ctx, m.rule(true), m.side(true), "", true, validate(m.s, m.pfx))
}

// TryLock takes the write side if nobody holds or waits, and otherwise
// returns ErrLocked at once, after deleting the key it wrote.
func (m *RWMutex) TryLock(ctx context.Context) error {
	return m.lock(ctx, m.rule(true), m.side(true), "", false, validate(m.s, m.pfx))
}

// RUnlock releases the read side, as Mutex.Unlock releases a lock. It
// returns ErrLockReleased if the read side is not held.
func (m *RWMutex) RUnlock(ctx context.Context) error { return m.unlockSide(ctx, false) }

// Unlock releases the write side, as Mutex.Unlock releases a lock. It
// returns ErrLockReleased if the write side is not held.
func (m *RWMutex) Unlock(ctx context.Context) error { return m.unlockSide(ctx, true) }

func (m *RWMutex) unlockSide(ctx context.Context, write bool) error {
	if err := validate(m.s, m.pfx); err != nil {
		return err
	}
	return m.unlockIf(ctx, func(key string) bool { return key == m.side(write) })
}

// Ctx returns a context for the current hold, read or write, cancelled as
// Mutex.Ctx is.
func (m *RWMutex) Ctx() context.Context { return m.ctx() }

// Token returns the fencing token of the current hold, read or write, or 0.
// A writer's token is greater than that of every hold before it.
func (m *RWMutex) Token() int64 { return m.token() }

// Key returns the key of the current hold, read or write, or of the wait
// for it, and "" otherwise.
func (m *RWMutex) Key() string { return m.keyNow() }

// IsOwner returns a comparison that holds, in a transaction, only while
// this RWMutex holds the side it acquired.
func (m *RWMutex) IsOwner() clientv3.Cmp { return m.isOwner() }

// Txn returns a transaction that commits only while the current hold, read
// or write, lasts, as Mutex.Txn does.
func (m *RWMutex) Txn(ctx context.Context) clientv3.Txn { return m.txn(ctx) }
