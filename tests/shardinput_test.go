package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// What another process writes under a Shards group is input (issue 49):
// no member key, whatever its value, makes a member, InspectShards or
// WatchShards panic; and two shard counts in one group settle by etcd's
// order instead of handing shards back and forth.

const putMethod = "/etcdserverpb.KV/Put"

// grantLease grants a lease of ttl seconds that the test revokes.
func grantLease(t *testing.T, c *clientv3.Client, ttl int64) clientv3.LeaseID {
	t.Helper()
	resp, err := c.Grant(t.Context(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 5*time.Second)
		defer cancel()
		c.Revoke(ctx, resp.ID)
	})
	return resp.ID
}

// A member key of weight 1<<60, written by hand beside a member of weight
// 1 (the reproduction: shares overflowed and every member
// panicked), and keys of every other bad kind: the members keep running,
// InspectShards and WatchShards report the heavy member at MaxShardWeight
// and ignore the rest, the shares add up to n; once the key goes, the
// real members balance.
func TestShardsForeignMemberKeys(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	const n = 16 // 16<<60 overflows int64
	log := newShardLog()
	_, erra := goShards(t, c, group, n, log.fn("a"), concurrency.WithShardTTL(5))
	waitBalanced(t, c, group, n, 1, 10*time.Second)

	var mu sync.Mutex
	var watched []*concurrency.ShardGroup
	wctx, wcancel := context.WithCancel(t.Context())
	werr := async(t, func() error {
		return concurrency.WatchShards(wctx, c, group, n, func(g *concurrency.ShardGroup) {
			mu.Lock()
			watched = append(watched, g)
			mu.Unlock()
		})
	})
	defer func() {
		wcancel()
		if err := <-werr; !errors.Is(err, context.Canceled) {
			t.Errorf("WatchShards: %v", err)
		}
	}()

	lease := grantLease(t, c, 30)
	heavy := fmt.Sprintf("%s/members/%x", group, int64(lease))
	bad := map[string]string{
		heavy:                   "shards=16 weight=1152921504606846976",
		heavy + "-negative":     "shards=16 weight=-3",
		heavy + "-zero":         "shards=16 weight=0",
		heavy + "-overflow":     "shards=16 weight=99999999999999999999999",
		heavy + "-count":        "shards=1125899906842624 weight=1",
		heavy + "-count-neg":    "shards=-4 weight=1",
		heavy + "-count-zero":   "shards=0 weight=1",
		heavy + "-garbage":      "garbage\x00\xff",
		heavy + "-empty":        "",
		heavy + "-half":         "shards=16",
		heavy + "-huge-value-1": string(make([]byte, 64<<10)),
	}
	for k, v := range bad {
		if _, err := c.Put(t.Context(), k, v, clientv3.WithLease(lease)); err != nil {
			t.Fatal(err)
		}
	}
	_, errb := goShards(t, c, group, n, log.fn("b"), concurrency.WithShardTTL(5))
	var g *concurrency.ShardGroup
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		g = inspectShards(t, c, group, n)
		return len(g.Members) == 3
	}, "want a, b and the heavy member: %+v", g)
	sum := 0
	for _, m := range g.Members {
		sum += m.Share
		if m.Lease == lease && m.Weight != concurrency.MaxShardWeight {
			t.Errorf("heavy member's weight %d, want MaxShardWeight", m.Weight)
		}
	}
	if sum != n {
		t.Errorf("shares add up to %d, want %d: %+v", sum, n, g.Members)
	}
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(watched) > 0 && len(watched[len(watched)-1].Members) == 3
	}, "WatchShards did not report the three members")

	// The heavy key goes: a and b share the shards.
	if _, err := c.Delete(t.Context(), heavy); err != nil {
		t.Fatal(err)
	}
	waitBalanced(t, c, group, n, 2, 15*time.Second)
	for name, errc := range map[string]<-chan error{"a": erra, "b": errb} {
		select {
		case err := <-errc:
			t.Errorf("member %s returned: %v", name, err)
		default:
		}
	}
	log.check(t)
}

// Bounds are checked before anything is written: a count or weight out
// of range is an error (not a panic in makeslice, as 1<<50 shards was).
func TestShardsLimits(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	fn := func(context.Context, concurrency.Shard) error { return nil }
	watchFn := func(*concurrency.ShardGroup) {}
	for _, tc := range []struct {
		name string
		err  error
		call func() error
	}{
		{"Shards 1<<50", concurrency.ErrInvalidShardCount, func() error { return concurrency.Shards(t.Context(), c, group, 1<<50, fn) }},
		{"Shards max+1", concurrency.ErrInvalidShardCount, func() error {
			return concurrency.Shards(t.Context(), c, group, concurrency.MaxShardCount+1, fn)
		}},
		{"InspectShards 1<<50", concurrency.ErrInvalidShardCount, func() error {
			_, err := concurrency.InspectShards(t.Context(), c, group, 1<<50)
			return err
		}},
		{"WatchShards 1<<50", concurrency.ErrInvalidShardCount, func() error {
			return concurrency.WatchShards(t.Context(), c, group, 1<<50, watchFn)
		}},
		{"weight 1<<60", concurrency.ErrInvalidShardWeight, func() error {
			return concurrency.Shards(t.Context(), c, group, 4, fn, concurrency.WithShardWeight(1<<60))
		}},
		{"weight max+1", concurrency.ErrInvalidShardWeight, func() error {
			return concurrency.Shards(t.Context(), c, group, 4, fn, concurrency.WithShardWeight(concurrency.MaxShardWeight+1))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, tc.err) {
				t.Errorf("got %v, want %v", err, tc.err)
			}
		})
	}
	if kvs := etcdtest.Keys(t, c, group); len(kvs) != 0 {
		t.Errorf("%d keys written", len(kvs))
	}
	// The maximums themselves are accepted.
	if _, err := concurrency.InspectShards(t.Context(), c, group, concurrency.MaxShardCount); err != nil {
		t.Errorf("InspectShards(MaxShardCount): %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	st := &concurrency.ShardStatus{}
	errc := async(t, func() error {
		return concurrency.Shards(ctx, c, group, 2, fn, concurrency.WithShardWeight(concurrency.MaxShardWeight), concurrency.WithShardStatus(st))
	})
	etcdtest.Eventually(t, 10*time.Second, func() bool { return len(st.Owned()) == 2 }, "MaxShardWeight member owns %v", st.Owned())
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Shards: %v", err)
	}
}

// Two members of different shard counts (4 and 8) that join at the same
// moment, their member-key puts slowed by 1.5 s so that each checks the
// group before the other's key is there (the reproduction: they
// took shards 0..3 from each other for ever). The younger by create
// revision sees the older after its own put and leaves with
// ErrInvalidShardCount having started nothing; the older owns every shard,
// each started once, and the group's keys then stay still.
func TestShardsCountsJoinAtOnce(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	slow := func(method string, _ int) time.Duration {
		if method == putMethod {
			return 1500 * time.Millisecond
		}
		return 0
	}
	type member struct {
		name string
		n    int
		log  *shardLog
		errc <-chan error
		puts func() int
	}
	var ms []*member
	for _, m := range []struct {
		name string
		n    int
	}{{"four", 4}, {"eight", 8}} {
		mc, sw := slowClient(t)
		sw.SetFunc(slow)
		log := newShardLog()
		_, errc := goShards(t, mc, group, m.n, log.fn(m.name), concurrency.WithShardTTL(5))
		ms = append(ms, &member{name: m.name, n: m.n, log: log, errc: errc, puts: func() int { return sw.Count(putMethod) }})
	}
	var loser, winner *member
	select {
	case err := <-ms[0].errc:
		loser, winner = ms[0], ms[1]
		if !errors.Is(err, concurrency.ErrInvalidShardCount) {
			t.Fatalf("%s: %v, want ErrInvalidShardCount", loser.name, err)
		}
	case err := <-ms[1].errc:
		loser, winner = ms[1], ms[0]
		if !errors.Is(err, concurrency.ErrInvalidShardCount) {
			t.Fatalf("%s: %v, want ErrInvalidShardCount", loser.name, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("neither member left: the counts did not settle")
	}
	if loser.puts() == 0 {
		t.Errorf("%s never wrote its member key: the joins were not simultaneous", loser.name)
	}
	if s := loser.log.startsOf(loser.name); s != 0 {
		t.Errorf("%s started %d functions before leaving", loser.name, s)
	}
	waitBalanced(t, c, group, winner.n, 1, 15*time.Second)

	// Settled: nothing under the group changes for 2 s.
	wctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var events []string
	for wr := range c.Watch(wctx, group+"/", clientv3.WithPrefix()) {
		for _, ev := range wr.Events {
			events = append(events, fmt.Sprintf("%s %s", ev.Type, strings.TrimPrefix(string(ev.Kv.Key), group)))
		}
	}
	if len(events) != 0 {
		t.Errorf("%d events under the group after it settled: %v", len(events), events)
	}
	if s := winner.log.startsOf(winner.name); s != winner.n {
		t.Errorf("%s started %d functions for %d shards: shards moved", winner.name, s, winner.n)
	}
	if kvs := etcdtest.Keys(t, c, group+"/members"); len(kvs) != 1 {
		t.Errorf("%d member keys, want the winner's only", len(kvs))
	}
	winner.log.check(t)
}

// A member of another shard count that holds a shard (here written by
// hand, as a member of an older version, without the check after its
// put, could): a member below its share queues behind it and waits, but
// never asks it to yield (the second half of the livelock: both
// took shards from each other by yield requests).
func TestShardsNoYieldToOtherCount(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	const n = 4
	log := newShardLog()
	_, errc := goShards(t, c, group, n, log.fn("a"), concurrency.WithShardTTL(5))
	waitBalanced(t, c, group, n, 1, 10*time.Second)

	// A younger member of 8 shards, queued for shard 0, takes it from a
	// by a yield request.
	lease := grantLease(t, c, 30)
	if _, err := c.Put(t.Context(), fmt.Sprintf("%s/members/%x", group, int64(lease)), "shards=8 weight=1", clientv3.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
	other := fmt.Sprintf("%s/shard/0/%x", group, int64(lease))
	if _, err := c.Put(t.Context(), other, "", clientv3.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
	if _, err := concurrency.RequestYield(t.Context(), c, group+"/shard/0"); err != nil {
		t.Fatal(err)
	}
	// a queues behind it again (its share is 4: the other is no member
	// of its count) ...
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		kvs := etcdtest.Keys(t, c, group+"/shard/0")
		return len(kvs) == 2 && string(kvs[0].Key) == other
	}, "a did not queue behind the other count's member on shard 0")
	// ... and, over 50 of its plans' least gap, never asks it to yield.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		resp, err := c.Get(t.Context(), concurrency.YieldPrefix+other)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) > 0 {
			t.Fatalf("a member asked a member of another count to yield shard 0")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Once the other goes, a owns shard 0 again.
	if _, err := c.Revoke(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	waitBalanced(t, c, group, n, 1, 10*time.Second)
	select {
	case err := <-errc:
		t.Errorf("a returned: %v", err)
	default:
	}
	log.check(t)
}
