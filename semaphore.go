package concurrency

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// Semaphore lets holders, across every session, hold permits of its
// limit, at most limit of them at once: a counting semaphore on etcd, on
// the same queue, wait and hold as Mutex. Acquire takes one permit;
// AcquireN takes n at once (a weight, as golang.org/x/sync/semaphore's
// Weighted.Acquire does), and unit and weighted holders mix on one name.
// Permits are granted in the order of the keys' create revisions, strictly
// (FIFO): a key holds when the weights of every older key and its own add
// up to at most the limit, so a request that does not fit yet blocks the
// ones behind it, even those that would fit, and a large request is never
// starved. A waiter watches one key, the newest older one, except the
// first waiter, whose turn comes when any holder goes and which watches
// the name's keys for deletions (and its own key, for a resize). Each
// permit has a fencing token, a guarded transaction and a context
// cancelled when it is lost, as a Mutex's hold has.
//
// Each Semaphore value holds at most one permit key, of one weight, under
// a key of its own: several Semaphores on one session (a worker pool
// sharing a lease) hold one key each. The key is the name, "/", the
// session's lease ID and a random 64-bit number (the weight folded in for
// a weight other than 1), in hex, so that values on one lease are told
// apart even across processes that share the lease (WithLease); its value
// is the limit, then, for a weight other than 1, "/" and the weight ("5"
// for one permit of 5, "5/3" for three), so that every client, Inspect and
// etcdctl see both.
//
// The limit is agreed in etcd: every key of the name carries it, and a key
// is written only if every key of the name has the same limit (one
// transaction compares them all), so all the keys of a name have the limit
// of its oldest one. A Semaphore with another limit, or another kind of
// lock's key under the name, is refused (ErrLimitMismatch, ErrLockKind)
// without writing anything, so a misconfigured client never stands in the
// way of the name's rightful users. A Semaphore of an earlier version of
// this package, which cannot count weights, is refused the same way while
// a key of weight other than 1 is in the queue. Nothing else records the
// limit, so nothing is left to clean up: it is forgotten when the last key
// goes, and the next user sets it anew. SetLimit changes it for every key
// at once.
//
// A Semaphore is safe for use by several goroutines, which it excludes as a
// Mutex does.
type Semaphore struct {
	holder
	id     uint64       // the random part of the key (see keyFor)
	limit  atomic.Int64 // the limit this value writes and agrees to
	weight atomic.Int64 // the weight of the permit held, 0 if none
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
	m := &Semaphore{holder: newHolder(s, pfx)}
	m.limit.Store(int64(limit))
	if s != nil {
		m.id = valueID()
	}
	created(s, m.pfx, kindSemaphore)
	return m
}

// semKey matches the part after the prefix of a Semaphore's key.
var semKey = regexp.MustCompile(`^[0-9a-f]+-[0-9a-f]+$`)

// semValue is the value of a Semaphore's key of weight w on a name of
// limit lim: the limit, then "/" and the weight unless it is 1, so that a
// unit key has the value that earlier versions wrote.
func semValue(lim, w int) string {
	if w == 1 {
		return strconv.Itoa(lim)
	}
	return strconv.Itoa(lim) + "/" + strconv.Itoa(w)
}

// parseSemValue is the limit and weight of a Semaphore's key from its
// value, as semValue writes it; ok is false for any other value (numbers
// must be positive and written without a sign or leading zeros, as
// strconv.Itoa writes them).
func parseSemValue(v []byte) (lim, w int, ok bool) {
	num := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || strconv.Itoa(n) != s {
			return 0
		}
		return n
	}
	ls, ws, weighted := strings.Cut(string(v), "/")
	lim, w = num(ls), 1
	if weighted {
		w = num(ws)
	}
	return lim, w, lim > 0 && w > 0
}

// limitRange is the range [lo, hi] of values, in etcd's byte order, that
// holds exactly the values semValue writes for limit lim, among the values
// it writes for every limit: lim itself, and lim followed by "/" and a
// weight. Values are made of digits and "/", which sorts before "0":
// every value for lim sorts from lim up to, not including, lim followed by
// "0", and so does nothing written for another limit (a longer limit that
// begins with lim's digits sorts at or after lim+"0"). etcd compares only
// with <, =, > and !=, so lo is a string just below lim: lim with its last
// digit one less, then "~", which sorts after every digit and "/".
func limitRange(lim int) (lo, hi string) {
	s := strconv.Itoa(lim)
	return s[:len(s)-1] + string(s[len(s)-1]-1) + "~", s + "0"
}

// rule is the rule of an acquisition of weight w of key. The limit read
// from the key's value at each grant is stored in *seen.
func (m *Semaphore) rule(key string, w int, seen *int) rule {
	lim := int(m.limit.Load())
	r := mutexRule(m.pfx)
	r.kind = kindSemaphore
	r.limit = lim
	r.weigh = func(own []byte, older []*mvccpb.KeyValue, truncated bool) (bool, target, bool, error) {
		return m.weigh(key, w, own, older, truncated, seen)
	}
	// Every key of the name has this limit, or there is none. (etcd fails
	// a value comparison over a range that holds no key, hence the second
	// transaction for the empty name.)
	lo, hi := limitRange(lim)
	r.guard = func(then, refused []clientv3.Op) clientv3.Op {
		empty := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Version(m.pfx), "=", 0).WithPrefix()}, then, refused)
		return clientv3.OpTxn([]clientv3.Cmp{
			clientv3.Compare(clientv3.Value(m.pfx), ">", lo).WithPrefix(),
			clientv3.Compare(clientv3.Value(m.pfx), "<", hi).WithPrefix(),
		}, then, []clientv3.Op{empty})
	}
	r.refused = []clientv3.Op{clientv3.OpGet(m.pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))}
	r.refuse = func(rs []*pb.ResponseOp) error {
		if kvs := rs[0].GetResponseRange().Kvs; len(kvs) > 0 {
			if _, err := m.refuseKey(kvs[0], lim); err != nil {
				return err
			}
		}
		return fmt.Errorf("%w: a key of %q has another limit than %d, or is another kind of lock's", ErrLockKind, m.pfx, lim)
	}
	return r
}

// weigh is the rule's weigh for a key of weight w (see rule.weigh). The
// limit is the one in the key's own value, read with the older keys, so
// that a resize, which rewrites every key at once, is seen whole. A key
// holds when the weights of the older keys and its own add up to at most
// the limit. One that does not waits for the newest older key (its
// deletion, or its grant, which rewrites it: see promote) if that key
// waits too or is the only one; and otherwise, as the first waiter, for
// any deletion among the holders and for a resize.
func (m *Semaphore) weigh(key string, w int, own []byte, older []*mvccpb.KeyValue, truncated bool, seen *int) (bool, target, bool, error) {
	lim, ow, ok := parseSemValue(own)
	switch {
	case !ok:
		return false, target{}, false, fmt.Errorf("%w: %q has value %q, not a semaphore's", ErrLockKind, key, own)
	case ow != w:
		// Not written by this Semaphore (its keys differ by weight: see
		// keyFor): refused, and deleted by the caller.
		return false, target{}, false, fmt.Errorf("%w: %q has weight %d, not %d", ErrLimitMismatch, key, ow, w)
	}
	// sum is the older keys' weight, counted only up to lim (over says
	// it is more): weights near the largest int must not wrap around.
	sum, over := 0, false
	for _, kv := range older {
		kl, err := m.refuseKey(kv, lim)
		if err != nil {
			return false, target{}, false, err
		}
		if kl > lim-sum {
			over = true
		} else if !over {
			sum += kl
		}
	}
	var pred target
	if len(older) > 0 {
		pred = target{key: string(older[0].Key), create: older[0].CreateRevision, mod: older[0].ModRevision, onPut: true}
	}
	// first is the wait of the first waiter: for any deletion among the
	// older keys, and for a resize (its own key rewritten).
	first := target{over: m.pfx, wake: key}
	// Until a resize, the holders are the oldest keys and fit the limit,
	// so a waiter whose older keys do not fit waits behind a waiter, the
	// newest older key, and watches only it. After a shrink, holders
	// beyond the limit keep their permits: the older keys may all hold, and
	// the deletion of any of them may let this one in. Every such holder's
	// key was rewritten (by the resize, or by its grant after a wait:
	// promote), so a newest older key rewritten since its creation may
	// hold: then this one waits as the first waiter does.
	mayHold := len(older) > 0 && older[0].ModRevision > older[0].CreateRevision
	switch {
	case len(older) > lim && mayHold:
		return false, first, false, nil
	case len(older) > lim:
		// Each key weighs at least 1: the newest older key waits too.
		return false, pred, false, nil
	case truncated:
		return false, target{}, true, nil // the limit grew: read them all
	case !over && w <= lim-sum:
		*seen = lim
		return true, target{}, false, nil
	case w > lim:
		// A resize cannot make this (SetLimit refuses a limit below a
		// key's weight): a key written by another client.
		return false, target{}, false, fmt.Errorf("%w: %q weighs %d, the limit is %d", ErrWeightExceedsLimit, key, w, lim)
	case !over && len(older) > 1, over && mayHold:
		return false, first, false, nil
	}
	return false, pred, false, nil
}

// refuseKey is the weight of a key of the name, or the error of one that
// a Semaphore of limit lim cannot share the name with: another kind of
// lock's (ErrLockKind), or another limit's (ErrLimitMismatch).
func (m *Semaphore) refuseKey(kv *mvccpb.KeyValue, lim int) (int, error) {
	if !semKey.MatchString(string(kv.Key[len(m.pfx):])) {
		return 0, fmt.Errorf("%w: %q is not a semaphore's key", ErrLockKind, kv.Key)
	}
	kl, kw, ok := parseSemValue(kv.Value)
	if !ok || kl != lim {
		return 0, fmt.Errorf("%w: %q has value %q, not limit %d", ErrLimitMismatch, kv.Key, kv.Value, lim)
	}
	return kw, nil
}

func (m *Semaphore) valid() error {
	if err := validate(m.s, m.pfx); err != nil {
		return err
	}
	if lim := m.limit.Load(); lim <= 0 {
		return fmt.Errorf("%w: %d", ErrInvalidLimit, lim)
	}
	return nil
}

// validWeight is valid, and the error of weight n for it.
func (m *Semaphore) validWeight(n int) error {
	if err := m.valid(); err != nil {
		return err
	}
	switch lim := m.limit.Load(); {
	case n <= 0:
		return fmt.Errorf("%w: %d", ErrInvalidWeight, n)
	case int64(n) > lim:
		return fmt.Errorf("%w: weight %d, limit %d", ErrWeightExceedsLimit, n, lim)
	}
	return nil
}

// keyFor is the key of an acquisition of weight n: the name, the lease ID
// and the random ID, with n folded into the random ID (XOR) for a weight
// other than 1. So a key that an earlier acquisition left in place (its
// outcome unknown, see settle) is found again, and judged, only by one of
// the same weight, and a unit key is the one earlier versions named.
func (m *Semaphore) keyFor(n int) string {
	id := m.id
	if n != 1 {
		id ^= uint64(n)
	}
	return fmt.Sprintf("%s%x-%x", m.pfx, int64(m.s.Lease()), id)
}

// acquire takes a key of weight n, waiting if wait.
func (m *Semaphore) acquire(ctx context.Context, n int, wait bool) error {
	valid := m.validWeight(n)
	seen := 0
	var r rule
	key := ""
	if valid == nil {
		key = m.keyFor(n)
		r = m.rule(key, n, &seen)
	}
	if err := m.lock(ctx, r, key, semValue(r.limit, n), wait, valid); err != nil {
		return err
	}
	m.weight.Store(int64(n))
	if seen > 0 {
		m.limit.Store(int64(seen)) // a resize while waiting: learn it
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
func (m *Semaphore) Acquire(ctx context.Context) error { return m.acquire(ctx, 1, true) }

// AcquireN blocks until this Semaphore holds n permits at once, ctx ends,
// or the session ends, as Acquire does for one. Like
// golang.org/x/sync/semaphore's Weighted.Acquire, it waits its turn
// strictly: while it does not fit, the acquisitions behind it wait too,
// even those that would fit. n must be at least 1 (else ErrInvalidWeight)
// and at most the limit (else ErrWeightExceedsLimit); both are refused
// before anything is written. On any error no permit is held and the key
// has been deleted. AcquireN(ctx, 1) is Acquire, with the same key value
// as earlier versions wrote.
func (m *Semaphore) AcquireN(ctx context.Context, n int) error { return m.acquire(ctx, n, true) }

// TryAcquire takes a permit if one is free now, and otherwise returns
// ErrLocked at once, after deleting the key it wrote. It also returns
// ErrLocked, without talking to etcd, while another goroutine holds or is
// acquiring a permit through this Semaphore. Other errors are Acquire's.
func (m *Semaphore) TryAcquire(ctx context.Context) error { return m.acquire(ctx, 1, false) }

// TryAcquireN takes n permits if they are free now and no acquisition is
// queued before it, and otherwise returns ErrLocked at once, after
// deleting the key it wrote. Other errors are AcquireN's.
func (m *Semaphore) TryAcquireN(ctx context.Context, n int) error { return m.acquire(ctx, n, false) }

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

// Weight returns the number of permits held by this Semaphore: the
// weight it was acquired with, or 0 when none is held.
func (m *Semaphore) Weight() int {
	if m.Token() == 0 {
		return 0
	}
	return int(m.weight.Load())
}

// Limit returns the limit this Semaphore writes with its key and agrees
// to: the one it was created with, or the one it set (SetLimit) or was
// granted under after another client's resize. It does not talk to etcd;
// Inspect reads the name's.
func (m *Semaphore) Limit() int { return int(m.limit.Load()) }

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

// SetLimit changes the limit of the semaphore's name to n for every
// client, holder and waiter at once: in one transaction it rewrites the
// value of every key of the name with n (keeping each key's weight, lease
// and create revision, so fencing tokens and guarded transactions are
// untouched), on condition that no key was created, written or deleted
// since the read it is based on (each key's mod revision, and no key
// newer than the read); if one was, it reads and tries again, until ctx
// ends; if n is the name's limit already, it writes nothing. Every grant
// is decided by one read of the keys, which sees the limit before the
// resize or after it, never a mix, so no moment lets more in than the
// old or the new limit. A larger limit lets waiters in
// at once (the first waiter watches its own key for it). A smaller one
// ends no hold: holders beyond it keep their permits, and new grants wait
// until the holders fit the new limit.
//
// n must be at least 1 (else ErrInvalidLimit) and at least the weight of
// every key of the name (else ErrWeightExceedsLimit: a waiter heavier
// than the limit would block the queue for ever); a name used by another
// kind of lock gives ErrLockKind. A refused SetLimit writes nothing. On
// success, this Semaphore's own limit becomes n; other Semaphores learn it
// when they are granted a permit under it, and until then those with the
// old limit are refused (ErrLimitMismatch) without writing, as any
// Semaphore with another limit is. On a name without keys there is
// nothing to rewrite: SetLimit sets only this Semaphore's limit, which
// its next acquisition gives the name. The rewrite is one transaction
// with a comparison per key and one more (no key is new), so a name with
// as many keys as etcd allows operations in one (--max-txn-ops, 128 by
// default: 127 keys can be resized) or more cannot be resized: etcd's
// error is returned and nothing changes.
// Concurrent SetLimits each apply whole; the last to commit wins. A
// rewrite whose answer was lost and that etcd applies late, after a later
// resize or any other write to the name's keys, changes nothing: the
// comparisons fail. An error of a ctx that ended while the rewrite was in
// flight may leave it applied, and this Semaphore's own limit unchanged:
// a SetLimit to the same n then writes nothing and sets it.
func (m *Semaphore) SetLimit(ctx context.Context, n int) error {
	if err := validate(m.s, m.pfx); err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("%w: %d", ErrInvalidLimit, n)
	}
	var b backoff
	for {
		done, err := m.setLimit(ctx, n)
		if done || err != nil && !request.Transient(err) {
			if err == nil {
				m.limit.Store(int64(n))
			}
			return err
		}
		// Keys came or went between the read and the rewrite, or etcd
		// did not answer: read again.
		if !b.Sleep(ctx) {
			return ctx.Err()
		}
	}
}

// setLimit is one attempt of SetLimit: done is false when a key came or
// went between its read and its rewrite.
func (m *Semaphore) setLimit(ctx context.Context, n int) (done bool, err error) {
	resp, err := m.s.get(ctx, m.pfx, clientv3.WithPrefix())
	if err != nil {
		return false, err
	}
	if len(resp.Kvs) == 0 {
		return true, nil
	}
	lim, _, _ := parseSemValue(resp.Kvs[0].Value)
	if lim == n {
		// Already the name's limit (and every key's, by the guard):
		// rewriting would only wake every waiter for nothing. The keys
		// are still checked, as a resize checks them.
		for _, kv := range resp.Kvs {
			if _, err := m.refuseKey(kv, lim); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	// No key created since the read; each key read still there, as it
	// was read (its mod revision: a key deleted, or created anew, has
	// another). So an attempt applied twice, or late (after a later
	// resize, or after any grant, release or promotion), changes nothing:
	// the rewrite applies only to the keys and limit it read.
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(m.pfx), "<", resp.Header.Revision+1).WithPrefix()}
	ops := make([]clientv3.Op, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		w, err := m.refuseKey(kv, lim)
		if err != nil {
			return false, err
		}
		if w > n {
			return false, fmt.Errorf("%w: %q weighs %d, more than limit %d", ErrWeightExceedsLimit, kv.Key, w, n)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))
		ops = append(ops, clientv3.OpPut(string(kv.Key), semValue(n, w), clientv3.WithIgnoreLease()))
	}
	tr, _, err := sessionAsk(ctx, m.s, request.Write, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return m.s.client.Txn(ctx).If(cmps...).Then(ops...).Commit()
	})
	if err != nil {
		return false, fmt.Errorf("concurrency: SetLimit %q: %w", m.pfx, err)
	}
	return tr.Succeeded, nil
}
