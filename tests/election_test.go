package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/tests/v3/framework/integration"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// election is the API of etcd's Election, which this package's has too, so
// that a scenario can run against both.
type election interface {
	Campaign(ctx context.Context, val string) error
	Proclaim(ctx context.Context, val string) error
	Resign(ctx context.Context) error
	Leader(ctx context.Context) (*clientv3.GetResponse, error)
	Observe(ctx context.Context) <-chan *clientv3.GetResponse
	Key() string
	Rev() int64
	Header() *pb.ResponseHeader
}

// The drop-in promise, checked by the compiler: every method and
// constructor of etcd's Election has the same signature here.
var (
	_ election = (*etcdconc.Election)(nil)
	_ election = (*concurrency.Election)(nil)

	_ func(*concurrency.Session, string) *concurrency.Election                = concurrency.NewElection
	_ func(*concurrency.Session, string, string, int64) *concurrency.Election = concurrency.ResumeElection
	_ func(*etcdconc.Session, string) *etcdconc.Election                      = etcdconc.NewElection
	_ func(*etcdconc.Session, string, string, int64) *etcdconc.Election       = etcdconc.ResumeElection
)

func (i impl) newElection(s session, pfx string) election {
	if i.name == ours.name {
		return concurrency.NewElection(s.(*concurrency.Session), pfx)
	}
	return etcdconc.NewElection(s.(*etcdconc.Session), pfx)
}

func (i impl) resumeElection(s session, pfx, key string, rev int64) election {
	if i.name == ours.name {
		return concurrency.ResumeElection(s.(*concurrency.Session), pfx, key, rev)
	}
	return etcdconc.ResumeElection(s.(*etcdconc.Session), pfx, key, rev)
}

// leader returns an Election of i, on a new session of c, that has won the
// election pfx with value val.
func (i impl) leader(t *testing.T, c *clientv3.Client, pfx, val string) election {
	t.Helper()
	e := i.newElection(i.mustSession(t, c, 60), pfx)
	if err := e.Campaign(t.Context(), val); err != nil {
		t.Fatalf("%s: Campaign: %v", i.name, err)
	}
	return e
}

// regression runs scenario against this package and etcd's, each with its
// own key prefix: it must return no violation here, and the violation that
// reproduces the upstream bug there.
func regression(t *testing.T, scenario func(t *testing.T, im impl, pfx string) (violation error)) {
	for _, im := range []impl{ours, etcds} {
		t.Run(im.name, func(t *testing.T) {
			expectBug(t, im, scenario(t, im, etcdtest.Begin(t)))
		})
	}
}

// async runs f in a goroutine that the test waits for, and returns its
// error on a channel.
func async(t *testing.T, f func() error) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		errc <- f()
	}()
	t.Cleanup(wg.Wait)
	return errc
}

func campaignAsync(t *testing.T, ctx context.Context, e election, val string) <-chan error {
	t.Helper()
	return async(t, func() error { return e.Campaign(ctx, val) })
}

// observe starts e.Observe for the rest of the test, and drains the channel
// until it is closed when the test ends.
func observe(t *testing.T, e election) <-chan *clientv3.GetResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ch := e.Observe(ctx)
	t.Cleanup(func() {
		cancel()
		for range ch {
		}
	})
	return ch
}

// next returns the next response posted on ch, or fails the test if ch
// closes or posts nothing within d.
func next(t *testing.T, ch <-chan *clientv3.GetResponse, d time.Duration) *clientv3.GetResponse {
	t.Helper()
	select {
	case resp, ok := <-ch:
		if !ok {
			t.Fatal("Observe closed its channel")
		}
		if len(resp.Kvs) != 1 || resp.Header == nil {
			t.Fatalf("Observe posted %v, want a header and one key", resp)
		}
		return resp
	case <-time.After(d):
		t.Fatalf("Observe posted nothing within %v", d)
	}
	return nil
}

// nextValue returns the value of the next leader posted on ch.
func nextValue(t *testing.T, ch <-chan *clientv3.GetResponse, d time.Duration) string {
	t.Helper()
	return string(next(t, ch, d).Kvs[0].Value)
}

// leaderAt checks that resp, posted by Observe, is what a read at its
// header's revision returns: the leader then, with its value then.
func leaderAt(t *testing.T, c *clientv3.Client, pfx string, resp *clientv3.GetResponse) error {
	t.Helper()
	rev := resp.Header.Revision
	got, err := c.Get(t.Context(), pfx+"/", append(clientv3.WithFirstCreate(), clientv3.WithRev(rev))...)
	if err != nil {
		t.Fatal(err)
	}
	kv := resp.Kvs[0]
	if len(got.Kvs) != 1 {
		return fmt.Errorf("Observe posted %s = %q at revision %d, when there was no leader", kv.Key, kv.Value, rev)
	}
	at := got.Kvs[0]
	if string(at.Key) != string(kv.Key) || at.CreateRevision != kv.CreateRevision || at.ModRevision != kv.ModRevision || string(at.Value) != string(kv.Value) {
		return fmt.Errorf("Observe posted %s = %q (mod revision %d) at revision %d, when the leader was %s = %q (mod revision %d)",
			kv.Key, kv.Value, kv.ModRevision, rev, at.Key, at.Value, at.ModRevision)
	}
	return nil
}

// kvFault fails, once armed, one unary KV call of a client with an error
// that the client does not retry, without sending it.
type kvFault struct{ left atomic.Int64 }

// failAfter arms f: the next n KV calls pass, and the one after fails.
func (f *kvFault) failAfter(n int64) { f.left.Store(n + 1) }

func (f *kvFault) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if strings.HasPrefix(method, "/etcdserverpb.KV/") && f.left.Add(-1) == 0 {
				return status.Error(codes.FailedPrecondition, "test: injected failure")
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

// rangeCounter counts the reads (KV Range calls) that a client has
// completed.
type rangeCounter struct{ n atomic.Int64 }

func (rc *rangeCounter) option(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil && method == "/etcdserverpb.KV/Range" {
				rc.n.Add(1)
			}
			return err
		}))
}

func TestElectionErrorsMatchEtcd(t *testing.T) {
	for _, tc := range []struct{ ours, etcds error }{
		{concurrency.ErrElectionNotLeader, etcdconc.ErrElectionNotLeader},
		{concurrency.ErrElectionNoLeader, etcdconc.ErrElectionNoLeader},
	} {
		if tc.ours.Error() != tc.etcds.Error() {
			t.Errorf("error text %q, etcd's is %q", tc.ours, tc.etcds)
		}
	}
}

func TestElectionUncontendedRoundTrips(t *testing.T) {
	pfx := etcdtest.Begin(t)
	var rc rpcCounter
	c := sharedClient(t, rc.option)
	e := concurrency.NewElection(newSession(t, c), pfx)
	for _, step := range []struct {
		name string
		f    func() error
	}{
		{"Campaign", func() error { return e.Campaign(t.Context(), "a") }},
		{"Campaign on the leader", func() error { return e.Campaign(t.Context(), "b") }},
		{"Proclaim", func() error { return e.Proclaim(t.Context(), "c") }},
		{"Resign", func() error { return e.Resign(t.Context()) }},
	} {
		before := rc.n.Load()
		if err := step.f(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if n := rc.n.Load() - before; n != 1 {
			t.Errorf("uncontended %s took %d RPCs, want 1", step.name, n)
		}
	}
}

func TestElectionCampaignProclaimResign(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	ctx := t.Context()
	e := concurrency.NewElection(s, pfx)
	if e.Key() != "" || e.Rev() != 0 || e.Header() != nil {
		t.Fatalf("before Campaign: Key %q Rev %d Header %v, want none", e.Key(), e.Rev(), e.Header())
	}
	if _, err := e.Leader(ctx); !errors.Is(err, concurrency.ErrElectionNoLeader) {
		t.Fatalf("Leader with no candidate = %v, want ErrElectionNoLeader", err)
	}
	if err := e.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s/%x", pfx, s.Lease())
	kvs := etcdtest.Keys(t, c, pfx)
	if len(kvs) != 1 || string(kvs[0].Key) != want || string(kvs[0].Value) != "a" || kvs[0].Lease != int64(s.Lease()) {
		t.Fatalf("keys = %v, want one key %q = a on the session lease", kvs, want)
	}
	rev := kvs[0].CreateRevision
	if e.Key() != want || e.Rev() != rev || e.Header() == nil || e.Header().Revision < rev {
		t.Fatalf("Key %q Rev %d Header %v, want %q, %d and a header at or after it", e.Key(), e.Rev(), e.Header(), want, rev)
	}

	leaderIs := func(val string) {
		t.Helper()
		resp, err := e.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		kv := resp.Kvs[0]
		if string(kv.Key) != want || string(kv.Value) != val || kv.CreateRevision != rev || e.Rev() != rev {
			t.Fatalf("Leader = %q = %q (rev %d), Rev %d; want %q = %q (rev %d)", kv.Key, kv.Value, kv.CreateRevision, e.Rev(), want, val, rev)
		}
	}
	leaderIs("a")
	if err := e.Proclaim(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if e.Header().Revision <= rev {
		t.Fatalf("Header after Proclaim at revision %d, want after %d", e.Header().Revision, rev)
	}
	leaderIs("b")
	// Campaign on the leader proclaims, as in etcd's package.
	if err := e.Campaign(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	leaderIs("c")

	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left after Resign", n)
	}
	if e.Key() != "" || e.Rev() != 0 {
		t.Fatalf("after Resign: Key %q Rev %d, want none", e.Key(), e.Rev())
	}
	if _, err := e.Leader(ctx); !errors.Is(err, concurrency.ErrElectionNoLeader) {
		t.Fatalf("Leader after Resign = %v, want ErrElectionNoLeader", err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatalf("second Resign = %v, want nil", err)
	}
	if err := e.Proclaim(ctx, "d"); !errors.Is(err, concurrency.ErrElectionNotLeader) {
		t.Fatalf("Proclaim after Resign = %v, want ErrElectionNotLeader", err)
	}
	// A new term gets a newer key, and so a larger token.
	if err := e.Campaign(ctx, "e"); err != nil {
		t.Fatal(err)
	}
	if e.Rev() <= rev {
		t.Fatalf("Rev of the second term %d, want more than %d", e.Rev(), rev)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// Leaders never overlap and their revisions, the fencing tokens, increase:
// among candidates of this package, and among candidates of this package
// and of etcd's on one name.
func TestElectionExclusion(t *testing.T) {
	for _, tc := range []struct {
		name            string
		impls           []impl
		workers, rounds int
	}{
		{"ours", []impl{ours}, 5, 15},
		{"with etcd's", []impl{ours, etcds}, 6, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			exclusion(t, c, pfx, tc.workers, tc.rounds, func(i int) (func() (int64, error), func() error) {
				im := tc.impls[i%len(tc.impls)]
				e := im.newElection(im.mustSession(t, c, 60), pfx)
				return func() (int64, error) {
						err := e.Campaign(t.Context(), fmt.Sprint(i))
						return e.Rev(), err
					},
					func() error { return e.Resign(t.Context()) }
			})
		})
	}
}

// This package's Election uses the very key etcd's does: on a session that
// adopted the lease of etcd's leader, Campaign finds that key and shares
// the leadership, as two Elections of one session do.
func TestElectionSameKeyAsEtcd(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	es := etcds.mustSession(t, c, 60)
	theirs := etcdconc.NewElection(es.(*etcdconc.Session), pfx)
	if err := theirs.Campaign(t.Context(), "etcd"); err != nil {
		t.Fatal(err)
	}
	e := concurrency.NewElection(newSession(t, c, concurrency.WithLease(es.Lease())), pfx)
	if err := within(t, 5*time.Second, campaignAsync(t, t.Context(), e, "ours"), "Campaign on etcd's key"); err != nil {
		t.Fatal(err)
	}
	if e.Key() != theirs.Key() || e.Rev() != theirs.Rev() {
		t.Fatalf("Key %q Rev %d, etcd's Key %q Rev %d: want the same", e.Key(), e.Rev(), theirs.Key(), theirs.Rev())
	}
	resp, err := theirs.Leader(t.Context())
	if err != nil || len(etcdtest.Keys(t, c, pfx)) != 1 || string(resp.Kvs[0].Value) != "ours" {
		t.Fatalf("etcd's Leader = %v, %v; want one key, with the value of this package's Campaign", resp, err)
	}
	if err := e.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := theirs.Proclaim(t.Context(), "x"); !errors.Is(err, etcdconc.ErrElectionNotLeader) {
		t.Fatalf("etcd's Proclaim after the shared key was resigned = %v, want ErrElectionNotLeader", err)
	}
}

// Candidates win in the order they campaigned, and Observe, of this package
// and of etcd's, posts each leader and proclamation in order (etcd's
// TestElectionWait). What this package posts was true at its revision.
func TestElectionObserve(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx := t.Context()
	observers := map[string]<-chan *clientv3.GetResponse{}
	for _, im := range []impl{ours, etcds} {
		observers[im.name] = observe(t, im.newElection(im.mustSession(t, c, 60), pfx))
	}
	saw := func(want string) {
		t.Helper()
		for name, ch := range observers {
			resp := next(t, ch, 5*time.Second)
			if got := string(resp.Kvs[0].Value); got != want {
				t.Fatalf("%s Observe posted %q, want %q", name, got, want)
			}
			if name == ours.name {
				if err := leaderAt(t, c, pfx, resp); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	es := make([]*concurrency.Election, 3)
	for i := range es {
		es[i] = concurrency.NewElection(newSession(t, c), pfx)
	}
	if err := es[0].Campaign(ctx, "0"); err != nil {
		t.Fatal(err)
	}
	saw("0")
	errcs := make([]<-chan error, len(es))
	for i := 1; i < len(es); i++ {
		errcs[i] = campaignAsync(t, ctx, es[i], fmt.Sprint(i))
		etcdtest.WaitKeys(t, c, pfx, i+1)
	}
	if err := es[0].Proclaim(ctx, "0b"); err != nil {
		t.Fatal(err)
	}
	saw("0b")
	var last int64
	for i := range es {
		if i > 0 {
			if err := within(t, 5*time.Second, errcs[i], "candidate"); err != nil {
				t.Fatal(err)
			}
			saw(fmt.Sprint(i))
		}
		if rev := es[i].Rev(); rev <= last {
			t.Fatalf("leader %d has revision %d, not after %d", i, rev, last)
		}
		last = es[i].Rev()
		for j := i + 1; j < len(es); j++ {
			if es[j].Rev() != 0 {
				t.Fatalf("candidate %d has Rev %d while %d leads", j, es[j].Rev(), i)
			}
		}
		if err := es[i].Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// When the leader's session ends, the next candidate is elected, and an
// observer sees it (etcd's TestElectionFailover).
func TestElectionFailover(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx := t.Context()
	s, err := concurrency.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := concurrency.NewElection(s, pfx)
	if err := first.Campaign(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	lead := first.Ctx()
	ch := observe(t, concurrency.NewElection(newSession(t, c), pfx))
	if got := nextValue(t, ch, 5*time.Second); got != "first" {
		t.Fatalf("Observe posted %q, want first", got)
	}
	second := concurrency.NewElection(newSession(t, c), pfx)
	errc := campaignAsync(t, ctx, second, "second")
	etcdtest.WaitKeys(t, c, pfx, 2)

	if err := s.Close(); err != nil { // the leader's process dies
		t.Fatal(err)
	}
	if err := within(t, 5*time.Second, errc, "next candidate"); err != nil {
		t.Fatal(err)
	}
	if got := nextValue(t, ch, 5*time.Second); got != "second" {
		t.Fatalf("Observe posted %q, want second", got)
	}
	if cause := context.Cause(lead); !errors.Is(cause, concurrency.ErrSessionExpired) {
		t.Fatalf("first leader's Ctx: cause %v, want ErrSessionExpired", cause)
	}
	if second.Rev() <= first.Rev() {
		t.Fatalf("second leader's Rev %d, want more than %d", second.Rev(), first.Rev())
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatalf("Resign after the session ended = %v, want nil (the key went with the lease)", err)
	}
	if err := second.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A candidate is not the leader: it cannot proclaim, its Rev is no token,
// its Txn does not commit, and Resign leaves its campaign alone.
func TestElectionCandidateIsNotLeader(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx := t.Context()
	leader := concurrency.NewElection(newSession(t, c), pfx)
	if err := leader.Campaign(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	e := concurrency.NewElection(newSession(t, c), pfx)
	errc := campaignAsync(t, ctx, e, "candidate")
	kvs := etcdtest.WaitKeys(t, c, pfx, 2)
	// The key is in etcd before Campaign has read the answer.
	etcdtest.Eventually(t, 5*time.Second, func() bool { return e.Key() != "" }, "Key of the waiting candidate")
	if e.Key() != string(kvs[1].Key) || e.Rev() != 0 {
		t.Fatalf("waiting candidate: Key %q Rev %d, want %q and 0", e.Key(), e.Rev(), kvs[1].Key)
	}
	if err := e.Proclaim(ctx, "usurper"); !errors.Is(err, concurrency.ErrElectionNotLeader) {
		t.Fatalf("Proclaim while waiting = %v, want ErrElectionNotLeader", err)
	}
	if _, err := e.Txn(ctx).Then(clientv3.OpPut(pfx+"-data", "x")).Commit(); !errors.Is(err, concurrency.ErrLockLost) {
		t.Fatalf("Txn while waiting = %v, want ErrLockLost", err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatalf("Resign while waiting = %v, want nil", err)
	}
	kvs = etcdtest.Keys(t, c, pfx)
	if len(kvs) != 2 || string(kvs[1].Value) != "candidate" {
		t.Fatalf("keys after the candidate's Proclaim and Resign: %v, want the candidate's untouched", kvs)
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 5*time.Second, errc, "candidate"); err != nil {
		t.Fatal(err)
	}
	if e.Rev() != kvs[1].CreateRevision {
		t.Fatalf("Rev after winning = %d, want %d", e.Rev(), kvs[1].CreateRevision)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := c.Get(ctx, pfx+"-data"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("a candidate's Txn wrote: %v %v", resp, err)
	}
}

// Campaigning again on the same session keeps the key and its place and
// updates the value, as etcd's does (etcd's TestElectionSessionRecampaign).
func TestElectionSameSessionSharesKey(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	ctx := t.Context()
	e1, e2 := concurrency.NewElection(s, pfx), concurrency.NewElection(s, pfx)
	if err := e1.Campaign(ctx, "1"); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 5*time.Second, campaignAsync(t, ctx, e2, "2"), "second Election on the same session"); err != nil {
		t.Fatal(err)
	}
	if e1.Key() != e2.Key() || e1.Rev() != e2.Rev() {
		t.Fatalf("keys %q/%q revisions %d/%d, want shared", e1.Key(), e2.Key(), e1.Rev(), e2.Rev())
	}
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 1 || string(kvs[0].Value) != "2" {
		t.Fatalf("keys = %v, want one, with the second Campaign's value", kvs)
	}
	if got := nextValue(t, observe(t, e1), 5*time.Second); got != "2" {
		t.Fatalf("Observe posted %q, want 2", got)
	}
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	// The shared key is gone: e2's leadership ended with it.
	if err := e2.Proclaim(ctx, "3"); !errors.Is(err, concurrency.ErrElectionNotLeader) {
		t.Fatalf("Proclaim after the shared key was deleted = %v, want ErrElectionNotLeader", err)
	}
	if cause := context.Cause(e2.Ctx()); !errors.Is(cause, concurrency.ErrLockLost) {
		t.Fatalf("Ctx cause = %v, want ErrLockLost", cause)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

// A name that is a prefix of an existing key is still a free election
// (etcd #6278, etcd's TestElectionOnPrefixOfExistingKey).
func TestElectionOnPrefixOfExistingKey(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	for _, k := range []string{pfx + "a", pfx + "a/x"} {
		if _, err := c.Put(t.Context(), k, "value"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Delete(context.Background(), k) })
	}
	e := concurrency.NewElection(newSession(t, c), pfx)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := e.Campaign(ctx, "abc"); err != nil {
		t.Fatal(err)
	}
	resp, err := e.Leader(ctx)
	if err != nil || string(resp.Kvs[0].Key) != e.Key() {
		t.Fatalf("Leader = %v, %v; want %q", resp, err, e.Key())
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A leader that restarts quickly and adopts its lease keeps its place,
// whether it campaigns again or resumes (etcd's
// TestElectionOnSessionRestart): the waiting candidate is not elected.
func TestElectionOnSessionRestart(t *testing.T) {
	for _, how := range []string{"campaign", "resume"} {
		t.Run(how, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			ctx := t.Context()
			old, err := concurrency.NewSession(c)
			if err != nil {
				t.Fatal(err)
			}
			e := concurrency.NewElection(old, pfx)
			if err := e.Campaign(ctx, "abc"); err != nil {
				t.Fatal(err)
			}
			key, rev := e.Key(), e.Rev()
			waiter := concurrency.NewElection(newSession(t, c), pfx)
			errc := campaignAsync(t, ctx, waiter, "123")
			etcdtest.WaitKeys(t, c, pfx, 2)

			old.Orphan() // the process restarts
			s := newSession(t, c, concurrency.WithLease(old.Lease()))
			var r *concurrency.Election
			if how == "campaign" {
				r = concurrency.NewElection(s, pfx)
				if err := within(t, 5*time.Second, campaignAsync(t, ctx, r, "def"), "Campaign after the restart"); err != nil {
					t.Fatal(err)
				}
			} else {
				r = concurrency.ResumeElection(s, pfx, key, rev)
				if err := r.Proclaim(ctx, "def"); err != nil {
					t.Fatal(err)
				}
			}
			if r.Key() != key || r.Rev() != rev {
				t.Fatalf("after the restart: Key %q Rev %d, want %q %d", r.Key(), r.Rev(), key, rev)
			}
			if resp, err := r.Leader(ctx); err != nil || string(resp.Kvs[0].Key) != key {
				t.Fatalf("Leader after the restart = %v, %v; want %q", resp, err, key)
			}
			if got := nextValue(t, observe(t, r), 5*time.Second); got != "def" {
				t.Fatalf("Observe posted %q, want def", got)
			}
			select {
			case err := <-errc:
				t.Fatalf("the waiting candidate returned %v while the restarted leader leads", err)
			default:
			}
			if err := r.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if err := within(t, 5*time.Second, errc, "waiting candidate"); err != nil {
				t.Fatal(err)
			}
			if err := waiter.Resign(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Ctx ends with the leadership, with a cause that says how, and a guarded
// transaction built during the leadership writes nothing after it.
func TestElectionCtx(t *testing.T) {
	for _, tc := range []struct {
		name   string
		end    func(t *testing.T, c *clientv3.Client, s *concurrency.Session, e *concurrency.Election)
		causes []error // any of these is a correct cause
	}{
		{"resign", func(t *testing.T, _ *clientv3.Client, _ *concurrency.Session, e *concurrency.Election) {
			if err := e.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}
		}, []error{concurrency.ErrLockReleased}},
		{"key deleted", func(t *testing.T, c *clientv3.Client, _ *concurrency.Session, e *concurrency.Election) {
			if _, err := c.Delete(t.Context(), e.Key()); err != nil {
				t.Fatal(err)
			}
		}, []error{concurrency.ErrLockLost}},
		{"lease revoked", func(t *testing.T, c *clientv3.Client, s *concurrency.Session, _ *concurrency.Election) {
			if _, err := c.Revoke(t.Context(), s.Lease()); err != nil {
				t.Fatal(err)
			}
		}, []error{concurrency.ErrLockLost, concurrency.ErrSessionExpired}},
		{"session closed", func(t *testing.T, _ *clientv3.Client, s *concurrency.Session, _ *concurrency.Election) {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}, []error{concurrency.ErrSessionExpired}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := etcdtest.Begin(t)
			c := sharedClient(t)
			other := sharedClient(t)
			s := newSession(t, c)
			e := concurrency.NewElection(s, pfx)
			if e.Ctx().Err() == nil {
				t.Fatal("Ctx before Campaign is not cancelled")
			}
			if err := e.Campaign(t.Context(), "v"); err != nil {
				t.Fatal(err)
			}
			ctx := e.Ctx()
			if ctx.Err() != nil {
				t.Fatalf("Ctx of the leader is cancelled: %v", context.Cause(ctx))
			}
			data := pfx + "-data"
			stale := e.Txn(t.Context()).Then(clientv3.OpPut(data, "stale"))
			tc.end(t, other, s, e)
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("Ctx not cancelled 5 s after the leadership ended")
			}
			cause := context.Cause(ctx)
			ok := false
			for _, want := range tc.causes {
				ok = ok || errors.Is(cause, want)
			}
			if !ok {
				t.Fatalf("cause = %v, want one of %v", cause, tc.causes)
			}
			if _, err := stale.Commit(); !errors.Is(err, concurrency.ErrLockLost) {
				t.Fatalf("guarded Txn after the leadership = %v, want ErrLockLost", err)
			}
			if resp, err := other.Get(t.Context(), data); err != nil || len(resp.Kvs) != 0 {
				t.Fatalf("guarded Txn wrote after the leadership: %v %v", resp, err)
			}
			if err := e.Resign(t.Context()); err != nil {
				t.Fatalf("Resign after the leadership ended = %v, want nil", err)
			}
			if n := len(etcdtest.Keys(t, other, pfx)); n != 0 {
				t.Fatalf("%d keys left", n)
			}
		})
	}
}

func TestElectionTxn(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx := t.Context()
	data := pfx + "-data"
	t.Cleanup(func() { c.Delete(context.Background(), data) })
	e := concurrency.NewElection(newSession(t, c), pfx)
	if _, err := e.Txn(ctx).Then(clientv3.OpPut(data, "0")).Commit(); !errors.Is(err, concurrency.ErrLockLost) {
		t.Fatalf("Txn before Campaign = %v, want ErrLockLost", err)
	}
	if err := e.Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := e.Txn(ctx).If(clientv3.Compare(clientv3.Version(data), "=", 0)).Then(clientv3.OpPut(data, "1")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("leader's Txn: succeeded=%v err=%v", resp != nil && resp.Succeeded, err)
	}
	stale := e.Txn(ctx).Then(clientv3.OpPut(data, "2"))
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Commit(); !errors.Is(err, concurrency.ErrLockLost) {
		t.Fatalf("Txn committed after Resign = %v, want ErrLockLost", err)
	}
	got, err := c.Get(ctx, data)
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "1" {
		t.Fatalf("data = %v %v, want the leader's write only", got, err)
	}
}

func TestElectionDo(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	e := concurrency.NewElection(newSession(t, c), pfx)
	fnErr := errors.New("fn failed")
	err := e.Do(t.Context(), "v", func(ctx context.Context) error {
		if ctx.Err() != nil || e.Rev() == 0 {
			return fmt.Errorf("fn runs with ctx %v, Rev %d: not as the leader", ctx.Err(), e.Rev())
		}
		resp, err := e.Leader(ctx)
		if err != nil || string(resp.Kvs[0].Value) != "v" {
			return fmt.Errorf("Leader inside Do: %v %v", resp, err)
		}
		return fnErr
	})
	if !errors.Is(err, fnErr) || errors.Is(err, concurrency.ErrLockLost) {
		t.Fatalf("Do = %v, want fn's error alone", err)
	}
	if e.Rev() != 0 || len(etcdtest.Keys(t, c, pfx)) != 0 {
		t.Fatalf("after Do: Rev %d, keys %v; want resigned", e.Rev(), etcdtest.Keys(t, c, pfx))
	}

	// A leadership lost inside fn is reported.
	err = e.Do(t.Context(), "v", func(ctx context.Context) error {
		if _, err := c.Delete(ctx, e.Key()); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, concurrency.ErrLockLost) {
		t.Fatalf("Do with the key deleted inside = %v, want ErrLockLost", err)
	}
}

func TestElectionCancelLeavesNoKey(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	leader := concurrency.NewElection(newSession(t, c), pfx)
	if err := leader.Campaign(t.Context(), "leader"); err != nil {
		t.Fatal(err)
	}
	t.Run("timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		e := concurrency.NewElection(newSession(t, c), pfx)
		if err := e.Campaign(ctx, "v"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Campaign = %v, want DeadlineExceeded", err)
		}
		if n := len(etcdtest.Keys(t, c, pfx)); n != 1 || e.Key() != "" {
			t.Fatalf("%d keys and Key %q after a timed-out Campaign, want only the leader's", n, e.Key())
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		e := concurrency.NewElection(newSession(t, c), pfx)
		errc := campaignAsync(t, ctx, e, "v")
		etcdtest.WaitKeys(t, c, pfx, 2)
		cancel()
		if err := within(t, 5*time.Second, errc, "cancelled Campaign"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Campaign = %v, want Canceled", err)
		}
		if n := len(etcdtest.Keys(t, c, pfx)); n != 1 {
			t.Fatalf("%d keys after a cancelled Campaign, want only the leader's", n)
		}
	})
	if err := leader.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestElectionBadInput(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx := t.Context()
	s := newSession(t, c)
	for _, tc := range []struct {
		name string
		e    *concurrency.Election
		want error
	}{
		{"nil session", concurrency.NewElection(nil, pfx), concurrency.ErrNilSession},
		{"empty name", concurrency.NewElection(s, ""), concurrency.ErrInvalidPrefix},
		{"resumed key outside the election", concurrency.ResumeElection(s, pfx, pfx+"-other/1", 5), concurrency.ErrElectionNotLeader},
		{"resumed key of another name with the prefix", concurrency.ResumeElection(s, pfx, pfx+"x/1", 5), concurrency.ErrElectionNotLeader},
		{"resumed name without key", concurrency.ResumeElection(s, pfx, pfx+"/", 5), concurrency.ErrElectionNotLeader},
		{"resumed revision 0", concurrency.ResumeElection(s, pfx, fmt.Sprintf("%s/%x", pfx, s.Lease()), 0), concurrency.ErrElectionNotLeader},
		{"resumed with nil session", concurrency.ResumeElection(nil, pfx, pfx+"/1", 5), concurrency.ErrNilSession},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, err := range map[string]error{
				"Campaign": tc.e.Campaign(ctx, "v"),
				"Proclaim": tc.e.Proclaim(ctx, "v"),
				"Resign":   tc.e.Resign(ctx),
				"Do":       tc.e.Do(ctx, "v", func(context.Context) error { return nil }),
			} {
				if !errors.Is(err, tc.want) {
					t.Errorf("%s = %v, want %v", name, err, tc.want)
				}
			}
		})
	}
	for name, e := range map[string]*concurrency.Election{"nil session": concurrency.NewElection(nil, pfx), "empty name": concurrency.NewElection(s, "")} {
		if _, err := e.Leader(ctx); err == nil {
			t.Errorf("%s: Leader = nil error", name)
		}
		if _, ok := <-e.Observe(ctx); ok {
			t.Errorf("%s: Observe posted a leader", name)
		}
	}

	closed, err := concurrency.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	e := concurrency.NewElection(closed, pfx)
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Campaign(ctx, "v"); !errors.Is(err, concurrency.ErrSessionExpired) {
		t.Errorf("Campaign on a closed session = %v, want ErrSessionExpired", err)
	}

	// A lease revoked behind the session's back: Campaign says the session
	// has expired, not just what etcd said.
	revoked := newSession(t, c)
	if _, err := c.Revoke(ctx, revoked.Lease()); err != nil {
		t.Fatal(err)
	}
	err = concurrency.NewElection(revoked, pfx).Campaign(ctx, "v")
	if !errors.Is(err, concurrency.ErrSessionExpired) || !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Errorf("Campaign on a revoked lease = %v, want ErrSessionExpired joined with etcd's ErrLeaseNotFound", err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Errorf("%d keys left", n)
	}
}

// A leader that restarts adopts its lease and resumes its leadership.
func TestElectionResume(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx := t.Context()
	old, err := concurrency.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	e := concurrency.NewElection(old, pfx)
	if err := e.Campaign(ctx, "before"); err != nil {
		t.Fatal(err)
	}
	key, rev := e.Key(), e.Rev()
	old.Orphan() // the process "restarts"

	s := newSession(t, c, concurrency.WithLease(old.Lease()))
	r := concurrency.ResumeElection(s, pfx, key, rev)
	if r.Key() != key || r.Rev() != rev {
		t.Fatalf("resumed Key %q Rev %d, want %q %d", r.Key(), r.Rev(), key, rev)
	}
	if err := r.Proclaim(ctx, "after"); err != nil {
		t.Fatal(err)
	}
	if resp, err := r.Leader(ctx); err != nil || string(resp.Kvs[0].Value) != "after" || resp.Kvs[0].CreateRevision != rev {
		t.Fatalf("Leader = %v %v, want the resumed key with the new value", resp, err)
	}
	if err := r.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left after the resumed leader resigned", n)
	}

	// Resuming a leadership that has ended finds out at the first Proclaim.
	gone := concurrency.ResumeElection(s, pfx, key, rev)
	ctxGone := gone.Ctx()
	if err := gone.Proclaim(ctx, "x"); !errors.Is(err, concurrency.ErrElectionNotLeader) {
		t.Fatalf("Proclaim on a resumed leadership whose key is gone = %v, want ErrElectionNotLeader", err)
	}
	if cause := context.Cause(ctxGone); !errors.Is(cause, concurrency.ErrLockLost) {
		t.Fatalf("Ctx cause = %v, want ErrLockLost", cause)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("the failed Proclaim wrote: %d keys", n)
	}
}

// etcd's TestElectionObserveFreshResponsesOnProclaim: each proclamation is
// posted in a response of its own, at its own revision.
func TestElectionObserveFreshResponses(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	e := concurrency.NewElection(newSession(t, c), pfx)
	if err := e.Campaign(t.Context(), "abc"); err != nil {
		t.Fatal(err)
	}
	ch := observe(t, e)
	var resps []*clientv3.GetResponse
	for i, val := range []string{"abc", "def", "ghi"} {
		if i > 0 {
			if err := e.Proclaim(t.Context(), val); err != nil {
				t.Fatal(err)
			}
		}
		resp := next(t, ch, 5*time.Second)
		kv := resp.Kvs[0]
		if string(kv.Value) != val || kv.Version != int64(i+1) {
			t.Fatalf("response %d: %q version %d, want %q version %d", i, kv.Value, kv.Version, val, i+1)
		}
		for j, prev := range resps {
			if prev == resp || prev.Header == resp.Header || prev.Kvs[0] == resp.Kvs[0] {
				t.Fatalf("response %d reuses parts of response %d", i, j)
			}
			if prev.Header.Revision >= resp.Header.Revision {
				t.Fatalf("response %d at revision %d, not after response %d at %d", i, resp.Header.Revision, j, prev.Header.Revision)
			}
		}
		if err := leaderAt(t, c, pfx, resp); err != nil {
			t.Fatal(err)
		}
		resps = append(resps, resp)
	}
	if err := e.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// etcd #10297, #13469: ResumeElection kept the name without its "/", so the
// resumed Election's Leader read keys of other names that begin with it.
func TestElectionResumeUsesPrefix(t *testing.T) {
	regression(t, func(t *testing.T, im impl, pfx string) error {
		c := sharedClient(t)
		ctx := t.Context()
		other := pfx + "0/key" // of the election named pfx+"0"
		if _, err := c.Put(ctx, other, "other"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Delete(context.Background(), other) })
		s := im.mustSession(t, c, 60)
		e := im.newElection(s, pfx)
		if err := e.Campaign(ctx, "mine"); err != nil {
			t.Fatal(err)
		}
		r := im.resumeElection(s, pfx, e.Key(), e.Rev())
		var violation error
		if resp, err := r.Leader(ctx); err != nil {
			t.Fatal(err)
		} else if got := string(resp.Kvs[0].Key); got != e.Key() {
			violation = fmt.Errorf("resumed Election's Leader is %q, want %q", got, e.Key())
		}
		if err := r.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
			t.Fatalf("%d keys left after the resumed Election resigned", n)
		}
		return violation
	})
}

// etcd #11007, #19597: a candidate whose own session ends keeps waiting in
// etcd's package until every older candidate is gone, and then Campaign
// returns nil, "you are the leader", with no key in the election.
func TestElectionCandidateSessionEnds(t *testing.T) {
	regression(t, func(t *testing.T, im impl, pfx string) error {
		c := sharedClient(t)
		leader := im.leader(t, c, pfx, "leader")
		// A revoke reaches a candidate through its session's next renewal,
		// every TTL/3: 1 s here.
		cs := im.mustSession(t, c, 3)
		errc := campaignAsync(t, t.Context(), im.newElection(cs, pfx), "candidate")
		etcdtest.WaitKeys(t, c, pfx, 2)
		if _, err := c.Revoke(t.Context(), cs.Lease()); err != nil {
			t.Fatal(err)
		}
		var violation error
		select {
		case err := <-errc:
			if !errors.Is(err, im.sessionEnded) {
				violation = fmt.Errorf("candidate returned %v, want ErrSessionExpired", err)
			}
		case <-time.After(3 * time.Second):
			violation = errors.New("candidate still waiting 3 s after its session ended")
			if err := leader.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := within(t, 5*time.Second, errc, "candidate, once the leader resigned"); err == nil {
				violation = errors.New("Campaign returned nil, elected, although its lease was revoked while it waited (etcd #11007)")
			}
		}
		leader.Resign(t.Context())
		return violation
	})
}

// etcd #22123: a Resign that failed forgot the leadership, so that a retry
// did nothing and the leader key stayed.
func TestElectionResignRetry(t *testing.T) {
	regression(t, func(t *testing.T, im impl, pfx string) error {
		c := sharedClient(t)
		e := im.leader(t, c, pfx, "v")
		cancelled, cancel := context.WithCancel(t.Context())
		cancel()
		if err := e.Resign(cancelled); !errors.Is(err, context.Canceled) {
			t.Fatalf("Resign with a cancelled context = %v, want Canceled", err)
		}
		if n := len(etcdtest.Keys(t, c, pfx)); n != 1 {
			t.Fatalf("%d keys after a Resign that was not sent, want 1", n)
		}
		if err := e.Resign(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
			return errors.New("the retried Resign left the leader key")
		}
		return nil
	})
}

// etcd #21128: a Campaign that failed for a reason other than its context
// left its key behind, a candidate nobody would resign.
func TestElectionCampaignErrorCleanup(t *testing.T) {
	t.Run("read fails while waiting", func(t *testing.T) {
		regression(t, func(t *testing.T, im impl, pfx string) error {
			c := sharedClient(t)
			leader := im.leader(t, c, pfx, "leader")
			var f kvFault
			e := im.newElection(im.mustSession(t, sharedClient(t, f.option), 60), pfx)
			f.failAfter(1) // the Campaign's first KV call writes the key; the next read fails
			errc := campaignAsync(t, t.Context(), e, "candidate")
			etcdtest.WaitKeys(t, c, pfx, 2)
			if err := leader.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := within(t, 5*time.Second, errc, "candidate"); status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("Campaign = %v, want the injected failure", err)
			}
			if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
				return fmt.Errorf("failed Campaign left its key: %d keys", len(kvs))
			}
			return nil
		})
	})
	t.Run("answer lost", func(t *testing.T) {
		regression(t, func(t *testing.T, im impl, pfx string) error {
			var rc rpcCounter
			c := sharedClient(t, rc.option)
			e := im.newElection(im.mustSession(t, c, 60), pfx)
			rc.armed.Store(true) // the key is written, and the answer lost
			if err := e.Campaign(t.Context(), "v"); status.Code(err) != codes.Unavailable {
				t.Fatalf("Campaign = %v, want the injected failure", err)
			}
			if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 0 {
				return fmt.Errorf("failed Campaign left its key: %d keys", len(kvs))
			}
			return nil
		})
	})
}

// etcd #18163: Observe gave each value in a watch response the revision of
// the whole response, so that it reported a value as the leader's at a
// revision where the leader had another. Here the observer reads the
// leader, the leader proclaims three times before the observer takes the
// first response, and the three values reach the observer's watch at once.
func TestElectionObserveBatch(t *testing.T) {
	regression(t, func(t *testing.T, im impl, pfx string) error {
		// One member, so that its answers to the leader's writes come after
		// it applied them, and the observer's watch starts behind them.
		ep := etcdtest.Endpoints()[:1]
		c := etcdtest.NewClient(t, ep)
		var reads rangeCounter
		oc := etcdtest.NewClient(t, ep, reads.option)
		leader := im.leader(t, c, pfx, "v0")
		ch := observe(t, im.newElection(im.mustSession(t, oc, 60), pfx))
		// Observe has read the leader: it now waits for the test to take it.
		etcdtest.Eventually(t, 5*time.Second, func() bool { return reads.n.Load() > 0 }, "Observe's read")
		vals := []string{"v0", "v1", "v2", "v3"}
		for _, v := range vals[1:] {
			if err := leader.Proclaim(t.Context(), v); err != nil {
				t.Fatal(err)
			}
		}
		var violation error
		for _, want := range vals {
			resp := next(t, ch, 5*time.Second)
			if got := string(resp.Kvs[0].Value); got != want {
				t.Fatalf("Observe posted %q, want %q", got, want)
			}
			if err := leaderAt(t, c, pfx, resp); err != nil && violation == nil {
				violation = err
			}
		}
		if err := leader.Resign(t.Context()); err != nil {
			t.Fatal(err)
		}
		return violation
	})
}

// Compaction while a campaign waits or an observer watches: etcd's Campaign
// failed and left its key (etcd #21128, the reported case), and etcd's
// Observe closed its channel (it documents closing when "the underlying
// watcher is otherwise disrupted"). Each watch is made to resume from a
// compacted revision by dropping its connection.
func TestElectionCompaction(t *testing.T) {
	clus := bridgeCluster(t)
	// compact writes elsewhere and compacts everything before, so that a
	// watch that resumes from before fails.
	compact := func(t *testing.T, c *clientv3.Client, pfx string) {
		t.Helper()
		var rev int64
		for i := 0; i < 5; i++ {
			resp, err := c.Put(t.Context(), pfx+"-other", "x")
			if err != nil {
				t.Fatal(err)
			}
			rev = resp.Header.Revision
		}
		t.Cleanup(func() { c.Delete(context.Background(), pfx+"-other") })
		if _, err := c.Compact(t.Context(), rev, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("campaign", func(t *testing.T) {
		regression(t, func(t *testing.T, im impl, pfx string) error {
			lc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
			wc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
			leader := im.leader(t, lc, pfx, "a")
			e := im.newElection(im.mustSession(t, wc, 60), pfx)
			errc := campaignAsync(t, t.Context(), e, "b")
			etcdtest.WaitKeys(t, lc, pfx, 2)
			compact(t, lc, pfx)
			clus.Members[0].Bridge().DropConnections()
			if err := leader.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}
			// 30 s: what is tested is that Campaign wins, not how fast; the
			// client's reconnection and the watch's resumption took more
			// than 10 s under -race on a loaded machine.
			if err := within(t, 30*time.Second, errc, "candidate"); err != nil {
				return fmt.Errorf("Campaign failed after compaction (%v), leaving %d keys", err, len(etcdtest.Keys(t, lc, pfx)))
			}
			if err := e.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}
			return nil
		})
	})
	t.Run("observe", func(t *testing.T) {
		regression(t, func(t *testing.T, im impl, pfx string) error {
			lc := etcdtest.NewClient(t, []string{clus.Members[1].GRPCURL})
			oc := etcdtest.NewClient(t, []string{clus.Members[0].GRPCURL})
			leader := im.leader(t, lc, pfx, "a")
			ch := observe(t, im.newElection(im.mustSession(t, oc, 60), pfx))
			if got := nextValue(t, ch, 5*time.Second); got != "a" {
				t.Fatalf("Observe posted %q, want a", got)
			}
			compact(t, lc, pfx)
			// etcd's TestElectionObserveCompacted: an observer that starts
			// after the leader's key was compacted sees the leader.
			if got := nextValue(t, observe(t, im.newElection(im.mustSession(t, oc, 60), pfx)), 5*time.Second); got != "a" {
				t.Fatalf("Observe started after compaction posted %q, want a", got)
			}
			clus.Members[0].Bridge().DropConnections()
			if err := leader.Proclaim(t.Context(), "b"); err != nil {
				t.Fatal(err)
			}
			var violation error
			select {
			case resp, ok := <-ch:
				if !ok {
					violation = errors.New("Observe closed its channel after compaction")
				} else if got := string(resp.Kvs[0].Value); got != "b" {
					t.Fatalf("Observe posted %q, want b", got)
				}
			case <-time.After(10 * time.Second):
				violation = errors.New("Observe posted nothing 10 s after the proclamation")
			}
			if err := leader.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}
			return violation
		})
	})
}

// With auth enabled, a user allowed only an election's keys can campaign,
// wait, observe, proclaim and resign, with this package and etcd's side by
// side (etcd's TestElectionWithAuthEnabled, etcd #17502); outside those
// keys, Campaign fails at once with etcd's permission error and leaves
// nothing.
func TestElectionWithAuth(t *testing.T) {
	clus := etcdtest.NewCluster(t, &integration.ClusterConfig{Size: 1})
	pfx := etcdtest.Begin(t)
	ep := []string{clus.Members[0].GRPCURL}
	ctx := t.Context()
	admin := etcdtest.NewClient(t, ep)
	for _, step := range []func() error{
		func() error { _, err := admin.RoleAdd(ctx, "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "voter"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "voter", pfx+"/", clientv3.GetPrefixRangeEnd(pfx+"/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "voter", "voterpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "voter", "voter"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	as := func(user, pw string) func(*clientv3.Config) {
		return func(cfg *clientv3.Config) { cfg.Username, cfg.Password = user, pw }
	}
	root := etcdtest.NewClient(t, ep, as("root", "rootpw"))
	c := etcdtest.NewClient(t, ep, as("voter", "voterpw"))

	first := concurrency.NewElection(newSession(t, c), pfx)
	if err := first.Campaign(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	ch := observe(t, concurrency.NewElection(newSession(t, c), pfx))
	if got := nextValue(t, ch, 5*time.Second); got != "first" {
		t.Fatalf("Observe posted %q, want first", got)
	}
	theirs := etcds.newElection(etcds.mustSession(t, c, 60), pfx)
	errc := campaignAsync(t, ctx, theirs, "etcd")
	etcdtest.WaitKeys(t, root, pfx, 2)
	if err := first.Proclaim(ctx, "first-b"); err != nil {
		t.Fatal(err)
	}
	if got := nextValue(t, ch, 5*time.Second); got != "first-b" {
		t.Fatalf("Observe posted %q, want first-b", got)
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 5*time.Second, errc, "etcd's candidate"); err != nil {
		t.Fatal(err)
	}
	if got := nextValue(t, ch, 5*time.Second); got != "etcd" {
		t.Fatalf("Observe posted %q, want etcd", got)
	}
	if err := theirs.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	outside := pfx + "-forbidden"
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := concurrency.NewElection(newSession(t, c), outside).Campaign(cctx, "v")
	if !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("Campaign outside the user's keys = %v, want ErrPermissionDenied", err)
	}
	for _, p := range []string{pfx, outside} {
		if n := len(etcdtest.Keys(t, root, p)); n != 0 {
			t.Fatalf("%d keys left under %s/", n, p)
		}
	}
}

// etcd #7547: concurrent calls on one Election raced. Here they are safe,
// and a Campaign on a leader proclaims.
func TestElectionConcurrentUse(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	ctx := t.Context()
	e := concurrency.NewElection(newSession(t, c), pfx)
	rival := concurrency.NewElection(newSession(t, c), pfx)
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 8; r++ {
				if err := e.Campaign(ctx, fmt.Sprint(g, r)); err != nil {
					errc <- fmt.Errorf("Campaign: %w", err)
					return
				}
				_, _, _, _ = e.Key(), e.Rev(), e.Header(), e.Ctx()
				// Proclaim is one attempt, as etcd's: etcd's "request
				// timed out" (seen under -race on a loaded machine) is
				// its answer to give, not a defect.
				if err := e.Proclaim(ctx, fmt.Sprint(g, r, "b")); err != nil && !errors.Is(err, concurrency.ErrElectionNotLeader) && !errors.Is(err, rpctypes.ErrTimeout) {
					errc <- fmt.Errorf("Proclaim: %w", err)
					return
				}
				if err := e.Resign(ctx); err != nil {
					errc <- fmt.Errorf("Resign: %w", err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := 0; r < 8; r++ {
			if err := rival.Campaign(ctx, "rival"); err != nil {
				errc <- fmt.Errorf("rival Campaign: %w", err)
				return
			}
			if err := rival.Resign(ctx); err != nil {
				errc <- fmt.Errorf("rival Resign: %w", err)
				return
			}
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if n := len(etcdtest.Keys(t, c, pfx)); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

// A dropped ResumeElection leaves nothing behind: no goroutine, no watch,
// and no claim on the key that would stop a later failed Campaign of the
// same session from deleting it (then Leader named a candidate nobody ran).
func TestElectionResumeDroppedLeavesNothing(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	leader := concurrency.NewElection(newSession(t, c), pfx)
	if err := leader.Campaign(t.Context(), "leader"); err != nil {
		t.Fatal(err)
	}
	s := newSession(t, c)
	candidate := concurrency.NewElection(s, pfx)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- candidate.Campaign(ctx, "candidate") }()
	kvs := etcdtest.WaitKeys(t, c, pfx, 2)

	before := runtime.NumGoroutine()
	for range 100 {
		concurrency.ResumeElection(s, pfx, string(kvs[1].Key), kvs[1].CreateRevision)
	}
	time.Sleep(2 * 20 * time.Millisecond) // past the delay after which a hold is watched
	if grew := runtime.NumGoroutine() - before; grew > 10 {
		t.Fatalf("100 dropped ResumeElections left %d goroutines", grew)
	}

	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Campaign = %v, want Canceled", err)
	}
	if err := leader.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if resp, err := leader.Leader(t.Context()); !errors.Is(err, concurrency.ErrElectionNoLeader) {
		t.Fatalf("Leader after the only leader resigned and the candidate gave up = %v, %v; want ErrElectionNoLeader", resp, err)
	}
}

// A ResumeElection given arguments that cannot be a leadership refuses the
// leadership methods, as documented, and still reads the election.
func TestElectionResumeInvalid(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := sharedClient(t)
	s := newSession(t, c)
	leader := concurrency.NewElection(s, pfx)
	if err := leader.Campaign(t.Context(), "v"); err != nil {
		t.Fatal(err)
	}
	defer leader.Resign(t.Context())
	r := concurrency.ResumeElection(s, pfx, "elsewhere", 0)
	if err := r.Proclaim(t.Context(), "x"); !errors.Is(err, concurrency.ErrElectionNotLeader) {
		t.Errorf("Proclaim = %v, want ErrElectionNotLeader", err)
	}
	if err := r.Resign(t.Context()); !errors.Is(err, concurrency.ErrElectionNotLeader) {
		t.Errorf("Resign = %v, want ErrElectionNotLeader", err)
	}
	if err := r.Campaign(t.Context(), "x"); !errors.Is(err, concurrency.ErrElectionNotLeader) {
		t.Errorf("Campaign = %v, want ErrElectionNotLeader", err)
	}
	if _, err := r.Txn(t.Context()).Commit(); !errors.Is(err, concurrency.ErrLockLost) {
		t.Errorf("Txn = %v, want ErrLockLost", err)
	}
	if r.Ctx().Err() == nil {
		t.Error("Ctx of an invalid resumed Election is not ended")
	}
	resp, err := r.Leader(t.Context())
	if err != nil || string(resp.Kvs[0].Value) != "v" {
		t.Errorf("Leader = %v, %v; want the election's leader", resp, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if first, ok := <-r.Observe(ctx); !ok || string(first.Kvs[0].Value) != "v" {
		t.Errorf("Observe posted %v, %v; want the election's leader", first, ok)
	}
}
