package lockbench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestCapLayout(t *testing.T) {
	for _, c := range []struct {
		scenario                string
		n                       int
		holders, waiters, names int
	}{
		{CapSessions, 1000, 0, 1000, 0},
		{CapHolds, 1000, 1000, 0, 1000},
		{CapSharedHolds, 1000, 10, 0, 1000},
		{CapSharedHolds, 1001, 11, 0, 1001},
		{CapQueue, 1000, 1, 1000, 1},
		{CapSpread, 1000, 1, 1000, 100},
		{CapSpread, 10000, 10, 10000, 1000},
	} {
		h, w, n, err := capLayout(c.scenario, c.n)
		if err != nil || h != c.holders || w != c.waiters || n != c.names {
			t.Errorf("capLayout(%q, %d) = %d holders, %d waiters, %d names, %v; want %d, %d, %d", c.scenario, c.n, h, w, n, err, c.holders, c.waiters, c.names)
		}
	}
	if _, _, _, err := capLayout("nothing", 1); err == nil {
		t.Error("capLayout of an unknown scenario: no error")
	}
}

func TestGaps(t *testing.T) {
	t0 := time.Unix(0, 0)
	var ts []time.Time
	// 20 acquisitions: 1 ms apart for the first half, 3 ms apart after.
	at := t0
	for i := range 20 {
		ts = append(ts, at)
		if i < 10 {
			at = at.Add(time.Millisecond)
		} else {
			at = at.Add(3 * time.Millisecond)
		}
	}
	early, late := gaps(ts)
	if early != time.Millisecond || late != 3*time.Millisecond {
		t.Fatalf("gaps = %v, %v; want 1ms, 3ms", early, late)
	}
}

// Each scenario builds, counts, drains and cleans up for both packages on
// a small N; the queues hand over to every waiter. With a rate
// (lockbench -cap-rate), the waiters call Lock one a tick: the setup
// cannot end before the last of them has started.
func TestCapacity(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var traffic Traffic
	clus, cs := startCluster(ctx, t, 1, 2, traffic.Option)
	members := []Member{{Endpoint: clus.Endpoints[0]}}
	const n = 20
	for _, impl := range []Impl{Ours, Etcd} {
		for _, sc := range CapScenarios {
			t.Run(fmt.Sprintf("%s/%s", impl.Name, sc), func(t *testing.T) {
				r, err := Capacity(ctx, Env{Clients: cs}, &traffic, members, impl, sc, fmt.Sprintf("/cap-test/%s/%d", impl.Name, len(sc)), n, 200*time.Millisecond, time.Minute, 0)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%+v", r)
				if r.Setup <= 0 || len(r.Base) != 1 || len(r.Loaded) != 1 || MemberSum(r.Loaded, MetricRSS) <= 0 {
					t.Fatalf("setup %v, %d and %d scrapes, RSS %v", r.Setup, len(r.Base), len(r.Loaded), MemberSum(r.Loaded, MetricRSS))
				}
				switch sc {
				case CapQueue, CapSpread:
					if r.FirstHandoff <= 0 || r.Drain < r.FirstHandoff || r.EarlyGap <= 0 {
						t.Fatalf("first handoff %v, drain %v, early gap %v", r.FirstHandoff, r.Drain, r.EarlyGap)
					}
					// Every waiter waits on a watch of its own.
					if w := MemberSum(r.Loaded, WatcherMetric) - MemberSum(r.Base, WatcherMetric); w < n {
						t.Fatalf("%v watchers for %d waiters", w, n)
					}
				default:
					if r.Drain != 0 {
						t.Fatalf("drain %v with no waiter", r.Drain)
					}
				}
			})
		}
		t.Run(impl.Name+"/rate", func(t *testing.T) {
			const rate = 50
			r, err := Capacity(ctx, Env{Clients: cs}, &traffic, members, impl, CapSpread, "/cap-test/rate/"+impl.Name, n, 200*time.Millisecond, time.Minute, rate)
			if err != nil {
				t.Fatal(err)
			}
			_, waiters, _, _ := capLayout(CapSpread, n)
			// The k-th tick of a ticker comes k periods after it starts, at
			// the earliest.
			if least := time.Duration(waiters) * time.Second / rate; r.Setup < least {
				t.Fatalf("setup %v for %d waiters at %d a second: under %v", r.Setup, waiters, rate, least)
			}
			if r.FirstHandoff <= 0 || r.Drain < r.FirstHandoff {
				t.Fatalf("first handoff %v, drain %v", r.FirstHandoff, r.Drain)
			}
		})
	}
}
