package recipes

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds the operators' calls of a WorkQueue: what is in it
// (Stats, Items), and the dead letters (DeadLetters, Requeue, Purge).

// ItemInfo describes an item for operators.
type ItemInfo struct {
	ID         string
	Value      string
	Priority   uint16
	Deliveries int       // deliveries so far
	PutTime    time.Time // by the producer's clock
	State      string    // "ready", "in flight", "delayed" or "dead"
	Due        time.Time // a delayed item's due time
}

// WorkQueueStats counts a WorkQueue's items at one revision.
type WorkQueueStats struct {
	Ready, InFlight, Delayed, Dead int64
	// Oldest is the put time (the producer's clock) of the oldest item
	// ready or in flight, by etcd's order of writes; zero if none.
	Oldest   time.Time
	Revision int64
}

// Stats counts the queue's items in one read. It does not block but on
// etcd; ctx bounds it.
func (q *WorkQueue) Stats(ctx context.Context) (WorkQueueStats, error) {
	count := func(k string) clientv3.Op {
		return clientv3.OpGet(q.pfx+k, clientv3.WithPrefix(), clientv3.WithCountOnly())
	}
	resp, err := q.client.Txn(ctx).Then(count("item/"), count("claim/"), count("delay/"), count("dead/"),
		clientv3.OpGet(q.pfx+"item/", clientv3.WithPrefix(), clientv3.WithLimit(1),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))).Commit()
	if err != nil {
		return WorkQueueStats{}, err
	}
	r := resp.Responses
	n := func(i int) int64 { return r[i].GetResponseRange().Count }
	st := WorkQueueStats{Ready: n(0) - n(1), InFlight: n(1), Delayed: n(2), Dead: n(3), Revision: resp.Header.Revision}
	if kvs := r[4].GetResponseRange().Kvs; len(kvs) > 0 {
		rec, err := parseRecord(kvs[0].Value)
		if err != nil {
			return WorkQueueStats{}, err
		}
		st.Oldest = time.Unix(0, rec.putNanos)
	}
	return st, nil
}

// Items lists up to limit items of the queue (all if limit <= 0) in key
// order: ready and in flight, then delayed, then dead, read at one
// revision.
func (q *WorkQueue) Items(ctx context.Context, limit int64) ([]ItemInfo, error) {
	get := func(k string) clientv3.Op {
		return clientv3.OpGet(q.pfx+k, clientv3.WithPrefix(), clientv3.WithLimit(max(limit, 0)))
	}
	resp, err := q.client.Txn(ctx).Then(get("item/"), get("claim/"), get("delay/"), get("dead/")).Commit()
	if err != nil {
		return nil, err
	}
	claimed := map[string]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		id, _, err := q.idOf(kv.Key, "claim/")
		if err != nil {
			return nil, err
		}
		claimed[id] = true
	}
	var out []ItemInfo
	for i, k := range []string{"item/", "", "delay/", "dead/"} {
		if k == "" {
			continue
		}
		for _, kv := range resp.Responses[i].GetResponseRange().Kvs {
			it, err := q.parseItem(kv, k)
			if err != nil {
				return nil, err
			}
			info := ItemInfo{ID: it.id, Value: it.rec.value, Priority: it.prio, Deliveries: it.count,
				PutTime: time.Unix(0, it.rec.putNanos), State: map[string]string{"item/": "ready", "delay/": "delayed", "dead/": "dead"}[k]}
			if claimed[it.id] {
				info.State = "in flight"
			}
			if k == "delay/" {
				info.Due, _ = q.dueOf(kv.Key)
			}
			if limit <= 0 || int64(len(out)) < limit {
				out = append(out, info)
			}
		}
	}
	return out, nil
}

// DeadLetters lists the queue's dead letters, in key order (priority, then
// put time), up to limit (all if limit <= 0).
func (q *WorkQueue) DeadLetters(ctx context.Context, limit int64) ([]ItemInfo, error) {
	resp, err := q.client.Get(ctx, q.pfx+"dead/", clientv3.WithPrefix(), clientv3.WithLimit(max(limit, 0)))
	if err != nil {
		return nil, err
	}
	out := make([]ItemInfo, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		it, err := q.parseItem(kv, "dead/")
		if err != nil {
			return nil, err
		}
		out = append(out, ItemInfo{ID: it.id, Value: it.rec.value, Priority: it.prio, Deliveries: it.count,
			PutTime: time.Unix(0, it.rec.putNanos), State: "dead"})
	}
	return out, nil
}

// Requeue makes dead letter id ready again, with its delivery count
// started again, in one transaction. It returns ErrNotFound if there is no
// such dead letter. A write cut short by ctx is settled as Put's.
func (q *WorkQueue) Requeue(ctx context.Context, id string) error {
	kv, rec, err := q.deadLetter(ctx, id)
	if err != nil {
		return err
	}
	rec.base = 0
	return q.commitDead(ctx, kv.ModRevision, id, clientv3.OpPut(q.itemKey(id), rec.encode()))
}

// Purge deletes dead letter id, and frees its deduplication id, in one
// transaction. It returns ErrNotFound if there is no such dead letter.
func (q *WorkQueue) Purge(ctx context.Context, id string) error {
	kv, rec, err := q.deadLetter(ctx, id)
	if err != nil {
		return err
	}
	var ops []clientv3.Op
	if rec.dedup != "" {
		dk := q.pfx + "dedup/" + rec.dedup
		ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(dk), "=", id)},
			[]clientv3.Op{clientv3.OpDelete(dk)}, nil))
	}
	return q.commitDead(ctx, kv.ModRevision, id, ops...)
}

// deadLetter reads dead letter id.
func (q *WorkQueue) deadLetter(ctx context.Context, id string) (*mvccpb.KeyValue, record, error) {
	if err := q.checkName(ctx); err != nil {
		return nil, record{}, err
	}
	resp, err := q.client.Get(ctx, q.deadKey(id))
	if err != nil {
		return nil, record{}, err
	}
	if len(resp.Kvs) == 0 {
		return nil, record{}, fmt.Errorf("%w: dead letter %q of %q", ErrNotFound, id, q.name)
	}
	rec, err := parseRecord(resp.Kvs[0].Value)
	return resp.Kvs[0], rec, err
}

// commitDead deletes dead letter id, if it has mod revision mod, with ops.
func (q *WorkQueue) commitDead(ctx context.Context, mod int64, id string, ops ...clientv3.Op) error {
	dk := q.deadKey(id)
	wctx, stop := settling(ctx)
	defer stop()
	resp, err := q.client.Txn(wctx).If(clientv3.Compare(clientv3.ModRevision(dk), "=", mod)).
		Then(append([]clientv3.Op{clientv3.OpDelete(dk)}, ops...)...).Commit()
	if err != nil {
		return writeErr(ctx, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: dead letter %q of %q changed", ErrNotFound, id, q.name)
	}
	return nil
}
