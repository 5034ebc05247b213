package concurrency

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/watch"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds the wait shared by every primitive on the queue (see
// acquire.go). A waiter watches only its predecessor, the newest key older
// than its own, so that a delete wakes one waiter, not the whole queue: one
// watch per waiter, as in etcd's package. Its own key's deletion is found
// by the read that follows each deletion of a predecessor, and the end of
// its session ends the wait at once (etcd #19597).
//
// The watch on the predecessor starts at the server's current revision
// rather than at the revision of the read that found the key. etcd serves a
// watch that starts at or below its current revision from its "unsynced"
// set, on a 100 ms tick; that tick is most of the ~100 ms that etcd's
// package spends on each contended handoff. A watch from the current
// revision is synced at once; the revision in its created response tells
// whether anything could have happened between the read and the watch, and
// only then is the key read again.
//
// A wait ends with its caller's ctx or with its session's life, at once
// (etcd #19597), but keeps no context of its own for that while it
// waits: a context for the whole wait, with its map of children and its
// done channel, cost about 460 bytes per waiter. Each read, sleep and
// watch creation of the wait runs on a context made for that step (see
// Session.during), and the session's end ends its open watch (see
// openWatch).
//
// After each wake-up the waiter judges its place again with one
// linearizable read (judge, in judge.go): its own key and the older keys
// that count. The read that decides a grant is never a serializable one:
// a member that lags could still show the waiter's key after it was
// deleted at the leader (its lease revoked, a force-unlock), and grant it
// beside the next waiter (issue 21).

// target is what a waiter waits for: the deletion of one key (the newest
// older key that counts against it), or also a new value of that key (when
// a Semaphore waiter ahead of it became a holder: see promote), or any
// deletion in a range. Only the first waiter of a Semaphore, whose turn
// comes when any one of limit holders goes (a release or a lease that
// expires), watches a range; every other waiter of every primitive
// watches one key.
type target struct {
	key         string
	create, mod int64 // the key's create and mod revisions when last read
	onPut       bool  // a new value ends the wait too
	over        string
	// wake, with over, is a key (the waiter's own) whose new value ends
	// the range wait too: a Semaphore's resize rewrites every key of the
	// name (see Semaphore.SetLimit), and a larger limit may let the
	// first waiter in with no deletion.
	wake string
}

// waitDeletes blocks until key, created at rev, holds by rule r, and
// returns the header of the read that showed it: at the header's revision,
// key existed and held. next is what to wait for
// first, as last read at revision seenRev, or the zero target if unknown.
// The key's own deletion is found by the read that follows each wake-up
// (ErrSessionExpired). When ctx ends it returns ctx.Err(); when the session's
// life ends, its cause. A cluster without a leader or a lost connection does not
// end the wait: it reads again once etcd answers, and keeps its place
// (etcd's package also kept waiting). It leaves key in place: the caller
// cleans up.
func waitDeletes(ctx context.Context, s *Session, r rule, key string, rev int64, next target, seenRev int64) (*pb.ResponseHeader, error) {
	var b backoff  // between failed reads
	var wb backoff // between watches that failed
	for {
		var err error
		var j judgement
		judged := false // the range watch judged already, with its watch open
		switch {
		case next.over != "":
			over := next.over
			judged, err = waitRange(ctx, s, over, next.wake, seenRev, &wb, func() (bool, int64, error) {
				var err error
				if j, err = judgeDuring(ctx, s, r, key, rev); err != nil {
					return false, 0, err
				}
				// Go on watching only while the key is still the first
				// waiter, waiting for any deletion in the range.
				return j.holds || j.next.over != over, j.hdr.Revision, nil
			})
		case next.key != "":
			err = waitDelete(ctx, s, next, seenRev, &wb)
		}
		if err != nil {
			return nil, err
		}
		if !judged {
			j, err = judgeDuring(ctx, s, r, key, rev)
			if request.Transient(err) {
				if !s.sleep(ctx, &b) {
					return nil, s.waitErr(ctx)
				}
				next = target{} // read again, at once
				continue
			}
			if err != nil {
				return nil, err
			}
		}
		b.Reset()
		if j.holds {
			return j.hdr, nil
		}
		// What the read showed is the key space at its revision: wait for
		// what happened after it.
		next, seenRev = j.next, j.hdr.Revision
	}
}

// waitDelete blocks until t.key, which had create revision t.create (and
// mod revision t.mod) in a read at revision seenRev, is deleted or
// replaced, or with t.onPut has a new value. It returns
// ctx.Err() when ctx ends, the cause of the session's life when that ends,
// and the error when watching fails for a reason
// that waiting cannot fix. After compaction (the watch could not resume), a
// member without a leader, or a lost connection, it reads the key again,
// retrying while etcd does not answer, and watches anew.
func waitDelete(ctx context.Context, s *Session, t target, seenRev int64, b *backoff) error {
	for {
		err := watchDelete(ctx, s, t, seenRev, b)
		if werr := s.waitErr(ctx); err == nil || werr != nil {
			return werr
		}
		if !errors.Is(err, rpctypes.ErrCompacted) {
			if !request.Transient(err) && !errors.Is(err, watch.ErrClosed) {
				return err
			}
			// Grows while watches keep failing; a watch that starts
			// resets it.
			if !s.sleep(ctx, b) {
				return s.waitErr(ctx)
			}
		}
		resp, err := s.getDuring(ctx, t.key)
		if request.Transient(err) {
			continue // watch again: the key is read once more
		}
		if err != nil {
			if werr := s.waitErr(ctx); werr != nil {
				return werr
			}
			return err
		}
		if t.changed(resp.Kvs) {
			return nil
		}
		seenRev = resp.Header.Revision
	}
}

// changed reports whether a read of t.key that returned kvs shows the end
// of the wait for t.
func (t target) changed(kvs []*mvccpb.KeyValue) bool {
	return len(kvs) == 0 || kvs[0].CreateRevision != t.create || t.onPut && kvs[0].ModRevision != t.mod
}

// watchDelete is one watch of waitDelete, from the server's current
// revision.
func watchDelete(ctx context.Context, s *Session, t target, seenRev int64, b *backoff) error {
	var opts []clientv3.OpOption
	if !t.onPut {
		opts = append(opts, clientv3.WithFilterPut())
	}
	return watchUntil(ctx, s.life, s.client, s.live(), t.key, b, func(wr clientv3.WatchResponse) (bool, error) {
		if watch.Missed(wr, seenRev) {
			// Something was written between the read at seenRev and the
			// watch's start: read the key once more.
			resp, err := s.getDuring(ctx, t.key)
			if err != nil {
				return false, err
			}
			if t.changed(resp.Kvs) {
				return true, nil
			}
		}
		for _, ev := range wr.Events {
			// A member that lags behind the read at seenRev may replay
			// older events: only one after the read ends the wait.
			if ev.Kv.ModRevision > max(seenRev, t.create) && (ev.Type == mvccpb.DELETE || t.onPut) {
				return true, nil
			}
		}
		return false, nil
	}, opts...)
}

// waitRange blocks until a key under prefix over is deleted after revision
// seenRev, or key wake (if not "") is written after it. Like watchDelete it watches from the server's current revision,
// which etcd serves at once (a watch from an older revision is served from
// etcd's "unsynced" set, up to 100 ms late). If that revision is past
// seenRev, a deletion in between may have been missed: with the watch
// open, it calls check, which reads the queue again and says whether the
// wait is over (stop) and the revision its read saw; from then on only a
// deletion after that revision ends the wait. So a busy name never makes
// it read in a loop, and no deletion is missed. It reports whether check
// ended the wait (false: a deletion did, or a failed watch that the caller
// reads after). It returns ctx.Err() when ctx ends, the cause of the
// session's life when that ends, and the error of check
// or of the watch when waiting cannot fix it; after a transient failure of
// either it waits (b) and returns, for the caller to read again.
func waitRange(ctx context.Context, s *Session, over, wake string, seenRev int64, b *backoff, check func() (stop bool, seen int64, err error)) (checked bool, err error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if wake == "" {
		opts = append(opts, clientv3.WithFilterPut())
	}
	err = watchUntil(ctx, s.life, s.client, s.live(), over, b, func(wr clientv3.WatchResponse) (bool, error) {
		if watch.Missed(wr, seenRev) {
			stop, seen, err := check()
			if err != nil || stop {
				checked = err == nil
				return true, err
			}
			seenRev = seen
		}
		for _, ev := range wr.Events {
			// A member behind the read at seenRev replays what the read
			// already showed: only a deletion (or a write of wake) after
			// it counts.
			if ev.Kv.ModRevision > seenRev && (ev.Type == mvccpb.DELETE || string(ev.Kv.Key) == wake) {
				return true, nil
			}
		}
		return false, nil
	}, opts...)
	werr := s.waitErr(ctx)
	switch {
	case err == nil || werr != nil:
		return checked, werr
	case errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, watch.ErrClosed) || request.Transient(err):
		if errors.Is(err, rpctypes.ErrCompacted) || s.sleep(ctx, b) {
			return false, nil
		}
		return false, s.waitErr(ctx)
	default:
		return false, err
	}
}

// during returns a context for one step of a wait on ctx (a read, a
// sleep): it ends with ctx, or with the session's life, with its cause.
// stop releases it.
func (s *Session) during(ctx context.Context) (c context.Context, stop func()) {
	c, cancel := context.WithCancelCause(ctx)
	unbind := context.AfterFunc(s.life, func() { cancel(context.Cause(s.life)) })
	return c, func() {
		unbind()
		cancel(nil)
	}
}

// waitErr is the error that ends a wait on ctx: ctx's, then the cause of
// the session's life; nil while both go on.
func (s *Session) waitErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.life.Err() != nil {
		return context.Cause(s.life)
	}
	return nil
}

// sleep is b.Sleep for a wait on ctx, cut short by the session's end too.
func (s *Session) sleep(ctx context.Context, b *backoff) bool {
	c, stop := s.during(ctx)
	defer stop()
	return b.Sleep(c)
}

// getDuring is s.get for a wait on ctx, cut short by the session's end
// too.
func (s *Session) getDuring(ctx context.Context, key string) (*clientv3.GetResponse, error) {
	c, stop := s.during(ctx)
	defer stop()
	return s.get(c, key)
}

// judgeDuring is judge for a wait on ctx, cut short by the session's end
// too.
func judgeDuring(ctx context.Context, s *Session, r rule, key string, rev int64) (judgement, error) {
	c, stop := s.during(ctx)
	defer stop()
	return judge(c, s, r, key, rev)
}
