package recipes

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// PriorityQueue is a queue whose elements come out lowest priority number
// first, and in create-revision order within a priority. An element is a
// key named the prefix, "/", the priority in five digits, "/" and the time
// in nanoseconds. Unlike etcd's recipe, it keeps no other key (etcd's
// leaves a "__" base key for every priority ever used), so its keys are
// not etcd's and the two do not share elements. Waiting and taking are as
// a Queue's.
type PriorityQueue struct {
	client *clientv3.Client
	key    string // with a trailing "/"
}

// NewPriorityQueue returns a PriorityQueue on key. It does not talk to
// etcd.
func NewPriorityQueue(client *clientv3.Client, key string) *PriorityQueue {
	return &PriorityQueue{client: client, key: key + "/"}
}

// Enqueue adds val with priority pr, as EnqueueContext with
// context.Background().
func (q *PriorityQueue) Enqueue(val string, pr uint16) error {
	return q.EnqueueContext(context.Background(), val, pr)
}

// EnqueueContext adds val with priority pr (0 first). The outcome of a
// write cut short by ctx is as Queue.EnqueueContext's.
func (q *PriorityQueue) EnqueueContext(ctx context.Context, val string, pr uint16) error {
	if q.client == nil {
		return ErrNilClient
	}
	return enqueue(ctx, q.client, fmt.Sprintf("%s%05d", q.key, pr), val)
}

// Dequeue removes and returns the first element, as DequeueContext with
// context.Background().
func (q *PriorityQueue) Dequeue() (string, error) { return q.DequeueContext(context.Background()) }

// DequeueContext removes and returns the oldest element of the lowest
// priority number, blocking until there is one or ctx ends. What it
// guarantees when ctx ends or a reply is lost is as Queue.DequeueContext.
func (q *PriorityQueue) DequeueContext(ctx context.Context) (string, error) {
	if q.client == nil {
		return "", ErrNilClient
	}
	return dequeue(ctx, q.client, q.key, q.first)
}

// first returns the oldest element of the lowest priority number, or nil
// and the revision read.
func (q *PriorityQueue) first(ctx context.Context) (*mvccpb.KeyValue, int64, error) {
	for {
		// The first key by name has the lowest priority present; the
		// oldest of that priority is the element.
		resp, err := q.client.Get(ctx, q.key, clientv3.WithFirstKey()...)
		if err != nil {
			return nil, 0, err
		}
		if len(resp.Kvs) == 0 {
			return nil, resp.Header.Revision, nil
		}
		k := string(resp.Kvs[0].Key)
		if len(k) < len(q.key)+6 || k[len(q.key)+5] != '/' {
			return resp.Kvs[0], resp.Header.Revision, nil // not named by Enqueue
		}
		resp, err = q.client.Get(ctx, k[:len(q.key)+6], clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
		if err != nil {
			return nil, 0, err
		}
		if len(resp.Kvs) > 0 {
			return resp.Kvs[0], resp.Header.Revision, nil
		}
		// That priority was emptied meanwhile: read again.
	}
}
