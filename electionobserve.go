package concurrency

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/request"
)

// This file holds what anyone can see of an Election without campaigning
// in it: its leader now (Leader), and each leader and value in turn
// (Observe).

// Leader returns the current leader's key and value, as the only entry of
// the response's Kvs, in one linearizable read. It returns
// ErrElectionNoLeader if the election has no candidate.
func (e *Election) Leader(ctx context.Context) (*clientv3.GetResponse, error) {
	if err := validate(e.s, e.pfx); err != nil {
		return nil, err
	}
	resp, err := e.s.get(ctx, e.pfx, clientv3.WithFirstCreate()...)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, ErrElectionNoLeader
	}
	return resp, nil
}

// Observe returns a channel on which it posts the leader, as Leader would
// return it (a *clientv3.GetResponse, as etcd 3.7's Observe does; etcd
// 3.5's and 3.6's post clientv3.GetResponse values: see the package
// documentation for the one-line change they need), each time the leader
// changes or proclaims a value, in order: first the current leader (or the first one once there is one), then each
// value after it. Each response is what a read at its Header.Revision would
// have returned: the leader at that revision, with its value then. (etcd's
// gave several values that reached it at once the same, later, revision,
// etcd #18163.) It may skip a leader or value that was replaced before it
// could read it, but it always posts the latest, and never the same value
// twice.
//
// Observe never posts a response without a leader, because callers of
// etcd's Observe read resp.Kvs[0]: when the leader resigns and no candidate
// is left, nothing is posted until the next leader. To tell whether there
// is a leader now, call Leader, which returns ErrElectionNoLeader.
//
// A goroutine reads etcd for the channel until ctx ends or the client is
// closed, and then closes the channel; the caller must keep receiving until
// then or end ctx. The session's end does not stop it. Compaction, lost
// connections and members without a raft leader do not end it either
// (etcd's closed the channel then): it reads the leader again, retrying
// every 500 ms while etcd does not answer. A nil session or an empty name
// give a channel that is already closed.
func (e *Election) Observe(ctx context.Context) <-chan *clientv3.GetResponse {
	ch := make(chan *clientv3.GetResponse)
	if validate(e.s, e.pfx) != nil {
		close(ch)
		return ch
	}
	go e.observe(ctx, ch)
	return ch
}

func (e *Election) observe(ctx context.Context, ch chan<- *clientv3.GetResponse) {
	defer close(ch)
	o := &observer{e: e, ctx: ctx, ch: ch}
	for {
		resp, err := e.s.get(ctx, e.pfx, clientv3.WithFirstCreate()...)
		if err == nil {
			err = o.follow(resp)
		}
		if ctx.Err() != nil || e.s.client.Ctx().Err() != nil {
			return
		}
		// After compaction the read is enough; after other failures, wait
		// before trying again.
		if err != nil && !errors.Is(err, rpctypes.ErrCompacted) && !request.SleepCtx(ctx, request.RetryInterval) {
			return
		}
	}
}

// observer is the goroutine of one Observe: where it posts, until when,
// and what it posted last.
type observer struct {
	e    *Election
	ctx  context.Context
	ch   chan<- *clientv3.GetResponse
	last *mvccpb.KeyValue // the last value posted
}

// follow posts the leader that a read found (resp), and
// its values, until it is deleted; with no leader, it waits for the first
// candidate, then returns for the caller to read which key leads (several
// may have come at once). It returns nil once ctx has ended, and the
// watch's error when it fails.
func (o *observer) follow(resp *clientv3.GetResponse) error {
	e, rev := o.e, resp.Header.Revision
	if len(resp.Kvs) == 0 {
		return watchAfter(o.ctx, e.s.client, e.s.live(), e.pfx, rev, func(wr clientv3.WatchResponse) (bool, error) {
			return len(wr.Events) > 0, nil
		}, clientv3.WithPrefix(), clientv3.WithFilterDelete())
	}
	// The oldest key leads until it is deleted: no key created later can
	// be older. Post its values until then.
	kv := resp.Kvs[0]
	if !o.post(resp.Header, kv) {
		return nil
	}
	return watchAfter(o.ctx, e.s.client, e.s.live(), string(kv.Key), rev, func(wr clientv3.WatchResponse) (bool, error) {
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision <= rev {
				// Already read (a watch on a member behind the read
				// replays it): posting it would go back.
				continue
			}
			if ev.Type == mvccpb.DELETE {
				return true, nil
			}
			// The header of a read at the revision that wrote the value,
			// not the watch response's, which may be later.
			h := &pb.ResponseHeader{ClusterId: wr.Header.ClusterId, MemberId: wr.Header.MemberId, Revision: ev.Kv.ModRevision, RaftTerm: wr.Header.RaftTerm}
			if !o.post(h, ev.Kv) {
				return true, nil
			}
		}
		return false, nil
	})
}

// post sends kv, read at hdr, on the channel, unless it is the value
// posted last (read again after a failure). It reports false when ctx
// ended first.
func (o *observer) post(hdr *pb.ResponseHeader, kv *mvccpb.KeyValue) bool {
	if last := o.last; last != nil && string(last.Key) == string(kv.Key) && last.CreateRevision == kv.CreateRevision && last.ModRevision == kv.ModRevision {
		return true
	}
	select {
	case o.ch <- &clientv3.GetResponse{Header: hdr, Kvs: []*mvccpb.KeyValue{kv}}:
		o.last = kv
		return true
	case <-o.ctx.Done():
		return false
	}
}
