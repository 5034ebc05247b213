package concurrency

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds the package's watches: opening one on a stream that
// answers (openWatch), following it until its caller has what it waits for
// (watchUntil, watchAfter), and ending it. What keeps a watch from trusting
// a silent stream is the stream's (stream.go).

// watchAfter is watchUntil for a caller that needs every event after
// revision rev, which its read saw last (Observe posts every value). It
// watches from the server's current revision and, only if that watch
// began past rev (see missed), watches again from rev+1, a revision etcd
// has written by then: so it never opens a watch at a revision not yet
// written, which would leave the stream's progress requests unanswered.
func watchAfter(ctx context.Context, client *clientv3.Client, l liveness, key string, rev int64, fn func(clientv3.WatchResponse) (bool, error), opts ...clientv3.OpOption) error {
	replay := false
	err := watchUntil(ctx, nil, client, l, key, nil, func(wr clientv3.WatchResponse) (bool, error) {
		if missed(wr, rev) {
			replay = true
			return true, nil
		}
		return fn(wr)
	}, opts...)
	if err != nil || !replay {
		return err
	}
	return watchUntil(ctx, nil, client, l, key, nil, fn, append(opts, clientv3.WithRev(rev+1))...)
}

// watchUntil watches key with opts until fn, called on each response in
// order, returns true or an error. It returns nil when fn returned true,
// fn's error, or the error that ended the watch (compaction, no leader,
// lost connection, ctx). If life is not nil (the watch is a session's
// wait's), its end ends the watch too, with its cause. The watch requires
// a leader: on a member without one it ends with an error instead of
// waiting for events that never come. A watch that starts resets b, the
// backoff between failed watches.
//
// No part of it trusts a silent stream (see openWatch and probe): if etcd
// does not create the watch in time, or the stream stops answering, it
// returns an error matching request.ErrNoAnswer, for the caller to read again and
// watch anew, on a new stream.
//
// Whatever else ends the watch (ctx, the end of life, the stream's
// probe) cancels the watch's context, and the wait ends then, on that
// context's done channel, not when clientv3 closes the watch's channel:
// clientv3 closes it from its stream's goroutine, which sends each new
// watch request on the stream itself and so may be stuck on a connection
// that accepts nothing more. (Waiting on the channel alone would save a
// runtime wait record, 112 bytes, per waiter; it would also trust the
// silent stream.)
func watchUntil(ctx context.Context, life context.Context, client *clientv3.Client, l liveness, key string, b *backoff, fn func(clientv3.WatchResponse) (bool, error), opts ...clientv3.OpOption) error {
	w, err := openWatch(ctx, life, client, l, key, opts...)
	if err != nil {
		return err
	}
	defer w.close()
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case wr, ok = <-w.ch:
		case <-w.done:
		}
		if !ok {
			return w.closed(ctx, life, key)
		}
		w.st.heard()
		if err := wr.Err(); err != nil {
			return err
		}
		if wr.Created {
			b.Reset()
		}
		if done, err := fn(wr); done || err != nil {
			return err
		}
	}
}

// watch is an open watch of the package, listed by its stream (whose probe
// ends it if the stream goes silent), and ended by the end of the life it
// was opened for, if any (a session's). It is all a waiter keeps of the
// package's liveness checks: the probe and its timer are the stream's.
type watch struct {
	ch     clientv3.WatchChan
	cancel context.CancelFunc // ends the watch: clientv3 closes ch
	done   <-chan struct{}    // closed once the watch has ended (see watchUntil)
	unbind func() bool        // stops the end of the life from ending the watch
	st     *stream
	// deadline is when the creation of the watch is given up (UnixNano),
	// while etcd creates it; 0 once given up (see stream.create).
	// Guarded by st.g.mu.
	deadline int64
}

// closed is the error of a watch whose channel has closed: ctx's, the
// cause of the end of life (if not nil), request.ErrNoAnswer if the stream's probe
// found it silent, else errWatchClosed.
func (w *watch) closed(ctx context.Context, life context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if life != nil && life.Err() != nil {
		return context.Cause(life)
	}
	if err := w.st.silence(); err != nil {
		return err
	}
	return fmt.Errorf("%w: %q", errWatchClosed, key)
}

// close ends the watch and takes it off its stream. A nil w is left alone.
func (w *watch) close() {
	if w == nil {
		return
	}
	w.unbind()
	w.st.drop(w)
	w.cancel()
}

// requestProgress asks the watch's stream for progress, on ctx.
func (w *watch) requestProgress(ctx context.Context) {
	w.st.g.client.RequestProgress(metadata.NewOutgoingContext(ctx, w.st.md))
}

// openWatch opens a watch of key with opts (and WithCreatedNotify) on the
// client's current stream of the package (see joinStream). clientv3's Watch
// returns only once etcd has created the watch (or its context ended): on
// a silent stream, never. So openWatch waits l.wait at most; if etcd has
// not answered by then, and nobody heard from the stream within l.wait
// either, the stream is silent: it moves the client's stream on and
// returns an error matching request.ErrNoAnswer. If life is not nil (a session's),
// its end ends the watch, and the wait for its creation, too; the error is
// then life's cause.
func openWatch(ctx context.Context, life context.Context, client *clientv3.Client, l liveness, key string, opts ...clientv3.OpOption) (*watch, error) {
	opts = append(opts, clientv3.WithCreatedNotify())
	for {
		st, sctx := joinStream(ctx, client)
		wctx, cancel := context.WithCancel(sctx)
		w := &watch{cancel: cancel, done: wctx.Done(), unbind: func() bool { return true }}
		if life != nil {
			w.unbind = context.AfterFunc(life, cancel)
		}
		ch, ok := st.create(w, wctx, l.wait, key, opts...)
		ended := life != nil && life.Err() != nil
		if ok && !ended {
			w.ch = ch
			st.add(w, key, l)
			return w, nil
		}
		w.unbind()
		cancel()
		err := ctx.Err()
		switch {
		case err != nil:
		case ended:
			err = context.Cause(life)
		case !st.heardWithin(l.wait):
			// clientv3 creates a stream's watches one at a time: behind
			// many others, a watch may wait longer than l.wait on a
			// stream that answers them. Only a stream nobody heard from
			// is silent.
			st.g.moveOn(st.key.n)
			err = fmt.Errorf("%w: etcd did not create a watch of %q within %v", request.ErrNoAnswer, key, l.wait)
		}
		st.leave()
		if err != nil {
			return nil, err
		}
	}
}

// errWatchClosed is the error of a watch whose channel closed without an
// error: the client lost its stream, and a new watch may succeed.
var errWatchClosed = errors.New("concurrency: watch closed")
