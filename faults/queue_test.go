package faults_test

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	hc "github.com/seed-a9d410c6/concurrency/internal/testkit/historycheck"
)

// checkQueue checks the history of a queue workload (queue or pqueue)
// against the elements left in its queue at the end: every value whose
// Enqueue succeeded was dequeued or is left (none lost); no value was
// taken by two Dequeues, or taken and left (none returned twice), except
// where a Dequeue returned it with ErrClaimUnknown, the documented case in
// which its outcome is unknown; and every value dequeued or left was
// enqueued (none made up). An Enqueue whose outcome is unknown may have
// added its value or not.
func checkQueue(rep *hc.Report, wl string, ops []hc.Op, left []string) {
	enqueued := map[string]string{} // value -> ok or info
	taken := map[string]int{}       // value -> Dequeues that returned it ok, plus 1 if left
	unknown := map[string]bool{}    // values returned with ErrClaimUnknown
	for _, op := range ops {
		switch {
		case op.F == hc.FEnq && op.Type != hc.Invoke:
			enqueued[op.ID] = op.Type
		case op.F == hc.FDeq && op.Type == hc.OK:
			taken[op.ID]++
		case op.F == hc.FDeq && op.Type == hc.Info:
			unknown[op.ID] = true
		}
	}
	for _, v := range left {
		taken[v]++
	}
	for v, how := range enqueued {
		rep.Checked[hc.QueueNoLoss]++
		if how == hc.OK && taken[v] == 0 && !unknown[v] {
			rep.Violate(hc.QueueNoLoss, "%s: %q was enqueued, never dequeued, and is not in the queue", wl, v)
		}
	}
	for v, n := range taken {
		rep.Checked[hc.QueueNoDup]++
		if n > 1 {
			rep.Violate(hc.QueueNoDup, "%s: %q dequeued or left %d times", wl, v, n)
		}
		if _, ok := enqueued[v]; !ok {
			rep.Violate(hc.QueueNoDup, "%s: %q dequeued or left, never enqueued", wl, v)
		}
	}
	for v := range unknown {
		if _, ok := enqueued[v]; !ok {
			rep.Violate(hc.QueueNoDup, "%s: %q returned with ErrClaimUnknown, never enqueued", wl, v)
		}
	}
}

// queueLeft returns the values left in queue workload wl's queue.
func (r *run) queueLeft(ctx context.Context, wl string) []string {
	resp, err := r.ctl.Get(ctx, r.pfx+"/"+wl+"/", clientv3.WithPrefix())
	if err != nil {
		r.t.Fatal(err)
	}
	var left []string
	for _, kv := range resp.Kvs {
		left = append(left, string(kv.Value))
	}
	return left
}

// queueWorkload reports whether wl is one of the queue workloads.
func queueWorkload(wl string) bool { return strings.HasSuffix(wl, "queue") }
