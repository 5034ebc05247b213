package concurrency

import (
	"context"
	"iter"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds a session's lock keys: which of them its Mutexes and
// Elections use, and the cleanup goroutine that deletes those left over
// from failed or cancelled calls; and the writes the session guards by
// revision, so that an attempt applied twice or late undoes nothing.
// First, the check of a session and a lock name that every primitive's
// constructor and calls make before they use a key.

// validate reports a Mutex or Election made with a nil session or an empty
// name.
func validate(s *Session, pfx string) error {
	if s == nil {
		return ErrNilSession
	}
	if pfx == "/" {
		return ErrInvalidPrefix
	}
	return nil
}

// created reports locks of kinds named by prefix pfx made on session s to
// its metrics (MetricsRecorder.LockCreated), unless s or the name is
// invalid.
func created(s *Session, pfx string, kinds ...string) {
	if validate(s, pfx) == nil {
		s.ins.created(lockName(pfx), kinds...)
	}
}

// keyState is what a session knows of one of its lock keys.
type keyState struct {
	users int32 // Mutexes and Elections of this session using the key (int32: with stale, one word)
	// stale: deleting the key failed; the cleanup goroutine retries, by
	// create revision rev (0: by lease).
	stale bool
	rev   int64
	// suspect: until then, an enqueue of the key whose outcome is unknown
	// may still be applied by etcd; while nobody uses the key, the cleanup
	// goroutine deletes it by lease after each renewal (see acquire).
	suspect time.Time
	// deleting is closed when a delete of the key in flight ends; nil when
	// none is. A use waits for it, so that no new user adopts an
	// incarnation that is being deleted.
	deleting chan struct{}
}

// keySet is a session's lock keys and their state. A session mostly uses
// one key at a time: that one is kept without a map, and its state in the
// set itself, so that a Lock on an idle session allocates none (issue 52);
// a map is made once a second key is used at the same time. A map of one
// key costs 250 bytes per session in use, 6 % of the heap of a queued
// waiter on a session of its own (measured with LOCKBENCH_HEAPPROFILE:
// BENCHMARKS.md, "Heap per waiter, by structure"). A state is used only
// while the session's mu is held (nobody keeps it past an unlock: each
// looks its key up again), so the first's is reused for the next first.
// The zero value is empty. The session's mu guards it.
type keySet struct {
	first  string    // a key, if firstK is not nil
	firstK *keyState // the state of first (&own); nil if none
	own    keyState
	more   map[string]*keyState
}

func (ks *keySet) get(key string) *keyState {
	if ks.firstK != nil && ks.first == key {
		return ks.firstK
	}
	return ks.more[key]
}

// add adds key, which the set does not have, and returns its state, zero.
func (ks *keySet) add(key string) *keyState {
	if ks.firstK == nil {
		ks.first, ks.own = key, keyState{}
		ks.firstK = &ks.own
		return ks.firstK
	}
	if ks.more == nil {
		ks.more = make(map[string]*keyState)
	}
	k := &keyState{}
	ks.more[key] = k
	return k
}

func (ks *keySet) del(key string) {
	if ks.firstK != nil && ks.first == key {
		ks.first, ks.firstK = "", nil
		return
	}
	delete(ks.more, key)
}

// all yields each key and its state; the loop may delete the key it is
// given.
func (ks *keySet) all() iter.Seq2[string, *keyState] {
	return func(yield func(string, *keyState) bool) {
		if ks.firstK != nil && !yield(ks.first, ks.firstK) {
			return
		}
		for key, k := range ks.more {
			if !yield(key, k) {
				return
			}
		}
	}
}

// cleanupTimeout bounds each attempt to delete a lock key after a failed or
// cancelled Lock (etcd #18082: etcd's package used the client's context and
// could hang while etcd was unreachable).
const cleanupTimeout = 5 * time.Second

// lateApplyWindow is how long after an enqueue of unknown outcome the
// session keeps deleting the key whenever nobody uses it (at least a TTL):
// etcd applies or drops a proposal within its request timeout (7 s by
// default) plus a leader election, far less than this.
const lateApplyWindow = time.Minute

// use records that a Mutex or Election of this session is about to write or
// wait on key, so that the session neither deletes it as stale nor lets a
// failed Lock on another Mutex sharing the key delete it. If a delete of key
// is in flight and wait is true, use first waits for it to end (at most
// cleanupTimeout), or returns ctx's error if ctx ends first, in which case
// the key is not used.
func (s *Session) use(ctx context.Context, key string, wait bool) error {
	for {
		s.mu.Lock()
		k := s.keys.get(key)
		if k == nil {
			k = s.keys.add(key)
		}
		if d := k.deleting; d != nil && wait {
			s.mu.Unlock()
			select {
			case <-d:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		k.users++
		k.stale = false
		s.mu.Unlock()
		return nil
	}
}

// cleanup says what unuse does with a key that no other user of the session
// is left on.
type cleanup int

const (
	keep        cleanup = iota // leave it: it was released, or is still held
	deleteNow                  // delete it before returning, within cleanupTimeout
	deleteLater                // leave it to the cleanup goroutine
)

// unuse undoes use. When no other user of this session is left on key, it
// keeps, deletes or hands to the cleanup goroutine the key as then says: by
// create revision rev, or by lease when rev is 0 (unknown). A delete now uses
// a fresh context bounded by cleanupTimeout, because ctx may already be
// done; no lock is held while it runs. When it fails, the key is deleted by
// the cleanup goroutine once etcd answers again, so that a lock key is never
// left behind for as long as the session lives.
func (s *Session) unuse(ctx context.Context, key string, rev int64, then cleanup) {
	s.mu.Lock()
	k := s.keys.get(key)
	k.users--
	if k.users > 0 || then == keep {
		s.forgetLocked(key, k)
		s.mu.Unlock()
		return
	}
	if then == deleteLater {
		k.stale, k.rev = true, rev
		s.mu.Unlock()
		s.check()
		s.kickSweeper()
		return
	}
	k.deleting = make(chan struct{})
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	// A closed client cannot delete anything: do not retry until the timeout.
	defer context.AfterFunc(s.client.Ctx(), cancel)()
	err := s.deleteKey(ctx, key, rev)
	s.deleted(key, rev, err)
	if err != nil {
		s.check()
		s.kickSweeper()
	}
}

// deleted ends a delete of key that unuse or sweep started: on failure the
// key is left stale, for the cleanup goroutine.
func (s *Session) deleted(key string, rev int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys.get(key)
	close(k.deleting)
	k.deleting = nil
	if err != nil && k.users == 0 {
		k.stale, k.rev = true, rev
	} else if err == nil && k.rev == rev {
		k.stale = false
	}
	s.forgetLocked(key, k)
}

// forgetLocked drops the state of key once nothing is left to do for it.
// The caller holds s.mu.
func (s *Session) forgetLocked(key string, k *keyState) {
	if k.users <= 0 && !k.stale && k.deleting == nil && time.Now().After(k.suspect) {
		s.keys.del(key)
	}
}

// suspect marks key, whose enqueue failed with an unknown outcome, for the
// cleanup goroutine (see lateApplyWindow).
func (s *Session) suspect(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.keys.get(key); k != nil {
		k.suspect = time.Now().Add(max(lateApplyWindow, s.ttl))
	}
	s.kickLocked()
}

// kickSweeper asks the cleanup goroutine to run, and starts it if keys
// are left to delete and it does not run. It never blocks.
func (s *Session) kickSweeper() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kickLocked()
}

// kickLocked is kickSweeper; the caller holds s.mu.
func (s *Session) kickLocked() {
	if s.sweeperOn {
		select {
		case s.sweepc <- struct{}{}:
		default:
		}
		return
	}
	if s.closing || s.life.Err() != nil || !s.pendingLocked(time.Now()) {
		return
	}
	s.sweeperOn = true
	s.sweeping.Add(1)
	go s.sweeper()
}

// pendingLocked reports whether a key is left to delete: stale, or
// suspect until a time after now. The caller holds s.mu.
func (s *Session) pendingLocked(now time.Time) bool {
	for _, k := range s.keys.all() {
		if k.stale || now.Before(k.suspect) {
			return true
		}
	}
	return false
}

// suspectSweep is how often the cleanup goroutine deletes suspect keys
// again while any is suspect, so that a late-applied enqueue leaves its
// key for about that long, whatever the TTL.
const suspectSweep = time.Second

// sweeper is the cleanup goroutine: it runs while keys are left to delete
// (see kickSweeper), and deletes the keys whose cleanup failed and the
// suspect keys nobody uses at once, then every suspectSweep, when asked,
// and after each renewal, until none is left or the session's life ends.
// It goes on after Orphan, as the session stays usable (etcd's Lock
// service orphans its sessions): a key left by a failed Lock must not stay
// for the life of a lease that someone else renews.
func (s *Session) sweeper() {
	defer s.sweeping.Done()
	tick := time.NewTimer(suspectSweep)
	defer tick.Stop()
	for {
		s.sweep()
		s.mu.Lock()
		if s.life.Err() != nil || !s.pendingLocked(time.Now()) {
			s.sweeperOn = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		tick.Reset(suspectSweep)
		select {
		case <-s.life.Done():
		case <-s.sweepc:
		case <-tick.C:
		}
	}
}

// sweep deletes, one at a time, each unused key that is stale or suspect.
// It stops at the first failure: the sweeper tries again. A suspect key is
// deleted by lease, and stays suspect until its window passes.
func (s *Session) sweep() {
	now := time.Now()
	s.mu.Lock()
	var keys []string
	for key, k := range s.keys.all() {
		if k.users <= 0 && (k.stale || now.Before(k.suspect)) {
			keys = append(keys, key)
		} else {
			s.forgetLocked(key, k)
		}
	}
	s.mu.Unlock()
	for _, key := range keys {
		rev, ok := s.startSweep(key, now)
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(s.life, cleanupTimeout)
		err := s.deleteKey(ctx, key, rev)
		cancel()
		s.deleted(key, rev, err)
		if err != nil {
			return
		}
	}
}

// startSweep marks key as being deleted by sweep, if it still needs to be,
// and returns the create revision to delete it by (0: by lease).
func (s *Session) startSweep(key string, now time.Time) (rev int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys.get(key)
	if k == nil || k.users > 0 || k.deleting != nil || !k.stale && !now.Before(k.suspect) {
		return 0, false
	}
	k.deleting = make(chan struct{})
	if k.stale {
		return k.rev, true
	}
	return 0, true
}

// deleteKey deletes key if it has create revision rev or, when rev is 0,
// if it is attached to this session's lease: then it reads the key first,
// and deletes it by the create revision read, so that a delete applied
// late never removes a later key of the same name on the same lease (a
// new hold's). While it runs, no user of the session writes the key (see
// use), so the key it reads is one of an enqueue of unknown outcome.
func (s *Session) deleteKey(ctx context.Context, key string, rev int64) error {
	if rev == 0 {
		resp, err := s.get(ctx, key)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 || clientv3.LeaseID(resp.Kvs[0].Lease) != s.id {
			return nil
		}
		rev = resp.Kvs[0].CreateRevision
	}
	_, err := s.deleteRev(ctx, deletionOf(key), rev)
	return err
}

// deleteRev deletes d's key only if its create revision is rev, so that
// a late or retried delete never removes a newer incarnation of the same
// key (etcd #22082). A key that is already gone or newer is not an error.
// It reports whether it deleted the key. It is asked as ask does; a key
// that an attempt finds gone when more than one was sent was then most
// likely deleted by another, and counts as deleted.
func (s *Session) deleteRev(ctx context.Context, d deletion, rev int64) (bool, error) {
	resp, sent, err := sessionAsk(ctx, s, request.Write, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return s.client.Txn(ctx).
			If(clientv3.Compare(d.created, "=", rev)).
			Then(d.ops...).
			Commit()
	})
	if err != nil {
		return false, err
	}
	return resp.Succeeded || sent > 1, nil
}

// deletion is what deleteRev sends for a key, whatever its revision: the
// key's create revision, to compare, and the key's delete, then also,
// applied in the same transaction (a lock-delay's release mark, see
// markReleased): applied twice or late, they are applied only with the
// delete, which finds the key gone. Without also, a hold of a key that
// held at once takes it from its key's operations, made once (see
// keyOps).
type deletion struct {
	created clientv3.Cmp  // clientv3.CreateRevision(key)
	ops     []clientv3.Op // the delete, then also
}

func deletionOf(key string, also ...clientv3.Op) deletion {
	return deletion{clientv3.CreateRevision(key), append([]clientv3.Op{clientv3.OpDelete(key)}, also...)}
}

// setIfRev sets the value of key to val, on lease (the session's, or a
// max hold's), if key still has create revision rev and mod revision
// mod: a value it sets is never set back by an attempt of an earlier
// write applied late, nor by one of its own attempts applied twice. It is
// asked as ask does. If the key's mod revision is not mod (mod 0: not
// known, read first), it tries again with the key's: a key whose value
// and lease are val and lease already counts as set. It returns the mod
// revision of the key with val and the header of the last answer, and ok
// false if the key is gone or another's (create revision not rev).
func (s *Session) setIfRev(ctx context.Context, key string, rev, mod int64, val string, lease clientv3.LeaseID) (newMod int64, hdr *pb.ResponseHeader, ok bool, err error) {
	if mod == 0 {
		resp, err := s.get(ctx, key)
		if err != nil {
			return 0, nil, false, err
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != rev {
			return 0, resp.Header, false, nil
		}
		mod = resp.Kvs[0].ModRevision
	}
	for {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", rev), clientv3.Compare(clientv3.ModRevision(key), "=", mod)}
		resp, _, err := sessionAsk(ctx, s, request.Write, func(ctx context.Context) (*clientv3.TxnResponse, error) {
			return s.client.Txn(ctx).If(cmps...).
				Then(clientv3.OpPut(key, val, clientv3.WithLease(lease))).
				Else(clientv3.OpGet(key)).
				Commit()
		})
		if err != nil {
			return 0, nil, false, err
		}
		if resp.Succeeded {
			return resp.Header.Revision, resp.Header, true, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != rev {
			return 0, resp.Header, false, nil
		}
		if string(kvs[0].Value) == val && clientv3.LeaseID(kvs[0].Lease) == lease {
			return kvs[0].ModRevision, resp.Header, true, nil
		}
		mod = kvs[0].ModRevision
	}
}
