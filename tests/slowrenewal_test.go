package concurrency_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/slowwrite"
)

// Issue 50: renewals that take long to answer. With every renewal
// answered 1.5 s after it was sent (a busy leader, a congested link), TTL
// 5, all 30 sessions of ours ended, while etcd's package lost none: the
// next renewal went out TTL/3 after the last answer while the deadline
// counts from the last send, so a session lived only while the round
// trip stayed under about TTL/3 minus half the margin (1.4 s at TTL 5,
// 4.5 s at TTL 15). Now it lives while etcd's does: up to two thirds of
// the TTL minus a second, and its deadline stays before etcd's expiry.

// Sessions of both packages, side by side on one client whose renewals'
// answers come late (slowwrite.Renewals; renewals still applied when
// sent), for a few renewal periods: no session of ours ends while etcd's
// live, and each of ours has a deadline before etcd's expiry of its lease.
// Round trips just below and above the old threshold, and at 2·TTL/3 −
// 1 s (the bound is 2·TTL/3; etcd's package lost most of its sessions at
// 8.5 s and TTL 15 in this harness). The cases run at once, a client
// each, so that the test takes about the longest one (25 s).
func TestSlowRenewals(t *testing.T) {
	etcdtest.Begin(t) // one leak check for all: the cases run at once
	cases := []struct {
		ttl  int
		late time.Duration
	}{
		{5, 1200 * time.Millisecond}, // below the old threshold (1.4 s)
		{5, 1700 * time.Millisecond}, // above it: none of ours lived
		{5, 2300 * time.Millisecond}, // 2·TTL/3 − 1 s
		{15, 4 * time.Second},        // below the old threshold (4.5 s)
		{15, 6 * time.Second},        // above it
		{15, 9 * time.Second},        // 2·TTL/3 − 1 s
	}
	var wg sync.WaitGroup
	results := make([]string, len(cases))
	for i, tc := range cases {
		sr := slowwrite.NewRenewals()
		c := sharedClient(t, sr.Option)
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = slowRenewals(t, c, sr, tc.ttl, tc.late)
		}()
	}
	wg.Wait()
	for _, r := range results {
		t.Log(r)
	}
}

// slowRenewals runs TestSlowRenewals for one TTL and one round trip, on
// c, whose renewals sr delays: 10 sessions of each package, for three
// renewal periods after the first late answer (a little over the TTL). It
// reports (t.Errorf) sessions of ours that ended, and returns a summary.
func slowRenewals(t *testing.T, c *clientv3.Client, sr *slowwrite.Renewals, ttl int, late time.Duration) string {
	const n = 10
	var ours []*concurrency.Session
	var theirs []*etcdconc.Session
	for range n {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(ttl))
		if err != nil {
			t.Errorf("NewSession: %v", err)
			return ""
		}
		defer s.Close()
		ours = append(ours, s)
		es, err := etcdconc.NewSession(c, etcdconc.WithTTL(ttl))
		if err != nil {
			t.Errorf("etcd's NewSession: %v", err)
			return ""
		}
		defer es.Close()
		theirs = append(theirs, es)
	}
	sr.Set(late)
	defer sr.Set(0)
	// Every session has renewed at least three times with late answers.
	period := time.Duration(ttl) * time.Second / 3
	time.Sleep(3*period + late + time.Second) // the time that sessions must live through

	endedOurs, endedTheirs := 0, 0
	for _, es := range theirs {
		select {
		case <-es.Done():
			endedTheirs++
		default:
		}
	}
	for _, s := range ours {
		select {
		case <-s.Done():
			endedOurs++
			t.Logf("TTL %d, %v: session %x ended: %v", ttl, late, s.Lease(), context.Cause(s.Ctx()))
			continue
		default:
		}
		resp, err := c.TimeToLive(context.WithoutCancel(t.Context()), s.Lease())
		if err != nil {
			t.Errorf("TimeToLive: %v", err)
			continue
		}
		// etcd expires the lease no later than TTL seconds (rounded up)
		// after now.
		if expiry := time.Now().Add(time.Duration(resp.TTL) * time.Second); resp.TTL <= 0 || s.Deadline().After(expiry) {
			t.Errorf("session %x: deadline %v, after etcd's expiry %v (TTL %d)", s.Lease(), s.Deadline(), expiry, resp.TTL)
		}
	}
	if endedOurs > 0 {
		t.Errorf("%d of %d sessions of ours ended with renewals answered %v late at TTL %d; etcd's package lost %d of %d",
			endedOurs, n, late, ttl, endedTheirs, n)
	}
	return fmt.Sprintf("TTL %d, answers %v late: %d of %d sessions of ours ended, %d of %d of etcd's; %d renewals answered",
		ttl, late, endedOurs, n, endedTheirs, n, sr.Answered())
}
