package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// shardLog records every call of the Shards functions of a test: who runs
// which shard, with which token, and how each call's context ended. It
// checks, as calls start, that a shard's tokens strictly increase and,
// unless overlapOK, that no two calls for one shard run at once in the
// test (all members run in this process).
type shardLog struct {
	mu        sync.Mutex
	overlapOK bool
	running   map[int]string // shard -> member whose fn runs
	lastTok   map[int]int64
	starts    map[string]int     // member -> calls started
	causes    map[string][]error // member -> causes of the calls that ended
	bad       []string
}

func newShardLog() *shardLog {
	return &shardLog{running: map[int]string{}, lastTok: map[int]int64{}, starts: map[string]int{}, causes: map[string][]error{}}
}

// fn is the function of member name: it runs until its context ends.
func (l *shardLog) fn(name string) func(context.Context, concurrency.Shard) error {
	return func(ctx context.Context, sh concurrency.Shard) error {
		id := sh.ID()
		l.mu.Lock()
		if cur, ok := l.running[id]; ok && !l.overlapOK {
			l.bad = append(l.bad, fmt.Sprintf("shard %d started on %s while %s runs it", id, name, cur))
		}
		if sh.Token() <= l.lastTok[id] {
			l.bad = append(l.bad, fmt.Sprintf("shard %d: token %d after %d", id, sh.Token(), l.lastTok[id]))
		}
		l.running[id], l.lastTok[id] = name, sh.Token()
		l.starts[name]++
		l.mu.Unlock()
		<-ctx.Done()
		l.mu.Lock()
		if l.running[id] == name {
			delete(l.running, id)
		}
		l.causes[name] = append(l.causes[name], context.Cause(ctx))
		l.mu.Unlock()
		return ctx.Err()
	}
}

// check fails the test with what went wrong.
func (l *shardLog) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.bad {
		t.Error(b)
	}
}

func (l *shardLog) startsOf(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.starts[name]
}

func (l *shardLog) causesOf(name string) []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.causes[name])
}

// goShards runs a member in a goroutine until the returned cancel is
// called or the test ends, and returns Shards' error on a channel.
func goShards(t *testing.T, c *clientv3.Client, group string, n int, fn func(context.Context, concurrency.Shard) error, opts ...concurrency.ShardOption) (context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	errc := async(t, func() error { return concurrency.Shards(ctx, c, group, n, fn, opts...) })
	t.Cleanup(cancel)
	return cancel, errc
}

// inspectShards reads the group or fails the test.
func inspectShards(t *testing.T, c *clientv3.Client, group string, n int) *concurrency.ShardGroup {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	g, err := concurrency.InspectShards(ctx, c, group, n)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// waitBalanced polls the group until it has members live members, every
// shard is owned by one of them, and each owns exactly its share (the
// plan's target, within one of n times its weight over the total); it
// fails the test after d, and
// returns the group and how long it took.
func waitBalanced(t *testing.T, c *clientv3.Client, group string, n, members int, d time.Duration) (*concurrency.ShardGroup, time.Duration) {
	t.Helper()
	start := time.Now()
	var g *concurrency.ShardGroup
	etcdtest.Eventually(t, d, func() bool {
		g = inspectShards(t, c, group, n)
		if len(g.Members) != members {
			return false
		}
		for _, sh := range g.Shards {
			if !sh.Member || sh.Waiters != 0 {
				return false
			}
		}
		for _, m := range g.Members {
			if len(m.Owned) != m.Share {
				return false
			}
		}
		return true
	}, "group %s not balanced over %d members: %+v", group, members, g)
	return g, time.Since(start)
}

// leaseOf returns the lease of the member whose status is st, and the
// shards it owns, once the group's read and st agree on them (st follows
// etcd once the functions have started).
func leaseOf(t *testing.T, c *clientv3.Client, group string, n int, st *concurrency.ShardStatus) (clientv3.LeaseID, []int) {
	t.Helper()
	var lease clientv3.LeaseID
	var owned []int
	etcdtest.Eventually(t, 5*time.Second, func() bool {
		for _, m := range inspectShards(t, c, group, n).Members {
			if len(m.Owned) > 0 && slices.Equal(m.Owned, st.Owned()) {
				lease, owned = m.Lease, m.Owned
				return true
			}
		}
		return false
	}, "no member owns %v", st.Owned())
	return lease, owned
}

// A member alone owns every shard; a second member that joins gets its
// share by asking the first to yield: exactly the shards needed move,
// each once, with cause ErrYieldRequested, and no shard runs twice at
// once. Then the second leaves by its ctx, and the first owns every shard
// again within a bound of about one commit per shard.
func TestShardsJoinLeave(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	const n = 8
	log := newShardLog()
	var stA, stB concurrency.ShardStatus
	_, errA := goShards(t, c, group, n, log.fn("a"), concurrency.WithShardTTL(5), concurrency.WithShardStatus(&stA))
	g, took := waitBalanced(t, c, group, n, 1, 10*time.Second)
	t.Logf("one member owns all %d shards after %v", n, took)
	etcdtest.Eventually(t, 5*time.Second, func() bool { return len(stA.Owned()) == n }, "a's status owns %v", stA.Owned())
	leaseA := g.Members[0].Lease

	cancelB, errB := goShards(t, c, group, n, log.fn("b"), concurrency.WithShardTTL(5), concurrency.WithShardStatus(&stB))
	g, took = waitBalanced(t, c, group, n, 2, 10*time.Second)
	t.Logf("the joining member reached its share after %v", took)
	// Bound: a join takes a few plans and commits, not a session TTL.
	if took > 5*time.Second {
		t.Errorf("join took %v, more than the 5 s TTL", took)
	}
	for _, m := range g.Members {
		if m.Share != n/2 {
			t.Errorf("member %x share %d, want %d", m.Lease, m.Share, n/2)
		}
	}
	etcdtest.Eventually(t, 5*time.Second, func() bool {
		return len(stA.Owned()) == n/2 && len(stB.Owned()) == n/2
	}, "statuses: a %v b %v", stA.Owned(), stB.Owned())
	// No more moves than needed: b started exactly its share, and a
	// gave up exactly that many, each asked to yield. A status counts a
	// shard as owned just before its function is called, so b's last
	// start may come just after.
	etcdtest.Eventually(t, 5*time.Second, func() bool { return log.startsOf("b") >= n/2 },
		"b started %d shards, want %d", log.startsOf("b"), n/2)
	if got := log.startsOf("b"); got != n/2 {
		t.Errorf("b started %d shards, want %d", got, n/2)
	}
	causes := log.causesOf("a")
	if len(causes) != n/2 {
		t.Errorf("a's fns ended %d times, want %d: %v", len(causes), n/2, causes)
	}
	for _, err := range causes {
		if !errors.Is(err, concurrency.ErrYieldRequested) {
			t.Errorf("a's fn ended with cause %v, want ErrYieldRequested", err)
		}
	}
	if g.Members[0].Lease != leaseA {
		t.Errorf("the first member is %x, want a (%x)", g.Members[0].Lease, leaseA)
	}

	// b leaves by its ctx: its shards go back to a.
	left := time.Now()
	cancelB()
	select {
	case err := <-errB:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("b's Shards returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's Shards did not return within 10 s of its ctx ending")
	}
	_, took = waitBalanced(t, c, group, n, 1, 10*time.Second)
	took = time.Since(left)
	t.Logf("a owns every shard %v after b's ctx ended", took)
	// Bound: b deletes its member key and releases each shard in one
	// commit each, in parallel; a plans on the events. A second covers
	// the plans on a loaded machine; the TTL (5 s) is what a crash costs.
	if took > 2*time.Second {
		t.Errorf("handover on leave took %v, want under 2 s", took)
	}
	for _, err := range log.causesOf("b") {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("b's fn ended with cause %v, want context.Canceled", err)
		}
	}
	log.check(t)
	select {
	case err := <-errA:
		t.Fatalf("a's Shards returned early: %v", err)
	default:
	}
}

// A member whose lease is revoked from outside (a crash, as far as etcd
// can tell) loses its shards, whose fns end with a cause matching
// ErrSessionExpired or ErrLockLost; the others own them within a session
// TTL, and the member joins again on a new session and gets its share
// back.
func TestShardsCrash(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	const n, ttl = 12, 5
	log := newShardLog()
	log.overlapOK = true // after a revoke, the lost fn may still run while another starts
	sts := []*concurrency.ShardStatus{{}, {}, {}}
	for i, name := range []string{"a", "b", "c"} {
		goShards(t, c, group, n, log.fn(name), concurrency.WithShardTTL(ttl), concurrency.WithShardStatus(sts[i]))
	}
	_, took := waitBalanced(t, c, group, n, 3, 20*time.Second)
	t.Logf("3 members balanced after %v", took)
	leaseB, ownedB := leaseOf(t, c, group, n, sts[1])
	before := len(log.causesOf("b")) // b's fns that yielded while the group spread

	crashed := time.Now()
	if _, err := c.Revoke(t.Context(), leaseB); err != nil {
		t.Fatal(err)
	}
	// Every shard of b is owned by another live member within the TTL.
	var reowned time.Duration
	etcdtest.Eventually(t, 2*ttl*time.Second, func() bool {
		g := inspectShards(t, c, group, n)
		for _, id := range ownedB {
			if sh := g.Shards[id]; !sh.Member || sh.Lease == leaseB {
				return false
			}
		}
		reowned = time.Since(crashed)
		return true
	}, "b's shards %v not re-owned", ownedB)
	t.Logf("b's %d shards re-owned %v after its lease was revoked", len(ownedB), reowned)
	if reowned > ttl*time.Second {
		t.Errorf("re-owning took %v, more than the TTL (%d s)", reowned, ttl)
	}
	// b joins again and the group balances over 3.
	_, took = waitBalanced(t, c, group, n, 3, 4*ttl*time.Second)
	t.Logf("balanced again over 3 members %v later", took)
	lost := 0
	for _, err := range log.causesOf("b")[before:] {
		if errors.Is(err, concurrency.ErrSessionExpired) || errors.Is(err, concurrency.ErrLockLost) {
			lost++
		} else {
			t.Errorf("b's fn ended with cause %v, want ErrSessionExpired or ErrLockLost", err)
		}
	}
	if lost < len(ownedB) {
		t.Errorf("%d of b's %d fns ended by the loss", lost, len(ownedB))
	}
	log.check(t)
}

// Weighted members: once membership is stable, each owns exactly its
// plan's share, which is within one of its fair share by weight.
func TestShardsWeights(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	const n = 17
	log := newShardLog()
	weights := map[string]int{"a": 1, "b": 3, "c": 2}
	sts := map[string]*concurrency.ShardStatus{}
	for _, name := range []string{"a", "b", "c"} {
		sts[name] = &concurrency.ShardStatus{}
		goShards(t, c, group, n, log.fn(name), concurrency.WithShardTTL(5), concurrency.WithShardWeight(weights[name]), concurrency.WithShardStatus(sts[name]))
	}
	g, took := waitBalanced(t, c, group, n, 3, 20*time.Second)
	t.Logf("balanced after %v", took)
	for _, m := range g.Members {
		exact := float64(n*m.Weight) / 6
		if float64(len(m.Owned)) < exact-1 || float64(len(m.Owned)) > exact+1 {
			t.Errorf("member %x of weight %d owns %d, fair share %.2f", m.Lease, m.Weight, len(m.Owned), exact)
		}
	}
	// The statuses follow etcd: each member's says what etcd says it owns
	// once its functions have started.
	etcdtest.Eventually(t, 5*time.Second, func() bool {
		total := 0
		for _, st := range sts {
			total += len(st.Owned())
		}
		return total == n
	}, "statuses do not add up to %d shards", n)
	for name, st := range sts {
		t.Logf("%s (weight %d) owns %v", name, weights[name], st.Owned())
	}
	log.check(t)
}

// A function that ignores its context keeps running after its shard was
// handed over: ShardStatus.Check reports it with ErrLeaderStuck, as
// LeaderStatus.Check reports a stuck term, and is nil again once it
// returns. The shard itself moves all the same (the Mutex's rules).
func TestShardsStuckFn(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	const n = 2
	release := make(chan struct{})
	var once sync.Once
	unstick := func() { once.Do(func() { close(release) }) }
	defer unstick() // before the cleanups end the members' ctxs, so that Shards can return
	var stA concurrency.ShardStatus
	stuck := func(ctx context.Context, sh concurrency.Shard) error {
		<-release // ignores ctx
		return nil
	}
	goShards(t, c, group, n, stuck, concurrency.WithShardTTL(5), concurrency.WithShardStatus(&stA))
	waitBalanced(t, c, group, n, 1, 10*time.Second)
	if err := stA.Check(time.Second); err != nil {
		t.Fatalf("Check while owning: %v", err)
	}
	log := newShardLog()
	goShards(t, c, group, n, log.fn("b"), concurrency.WithShardTTL(5))
	// b asks a to yield one shard; a's fn does not return, so a cannot
	// release it: the shard stays a's in etcd, and Check says so.
	const tolerance = 200 * time.Millisecond
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		return errors.Is(stA.Check(tolerance), concurrency.ErrLeaderStuck)
	}, "Check never reported the stuck fn: %v", stA.Check(tolerance))
	t.Logf("Check: %v", stA.Check(tolerance))
	if len(stA.Owned()) != n-1 {
		t.Errorf("a's status owns %v, want %d shard", stA.Owned(), n-1)
	}
	unstick()
	waitBalanced(t, c, group, n, 2, 10*time.Second)
	if err := stA.Check(tolerance); err != nil {
		t.Errorf("Check after the fn returned: %v", err)
	}
	log.check(t)
}

// Bad input is refused before anything is written.
func TestShardsInvalid(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	fn := func(context.Context, concurrency.Shard) error { return nil }
	for _, tc := range []struct {
		name string
		err  error
		call func() error
	}{
		{"nil client", concurrency.ErrNilClient, func() error { return concurrency.Shards(t.Context(), nil, group, 1, fn) }},
		{"empty group", concurrency.ErrInvalidPrefix, func() error { return concurrency.Shards(t.Context(), c, "", 1, fn) }},
		{"no shards", concurrency.ErrInvalidShardCount, func() error { return concurrency.Shards(t.Context(), c, group, 0, fn) }},
		{"nil fn", concurrency.ErrNilFunc, func() error { return concurrency.Shards(t.Context(), c, group, 1, nil) }},
		{"weight", concurrency.ErrInvalidShardWeight, func() error {
			return concurrency.Shards(t.Context(), c, group, 1, fn, concurrency.WithShardWeight(0))
		}},
		{"ttl", concurrency.ErrInvalidTTL, func() error { return concurrency.Shards(t.Context(), c, group, 1, fn, concurrency.WithShardTTL(0)) }},
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
	// A member with another shard count is refused when it joins.
	cancel, _ := goShards(t, c, group, 4, func(ctx context.Context, sh concurrency.Shard) error { <-ctx.Done(); return nil }, concurrency.WithShardTTL(5))
	defer cancel()
	waitBalanced(t, c, group, 4, 1, 10*time.Second)
	if err := concurrency.Shards(t.Context(), c, group, 5, fn, concurrency.WithShardTTL(5)); !errors.Is(err, concurrency.ErrInvalidShardCount) {
		t.Errorf("a member with another count: %v, want ErrInvalidShardCount", err)
	}
}

// A member cut off from etcd (its only endpoint blackholed) keeps nothing:
// its session reaches its conservative deadline and cancels every fn
// (ErrSessionExpired) before etcd expires its lease, and only then do the
// others own its shards, within about a TTL of the cut; no shard runs on
// two members at once. Once the cut heals, it joins again and gets its
// share back by yield.
func TestShardsPartition(t *testing.T) {
	clus := bridgeCluster(t)
	group := etcdtest.Begin(t)
	ca := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
	cb := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
	const n, ttl = 6, 4
	log := newShardLog()
	var stA, stB concurrency.ShardStatus
	goShards(t, ca, group, n, log.fn("a"), concurrency.WithShardTTL(ttl), concurrency.WithShardStatus(&stA))
	waitBalanced(t, cb, group, n, 1, 10*time.Second)
	goShards(t, cb, group, n, log.fn("b"), concurrency.WithShardTTL(ttl), concurrency.WithShardStatus(&stB))
	waitBalanced(t, cb, group, n, 2, 10*time.Second)
	etcdtest.Eventually(t, 5*time.Second, func() bool { return len(stA.Owned())+len(stB.Owned()) == n }, "statuses: a %v b %v", stA.Owned(), stB.Owned())
	ownedA := stA.Owned()
	before := len(log.causesOf("a")) // a's fns that yielded to b

	cut := time.Now()
	etcdtest.Cut(t, clus.Members[0])
	defer clus.Members[0].Bridge().Unblackhole()
	var took time.Duration
	etcdtest.Eventually(t, 3*ttl*time.Second, func() bool {
		if len(stB.Owned()) != n {
			return false
		}
		took = time.Since(cut)
		return true
	}, "b owns %v after a was cut off", stB.Owned())
	t.Logf("b owns all %d shards %v after a was cut off (TTL %d s)", n, took, ttl)
	// etcd expires a's lease a TTL after its last renewal, which was at
	// most a third of a TTL before the cut; then b plans and locks.
	if took > 2*ttl*time.Second {
		t.Errorf("b took %v to own a's shards, over two TTLs", took)
	}
	if len(stA.Owned()) != 0 {
		t.Errorf("a still says it owns %v", stA.Owned())
	}
	ended := 0
	for _, err := range log.causesOf("a")[before:] {
		if !errors.Is(err, concurrency.ErrSessionExpired) {
			t.Errorf("a's fn ended with cause %v, want ErrSessionExpired", err)
		}
		ended++
	}
	if ended != len(ownedA) {
		t.Errorf("%d of a's %d fns ended", ended, len(ownedA))
	}

	clus.Members[0].Bridge().Unblackhole()
	_, took = waitBalanced(t, cb, group, n, 2, 6*ttl*time.Second)
	t.Logf("balanced again %v after the cut healed", took)
	log.check(t)
}

// A member's metrics (WithShardMetrics, concurrencyprom) count its shards
// as mutex holds: the shards it owns, and those it handed over by yield
// when a second member joined.
func TestShardsMetrics(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	const n = 6
	metrics, reg := newMetrics(t)
	fn := func(ctx context.Context, sh concurrency.Shard) error { <-ctx.Done(); return nil }
	goShards(t, c, group, n, fn, concurrency.WithShardTTL(5), concurrency.WithShardMetrics(metrics))
	mutex := map[string]string{"kind": "mutex"}
	eventually(t, reg, "concurrency_lock_holders", mutex, func(v float64) bool { return v == n })
	goShards(t, c, group, n, fn, concurrency.WithShardTTL(5))
	waitBalanced(t, c, group, n, 2, 10*time.Second)
	eventually(t, reg, "concurrency_lock_holders", mutex, func(v float64) bool { return v == n/2 })
	expect(t, reg, "concurrency_lock_holds_ended_total", map[string]string{"kind": "mutex", "cause": "yielded"}, n/2)
	expect(t, reg, "concurrency_lock_acquisitions_total", mutex, n)
}

// A function that returns nil keeps its shard, idle, until it is handed
// over; one that returns an error while it owns its shard ends Shards,
// which releases every shard and returns the error.
func TestShardsFnReturns(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	const n = 4
	var st concurrency.ShardStatus
	idle := func(ctx context.Context, sh concurrency.Shard) error { return nil }
	goShards(t, c, group, n, idle, concurrency.WithShardTTL(5), concurrency.WithShardStatus(&st))
	waitBalanced(t, c, group, n, 1, 10*time.Second)
	etcdtest.Eventually(t, 5*time.Second, func() bool { return len(st.Owned()) == n }, "idle member owns %v", st.Owned())
	if err := st.Check(0); err != nil {
		t.Errorf("Check with idle shards: %v", err)
	}
	// Idle shards are handed over when asked, as running ones are.
	boom := errors.New("boom")
	failed := make(chan struct{})
	var once sync.Once
	fail := func(ctx context.Context, sh concurrency.Shard) error {
		once.Do(func() { close(failed) })
		return fmt.Errorf("shard %d: %w", sh.ID(), boom)
	}
	_, errB := goShards(t, c, group, n, fail, concurrency.WithShardTTL(5))
	select {
	case <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle member never handed a shard over")
	}
	select {
	case err := <-errB:
		if !errors.Is(err, boom) {
			t.Fatalf("Shards returned %v, want boom", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shards did not return after its function failed")
	}
	// The failed member left: the idle one owns every shard again.
	waitBalanced(t, c, group, n, 1, 10*time.Second)
}

// WithShardSession gives each of the member's sessions its options: a TTL,
// an owner record (InspectShards shows it) and a tracer provider, which
// records the spans of the shards' Mutexes (Shards had no tracer before
// it).
func TestShardsSessionOptions(t *testing.T) {
	group := etcdtest.Begin(t)
	c := sharedClient(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	o := concurrency.Owner{Host: "h", PID: 9, Label: "shard-session"}
	owned := make(chan concurrency.Shard, 1)
	cancel, errc := goShards(t, c, group, 1, func(ctx context.Context, sh concurrency.Shard) error {
		owned <- sh
		return nil // keep the shard, idle
	}, concurrency.WithShardSession(concurrency.WithTTL(7), concurrency.WithOwner(o), concurrency.WithTracerProvider(tp)))
	select {
	case <-owned:
	case err := <-errc:
		t.Fatalf("Shards returned %v before owning its shard", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the member did not own its shard within 30 s")
	}
	g := inspectShards(t, c, group, 1)
	if len(g.Members) != 1 || g.Members[0].Owner == nil || *g.Members[0].Owner != o {
		t.Fatalf("InspectShards = %+v, want one member owned by %+v", g.Members, o)
	}
	ttl, err := c.TimeToLive(t.Context(), g.Members[0].Lease)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != 7 {
		t.Errorf("the member's lease was granted a TTL of %d, want 7 (WithTTL)", ttl.GrantedTTL)
	}
	acquired := false
	for _, sp := range rec.Ended() {
		if sp.Name() == "concurrency.acquire" && spanAttrs(sp)[attr("lock")] == group+"/shard/0" {
			acquired = true
		}
	}
	if !acquired {
		t.Errorf("no concurrency.acquire span for %s/shard/0 among %d ended spans", group, len(rec.Ended()))
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Shards = %v, want context.Canceled", err)
	}

	// Options no session would take end Shards at once; it retried them
	// each term, for ever, before.
	check := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name string
		opt  concurrency.ShardOption
		want error
	}{
		{"WithShardSession(WithHealthCheck(0, 1, check))", concurrency.WithShardSession(concurrency.WithHealthCheck(0, 1, check)), concurrency.ErrInvalidHealthCheck},
		{"WithShardSession(WithMaxHold(time.Millisecond))", concurrency.WithShardSession(concurrency.WithMaxHold(time.Millisecond)), concurrency.ErrInvalidMaxHold},
		{"WithShardSession(WithLockDelay(-time.Second))", concurrency.WithShardSession(concurrency.WithLockDelay(-time.Second)), concurrency.ErrInvalidLockDelay},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := concurrency.Shards(ctx, c, group, 1, func(context.Context, concurrency.Shard) error {
			t.Errorf("Shards %s ran fn", tc.name)
			return nil
		}, tc.opt)
		cancel()
		if option, _, _ := strings.Cut(tc.name, "("); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), option) {
			t.Errorf("Shards %s = %v, want an error matching %v that names %s", tc.name, err, tc.want, option)
		}
	}
	etcdtest.WaitKeys(t, c, group, 0)
}
