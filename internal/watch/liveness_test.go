package watch

import (
	"testing"
	"time"
)

// A session's liveness is a third and a sixth of its TTL, bounded; a TTL
// of 0 is not defaulted here (its callers pass the TTL they know), and
// gets the shortest.
func TestLivenessFor(t *testing.T) {
	for _, tc := range []struct {
		ttl        time.Duration
		idle, wait time.Duration
	}{
		{0, time.Second, time.Second},
		{2 * time.Second, time.Second, time.Second},
		{15 * time.Second, 5 * time.Second, 2500 * time.Millisecond},
		{60 * time.Second, 20 * time.Second, 5 * time.Second},
		{10 * time.Minute, 20 * time.Second, 5 * time.Second},
	} {
		if l := LivenessFor(tc.ttl); l.Idle != tc.idle || l.Wait != tc.wait {
			t.Errorf("LivenessFor(%v) = %+v, want idle %v, wait %v", tc.ttl, l, tc.idle, tc.wait)
		}
	}
}
