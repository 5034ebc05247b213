package concurrency

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds lock-delay (Consul's lock-delay, Chubby's): a Mutex on a
// session WithLockDelay that is granted the lock after a hold that ended
// by loss rather than by its holder's release waits d before Lock
// returns. etcd keeps no record of why a key was deleted, so the holders
// keep one: one key per lock name (see lockDelayKey), on no lease (it must
// outlive a holder whose lease expired). A
// holder with lock-delay writes its token there when it is granted, and
// "released" and its token in the same transaction as its release's
// delete. So the next holder with lock-delay, which reads the record and
// writes its own in one transaction, tells:
//
//   - the token of another hold, not marked released: that hold ended
//     without its release (lease expired or revoked, key deleted by
//     someone else, process gone): a loss, so it waits;
//   - "released" and a token: that hold was released; if it queued behind
//     keys newer than that hold, whose end nobody recorded (a holder of
//     etcd's package, `etcdctl lock`, or a session without lock-delay), it
//     judges them by their leases (see lostBefore): a key gone while its
//     lease lives was deleted, as a release deletes it; one whose lease is
//     gone counts as a loss, so it waits;
//   - no record: no holder with lock-delay has held the name; it judges
//     the keys it queued behind in the same way.
//
// A grant that finds a loss starts the delay in etcd: a key (see delayKey)
// on a lease granted for d, so that etcd's clock ends it and every grant
// with lock-delay in the meantime, Lock or TryLock, of any process, sees
// it and waits (or misses) until it is gone.

// LockDelayPrefix is the prefix of the keys in which the holders of a
// Mutex on a session WithLockDelay record how the last hold of its name
// ended, LockDelayPrefix, "last" and the name's prefix (the name and "/"),
// and the key that exists while the name is in a lock-delay,
// LockDelayPrefix, "delay" and the name's prefix, on a lease that etcd
// expires when the delay is over. The first is on no lease, so that it
// outlives a holder that crashed; one is left per name used with
// lock-delay.
const LockDelayPrefix = "/_concurrency/lockdelay/"

// lockDelayKey is the lock-delay record of the lock whose keys are under
// pfx.
func lockDelayKey(pfx string) string { return LockDelayPrefix + "last" + pfx }

// delayKey is the key that exists while the lock whose keys are under pfx
// is in a lock-delay, on a lease of its own that etcd expires after it.
func delayKey(pfx string) string { return LockDelayPrefix + "delay" + pfx }

// lockDelayLeft is what is left of a lock-delay running on the lock whose
// keys are under pfx: its delay key's lease's time to live, or 0 if there
// is no delay key (or its lease is gone).
func lockDelayLeft(ctx context.Context, c *clientv3.Client, pfx string) (time.Duration, error) {
	resp, err := c.Get(ctx, delayKey(pfx))
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		return 0, err
	}
	ttl, err := c.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil || ttl.TTL <= 0 {
		return 0, err
	}
	return time.Duration(ttl.TTL) * time.Second, nil
}

// releasedMark is the value of a lock-delay record after the release of
// the hold with token rev.
func releasedMark(rev int64) string { return "released " + strconv.FormatInt(rev, 10) }

// behindUnknown is what a grant queued behind when it cannot tell: as if
// behind a key newer than any record.
const behindUnknown = math.MaxInt64

// markReleased is what a release of h adds to its delete: the mark in the
// name's lock-delay record, if h wrote it and it still names h.
func (h *hold) markReleased() []clientv3.Op {
	if h.delayed == "" {
		return nil
	}
	tok := strconv.FormatInt(h.rev, 10)
	return []clientv3.Op{clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(h.delayed), "=", tok)},
		[]clientv3.Op{clientv3.OpPut(h.delayed, releasedMark(h.rev))}, nil)}
}

// delayGrant writes h's token into the lock-delay record of the lock under
// pfx. It reads the record and the name's delay key first; if the hold
// before h may have ended by loss (see mustDelay) and no delay runs, it
// grants a lease of its own for d, never renewed, so that etcd's clock,
// not this host's, ends the delay. Then one transaction, applied only
// while h's key holds, writes the delay key on that lease (unless one is
// there), h's token into the record, and reads the delay key. So the
// record never names h before the delay it calls for is in etcd: a grant
// that gives up before (its ctx ends while the lease is granted) leaves
// the record naming the hold that was lost, and the next grant delays in
// its place. Applied twice, the transaction writes the same again; applied
// late, after h's key went, nothing. While a delay runs, a Lock (wait)
// waits for the delay key to go, until ctx or the session ends (their
// error is returned), and a TryLock returns ErrLocked. behind is the
// create revision of the newest key older than h's when h queued (0:
// none, h held at once). On error the caller releases h, which marks the
// record released if h wrote it: the delay key carries the delay on.
func (h *hold) delayGrant(ctx context.Context, pfx string, behind int64, d time.Duration, wait bool) error {
	delay, seen, err := h.recordGrant(ctx, pfx, behind, d)
	if err != nil || delay == 0 {
		return err
	}
	if !wait {
		return fmt.Errorf("%w: the lock is in its lock-delay after a loss", ErrLocked)
	}
	return h.waitDelay(ctx, delayKey(pfx), delay, seen)
}

// recordGrant is delayGrant's read and write: it reads the lock-delay
// record of the lock under pfx and its delay key, starts a delay of d if
// the hold before h may have been lost and none runs, and writes h's
// token into the record, while h's key holds. It returns the create
// revision of the delay key that runs (0: none), and the revision at
// which the write saw it.
func (h *hold) recordGrant(ctx context.Context, pfx string, behind int64, d time.Duration) (delay, seen int64, err error) {
	s, rec, dk := h.s, lockDelayKey(pfx), delayKey(pfx)
	read, _, err := sessionAsk(ctx, s, request.Read, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)).
			Then(clientv3.OpGet(rec), clientv3.OpGet(dk)).Commit()
	})
	if err != nil {
		return 0, 0, err
	}
	if !read.Succeeded {
		s.check()
		return 0, 0, fmt.Errorf("%w: key %q was deleted before its lock-delay was read", ErrSessionExpired, h.key)
	}
	// Keys of holders that record nothing are judged by their leases (see
	// lostBefore).
	last := read.Responses[0].GetResponseRange().Kvs
	lost := mustDelay(last, h.rev, behind)
	if after, ok := releasedBefore(last); lost && ok {
		lost = h.lostBefore(ctx, pfx, after)
	}
	ops := []clientv3.Op{clientv3.OpPut(rec, strconv.FormatInt(h.rev, 10))}
	if lost && len(read.Responses[1].GetResponseRange().Kvs) == 0 {
		lease, err := s.grantFor(ctx, d)
		if err != nil {
			return 0, 0, err
		}
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(dk), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(dk, "", clientv3.WithLease(lease))}, nil))
	}
	resp, _, err := h.ifHeld(ctx, "its lock-delay was recorded", append(ops, clientv3.OpGet(dk))...)
	if err != nil {
		return 0, 0, err
	}
	h.delayed = rec
	if kvs := resp.Responses[len(resp.Responses)-1].GetResponseRange().Kvs; len(kvs) > 0 {
		return kvs[0].CreateRevision, resp.Header.Revision, nil
	}
	return 0, resp.Header.Revision, nil
}

// waitDelay waits for the delay key dk, created at create and seen at
// revision seen, to go, until ctx or the session ends (their error is
// returned), and then checks that h's key still holds.
func (h *hold) waitDelay(ctx context.Context, dk string, create, seen int64) error {
	s := h.s
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(s.life, func() { cancel(context.Cause(s.life)) })()
	var b backoff
	for {
		err := waitDelete(wctx, s, target{key: dk, create: create}, seen, &b)
		switch {
		case err == nil && wctx.Err() == nil:
			// The key held all along, unless it was lost meanwhile.
			resp, err := s.get(wctx, h.key)
			if err == nil && (len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != h.rev) {
				s.check()
				return fmt.Errorf("%w: key %q was deleted during its lock-delay", ErrSessionExpired, h.key)
			}
			if err == nil || wctx.Err() == nil {
				return err
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case wctx.Err() != nil:
			return context.Cause(wctx)
		}
		b.Sleep(wctx) // refused (permission): try again
	}
}

// mustDelay reports whether a grant of the key created at rev that read
// the lock-delay record kvs, and queued behind a key created at behind (0:
// none), must wait: unless the last hold recorded was released, or is
// this very key's (another Mutex of the session shares it), and no
// unrecorded key can have held between it and the grant.
func mustDelay(kvs []*mvccpb.KeyValue, rev, behind int64) bool {
	if len(kvs) == 0 {
		return behind > 0
	}
	v, ok := strings.CutPrefix(string(kvs[0].Value), "released ")
	if !ok {
		// The last recorded hold was not released: lost, unless it is
		// this key's own.
		return string(kvs[0].Value) != strconv.FormatInt(rev, 10)
	}
	tok, err := strconv.ParseInt(v, 10, 64)
	return err != nil || behind > tok
}

// releasedBefore reads the lock-delay record kvs: ok is true when it
// records no loss, and after is then the token of the last hold released
// (0 without a record). Only keys newer than after, which wrote no record,
// can have ended by loss since.
func releasedBefore(kvs []*mvccpb.KeyValue) (after int64, ok bool) {
	if len(kvs) == 0 {
		return 0, true
	}
	v, released := strings.CutPrefix(string(kvs[0].Value), "released ")
	if !released {
		return 0, false
	}
	tok, err := strconv.ParseInt(v, 10, 64)
	return tok, err == nil
}

// lostBefore reports whether a key of the lock under pfx that may have
// held before h without recording it (etcd's package, `etcdctl lock`, a
// session without lock-delay) ended by loss. Those keys are the ones
// older than h's, newer than the hold with token after, that were there
// when h's key was created (one read at that revision); all are gone at
// h's grant. A key gone while its lease lives was deleted by a client:
// its holder's release (Unlock, the end of `etcdctl lock`'s command), or
// someone else's delete, which cannot be told from it. A key whose lease
// is gone may have gone with it: a loss. So is any key that cannot be
// judged (an error, a compacted revision). Each request is asked as ask
// does, until answered or ctx ends.
func (h *hold) lostBefore(ctx context.Context, pfx string, after int64) bool {
	resp, err := h.s.get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(h.rev),
		clientv3.WithMinCreateRev(after+1), clientv3.WithMaxCreateRev(h.rev-1))
	if err != nil {
		return true
	}
	for _, kv := range resp.Kvs {
		if kv.Lease == 0 {
			continue // only a delete removes it
		}
		ttl, _, err := sessionAsk(ctx, h.s, request.Read, func(ctx context.Context) (*clientv3.LeaseTimeToLiveResponse, error) {
			return h.s.client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		})
		if err != nil || ttl.TTL <= 0 {
			return true
		}
	}
	return false
}
