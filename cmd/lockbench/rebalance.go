package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/lockbench"
	concurrencyprom "github.com/seed-a9d410c6/concurrency/prometheus"
)

// The rebalance group (issue 41): concurrency.Shards with n shards over m
// members, one client each. m-1 members start together and spread the
// shards; then an m-th member joins, and then the oldest leaves by its
// ctx. For the start, the join and the leave: how long until the newcomer owns its
// share (the join) and until every member owns exactly its share; how
// many shards started on a new owner (moves); the shard-seconds during
// which no member's function ran for a shard (from the old owner's loss
// or yield, as its ShardStatus says, to the new owner's grant), sampled
// every 5 ms; and the requests the members' clients sent meanwhile
// (unary RPCs and watch-stream requests, by gRPC client interceptors).
// Beside the sampled shard-seconds, what the members' own metric says
// (WithShardMetrics with a concurrency.ShardMetricsRecorder): the
// unowned shard-seconds of the spans each member saw end, the largest
// over the members live after the event.

// rebalanceTTL is the members' session TTL: it matters only after a crash,
// which the group does not measure.
const rebalanceTTL = 10

// rebalanceRow is one measured event (a join or a leave) of one (n, m).
type rebalanceRow struct {
	n, m, share      int    // shards, members after the event, the newcomer's share (join)
	event            string // "start", "join" or "leave"
	toShare, toAll   time.Duration
	moves            int64
	unowned          float64 // shard-seconds
	seen             float64 // shard-seconds by the members' metric, max over members
	unary, watchReqs int64
	err              string
}

// shardsMember is one member the group runs.
type shardsMember struct {
	st     concurrency.ShardStatus
	seen   unownedSeen
	cancel context.CancelFunc
	done   chan error
}

// runRebalance runs the group for every shard count and member count of
// -rebalance-shards and -rebalance-members, and writes its section.
func runRebalance(ctx context.Context, cfg config, root string, w io.Writer) error {
	load := loadavg()
	start := time.Now()
	var rows []rebalanceRow
	for _, n := range cfg.rebalanceShards {
		for _, m := range cfg.rebalanceMembers {
			progress("rebalance: %d shards, %d members joining then one leaving", n, m)
			rs, err := rebalanceOnce(ctx, cfg, fmt.Sprintf("%s/rebalance/%d-%d", root, n, m), n, m)
			if err != nil {
				return err
			}
			rows = append(rows, rs...)
		}
	}
	fmt.Fprintf(w, "\n## Shards: rebalancing on a join and a leave\n\n")
	fmt.Fprintf(w, "concurrency.Shards, n shards over m members, each member on a client of its own (TTL %d s). "+
		"m-1 members start together and spread the shards (start: the moves count every function started, so more than n means shards moved while the members learned of one another); then an m-th joins (it asks the owners above their share to yield, as many shards as it lacks), and then the oldest member leaves by its ctx. "+
		"to share: until the newcomer owns its share (join); to balance: until every member owns exactly its share and no shard is without an owner; "+
		"moves: functions started on a new owner; unowned: shard-seconds in which no member's function ran for a shard (from the old owner's loss or yield to the new owner's grant, sampled every 5 ms); "+
		"members' metric: the unowned shard-seconds that the members' own metric recorded (WithShardMetrics, spans in which a member saw a shard without a member owner in the group's keys; a handover by yield is not such a span), the largest over the members live after the event; "+
		"requests: unary RPCs and watch-stream requests of all members' clients from the event to balance. "+
		"The machine's load (1, 5, 15 min) was %s at the group's start and %s at its end; it took %v.\n\n",
		rebalanceTTL, load, loadavg(), time.Since(start).Round(time.Second))
	t := newTable("shards", "members", "event", "newcomer's share", "to share", "to balance", "moves", "unowned (shard·s)", "members' metric (shard·s)", "unary RPCs", "watch requests", "error")
	for _, r := range rows {
		share := "-"
		if r.event == "join" {
			share = fmt.Sprint(r.share)
		}
		t.add(fmt.Sprint(r.n), fmt.Sprint(r.m), r.event, share, dur(r.toShare), dur(r.toAll), fmt.Sprint(r.moves),
			fmt.Sprintf("%.3f", r.unowned), fmt.Sprintf("%.3f", r.seen), fmt.Sprint(r.unary), fmt.Sprint(r.watchReqs), r.err)
	}
	t.write(w)
	return nil
}

// rebalanceOnce measures a join and a leave of n shards over m members
// under pfx.
func rebalanceOnce(ctx context.Context, cfg config, pfx string, n, m int) (rows []rebalanceRow, err error) {
	var counter lockbench.Counter
	cs, closeClients, err := newClients(cfg.endpoints, m, counter.Option)
	if err != nil {
		return nil, err
	}
	defer closeClients()
	var starts atomic.Int64
	fn := func(ctx context.Context, sh concurrency.Shard) error {
		starts.Add(1)
		<-ctx.Done()
		return nil
	}
	var mu sync.Mutex // guards members
	var members []*shardsMember
	join := func(i int) *shardsMember {
		mctx, cancel := context.WithCancel(ctx)
		sm := &shardsMember{cancel: cancel, done: make(chan error, 1)}
		go func() {
			sm.done <- concurrency.Shards(mctx, cs[i], pfx, n, fn, concurrency.WithShardTTL(rebalanceTTL), concurrency.WithShardStatus(&sm.st),
				concurrency.WithShardMetrics(&sm.seen))
		}()
		mu.Lock()
		members = append(members, sm)
		mu.Unlock()
		return sm
	}
	leave := func(sm *shardsMember) error {
		sm.cancel()
		if err := <-sm.done; !errors.Is(err, context.Canceled) {
			return fmt.Errorf("rebalance: a member returned %v", err)
		}
		return nil
	}
	defer func() {
		mu.Lock()
		left := members
		members = nil
		mu.Unlock()
		for _, sm := range left {
			err = errors.Join(err, leave(sm))
		}
		err = errors.Join(err, checkEmpty(ctx, cs[0], pfx))
	}()
	live := func() []*shardsMember {
		mu.Lock()
		defer mu.Unlock()
		return append([]*shardsMember(nil), members...)
	}
	// owned counts the shards some live member's function runs for, and
	// reports whether each member owns n/len or n/len+1 of them, as the
	// plan's shares are for equal weights.
	owned := func() (int, bool) {
		ms := live()
		total, even := 0, true
		for _, sm := range ms {
			k := len(sm.st.Owned())
			total += k
			if k != n/len(ms) && k != n/len(ms)+1 {
				even = false
			}
		}
		return total, even && total == n
	}
	timeout := 2*time.Minute + time.Duration(n*m)*time.Millisecond
	// measure runs event and samples until balance.
	measure := func(event string, m int, do func() *shardsMember) rebalanceRow {
		r := rebalanceRow{n: n, m: m, event: event}
		before, startsBefore := counter.Snapshot(), starts.Load()
		seenBefore := map[*shardsMember]time.Duration{}
		for _, sm := range live() {
			_, seenBefore[sm] = sm.seen.read()
		}
		t0 := time.Now()
		newcomer := do()
		share := n / m // the newest member is last among equals
		r.share = share
		var unowned time.Duration
		last := t0
		err := waitFor(ctx, timeout, func() bool {
			now := time.Now()
			k, ok := owned()
			unowned += time.Duration(n-k) * now.Sub(last)
			last = now
			if newcomer != nil && r.toShare == 0 && len(newcomer.st.Owned()) >= share {
				r.toShare = time.Since(t0)
			}
			return ok
		})
		r.toAll = time.Since(t0)
		if err != nil {
			r.err = err.Error()
		}
		d := counter.Snapshot().Sub(before)
		r.unary, r.watchReqs = d.Unary, d.WatchReqs
		r.moves = starts.Load() - startsBefore
		r.unowned = unowned.Seconds()
		// The members see the last owner after the test's poll may have:
		// wait (up to 5 s) until none sees a shard unowned.
		waitFor(ctx, 5*time.Second, func() bool {
			for _, sm := range live() {
				if open, _ := sm.seen.read(); open > 0 {
					return false
				}
			}
			return true
		})
		for _, sm := range live() {
			_, sum := sm.seen.read()
			r.seen = max(r.seen, (sum - seenBefore[sm]).Seconds())
		}
		return r
	}
	if m > 1 {
		r := measure("start", m-1, func() *shardsMember {
			for i := 0; i < m-1; i++ {
				join(i)
			}
			return nil
		})
		rows = append(rows, r)
		if r.err != "" {
			return rows, nil
		}
	}
	rows = append(rows, measure("join", m, func() *shardsMember { return join(m - 1) }))
	if m > 1 {
		var oldest *shardsMember
		r := measure("leave", m-1, func() *shardsMember {
			mu.Lock()
			oldest = members[0]
			members = members[1:]
			mu.Unlock()
			oldest.cancel() // sampled while it hands over; its return is checked below
			return nil
		})
		if err := leave(oldest); err != nil {
			r.err = err.Error()
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// waitFor polls cond every 5 ms until it holds, ctx ends or d passes.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// unownedSeen is a member's concurrency.ShardMetricsRecorder: how many
// shards it sees unowned now, and the unowned shard-seconds of the spans
// it saw end. Its lock metrics are a nil *concurrencyprom.Metrics, which
// records nothing.
type unownedSeen struct {
	*concurrencyprom.Metrics
	mu   sync.Mutex // guards open, sum
	open int
	sum  time.Duration
}

func (u *unownedSeen) ShardUnownedStarted(string, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.open++
}

func (u *unownedSeen) ShardUnownedEnded(_ string, _ int, d time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.open--
	u.sum += d
}

func (u *unownedSeen) read() (open int, sum time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.open, u.sum
}
