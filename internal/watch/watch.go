// Package watch holds the concurrency package's watches: opening one on a
// gRPC stream that answers (Open), following it until its caller has what
// it waits for (Until, After), and ending it; the streams that carry them
// and the probe that gives up a silent one (stream.go); and how long
// either trusts a silent connection (Liveness). It stands on the request
// layer (internal/request) and uses none of the package's names: it takes
// a client's Streams and plain values.
package watch

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// ErrClosed is the error of a watch whose channel closed without an
// error: the client lost its stream, and a new watch may succeed.
var ErrClosed = errors.New("concurrency: watch closed")

// Spec says where a watch is opened and what ends it besides its ctx.
type Spec struct {
	Streams *Streams // the client's
	Live    Liveness // how long the watch trusts a silent stream
	// Life, if not nil (the watch is a session's wait's), ends the watch
	// too when it ends, with its cause.
	Life context.Context
}

// Missed reports whether wr is the created response of a watch that began
// after revision rev, which a read saw last: something written in between
// may have been missed, and the caller reads again. The package's watches
// start at the server's current revision rather than at rev+1: etcd
// answers a progress request (see probe) only once every watch of the
// stream has reached its start revision, so one watch waiting for a
// revision not yet written would leave every other watch of the stream
// without an answer while the cluster is idle.
func Missed(wr clientv3.WatchResponse, rev int64) bool {
	return wr.Created && wr.Header.Revision > rev
}

// After is Until for a caller that needs every event after revision rev,
// which its read saw last (Observe posts every value). It watches from the
// server's current revision and, only if that watch began past rev (see
// Missed), watches again from rev+1, a revision etcd has written by then:
// so it never opens a watch at a revision not yet written, which would
// leave the stream's progress requests unanswered.
func After(ctx context.Context, spec Spec, key string, rev int64, fn func(clientv3.WatchResponse) (bool, error), opts ...clientv3.OpOption) error {
	replay := false
	err := Until(ctx, spec, key, nil, func(wr clientv3.WatchResponse) (bool, error) {
		if Missed(wr, rev) {
			replay = true
			return true, nil
		}
		return fn(wr)
	}, opts...)
	if err != nil || !replay {
		return err
	}
	return Until(ctx, spec, key, nil, fn, append(opts, clientv3.WithRev(rev+1))...)
}

// Until watches key with opts until fn, called on each response in
// order, returns true or an error. It returns nil when fn returned true,
// fn's error, or the error that ended the watch (compaction, no leader,
// lost connection, ctx, the end of spec.Life with its cause). The watch
// requires a leader: on a member without one it ends with an error
// instead of waiting for events that never come. A watch that starts
// resets b, the backoff between failed watches.
//
// No part of it trusts a silent stream (see Open and probe): if etcd
// does not create the watch in time, or the stream stops answering, it
// returns an error matching request.ErrNoAnswer, for the caller to read
// again and watch anew, on a new stream.
//
// Whatever else ends the watch (ctx, the end of life, the stream's
// probe) cancels the watch's context, and the wait ends then, on that
// context's done channel, not when clientv3 closes the watch's channel:
// clientv3 closes it from its stream's goroutine, which sends each new
// watch request on the stream itself and so may be stuck on a connection
// that accepts nothing more. (Waiting on the channel alone would save a
// runtime wait record, 112 bytes, per waiter; it would also trust the
// silent stream.)
func Until(ctx context.Context, spec Spec, key string, b *request.Backoff, fn func(clientv3.WatchResponse) (bool, error), opts ...clientv3.OpOption) error {
	w, err := Open(ctx, spec, key, opts...)
	if err != nil {
		return err
	}
	defer w.Close()
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case wr, ok = <-w.ch:
		case <-w.done:
		}
		if !ok {
			return w.Closed(ctx, spec.Life, key)
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

// Watch is an open watch of the package, listed by its stream (whose probe
// ends it if the stream goes silent), and ended by the end of the life it
// was opened for, if any (a session's). It is all a waiter keeps of the
// package's liveness checks: the probe and its timer are the stream's.
type Watch struct {
	ch     clientv3.WatchChan
	cancel context.CancelFunc // ends the watch: clientv3 closes ch
	done   <-chan struct{}    // closed once the watch has ended (see Until)
	unbind func() bool        // stops the end of the life from ending the watch
	st     *stream
	// deadline is when the creation of the watch is given up (UnixNano),
	// while etcd creates it; 0 once given up (see stream.create).
	// Guarded by st.g.mu.
	deadline int64
}

// C is the watch's channel of responses (clientv3's). A caller that
// reads it waits on Done too (see Until), and calls Heard for each
// response.
func (w *Watch) C() clientv3.WatchChan { return w.ch }

// Done is closed once the watch has ended: by its ctx, its life, its
// stream's probe or Close.
func (w *Watch) Done() <-chan struct{} { return w.done }

// Heard records that the watch heard from its stream (a response on C):
// the stream is alive.
func (w *Watch) Heard() { w.st.heard() }

// Closed is the error of a watch whose channel has closed, or that has
// ended (Done): ctx's, the cause of the end of life (if not nil),
// request.ErrNoAnswer if the stream's probe found it silent, else
// ErrClosed.
func (w *Watch) Closed(ctx context.Context, life context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if life != nil && life.Err() != nil {
		return context.Cause(life)
	}
	if err := w.st.silence(); err != nil {
		return err
	}
	return fmt.Errorf("%w: %q", ErrClosed, key)
}

// Close ends the watch and takes it off its stream. A nil w is left alone.
func (w *Watch) Close() {
	if w == nil {
		return
	}
	w.unbind()
	w.st.drop(w)
	w.cancel()
}

// RequestProgress asks the watch's stream for progress, on ctx.
func (w *Watch) RequestProgress(ctx context.Context) {
	w.st.g.client.RequestProgress(metadata.NewOutgoingContext(ctx, w.st.md))
}

// Open opens a watch of key with opts (and WithCreatedNotify) on the
// client's current stream of the package (see Streams.join). clientv3's
// Watch returns only once etcd has created the watch (or its context
// ended): on a silent stream, never. So Open waits spec.Live.Wait at
// most; if etcd has not answered by then, and nobody heard from the
// stream within that wait either, the stream is silent: it moves the
// client's stream on and returns an error matching request.ErrNoAnswer.
// If spec.Life is not nil (a session's), its end ends the watch, and the
// wait for its creation, too; the error is then life's cause.
func Open(ctx context.Context, spec Spec, key string, opts ...clientv3.OpOption) (*Watch, error) {
	opts = append(opts, clientv3.WithCreatedNotify())
	life, l := spec.Life, spec.Live
	for {
		st, sctx := spec.Streams.join(ctx)
		wctx, cancel := context.WithCancel(sctx)
		w := &Watch{cancel: cancel, done: wctx.Done(), unbind: func() bool { return true }}
		if life != nil {
			w.unbind = context.AfterFunc(life, cancel)
		}
		ch, ok := st.create(w, wctx, l.Wait, key, opts...)
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
		case !st.heardWithin(l.Wait):
			// clientv3 creates a stream's watches one at a time: behind
			// many others, a watch may wait longer than l.Wait on a
			// stream that answers them. Only a stream nobody heard from
			// is silent.
			st.g.moveOn(st.key.n)
			err = fmt.Errorf("%w: etcd did not create a watch of %q within %v", request.ErrNoAnswer, key, l.Wait)
		}
		st.leave()
		if err != nil {
			return nil, err
		}
	}
}
