package embedetcd

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// start starts a 3-member cluster with o, closed when the test ends.
func start(t *testing.T, ctx context.Context, o Options) *Cluster {
	t.Helper()
	c, err := StartWith(ctx, 3, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// client returns a client of c, closed when the test ends.
func client(t *testing.T, c *Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestStartThreeMembers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := start(t, ctx, Options{})
	cli := client(t, c)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Members) != 3 {
		t.Fatalf("%d members, want 3", len(resp.Members))
	}
}

// TestPeerDelaySlowsCommits checks that a cluster started with a peer
// delay commits, and that a Put takes at least one delayed round trip
// between members longer than the delay alone.
func TestPeerDelaySlowsCommits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const delay = 5 * time.Millisecond
	c := start(t, ctx, Options{PeerDelay: delay})
	cli := client(t, c)
	var fastest time.Duration
	for i := range 10 {
		start := time.Now()
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); i == 0 || d < fastest {
			fastest = d
		}
	}
	// A commit needs the leader's append to reach a follower and its
	// acknowledgement to come back: two delayed hops.
	if fastest < 2*delay {
		t.Fatalf("fastest of 10 Puts took %v, want at least %v with a peer delay of %v", fastest, 2*delay, delay)
	}
}
