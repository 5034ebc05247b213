package concurrency

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Semaphore lets at most limit holders, across every session, hold one of
// its permits at once: a counting semaphore on etcd, on the same queue,
// wait and hold as Mutex. Permits are granted in the order of the keys'
// create revisions (FIFO); a waiter watches one key, the newest older one,
// except the first waiter, whose turn comes when any of the limit holders
// goes and which watches the name's keys for deletions. Each permit has a
// fencing token, a guarded transaction and a context cancelled when it is
// lost, as a Mutex's hold has.
//
// Each Semaphore value holds at most one permit, under a key of its own:
// several Semaphores on one session (a worker pool sharing a lease) hold
// one permit each. The key is the name, "/", the session's lease ID and a
// random 64-bit number, in hex, so that values on one lease are told apart
// even across processes that share the lease (WithLease); its value is the
// limit.
//
// The limit is agreed in etcd: every key of the name carries it, and a key
// is written only if every key of the name has the same limit (one
// transaction compares them all), so all the keys of a name have the limit
// of its oldest one. A Semaphore with another limit, or another kind of
// lock's key under the name, is refused (ErrLimitMismatch, ErrLockKind)
// without writing anything, so a misconfigured client never stands in the
// way of the name's rightful users. Nothing else records the limit, so
// nothing is left to clean up: it is forgotten when the last key goes, and
// the next user sets it anew.
//
// A Semaphore is safe for use by several goroutines, which it excludes as a
// Mutex does.
type Semaphore struct {
	holder
	key   string
	limit int
}

// valueID is the part after the lease ID of the keys of Semaphores and
// RWMutexes, which are unique to each value rather than to each session: a
// random 64-bit number, so that processes sharing a lease cannot pick the
// same one (a counter in each process would).
func valueID() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("concurrency: reading random bytes: " + err.Error())
	}
	return binary.BigEndian.Uint64(b[:])
}

// NewSemaphore returns a Semaphore with limit permits named pfx on session
// s. It does not talk to etcd. A nil session, an empty name or a limit of
// zero or less is reported by its methods, with ErrNilSession,
// ErrInvalidPrefix or ErrInvalidLimit.
func NewSemaphore(s *Session, pfx string, limit int) *Semaphore {
	m := &Semaphore{holder: newHolder(s, pfx), limit: limit}
	if s != nil {
		m.key = fmt.Sprintf("%s%x-%x", m.pfx, int64(s.Lease()), valueID())
	}
	created(s, m.pfx, kindSemaphore)
	return m
}

// semKey matches the part after the prefix of a Semaphore's key.
var semKey = regexp.MustCompile(`^[0-9a-f]+-[0-9a-f]+$`)

func (m *Semaphore) rule() rule {
	r := mutexRule(m.pfx)
	r.kind = kindSemaphore
	r.limit = m.limit
	lim := strconv.Itoa(m.limit)
	r.check = func(older []*mvccpb.KeyValue) error {
		for _, kv := range older {
			if err := m.refuseKey(kv); err != nil {
				return err
			}
		}
		return nil
	}
	// Every key of the name has this limit, or there is none. (etcd fails
	// a value comparison over a range that holds no key, hence the second
	// transaction for the empty name.)
	r.guard = func(then, refused []clientv3.Op) clientv3.Op {
		empty := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Version(m.pfx), "=", 0).WithPrefix()}, then, refused)
		return clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(m.pfx), "=", lim).WithPrefix()}, then, []clientv3.Op{empty})
	}
	r.refused = []clientv3.Op{clientv3.OpGet(m.pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))}
	r.refuse = func(rs []*pb.ResponseOp) error {
		if kvs := rs[0].GetResponseRange().Kvs; len(kvs) > 0 {
			if err := m.refuseKey(kvs[0]); err != nil {
				return err
			}
		}
		return fmt.Errorf("%w: a key of %q has another limit than %d, or is another kind of lock's", ErrLockKind, m.pfx, m.limit)
	}
	return r
}

// refuseKey is the error of a key of the name that this Semaphore cannot
// share the name with: another kind of lock's, or another limit's; nil if
// none.
func (m *Semaphore) refuseKey(kv *mvccpb.KeyValue) error {
	if !semKey.MatchString(string(kv.Key[len(m.pfx):])) {
		return fmt.Errorf("%w: %q is not a semaphore's key", ErrLockKind, kv.Key)
	}
	if string(kv.Value) != strconv.Itoa(m.limit) {
		return fmt.Errorf("%w: %q has limit %q, this Semaphore %d", ErrLimitMismatch, kv.Key, kv.Value, m.limit)
	}
	return nil
}

func (m *Semaphore) valid() error {
	if err := validate(m.s, m.pfx); err != nil {
		return err
	}
	if m.limit <= 0 {
		return fmt.Errorf("%w: %d", ErrInvalidLimit, m.limit)
	}
	return nil
}

// Acquire blocks until this Semaphore holds a permit, ctx ends, or the
// session ends. Uncontended, it takes one round trip. If ctx ends first, it
// returns an error matching ctx.Err(); if the session ends or the key is
// deleted first, one matching ErrSessionExpired; if the name is in use with
// another limit, ErrLimitMismatch, or by another kind of lock, ErrLockKind.
// On any error no permit is held and the key has been deleted, within a
// bounded time even if etcd cannot be reached.
func (m *Semaphore) Acquire(ctx context.Context) error {
	return m.lock(ctx, m.rule(), m.key, strconv.Itoa(m.limit), true, m.valid())
}

// TryAcquire takes a permit if one is free now, and otherwise returns
// ErrLocked at once, after deleting the key it wrote. It also returns
// ErrLocked, without talking to etcd, while another goroutine holds or is
// acquiring a permit through this Semaphore. Other errors are Acquire's.
func (m *Semaphore) TryAcquire(ctx context.Context) error {
	return m.lock(ctx, m.rule(), m.key, strconv.Itoa(m.limit), false, m.valid())
}

// Release gives the permit back: it deletes the key if, and only if, it is
// still the incarnation acquired. It returns ErrLockReleased if no permit is
// held. Like Mutex.Unlock, it retries while etcd is unreachable until ctx
// ends; if it fails, the permit stays held so that Release can be retried.
func (m *Semaphore) Release(ctx context.Context) error {
	if err := m.valid(); err != nil {
		return err
	}
	return m.unlock(ctx)
}

// Ctx returns a context for the permit held, cancelled as Mutex.Ctx is.
func (m *Semaphore) Ctx() context.Context { return m.ctx() }

// Token returns the fencing token of the permit held, its key's create
// revision, or 0 when none is held. Tokens of one name increase in the
// order permits are granted, but up to limit holders hold at once: a
// resource guarded by Fence accepts only the newest of them.
func (m *Semaphore) Token() int64 { return m.token() }

// Key returns the Semaphore's key while it holds or waits for a permit,
// and "" otherwise.
func (m *Semaphore) Key() string { return m.keyNow() }

// Header is the response header of the read that showed the permit held,
// or nil before the first.
func (m *Semaphore) Header() *pb.ResponseHeader { return m.header() }

// IsOwner returns a comparison that holds, in a transaction, only while
// this Semaphore holds its permit.
func (m *Semaphore) IsOwner() clientv3.Cmp { return m.isOwner() }

// Txn returns a transaction that commits only while this Semaphore holds
// its permit, as Mutex.Txn does for a hold.
func (m *Semaphore) Txn(ctx context.Context) clientv3.Txn { return m.txn(ctx) }

// Do acquires a permit, runs fn with a context that ends when ctx ends or
// the permit is lost, and releases it, as Mutex.Do does.
func (m *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return m.do(ctx, m.Acquire, fn)
}
