package lockbench

import (
	"context"
	"testing"
	"time"
)

// The work queue drain, small: every item done once by both queues; with
// crashes, the WorkQueue loses none and delivers the crashed ones again,
// and etcd's Queue loses exactly the items its crashed consumers took.
func TestWorkQueueDrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var counter Counter
	_, cs := startCluster(ctx, t, 1, 2, counter.Option)
	env := Env{Clients: cs, Counter: &counter}
	for _, crash := range []int{0, 3} {
		for _, impl := range []string{WQOurs, WQEtcd} {
			r, err := WorkQueueDrain(ctx, env, impl, "/wq/"+impl, 4, 30, crash, 2*time.Second)
			if err != nil {
				t.Fatalf("%s crash %d: %v", impl, crash, err)
			}
			t.Logf("%s crash %d: %.0f items/s, %.1f requests/item, %d crashes, %d lost, %d twice, %d redelivered",
				impl, crash, r.PerSec(), r.Requests(), r.Crashes, r.Lost, r.Duplicated, r.Redelivered)
			wantLost := 0
			if impl == WQEtcd {
				wantLost = r.Crashes
			}
			if r.Lost != wantLost || r.Duplicated != 0 {
				t.Errorf("%s crash %d: %d lost (want %d), %d done twice", impl, crash, r.Lost, wantLost, r.Duplicated)
			}
			if impl == WQOurs && r.Redelivered < r.Crashes {
				t.Errorf("%s: %d crashes, %d redeliveries", impl, r.Crashes, r.Redelivered)
			}
		}
	}
}
