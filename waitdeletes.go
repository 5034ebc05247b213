package concurrency

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds the wait shared by every primitive on the queue (see
// queue.go). A waiter watches
// only its predecessor, the newest key older than its own (so a delete wakes
// one waiter, not the whole queue), and its own key (so it returns as soon
// as its own key or lease is gone, etcd #19597).
//
// The watch on the predecessor starts at the server's current revision
// rather than at the revision of the read that found the key. etcd serves a
// watch that starts at or below its current revision from its "unsynced"
// set, on a 100 ms tick; that tick is most of the ~100 ms that etcd's
// package spends on each contended handoff. A watch from the current
// revision is synced at once; the revision in its created response tells
// whether anything could have happened between the read and the watch, and
// only then is the key read again. The watch on the waiter's own key (see
// hold), whose deletion is rare and off the handoff path, starts right
// after the read and never costs a read (see start).

// waitDeletes blocks until key, created at rev, is the oldest key under pfx,
// and returns the header of the read that showed it. pred is the newest key
// older than key as last read at revision seenRev, or nil if unknown. It
// watches only pred; the key's own deletion ends the wait through ctx (see
// hold), or is found by the read that follows each deletion of a
// predecessor (ErrSessionExpired). A cluster without a leader or a lost
// connection does not end the wait: it reads again once etcd answers, and
// keeps its place (etcd's package also kept waiting). It leaves key in
// place: the caller cleans up.
func waitDeletes(ctx context.Context, s *Session, pfx, key string, rev int64, pred *mvccpb.KeyValue, seenRev int64) (*pb.ResponseHeader, error) {
	wait := firstRetry
	for {
		if pred != nil {
			if err := waitDelete(ctx, s.client, string(pred.Key), pred.CreateRevision, seenRev, fromNow); err != nil {
				return nil, err
			}
		}
		// One read re-checks both that key still exists and which key, if
		// any, is now its predecessor.
		resp, err := s.client.Txn(ctx).Then(
			clientv3.OpGet(key),
			clientv3.OpGet(pfx, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))...),
		).Commit()
		if transient(err) {
			if !sleepCtx(ctx, wait) {
				return nil, ctx.Err()
			}
			wait = min(2*wait, retryInterval)
			pred = nil // read again, at once
			continue
		}
		if err != nil {
			return nil, err
		}
		wait = firstRetry
		own := resp.Responses[0].GetResponseRange().Kvs
		if len(own) == 0 || own[0].CreateRevision != rev {
			s.check()
			return nil, fmt.Errorf("%w: key %q was deleted while waiting", ErrSessionExpired, key)
		}
		older := resp.Responses[1].GetResponseRange().Kvs
		if len(older) == 0 {
			return resp.Header, nil
		}
		pred, seenRev = older[0], resp.Header.Revision
	}
}

// start says where waitDelete starts its watch.
type start int

const (
	// fromNow starts the watch at the server's current revision, so that
	// etcd serves it from its synced set at once, and reads the key again
	// if the server has moved past the caller's read: the promptest notice,
	// at the cost of that read on a busy cluster.
	fromNow start = iota
	// fromSeen starts the watch right after the caller's read: never an
	// extra read, but if the server has moved past that read, etcd serves
	// the watch from its unsynced set, up to about 100 ms late. For keys
	// whose deletion is rare and off the handoff path.
	fromSeen
)

// waitDelete blocks until key, which had create revision createRev in a read
// at revision seenRev, is deleted or replaced (nil), ctx ends (ctx.Err()),
// or watching fails for a reason that waiting cannot fix (that error). After
// compaction (the watch could not resume), a member without a leader, or a
// lost connection, it reads the key again, retrying while etcd does not
// answer, and watches anew.
func waitDelete(ctx context.Context, client *clientv3.Client, key string, createRev, seenRev int64, from start) error {
	wait := firstRetry
	for {
		err := watchDelete(ctx, client, key, createRev, seenRev, from)
		if err == nil || ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, rpctypes.ErrCompacted) {
			if !transient(err) && !errors.Is(err, errWatchClosed) {
				return err
			}
			if !sleepCtx(ctx, wait) {
				return ctx.Err()
			}
			wait = min(2*wait, retryInterval)
		}
		resp, err := client.Get(ctx, key)
		if transient(err) {
			continue // watch again from seenRev: the key is read once more
		}
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != createRev {
			return nil
		}
		seenRev, from, wait = resp.Header.Revision, fromNow, firstRetry
	}
}

// watchDelete is one watch of waitDelete.
func watchDelete(ctx context.Context, client *clientv3.Client, key string, createRev, seenRev int64, from start) error {
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify(), clientv3.WithFilterPut()}
	if from == fromSeen {
		opts = append(opts, clientv3.WithRev(seenRev+1))
	}
	return watchUntil(ctx, client, key, func(wr clientv3.WatchResponse) (bool, error) {
		if from == fromNow && wr.Created && wr.Header.Revision > seenRev {
			// Something was written between the read at seenRev and the
			// watch's start: read the key once more.
			resp, err := client.Get(ctx, key)
			if err != nil {
				return false, err
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != createRev {
				return true, nil
			}
		}
		for _, ev := range wr.Events {
			// A member that lags behind the read at seenRev may replay the
			// deletion of an older incarnation of the key: only a deletion
			// after createRev ends this one.
			if ev.Type == mvccpb.DELETE && ev.Kv.ModRevision > createRev {
				return true, nil
			}
		}
		return false, nil
	}, opts...)
}

// watchUntil watches key with opts until fn, called on each response in
// order, returns true or an error. It returns nil when fn returned true,
// fn's error, or the error that ended the watch (compaction, no leader,
// lost connection, ctx). The watch requires a leader: on a member without
// one it ends with an error instead of waiting for events that never come.
func watchUntil(ctx context.Context, client *clientv3.Client, key string, fn func(clientv3.WatchResponse) (bool, error), opts ...clientv3.OpOption) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range client.Watch(wctx, key, opts...) {
		if err := wr.Err(); err != nil {
			return err
		}
		if done, err := fn(wr); done || err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: %q", errWatchClosed, key)
}

// errWatchClosed is the error of a watch whose channel closed without an
// error: the client lost its stream, and a new watch may succeed.
var errWatchClosed = errors.New("concurrency: watch closed")
