package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file checks the demo's claims against etcd's own record: the
// revision history of the lock's keys. A worker claims a hold by its key,
// its fencing token (the key's create revision) and the revision of the
// read that showed the lock held (Mutex.Header); etcd's history says when
// each key was created and deleted, and so which key headed the queue at
// each revision. The claims are checked against that, never against
// themselves.

// acquisition is one hold as the worker that took it reports it.
type acquisition struct {
	Worker      int
	Key         string
	Token       int64 // the key's create revision
	AcquiredRev int64 // revision of the read that showed the key first in the queue
	Waited      time.Duration
}

// life is one incarnation of a lock key in etcd's history.
type life struct {
	Key     string
	Created int64
	Deleted int64 // revision of its deletion; 0 if it was not deleted
	Head    int64 // revision from which it was the oldest key (held the lock); 0 if never
}

// readHistory returns the events on the keys under prefix with revisions
// from..to, in order. It watches from revision from and asks for progress
// notifications until one shows that every event up to to has arrived.
// If from has been compacted away, it fails.
func readHistory(ctx context.Context, cli *clientv3.Client, prefix string, from, to int64) ([]*clientv3.Event, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from))
	// A progress request is answered only once the watch has caught up.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var evs []*clientv3.Event
	for {
		select {
		case wr, ok := <-wch:
			if !ok {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("watch of %q closed", prefix)
			}
			if err := wr.Err(); err != nil {
				return nil, fmt.Errorf("reading the history of %q from revision %d: %w", prefix, from, err)
			}
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision > to {
					return evs, nil
				}
				evs = append(evs, ev)
			}
			if wr.IsProgressNotify() && wr.Header.Revision >= to {
				return evs, nil
			}
		case <-tick.C:
			if err := cli.RequestProgress(wctx); err != nil {
				return nil, err
			}
		}
	}
}

// replay rebuilds the incarnations of the keys from events, given in
// revision order, starting from an empty prefix: when each was created,
// when it became the oldest (the holder), and when it was deleted.
func replay(events []*clientv3.Event) ([]*life, error) {
	present := make(map[string]*life)
	var lives []*life
	for i := 0; i < len(events); {
		// The events of one revision (a revoke deletes several keys at once)
		// are applied together before the holder is determined.
		rev := events[i].Kv.ModRevision
		for ; i < len(events) && events[i].Kv.ModRevision == rev; i++ {
			ev := events[i]
			key := string(ev.Kv.Key)
			switch {
			case ev.Type == mvccpb.PUT && ev.IsCreate():
				l := &life{Key: key, Created: ev.Kv.CreateRevision}
				present[key] = l
				lives = append(lives, l)
			case ev.Type == mvccpb.PUT:
				if l := present[key]; l == nil || l.Created != ev.Kv.CreateRevision {
					return nil, fmt.Errorf("revision %d updates %s, created at %d, before the history starts", rev, key, ev.Kv.CreateRevision)
				}
			case ev.Type == mvccpb.DELETE:
				if l := present[key]; l != nil {
					l.Deleted = rev
					delete(present, key)
				}
			}
		}
		var head *life
		for _, l := range present {
			if head == nil || l.Created < head.Created {
				head = l
			}
		}
		if head != nil && head.Head == 0 {
			head.Head = rev
		}
	}
	return lives, nil
}

// verdict is the outcome of checking the workers' claims against etcd's
// history.
type verdict struct {
	Reported int      // acquisitions reported by the workers
	Holds    int      // keys that held the lock according to etcd's history
	Overlaps int      // pairs of reported holds that overlap
	Left     int      // keys not deleted by the end of the history
	Problems []string // every discrepancy; none means the check passed
}

func (v *verdict) problem(format string, args ...any) {
	v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
}

// verify checks the reported acquisitions against lives:
//   - each names a key incarnation that etcd created, with the token as its
//     create revision, reported once;
//   - at the revision the worker read the lock as held, etcd's history has
//     that key first in the queue;
//   - no two reported holds overlap, a hold lasting from the revision it was
//     acquired at to the revision etcd deleted its key;
//   - tokens increase in acquisition order;
//   - every key that held the lock in etcd's history was reported, and no
//     key was left behind.
func verify(acqs []acquisition, lives []*life) verdict {
	v := verdict{Reported: len(acqs)}
	type incarnation struct {
		key string
		rev int64
	}
	byKey := make(map[incarnation]*life, len(lives))
	for _, l := range lives {
		byKey[incarnation{l.Key, l.Created}] = l
		if l.Head != 0 {
			v.Holds++
		}
		if l.Deleted == 0 {
			v.Left++
		}
	}
	if v.Left > 0 {
		v.problem("%d keys were left under the lock", v.Left)
	}

	claimed := make(map[*life]bool)
	type hold struct {
		acquisition
		end int64 // revision of its key's deletion, or 0 if never deleted
	}
	var holds []hold
	for _, a := range acqs {
		l := byKey[incarnation{a.Key, a.Token}]
		if l == nil {
			v.problem("worker %d reported token %d for %s, which etcd's history never created", a.Worker, a.Token, a.Key)
			continue
		}
		if claimed[l] {
			v.problem("the hold of %s (token %d) was reported twice", a.Key, a.Token)
		}
		claimed[l] = true
		switch {
		case l.Head == 0:
			v.problem("worker %d held %s at revision %d, but in etcd's history that key never came first in the queue",
				a.Worker, a.Key, a.AcquiredRev)
		case a.AcquiredRev < l.Head || (l.Deleted != 0 && a.AcquiredRev >= l.Deleted):
			v.problem("worker %d held %s at revision %d, but in etcd's history it was first in the queue only from revision %d to %d",
				a.Worker, a.Key, a.AcquiredRev, l.Head, l.Deleted)
		}
		holds = append(holds, hold{a, l.Deleted})
	}
	for _, l := range lives {
		if l.Head != 0 && !claimed[l] {
			v.problem("etcd's history shows %s (created at %d) holding the lock from revision %d, but no worker reported it", l.Key, l.Created, l.Head)
		}
	}

	slices.SortFunc(holds, func(a, b hold) int { return cmp.Compare(a.AcquiredRev, b.AcquiredRev) })
	for j := range holds {
		for i := range j {
			if holds[i].end == 0 || holds[j].AcquiredRev < holds[i].end {
				v.Overlaps++
				v.problem("worker %d held %s from revision %d while worker %d still held %s (deleted at %d)",
					holds[j].Worker, holds[j].Key, holds[j].AcquiredRev, holds[i].Worker, holds[i].Key, holds[i].end)
			}
		}
		if j > 0 && holds[j].Token <= holds[j-1].Token {
			v.problem("token %d (worker %d) came after token %d (worker %d): tokens must increase", holds[j].Token, holds[j].Worker, holds[j-1].Token, holds[j-1].Worker)
		}
	}
	return v
}
