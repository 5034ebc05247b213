package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// goLead runs Lead in a goroutine until the returned cancel is called or
// the test ends, and returns Lead's error on a channel.
func goLead(t *testing.T, c *clientv3.Client, pfx, val string, fn func(context.Context, *concurrency.Election) error, opts ...concurrency.LeadOption) (context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	errc := async(t, func() error { return concurrency.Lead(ctx, c, pfx, val, fn, opts...) })
	t.Cleanup(cancel) // runs before async's wait
	return cancel, errc
}

// term is one call of a Lead's fn, as blockUntilDone reports it.
type term struct {
	val  string
	key  string
	rev  int64
	ctx  context.Context
	e    *concurrency.Election
	done chan struct{} // closed when fn has returned
}

// blockUntilDone is a Lead fn that reports its start on started and
// returns when its context ends.
func blockUntilDone(val string, started chan<- *term) func(context.Context, *concurrency.Election) error {
	return func(ctx context.Context, e *concurrency.Election) error {
		tm := &term{val: val, key: e.Key(), rev: e.Rev(), ctx: ctx, e: e, done: make(chan struct{})}
		defer close(tm.done)
		started <- tm
		<-ctx.Done()
		return ctx.Err()
	}
}

// nextTerm returns the next term started, or fails the test after d.
func nextTerm(t *testing.T, started <-chan *term, d time.Duration, what string) *term {
	t.Helper()
	select {
	case tm := <-started:
		return tm
	case <-time.After(d):
		t.Fatalf("%s: no fn started within %v", what, d)
		return nil
	}
}

// The leader's lease is revoked: its fn's context is cancelled with a cause,
// its guarded Txn no longer writes, the other Lead's fn starts, and the
// first Lead campaigns again on a new session.
func TestLeadLeaseRevoked(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	started := make(chan *term, 4)
	cancelA, errA := goLead(t, c, pfx, "a", blockUntilDone("a", started), concurrency.WithLeadTTL(10))
	a := nextTerm(t, started, 10*time.Second, "first Lead")
	kvs := etcdtest.WaitKeys(t, c, pfx, 1)
	if string(kvs[0].Key) != a.key || kvs[0].CreateRevision != a.rev || a.rev == 0 {
		t.Fatalf("fn runs with key %s rev %d; etcd has %s created at %d", a.key, a.rev, kvs[0].Key, kvs[0].CreateRevision)
	}
	oldLease := clientv3.LeaseID(kvs[0].Lease)
	cancelB, errB := goLead(t, c, pfx, "b", blockUntilDone("b", started), concurrency.WithLeadTTL(10))
	etcdtest.WaitKeys(t, c, pfx, 2)

	data := pfx + "-data"
	stale := a.e.Txn(context.Background()).Then(clientv3.OpPut(data, "a"))
	if _, err := c.Revoke(t.Context(), oldLease); err != nil {
		t.Fatal(err)
	}
	b := nextTerm(t, started, 10*time.Second, "second Lead after the revoke")
	if b.val != "b" {
		t.Fatalf("after the revoke, %q's fn started, want b's", b.val)
	}
	select {
	case <-a.ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("first fn's context not cancelled 5 s after its lease was revoked")
	}
	if cause := context.Cause(a.ctx); !errors.Is(cause, concurrency.ErrLockLost) && !errors.Is(cause, concurrency.ErrSessionExpired) {
		t.Fatalf("first fn's cause = %v, want ErrLockLost or ErrSessionExpired", cause)
	}
	<-a.done
	if _, err := stale.Commit(); !errors.Is(err, concurrency.ErrLockLost) {
		t.Fatalf("old leader's guarded Txn = %v, want ErrLockLost", err)
	}
	if _, err := a.e.Txn(t.Context()).Then(clientv3.OpPut(data, "a")).Commit(); !errors.Is(err, concurrency.ErrLockLost) {
		t.Fatalf("old leader's Txn built after the loss = %v, want ErrLockLost", err)
	}
	if resp, err := c.Get(t.Context(), data); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("old leader wrote after its loss: %v %v", resp, err)
	}
	if b.rev <= a.rev {
		t.Fatalf("new leader's token %d, want more than %d", b.rev, a.rev)
	}

	// The first Lead campaigns again, on a new lease, behind b.
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		kvs = etcdtest.Keys(t, c, pfx)
		return len(kvs) == 2 && string(kvs[1].Value) == "a"
	}, "first Lead campaigning again")
	if clientv3.LeaseID(kvs[1].Lease) == oldLease {
		t.Fatalf("first Lead campaigns again on its revoked lease %x", oldLease)
	}

	// Ending b's Lead hands over to a's second term.
	cancelB()
	if err := within(t, 5*time.Second, errB, "second Lead"); !errors.Is(err, context.Canceled) {
		t.Fatalf("second Lead = %v, want Canceled", err)
	}
	a2 := nextTerm(t, started, 5*time.Second, "first Lead's second term")
	if a2.val != "a" || a2.key != string(kvs[1].Key) || a2.rev <= b.rev {
		t.Fatalf("second term: %q key %s rev %d, want a on %s after %d", a2.val, a2.key, a2.rev, kvs[1].Key, b.rev)
	}
	cancelA()
	if err := within(t, 5*time.Second, errA, "first Lead"); !errors.Is(err, context.Canceled) {
		t.Fatalf("first Lead = %v, want Canceled", err)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// Cancelling the leader's ctx hands over to a follower at once, not after
// the TTL: Lead resigns once fn has returned.
func TestLeadShutdownHandsOver(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	started := make(chan *term, 2)
	var st concurrency.LeaderStatus
	cancelA, errA := goLead(t, c, pfx, "a", blockUntilDone("a", started), concurrency.WithLeadTTL(10), concurrency.WithStatus(&st))
	a := nextTerm(t, started, 10*time.Second, "first Lead")
	if ok, since := st.Leading(); !ok || since.IsZero() || st.Rev() != a.rev {
		t.Fatalf("status while leading: %v since %v rev %d, want leading since a time, rev %d", ok, since, st.Rev(), a.rev)
	}
	goLead(t, c, pfx, "b", blockUntilDone("b", started), concurrency.WithLeadTTL(10))
	etcdtest.WaitKeys(t, c, pfx, 2)

	t0 := time.Now()
	cancelA()
	b := nextTerm(t, started, 10*time.Second, "follower")
	took := time.Since(t0)
	t.Logf("handover after cancel: %v (TTL 10 s)", took)
	if took > time.Second {
		t.Errorf("follower took %v to take over, want well under the 10 s TTL", took)
	}
	if b.val != "b" {
		t.Fatalf("fn of %q started, want b", b.val)
	}
	select {
	case <-a.done:
	default:
		t.Fatal("follower's fn started before the leader's returned")
	}
	if err := within(t, 5*time.Second, errA, "first Lead"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lead = %v, want Canceled", err)
	}
	if cause := context.Cause(a.ctx); !errors.Is(cause, context.Canceled) {
		t.Fatalf("fn's cause = %v, want ctx's", cause)
	}
	if ok, _ := st.Leading(); ok || st.Rev() != 0 {
		t.Fatalf("status after Lead returned: leading %v rev %d", ok, st.Rev())
	}
}

// fn returning as the leader ends Lead: it resigns at once and returns fn's
// error, nil included.
func TestLeadFnReturns(t *testing.T) {
	fnErr := errors.New("fn failed")
	for _, want := range []error{nil, fnErr} {
		t.Run(fmt.Sprint(want), func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			var st concurrency.LeaderStatus
			calls := 0
			err := concurrency.Lead(t.Context(), c, pfx, "v", func(ctx context.Context, e *concurrency.Election) error {
				calls++
				if ok, _ := st.Leading(); !ok || ctx.Err() != nil || e.Rev() == 0 {
					return fmt.Errorf("fn runs with status %v, ctx %v, Rev %d: not as the leader", ok, ctx.Err(), e.Rev())
				}
				kvs := etcdtest.Keys(t, c, pfx)
				if len(kvs) != 1 || string(kvs[0].Key) != e.Key() || string(kvs[0].Value) != "v" {
					return fmt.Errorf("fn runs with key %s; etcd has %v", e.Key(), kvs)
				}
				return want
			}, concurrency.WithStatus(&st))
			if err != want { // fn's error itself, not wrapped
				t.Fatalf("Lead = %v, want %v", err, want)
			}
			if calls != 1 {
				t.Fatalf("fn called %d times", calls)
			}
			if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
				t.Fatalf("%d keys left after Lead returned", n)
			}
			if ok, _ := st.Leading(); ok {
				t.Fatal("status leading after Lead returned")
			}
		})
	}
}

// Three Leads that each return after one term, started again and again,
// never run fn at once, and their tokens increase from term to term.
func TestLeadExclusive(t *testing.T) {
	pfx := etcdtest.Begin(t)
	const leads, rounds = 3, 8
	var (
		mu            sync.Mutex // guards active, maxActive, lastRev, terms
		active        int
		maxActive     int
		lastRev       int64
		terms         int
		tokenDisorder error
	)
	data := pfx + "-data"
	var wg sync.WaitGroup
	errc := make(chan error, leads*rounds)
	for i := range leads {
		c := sharedClient(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				ctx, cancel := context.WithCancel(t.Context())
				err := concurrency.Lead(ctx, c, pfx, fmt.Sprint(i), func(fctx context.Context, e *concurrency.Election) error {
					mu.Lock()
					active++
					maxActive = max(maxActive, active)
					if e.Rev() <= lastRev && tokenDisorder == nil {
						tokenDisorder = fmt.Errorf("term with token %d after one with %d", e.Rev(), lastRev)
					}
					lastRev = e.Rev()
					terms++
					mu.Unlock()
					defer func() {
						mu.Lock()
						active--
						mu.Unlock()
					}()
					if _, err := e.Txn(fctx).Then(clientv3.OpPut(data, fmt.Sprint(e.Rev()))).Commit(); err != nil {
						return err
					}
					if r%2 == 1 {
						// The other way out: ctx ends while fn runs.
						cancel()
						<-fctx.Done()
						return fctx.Err()
					}
					return nil
				})
				cancel()
				if r%2 == 1 && !errors.Is(err, context.Canceled) || r%2 == 0 && err != nil {
					errc <- fmt.Errorf("Lead %d round %d: %v", i, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if maxActive != 1 || terms != leads*rounds || tokenDisorder != nil {
		t.Fatalf("%d terms, at most %d fn at once, tokens: %v; want %d terms, 1 at once, increasing tokens", terms, maxActive, tokenDisorder, leads*rounds)
	}
	c := sharedClient(t)
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left", n)
	}
	c.Delete(context.Background(), data)
}

func TestLeadBadInput(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	fn := func(context.Context, *concurrency.Election) error { return errors.New("fn ran") }
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		c    *clientv3.Client
		pfx  string
		fn   func(context.Context, *concurrency.Election) error
		opts []concurrency.LeadOption
		want error
	}{
		{"nil client", t.Context(), nil, pfx, fn, nil, concurrency.ErrNilClient},
		{"empty name", t.Context(), c, "", fn, nil, concurrency.ErrInvalidPrefix},
		{"nil fn", t.Context(), c, pfx, nil, nil, concurrency.ErrNilFunc},
		{"TTL 0", t.Context(), c, pfx, fn, []concurrency.LeadOption{concurrency.WithLeadTTL(0)}, concurrency.ErrInvalidTTL},
		{"cancelled ctx", cancelled, c, pfx, fn, nil, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := concurrency.Lead(tc.ctx, tc.c, tc.pfx, "v", tc.fn, tc.opts...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Lead = %v, want %v", err, tc.want)
			}
		})
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

// leaderLog collects the reports of WithLeaderChanges.
type leaderLog struct {
	mu  sync.Mutex
	log []concurrency.LeaderInfo
}

func (l *leaderLog) add(li concurrency.LeaderInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, li)
}

func (l *leaderLog) get() []concurrency.LeaderInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]concurrency.LeaderInfo(nil), l.log...)
}

// WithLeaderChanges reports every leader, whoever it is, and "no leader"
// once the last leader has resigned.
func TestLeadLeaderChanges(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	other := concurrency.NewElection(newSession(t, c), pfx)
	if err := other.Campaign(t.Context(), "other"); err != nil {
		t.Fatal(err)
	}
	var log leaderLog
	started := make(chan *term, 1)
	release := make(chan struct{})
	errc := async(t, func() error {
		return concurrency.Lead(t.Context(), c, pfx, "me", func(ctx context.Context, e *concurrency.Election) error {
			started <- &term{key: e.Key(), rev: e.Rev()}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, concurrency.WithLeaderChanges(log.add))
	})
	etcdtest.WaitKeys(t, c, pfx, 2)
	etcdtest.Eventually(t, 5*time.Second, func() bool { return len(log.get()) > 0 }, "first report")
	if got := log.get()[0]; got.Key != other.Key() || got.Value != "other" || got.Rev != other.Rev() {
		t.Fatalf("first report %+v, want the other leader %s", got, other.Key())
	}
	if err := other.Proclaim(t.Context(), "other2"); err != nil {
		t.Fatal(err)
	}
	etcdtest.Eventually(t, 5*time.Second, func() bool { return len(log.get()) > 1 }, "proclaimed value")
	if err := other.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	me := nextTerm(t, started, 5*time.Second, "Lead after the other resigned")
	close(release)
	if err := within(t, 5*time.Second, errc, "Lead"); err != nil {
		t.Fatalf("Lead = %v", err)
	}
	got := log.get()
	want := []concurrency.LeaderInfo{
		{Key: got[0].Key, Value: "other", Rev: got[0].Rev},
		{Key: got[0].Key, Value: "other2", Rev: got[0].Rev},
		{Key: me.key, Value: "me", Rev: me.rev},
		{},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("reports:\n%+v\nwant:\n%+v", got, want)
	}
}

// Killing the cluster's raft leader, and the member that the election
// leader's client uses, moves the leadership without two fns at once.
func TestLeadMemberRestart(t *testing.T) {
	clus := etcdtest.NewCluster(t, &integration.ClusterConfig{Size: 3})
	pfx := etcdtest.Begin(t)
	var (
		mu        sync.Mutex // guards active and overlaps
		active    int
		overlaps  int
		leaderIdx = -1 // the member whose client the current fn uses
	)
	started := make(chan int, 16)
	for i := range 3 {
		c := etcdtest.NewClient(t, []string{clus.Members[i].GRPCURL})
		goLead(t, c, pfx, fmt.Sprint(i), func(ctx context.Context, e *concurrency.Election) error {
			mu.Lock()
			active++
			if active > 1 {
				overlaps++
			}
			leaderIdx = i
			mu.Unlock()
			started <- i
			<-ctx.Done()
			mu.Lock()
			active--
			mu.Unlock()
			return ctx.Err()
		}, concurrency.WithLeadTTL(3))
	}
	// settled waits until one fn runs, and returns the member its client
	// uses.
	settled := func() int {
		t.Helper()
		var idx int
		etcdtest.Eventually(t, 15*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			idx = leaderIdx
			return active == 1
		}, "one fn running")
		return idx
	}
	t.Logf("first leader uses member %d", settled())

	for round, pick := range []string{"raft leader", "election leader's member"} {
		idx := clus.WaitLeader(t)
		if pick != "raft leader" {
			idx = settled()
			for len(started) > 0 {
				<-started
			}
		}
		m := clus.Members[idx]
		t.Logf("round %d: stopping member %d (%s)", round, idx, pick)
		m.Stop(t)
		if pick != "raft leader" {
			// The leader's client has lost its member: another Lead takes
			// over once the lease is gone.
			t0 := time.Now()
			for i := idx; i == idx; {
				select {
				case i = <-started:
				case <-time.After(15 * time.Second):
					t.Fatal("no other Lead took over within 15 s of the leader's member stopping")
				}
			}
			t.Logf("another Lead took over after %v", time.Since(t0))
		}
		if err := m.Restart(t); err != nil {
			t.Fatal(err)
		}
		clus.WaitLeader(t)
	}
	settled()
	mu.Lock()
	defer mu.Unlock()
	if overlaps != 0 {
		t.Fatalf("%d times two fns ran at once", overlaps)
	}
}

// LeaderStatus.Wait returns once Lead leads, and with ctx's error while
// it does not.
func TestLeaderStatusWait(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	var st concurrency.LeaderStatus
	short, cancelShort := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancelShort()
	if err := st.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait without a Lead = %v, want DeadlineExceeded", err)
	}

	waited := async(t, func() error { return st.Wait(t.Context()) }) // before Lead starts
	started := make(chan *term, 1)
	cancel, errc := goLead(t, c, pfx, "a", blockUntilDone("a", started), concurrency.WithLeadTTL(10), concurrency.WithStatus(&st))
	tm := nextTerm(t, started, 10*time.Second, "Lead")
	if err := within(t, 5*time.Second, waited, "Wait"); err != nil {
		t.Fatalf("Wait = %v, want nil once leading", err)
	}
	if leading, _ := st.Leading(); !leading || st.Rev() != tm.rev {
		t.Fatalf("after Wait: leading %v rev %d, want true %d", leading, st.Rev(), tm.rev)
	}
	if err := st.Wait(t.Context()); err != nil { // leads already: at once
		t.Fatalf("second Wait = %v", err)
	}

	cancel()
	if err := within(t, 5*time.Second, errc, "Lead"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lead = %v, want Canceled", err)
	}
	short, cancelShort = context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancelShort()
	if err := st.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait after Lead returned = %v, want DeadlineExceeded", err)
	}
}

// health is LeaderStatus.Handler's answer.
func health(t *testing.T, st *concurrency.LeaderStatus, tolerance time.Duration) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	st.Handler(tolerance).ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	return rec.Code, rec.Body.String()
}

// LeaderStatus.Check passes for a follower and a leader within its term,
// and fails once a term's fn outlives its leadership: here fn ignores its
// context after the lease was revoked (as it would after the session's
// deadline passed with etcd out of reach). Once fn returns, Check passes
// again.
func TestLeaderStatusCheck(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	var st concurrency.LeaderStatus
	if err := st.Check(0); err != nil {
		t.Fatalf("Check without a Lead = %v", err)
	}

	release := make(chan struct{})
	started := make(chan *concurrency.Election, 2)
	var terms atomic.Int32
	stuck := func(ctx context.Context, e *concurrency.Election) error {
		started <- e
		if terms.Add(1) > 1 {
			<-ctx.Done() // later terms behave
			return ctx.Err()
		}
		select {
		case <-release: // the first ignores ctx until the test releases it
		case <-t.Context().Done():
		}
		return ctx.Err()
	}
	cancel, errc := goLead(t, c, pfx, "a", stuck, concurrency.WithLeadTTL(10), concurrency.WithStatus(&st))
	var e *concurrency.Election
	select {
	case e = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("fn did not start within 10 s")
	}
	if err := st.Check(0); err != nil {
		t.Fatalf("Check while leading = %v", err)
	}
	if code, body := health(t, &st, 0); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("Handler while leading = %d %q", code, body)
	}

	kvs := etcdtest.WaitKeys(t, c, pfx, 1)
	if _, err := c.Revoke(t.Context(), clientv3.LeaseID(kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	<-e.Ctx().Done()
	etcdtest.Eventually(t, 5*time.Second, func() bool {
		return errors.Is(st.Check(0), concurrency.ErrLeaderStuck)
	}, "Check(0) to report the stuck fn")
	if leading, _ := st.Leading(); leading {
		t.Fatal("Leading after the revoke")
	}
	if err := st.Check(time.Hour); err != nil {
		t.Fatalf("Check(1h) right after the loss = %v, want nil", err)
	}
	if code, body := health(t, &st, 0); code != http.StatusInternalServerError || !strings.Contains(body, "leader stuck") {
		t.Fatalf("Handler while stuck = %d %q", code, body)
	}

	close(release) // fn returns; Lead campaigns again, and leads
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no second term within 10 s")
	}
	if err := st.Check(0); err != nil {
		t.Fatalf("Check in the second term = %v", err)
	}
	cancel()
	if err := within(t, 5*time.Second, errc, "Lead"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lead = %v, want Canceled", err)
	}
	if err := st.Check(0); err != nil {
		t.Fatalf("Check after Lead returned = %v", err)
	}
}

// WithLeadSession gives each term's session its options (a TTL, an owner
// record), overrides WithContext and WithLease (each term runs on a lease
// of its own until Lead's ctx ends), and reports an owner too large to
// record at once, as WithLeadOwner does.
func TestLeadSessionOptions(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	adopted, err := c.Grant(t.Context(), 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Revoke(context.Background(), adopted.ID) })
	ended, cancel := context.WithCancel(t.Context())
	cancel() // a session on this context would end at once
	o := concurrency.Owner{Host: "h", PID: 9, Label: "lead-session"}
	ran := false
	err = concurrency.Lead(t.Context(), c, pfx, "v", func(ctx context.Context, e *concurrency.Election) error {
		ran = true
		q, err := concurrency.Inspect(ctx, c, pfx)
		if err != nil {
			return err
		}
		if len(q.Keys) != 1 || q.Keys[0].Owner == nil || *q.Keys[0].Owner != o {
			t.Fatalf("Inspect of the election = %+v, want one key owned by %+v", q.Keys, o)
		}
		if lease := q.Keys[0].Lease; lease == adopted.ID {
			t.Errorf("the term runs on the lease given WithLease (%x), want one of its own", adopted.ID)
		}
		ttl, err := c.TimeToLive(ctx, q.Keys[0].Lease)
		if err != nil {
			return err
		}
		if ttl.GrantedTTL != 7 {
			t.Errorf("the term's lease was granted a TTL of %d, want 7 (WithTTL)", ttl.GrantedTTL)
		}
		return nil
	}, concurrency.WithLeadSession(concurrency.WithTTL(7), concurrency.WithOwner(o), concurrency.WithContext(ended), concurrency.WithLease(adopted.ID)))
	if err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Fatal("Lead returned nil without running fn")
	}

	huge := concurrency.Owner{Label: strings.Repeat("x", 2000)}
	err = concurrency.Lead(t.Context(), c, pfx, "v", func(context.Context, *concurrency.Election) error {
		t.Error("Lead ran fn with an invalid owner")
		return nil
	}, concurrency.WithLeadSession(concurrency.WithOwner(huge)))
	if !errors.Is(err, concurrency.ErrInvalidOwner) || !strings.Contains(err.Error(), "WithLeadSession") {
		t.Fatalf("Lead WithLeadSession(WithOwner(2000-byte label)) = %v, want ErrInvalidOwner naming WithLeadSession", err)
	}

	// Options no session would take end Lead at once; it retried them
	// each term, for ever, before.
	check := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name string
		opt  concurrency.LeadOption
		want error
	}{
		{"WithLeadSession(WithHealthCheck(0, 1, check))", concurrency.WithLeadSession(concurrency.WithHealthCheck(0, 1, check)), concurrency.ErrInvalidHealthCheck},
		{"WithLeadHealthCheck(time.Second, 0, check)", concurrency.WithLeadHealthCheck(time.Second, 0, check), concurrency.ErrInvalidHealthCheck},
		{"WithLeadSession(WithMaxHold(time.Millisecond))", concurrency.WithLeadSession(concurrency.WithMaxHold(time.Millisecond)), concurrency.ErrInvalidMaxHold},
		{"WithLeadSession(WithLockDelay(-time.Second))", concurrency.WithLeadSession(concurrency.WithLockDelay(-time.Second)), concurrency.ErrInvalidLockDelay},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := concurrency.Lead(ctx, c, pfx, "v", func(context.Context, *concurrency.Election) error {
			t.Errorf("Lead %s ran fn", tc.name)
			return nil
		}, tc.opt)
		cancel()
		if option, _, _ := strings.Cut(tc.name, "("); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), option) {
			t.Errorf("Lead %s = %v, want an error matching %v that names %s", tc.name, err, tc.want, option)
		}
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}
