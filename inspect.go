package concurrency

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// KeyKind is the kind of lock a key under a lock name belongs to, told
// apart by the part of the key after the name's prefix, as this package
// (and etcd's) names them.
type KeyKind int

// The kinds of key Inspect tells apart.
const (
	// KindOther is a key of none of the kinds below (written by hand or
	// by another library). Inspect counts it as a writer: it holds only
	// when no key is older.
	KindOther KeyKind = iota
	// KindMutex is NAME/<lease ID in hex>: a Mutex, an Election's
	// candidate, etcd's package, etcdctl lock and elect (one kind of key).
	KindMutex
	// KindSemaphore is NAME/<lease ID>-<random ID>, with the Semaphore's
	// limit as its value, followed by "/" and the weight for a weight
	// other than 1 (see Semaphore).
	KindSemaphore
	// KindReader is NAME/r/<lease ID>-<random ID>: an RWMutex's read side.
	KindReader
	// KindWriter is NAME/w/<lease ID>-<random ID>: an RWMutex's write side.
	KindWriter
)

// String returns "mutex", "semaphore", "reader", "writer" or "other".
func (k KeyKind) String() string {
	switch k {
	case KindMutex:
		return "mutex"
	case KindSemaphore:
		return "semaphore"
	case KindReader:
		return "reader"
	case KindWriter:
		return "writer"
	}
	return "other"
}

// Queue is the keys of a lock name as one linearizable read saw them, as
// Inspect returns it.
type Queue struct {
	Name     string     // the lock name, as given to Inspect
	Revision int64      // etcd's revision at the read of the keys
	Keys     []QueueKey // every key under the name, in queue order (oldest first)
	// LockDelay is what is left of a lock-delay running on the name (see
	// WithLockDelay), in whole seconds as etcd reports its lease's time to
	// live, or 0 if none runs (or the client may not read LockDelayPrefix):
	// until it ends, no Mutex with lock-delay is granted the name.
	LockDelay time.Duration
}

// QueueKey is one key of a lock name's queue.
type QueueKey struct {
	Key   string
	Lease clientv3.LeaseID // the key's lease; clientv3.NoLease if none
	// TTL is the lease's time to live left, in seconds, as etcd reported
	// it just after the read of the keys; -1 when the lease was gone by
	// then (revoked or expired: the key is about to be deleted, or has
	// been) or the key has no lease.
	TTL int64
	// CreateRevision orders the queue and is the holder's fencing token
	// (Mutex.Token, Election.Rev, Semaphore.Token, RWMutex.Token).
	CreateRevision int64
	Position       int     // the key's index in Queue.Keys: 0 for the oldest
	Kind           KeyKind // the kind of lock the key belongs to
	Limit          int     // a semaphore key's limit, from its value; 0 for other kinds or a value that is not a semaphore's
	Weight         int     // a semaphore key's weight, the permits it takes (1 unless its value says otherwise); 0 for other kinds
	// Holds reports whether the key holds, by the rule of its own kind, as
	// this package decides it: a mutex key (or another key) or a writer
	// when no key is older; a semaphore key when the weights of the older
	// keys (other kinds of key weigh 1) and its own add up to at most its
	// limit; a reader when no key other than a reader is older. On a name
	// used by one kind of lock, as this package keeps it, this is exactly
	// who holds, with one exception: after a Semaphore's limit shrank
	// (SetLimit), holders beyond the new limit keep their permits but are
	// shown waiting until they release. A key that does not hold waits.
	Holds bool
	Value string // the key's value, raw: a semaphore's limit, an election's proclaimed value, whatever a client wrote
	// Owner is the owner record of the key's lease (see WithOwner), or nil
	// if its session was created without one, or by another client.
	Owner *Owner
	// Health is the state of the key's session's failing health checks
	// (WithHealthCheck), or nil if they are not failing (or the session
	// has none).
	Health *Health
	// YieldRequested reports that RequestYield asked this key's hold (this
	// create revision) to let go; whether it does depends on its session
	// (WithYield).
	YieldRequested bool
}

// Holders returns the keys of q that hold, in queue order.
func (q *Queue) Holders() []QueueKey { return q.filter(true) }

// Waiters returns the keys of q that wait, in queue order.
func (q *Queue) Waiters() []QueueKey { return q.filter(false) }

func (q *Queue) filter(holds bool) []QueueKey {
	var ks []QueueKey
	for _, k := range q.Keys {
		if k.Holds == holds {
			ks = append(ks, k)
		}
	}
	return ks
}

// Inspect reads the queue of lock name: every key under the name's prefix
// (the name and "/", as NewMutex, NewElection, NewSemaphore and NewRWMutex
// build it), in queue order, with its kind, whether it holds, and the time
// to live left of its lease. It is read-only: it writes nothing, needs no
// session, and works on names of every kind of lock this package, etcd's
// package and etcdctl keep, including names whose keys are of several
// kinds.
//
// The keys come from one linearizable read (Queue.Revision); then Inspect
// asks etcd for the TTL of each distinct lease, one round trip each, and
// for the owner records of the leases (WithOwner), one round trip per 100
// leases, for the name's yield requests (RequestYield) and for the
// sessions' failing health checks (WithHealthCheck), one round trip each,
// so the TTLs, owners, requests and health are a little later than the
// keys (those that cannot be read, e.g. without permission, are left nil
// and false). Inspect
// blocks for these round trips, which ctx bounds: if ctx ends first, it
// returns an error matching ctx.Err(). A nil client gives ErrNilClient and an empty name
// ErrInvalidPrefix, before any round trip; an etcd error is returned
// wrapped. On any error the Queue is nil.
func Inspect(ctx context.Context, c *clientv3.Client, name string) (*Queue, error) {
	switch {
	case c == nil:
		return nil, ErrNilClient
	case name == "":
		return nil, ErrInvalidPrefix
	}
	pfx := prefix(name)
	resp, err := c.Get(ctx, pfx, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("concurrency: Inspect %q: %w", name, err)
	}
	q := queueOf(name, pfx, resp)
	// Like the owner and health records, the lock-delay is read best
	// effort: a read that fails (on a cluster with authentication, without
	// permission on LockDelayPrefix) leaves it 0, unless ctx ended.
	if d, err := lockDelayLeft(ctx, c, pfx); err == nil {
		q.LockDelay = d
	} else if ctx.Err() != nil {
		return nil, fmt.Errorf("concurrency: Inspect %q: lock-delay: %w", name, err)
	}
	sessions, err := readLeases(ctx, c, pfx, q)
	if err != nil {
		return nil, fmt.Errorf("concurrency: Inspect %q: %w", name, err)
	}
	if err := readYields(ctx, c, pfx, q); err != nil {
		return nil, fmt.Errorf("concurrency: Inspect %q: yield requests: %w", name, err)
	}
	if err := readHealth(ctx, c, q, sessions); err != nil {
		return nil, fmt.Errorf("concurrency: Inspect %q: health records: %w", name, err)
	}
	return q, nil
}

// queueOf is the queue of the lock name name (prefix pfx) in resp, a read
// of its keys in create-revision order: each key with its kind and value,
// and whether it holds, judged as the primitives judge it (TTL -1 until
// readLeases reads it).
func queueOf(name, pfx string, resp *clientv3.GetResponse) *Queue {
	q := &Queue{Name: name, Revision: resp.Header.Revision, Keys: make([]QueueKey, 0, len(resp.Kvs))}
	nonReaders := 0 // keys older than the current one that are not readers
	weight := 0     // the weights of the keys older than the current one
	for i, kv := range resp.Kvs {
		k := QueueKey{
			Key:            string(kv.Key),
			Lease:          clientv3.LeaseID(kv.Lease),
			TTL:            -1,
			CreateRevision: kv.CreateRevision,
			Position:       i,
			Kind:           keyKindOf(string(kv.Key[len(pfx):])),
			Value:          string(kv.Value),
		}
		switch k.Kind {
		case KindSemaphore:
			if l, w, ok := parseSemValue(kv.Value); ok {
				k.Limit, k.Weight = l, w
			}
			// weight <= Limit first: the sum must not wrap around.
			k.Holds = k.Limit > 0 && weight <= k.Limit && k.Weight <= k.Limit-weight
		case KindReader:
			k.Holds = nonReaders == 0
		default:
			k.Holds = i == 0
		}
		if k.Kind != KindReader {
			nonReaders++
		}
		weight += min(max(k.Weight, 1), math.MaxInt-weight) // at most MaxInt
		q.Keys = append(q.Keys, k)
	}
	return q
}

// readLeases sets the TTL of each key of q (one TimeToLive per lease) and
// its owner record, and returns the lease of the session that wrote each
// key, on which its owner and health records are: a max hold moved the key
// off it (see sessionLease).
func readLeases(ctx context.Context, c *clientv3.Client, pfx string, q *Queue) ([]clientv3.LeaseID, error) {
	ttls := make(map[clientv3.LeaseID]int64)
	for _, k := range q.Keys {
		if k.Lease != clientv3.NoLease {
			ttls[k.Lease] = -1
		}
	}
	ids := make([]clientv3.LeaseID, 0, len(ttls))
	for id := range ttls {
		resp, err := c.TimeToLive(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("lease %x: %w", int64(id), err)
		}
		ttls[id] = resp.TTL // etcd answers -1 for a lease it does not have
		ids = append(ids, id)
	}
	sessions := make([]clientv3.LeaseID, len(q.Keys))
	for i := range q.Keys {
		sessions[i] = sessionLease(pfx, &q.Keys[i])
		if _, ok := ttls[sessions[i]]; !ok && !slices.Contains(ids, sessions[i]) && sessions[i] != clientv3.NoLease {
			ids = append(ids, sessions[i]) // its owner record only
		}
	}
	owners, err := readOwners(ctx, c, ids)
	if err != nil {
		return nil, fmt.Errorf("owners: %w", err)
	}
	for i := range q.Keys {
		k := &q.Keys[i]
		if ttl, ok := ttls[k.Lease]; ok {
			k.TTL = ttl
		}
		k.Owner = owners[sessions[i]]
	}
	return sessions, nil
}

// readYields sets YieldRequested on the keys of q that a yield request
// asks (see RequestYield), from one read of the name's requests. A read
// that fails (without permission to read YieldPrefix) leaves them unset;
// its error is returned only if ctx ended.
func readYields(ctx context.Context, c *clientv3.Client, pfx string, q *Queue) error {
	resp, err := c.Get(ctx, yieldKey(pfx), clientv3.WithPrefix())
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return nil
	}
	asked := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		asked[strings.TrimPrefix(string(kv.Key), YieldPrefix)] = kv
	}
	for i := range q.Keys {
		k := &q.Keys[i]
		if kv := asked[k.Key]; kv != nil {
			k.YieldRequested = asks([]*mvccpb.KeyValue{kv}, k.CreateRevision)
		}
	}
	return nil
}

var (
	// Lease IDs are written as int64 in hex ("%x"), so a negative one,
	// which etcd does not grant but a hand-written key may carry, has a
	// minus sign.
	mutexKeyRe = regexp.MustCompile(`^-?[0-9a-f]+$`)
	seqKeyRe   = regexp.MustCompile(`^-?[0-9a-f]+-[0-9a-f]+$`)
)

// sessionLease is the lease of the session that wrote the key k of the
// name whose prefix is pfx: the lease in the key's name for the keys of
// this package and etcd's, which is the key's own lease unless a max hold
// moved the key to a lease of its own (see hold.bound); the key's lease
// for any other key.
func sessionLease(pfx string, k *QueueKey) clientv3.LeaseID {
	rest := k.Key[len(pfx):]
	switch k.Kind {
	case KindMutex:
	case KindReader, KindWriter:
		rest = rest[2:]
		fallthrough
	case KindSemaphore:
		rest = rest[:strings.LastIndexByte(rest, '-')]
	default:
		return k.Lease
	}
	id, err := strconv.ParseInt(rest, 16, 64)
	if err != nil {
		return k.Lease
	}
	return clientv3.LeaseID(id)
}

// keyKindOf is the kind of a key from rest, the part after the name's
// prefix.
func keyKindOf(rest string) KeyKind {
	switch {
	case mutexKeyRe.MatchString(rest):
		return KindMutex
	case seqKeyRe.MatchString(rest):
		return KindSemaphore
	case strings.HasPrefix(rest, "r/") && seqKeyRe.MatchString(rest[2:]):
		return KindReader
	case strings.HasPrefix(rest, "w/") && seqKeyRe.MatchString(rest[2:]):
		return KindWriter
	}
	return KindOther
}

// readOwners returns the owner record of each lease in ids that has one.
// Records are informative, so a failure to read them gives no owners (or
// those read so far) rather than an error, unless ctx ended: a user
// without permission to read OwnerPrefix, or a cluster whose
// --max-txn-ops is below maxTxnOps, still gets the queue. Records it cannot
// parse, or whose key is on another lease than its name says (written by
// hand), are skipped.
func readOwners(ctx context.Context, c *clientv3.Client, ids []clientv3.LeaseID) (map[clientv3.LeaseID]*Owner, error) {
	owners := make(map[clientv3.LeaseID]*Owner)
	for len(ids) > 0 {
		n := min(len(ids), maxTxnOps)
		ops := make([]clientv3.Op, n)
		for i, id := range ids[:n] {
			ops[i] = clientv3.OpGet(ownerKey(id))
		}
		resp, err := c.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			return owners, nil
		}
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().GetKvs()
			if len(kvs) == 0 || kvs[0].Lease != int64(ids[i]) {
				continue
			}
			var o Owner
			if json.Unmarshal(kvs[0].Value, &o) == nil {
				owners[ids[i]] = &o
			}
		}
		ids = ids[n:]
	}
	return owners, nil
}

// readHealth sets QueueKey.Health for the keys of q whose session's checks
// are failing, from one read of HealthPrefix; sessions[i] is the lease of
// the session of q.Keys[i] (see sessionLease). A read that fails (without
// permission) leaves them nil; its error is returned only if ctx ended.
func readHealth(ctx context.Context, c *clientv3.Client, q *Queue, sessions []clientv3.LeaseID) error {
	if len(q.Keys) == 0 {
		return nil
	}
	resp, err := c.Get(ctx, HealthPrefix, clientv3.WithPrefix())
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return nil
	}
	byLease := make(map[clientv3.LeaseID]*Health, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		// Failures 0: the checks pass again (see recordHealth).
		if id, h, ok := parseHealth(kv); ok && h.Failures > 0 {
			byLease[id] = h
		}
	}
	for i := range q.Keys {
		q.Keys[i].Health = byLease[sessions[i]]
	}
	return nil
}
