package concurrency

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds the rules of the queue, one per primitive, and the
// judgement of a key's place by them: one linearizable read that says
// whether the key holds and, if not, what it waits for.

// rule says when a key of a queue holds.
type rule struct {
	pfx string // the queue: every key of the lock name is under it
	// over is the part of the queue whose older keys count against a key:
	// pfx for a Mutex, an Election, a Semaphore and an RWMutex writer; only
	// the writers for an RWMutex reader.
	over string
	// limit is how many keys of over may be older than a key that holds:
	// 1 for everything but a Semaphore.
	limit int
	// check, if not nil, vets the older keys that a read returned (the kind
	// of lock and its limit): an error ends the acquisition, leaving no key.
	check func(older []*mvccpb.KeyValue) error
	// foreign, if not "", ends the range [pfx, foreign) of keys of other
	// kinds of lock that over does not take in: a key older than this one
	// in that range refuses it, with ErrLockKind.
	foreign string
	// guard, if not nil, makes the write of a new key conditional on the
	// name's other keys allowing it (their kind, their limit): it returns
	// one operation that applies then if they do, and else refused, whose
	// reads refuse turns into the error. So a key that would be refused is
	// never written, and cannot stand in the way of the name's rightful
	// users while it waits to be deleted (or, if its process died, for the
	// rest of its lease).
	guard   func(then, refused []clientv3.Op) clientv3.Op
	refused []clientv3.Op
	refuse  func(rs []*pb.ResponseOp) error
	kind    string // for metrics and traces: kindMutex, kindElection...
	// weigh, if not nil, replaces judge and check for a Semaphore, whose
	// keys carry their weight and the name's limit in their values (see
	// semaphore.go): from own, the value of the key, and the newest keys
	// of over older than it (newest first), whether the key holds and if
	// not what it waits for. truncated says that the read stopped at its
	// limit, so older keys may exist beyond those given; more asks for
	// them (the name's limit grew past the one read with: see
	// Semaphore.SetLimit).
	weigh func(own []byte, older []*mvccpb.KeyValue, truncated bool) (holds bool, next target, more bool, err error)
}

// olderKeys returns opts for a read of the keys of over that judge a key,
// asking for their keys alone unless r weighs their values (a Semaphore).
// etcd sorts such a read by reading every key of the range (issue 42: a
// queue of N costs each enqueue and each handoff O(N) on the server, for
// etcd's package too); without values, etcd v3.7 serves it from its
// in-memory index instead of its backend, 2.4 to 3.9 times faster with
// 10,000 keys queued (BenchmarkSortedRead in internal/lockbench). Older
// servers read the values all the same and do not send them.
func (r rule) olderKeys(opts ...clientv3.OpOption) []clientv3.OpOption {
	if r.weigh == nil {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	return opts
}

// mutexRule is the rule of a Mutex named by prefix pfx, and the base of
// the others.
func mutexRule(pfx string) rule { return rule{pfx: pfx, over: pfx, limit: 1, kind: kindMutex} }

// judge says, from the newest keys of over older than a key (newest first,
// at most limit+1 of them), whether the key holds, and if not what it
// waits for: the newest older key or, when exactly limit keys are older
// and limit > 1, any deletion in over (see target).
func (r rule) judge(older []*mvccpb.KeyValue) (holds bool, next target) {
	switch {
	case len(older) < r.limit:
		return true, target{}
	case len(older) == r.limit && r.limit > 1:
		return false, target{over: r.over}
	default:
		return false, target{key: string(older[0].Key), create: older[0].CreateRevision, mod: older[0].ModRevision, onPut: r.limit > 1}
	}
}

// judgement is what judge read of a key's place.
type judgement struct {
	holds bool
	next  target             // what to wait for, if the key does not hold
	hdr   *pb.ResponseHeader // of the read: the key space at hdr.Revision
}

// judge reads linearizably, in one transaction, key and the keys older
// than it that r counts, and says whether key, created at rev, holds. A
// linearizable read reflects every write the cluster had applied when the
// read began, so a key it shows holding has not been deleted by then,
// whichever member answers (a serializable read of a member that lags
// could show a key that the leader has already deleted, and so grant it
// beside the next holder). It returns an error matching ErrSessionExpired
// if the key is gone or was replaced, and r's check's error if the older
// keys refuse it.
func judge(ctx context.Context, s *Session, r rule, key string, rev int64) (judgement, error) {
	j, more, err := judgeOnce(ctx, s, r, key, rev, int64(r.limit)+1)
	if more {
		// The name's limit grew past the one read with: read every older
		// key (a read without a limit is never truncated).
		j, _, err = judgeOnce(ctx, s, r, key, rev, 0)
	}
	return j, err
}

// skipJudge makes judge ignore the older keys it read, so that every
// waiter holds at once: a deliberately broken library, set only by the
// build tag concurrency_brokenjudge (brokenjudge.go), which the fault
// tests use to show that their checkers catch it (issue 40).
var skipJudge = false

// judgeOnce is one read of judge, of at most limit older keys (0: all of
// them). more says that r.weigh asks for every older key.
func judgeOnce(ctx context.Context, s *Session, r rule, key string, rev, limit int64) (judgement, bool, error) {
	older := r.olderKeys(clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithLimit(limit), clientv3.WithMaxCreateRev(rev-1))
	ops := []clientv3.Op{clientv3.OpGet(key), clientv3.OpGet(r.over, older...)}
	if r.foreign != "" {
		ops = append(ops, clientv3.OpGet(r.pfx, clientv3.WithRange(r.foreign), clientv3.WithMaxCreateRev(rev-1), clientv3.WithLimit(1), clientv3.WithKeysOnly()))
	}
	resp, _, err := sessionAsk(ctx, s, request.Read, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.client.Txn(ctx).Then(ops...).Commit()
	})
	if err != nil {
		return judgement{}, false, err
	}
	own := resp.Responses[0].GetResponseRange().Kvs
	if len(own) == 0 || own[0].CreateRevision != rev {
		s.check()
		return judgement{}, false, fmt.Errorf("%w: key %q was deleted while waiting", ErrSessionExpired, key)
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if skipJudge {
		kvs = nil
	}
	j := judgement{hdr: resp.Header}
	if r.weigh != nil {
		holds, next, more, err := r.weigh(own[0].Value, kvs, limit > 0 && int64(len(kvs)) == limit)
		if err != nil || more {
			return judgement{}, more && err == nil, err
		}
		j.holds, j.next = holds, next
		return j, false, nil
	}
	if r.check != nil {
		if err := r.check(kvs); err != nil {
			return judgement{}, false, err
		}
	}
	if r.foreign != "" {
		if f := resp.Responses[2].GetResponseRange().Kvs; len(f) > 0 {
			return judgement{}, false, fmt.Errorf("%w: %q", ErrLockKind, f[0].Key)
		}
	}
	j.holds, j.next = r.judge(kvs)
	return j, false, nil
}
