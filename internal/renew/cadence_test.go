package renew

import (
	"testing"
	"time"
)

// A renewal is sent on the grid, up to renewGrid before TTL/3 minus the
// margin, never after; with a TTL too short for the grid, at TTL/3 minus
// the margin.
func TestRenewIn(t *testing.T) {
	for _, ttl := range []time.Duration{9 * time.Second, 60 * time.Second, 90 * time.Second} {
		for range 50 {
			before := time.Now()
			d := In(ttl, 0)
			after := time.Now()
			if want := ttl/3 - Margin(ttl); d > want || d <= want-renewGrid {
				t.Fatalf("TTL %v: In %v, want in (%v, %v]", ttl, d, want-renewGrid, want)
			}
			// The send time is on the grid, as seen at some instant
			// between the two readings of the clock.
			lo, hi := before.Add(d).UnixNano(), after.Add(d).UnixNano()
			if lo/int64(renewGrid) == hi/int64(renewGrid) && lo%int64(renewGrid) != 0 {
				t.Fatalf("TTL %v: a renewal at %v is off the %v grid", ttl, before.Add(d), renewGrid)
			}
			time.Sleep(7 * time.Millisecond)
		}
	}
	for _, ttl := range []time.Duration{3 * time.Second, 5 * time.Second} {
		if d := In(ttl, 0); d != ttl/3-Margin(ttl) {
			t.Fatalf("TTL %v: In %v, want TTL/3 minus the margin", ttl, d)
		}
	}
}

// With renewals answered late, the next is sent early enough that its
// answer, if it takes as long, comes renewSlack before the deadline of the
// one sent now; never more often than renewGrid.
func TestRenewInLate(t *testing.T) {
	for _, tc := range []struct {
		ttl, rtt time.Duration
	}{
		{5 * time.Second, 1200 * time.Millisecond},
		{5 * time.Second, 2300 * time.Millisecond},
		{15 * time.Second, 4 * time.Second},
		{15 * time.Second, 8 * time.Second},
		{60 * time.Second, 38 * time.Second},
		{3 * time.Second, 2 * time.Second},
	} {
		d := In(tc.ttl, tc.rtt)
		deadline := tc.ttl - Margin(tc.ttl)
		switch {
		case d < renewGrid-time.Millisecond:
			t.Errorf("TTL %v, round trip %v: In %v, under the grid", tc.ttl, tc.rtt, d)
		case d > tc.ttl/3-Margin(tc.ttl):
			t.Errorf("TTL %v, round trip %v: In %v, over TTL/3 minus the margin", tc.ttl, tc.rtt, d)
		case d > renewGrid && d+tc.rtt > deadline-renewSlack:
			t.Errorf("TTL %v, round trip %v: In %v: the answer comes %v after the send, past %v", tc.ttl, tc.rtt, d, d+tc.rtt, deadline-renewSlack)
		}
	}
}
