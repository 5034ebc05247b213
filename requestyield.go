package concurrency

import (
	"context"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds RequestYield, the operators' call that asks the holders
// of a name to let go: it reads them with Inspect and writes, for each, the
// request that a hold watches for (yield.go: the request key's layout and
// the hold's side).

// yieldAttempts bounds how often RequestYield reads the holders again when
// they changed between its read and its write.
const yieldAttempts = 3

// RequestYield asks the holders of the lock or election name to let go:
// the holder of a Mutex, an Election's leader, every holder of a Semaphore
// or the holders of an RWMutex, as Inspect finds them. It writes one key
// per holder (see YieldPrefix), in one transaction that applies only if
// every one of those holds is still the same (their keys' create
// revisions), and returns the holders it asked. A hold whose session was
// created WithYield (and Lead's, WithLeadSession(WithYield())) ends,
// with ErrYieldRequested as the cause of its Ctx, within milliseconds once
// its Ctx has been asked for; a hold without it, and the holders of etcd's package and
// `etcdctl lock`, keep the lock: RequestYield cannot tell them apart, so
// its result says whom it asked, not who will yield. After a Semaphore's
// limit shrank, holders beyond the new limit, which Inspect shows as
// waiting (it judges by the current limit), are not asked.
//
// It blocks for Inspect's round trips and one transaction; if the holders
// changed in between, it reads again, three times at most. It returns an
// error matching ErrNotHeld if nobody holds the name, ErrNilClient and
// ErrInvalidPrefix for bad input, and ctx.Err() when ctx ends. On error
// nothing was written, unless the transaction's answer was lost (ctx
// ended while it was in flight, or the connection failed on its last
// attempt): then it may have applied, and the holders may yield. (A holder
// that asks on the context of its own hold sees just that: its hold ends
// as the request applies, and the request's answer is lost with it.)
func RequestYield(ctx context.Context, c *clientv3.Client, name string) ([]QueueKey, error) {
	for attempt := 1; ; attempt++ {
		q, err := Inspect(ctx, c, name)
		if err != nil {
			return nil, err
		}
		hs := q.Holders()
		if len(hs) == 0 {
			return nil, fmt.Errorf("%w: %q", ErrNotHeld, name)
		}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for _, h := range hs {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(h.Key), "=", h.CreateRevision))
			var opts []clientv3.OpOption
			if h.Lease != clientv3.NoLease {
				opts = append(opts, clientv3.WithLease(h.Lease))
			}
			ops = append(ops, clientv3.OpPut(yieldKey(h.Key), strconv.FormatInt(h.CreateRevision, 10), opts...))
		}
		resp, err := c.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			// A lease that expired since the read fails the put: read
			// again, as for a holder that changed.
			if ctx.Err() != nil || attempt == yieldAttempts {
				return nil, fmt.Errorf("concurrency: RequestYield %q: %w", name, err)
			}
			continue
		}
		if resp.Succeeded {
			return hs, nil
		}
		if attempt == yieldAttempts {
			return nil, fmt.Errorf("concurrency: RequestYield %q: the holders changed %d times while asking", name, yieldAttempts)
		}
	}
}
