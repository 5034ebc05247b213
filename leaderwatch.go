package concurrency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/watch"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds the watch of an election's leader: WatchLeader, for
// processes that do not campaign, and the loop that it and Lead's
// WithLeaderChanges report from.

// WatchLeader calls fn with the leader of the election name each time it
// changes, for a process that does not campaign: first with the leader
// when it starts, then with each new leader or proclaimed value, and with
// the zero LeaderInfo whenever the election has no leader (which
// Election.Observe and etcd's Observe never report). It is what Lead's
// WithLeaderChanges reports, for anyone: the same goroutine-free loop runs
// in the caller's goroutine, reading the candidates once and following
// them with a watch, so that it reports each leader of each revision in
// order; after a failed watch (no leader in etcd, a lost connection,
// compaction) it reads again after a backoff of 100 ms doubling to 5 s,
// and may then skip a leader that came and went meanwhile, never the
// latest.
//
// It blocks until ctx ends, and returns ctx.Err(), or, within a second
// of the client's Close, an error matching ErrClientClosed. fn is called from the caller's goroutine, one call at
// a time, and none after WatchLeader returns. A nil client, an empty name
// and a nil fn give ErrNilClient, ErrInvalidPrefix and ErrNilFunc at once.
//
// etcd's client naming and endpoints manager (client/v3/naming) is not
// used: it publishes endpoints under a prefix, with no order among them,
// where an election's leader is its oldest key.
func WatchLeader(ctx context.Context, cli *clientv3.Client, name string, fn func(LeaderInfo)) error {
	switch {
	case cli == nil:
		return ErrNilClient
	case name == "":
		return ErrInvalidPrefix
	case fn == nil:
		return ErrNilFunc
	}
	// fin never ends: the watch stops only with ctx.
	watchLeaders(ctx, context.Background(), cli, watch.LivenessFor(defaultSessionTTL*time.Second), prefix(name), fn)
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("concurrency: WatchLeader %q: %w", name, request.ClientClosed(cli))
}

// watchLeaders reports the leader of the election pfx to notify each time
// it changes. It keeps the candidates' keys, read once and then followed
// by a watch of the prefix, and works out the leader after each revision's
// events, so that it reports every leader in turn, even one that lasted a
// single revision. Only after a failed watch, when it reads the keys
// again, may it skip a leader.
//
// Once fin is cancelled, it catches up with the revision etcd has then and
// returns: the last report shows what Lead left behind. ctx bounds that,
// and ends it at once.
func watchLeaders(ctx, fin context.Context, cli *clientv3.Client, l liveness, pfx string, notify func(LeaderInfo)) {
	w := &leaderWatch{cli: cli, l: l, pfx: pfx, notify: notify, keys: make(map[string]LeaderInfo)}
	var backoff retryBackoff
	for ctx.Err() == nil && cli.Ctx().Err() == nil {
		rev, err := w.read(ctx)
		if err == nil {
			backoff.reset()
			if err = w.follow(ctx, fin, rev); err == nil {
				return // caught up after fin
			}
		}
		switch {
		case ctx.Err() != nil || cli.Ctx().Err() != nil:
			return
		case fin.Err() != nil:
			w.read(ctx) // the last report, as good as it gets
			return
		case errors.Is(err, rpctypes.ErrCompacted):
			continue // reading again is enough
		}
		t := time.NewTimer(backoff.next())
		select {
		case <-t.C:
		case <-fin.Done():
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// leaderWatch is the state of watchLeaders, used by its goroutine only.
type leaderWatch struct {
	cli    *clientv3.Client
	l      liveness // of the terms' sessions: see probe
	pfx    string
	notify func(LeaderInfo)
	keys   map[string]LeaderInfo // the candidates, by key
	last   *LeaderInfo           // the last report, nil before the first
}

// report tells notify the leader among keys, if it changed.
func (w *leaderWatch) report() {
	var li LeaderInfo
	for _, k := range w.keys {
		if li.Key == "" || k.Rev < li.Rev {
			li = k
		}
	}
	if w.last == nil || *w.last != li {
		w.last = &li
		w.notify(li)
	}
}

// read reads the candidates, reports the leader, and returns the revision
// read.
func (w *leaderWatch) read(ctx context.Context) (int64, error) {
	resp, _, err := ask(ctx, w.cli, w.l.Wait, request.Read, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return w.cli.Get(ctx, w.pfx, clientv3.WithPrefix())
	})
	if err != nil {
		return 0, err
	}
	clear(w.keys)
	for _, kv := range resp.Kvs {
		w.keys[string(kv.Key)] = LeaderInfo{Key: string(kv.Key), Value: string(kv.Value), Rev: kv.CreateRevision}
	}
	w.report()
	return resp.Header.Revision, nil
}

// follow applies the events after revision rev to the candidates and
// reports the leader after each revision. It returns nil once fin has
// ended and it has seen the revision etcd had then, and otherwise the error
// that ended the watch.
func (w *leaderWatch) follow(ctx, fin context.Context, rev int64) error {
	wt, err := openWatch(ctx, nil, w.cli, w.l, w.pfx, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	defer func() { wt.Close() }()
	replayed := false
	seen, target := rev, int64(0) // target: etcd's revision once fin ended
	finc := fin.Done()
	for {
		select {
		case <-wt.Done():
			// ctx ended or the stream was found silent (see probe), and
			// clientv3 may not close the channel yet (see watchUntil).
			return wt.Closed(ctx, nil, w.pfx)
		case wr, ok := <-wt.C():
			if !ok {
				// ctx ended, the stream was found silent, or clientv3
				// lost it.
				return wt.Closed(ctx, nil, w.pfx)
			}
			wt.Heard()
			if err := wr.Err(); err != nil {
				return err
			}
			if !replayed && watch.Missed(wr, rev) {
				// Something was written between the read and the watch
				// (see missed): etcd has written rev+1 by now, so watch
				// again from it, to apply every event after the read.
				wt.Close()
				replayed = true
				if wt, err = openWatch(ctx, nil, w.cli, w.l, w.pfx, clientv3.WithPrefix(), clientv3.WithRev(rev+1)); err != nil {
					return err
				}
				continue
			}
			seen = max(seen, w.apply(wr.Events, rev))
			if wr.IsProgressNotify() {
				// Every event up to this revision has been sent.
				seen = max(seen, wr.Header.Revision)
			}
		case <-finc:
			finc = nil
			resp, _, err := ask(ctx, w.cli, w.l.Wait, request.Read, func(ctx context.Context) (*clientv3.GetResponse, error) {
				return w.cli.Get(ctx, w.pfx, clientv3.WithCountOnly())
			})
			if err != nil {
				return err
			}
			target = resp.Header.Revision
			// Without events after seen, only a progress notification
			// tells that there are none.
			wt.RequestProgress(ctx)
		}
		if target > 0 && seen >= target {
			return nil
		}
	}
}

// apply applies to the candidates the events of a watch that follows a
// read at revision rev, and reports the leader after each revision; it
// returns the last revision applied (0 if none). Events at rev or before
// are skipped: the read has them already. A watch opened with no start
// revision (see missed: the package's watches start at the member's
// revision, not at rev+1) on a member behind the read replays them, and
// applying them would report an older leader after a newer one.
func (w *leaderWatch) apply(events []*clientv3.Event, rev int64) int64 {
	var seen int64
	for i, ev := range events {
		if ev.Kv.ModRevision <= rev {
			continue
		}
		k := string(ev.Kv.Key)
		if ev.Type == mvccpb.DELETE {
			delete(w.keys, k)
		} else {
			w.keys[k] = LeaderInfo{Key: k, Value: string(ev.Kv.Value), Rev: ev.Kv.CreateRevision}
		}
		// The events of one revision (one transaction) change the
		// leader at once; etcd never splits them.
		if i == len(events)-1 || events[i+1].Kv.ModRevision != ev.Kv.ModRevision {
			w.report()
			seen = ev.Kv.ModRevision
		}
	}
	return seen
}
