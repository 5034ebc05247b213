package etcdproc_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdproc"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// binary builds the etcd server once for the test binary.
func binary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "etcdproc-bin")
		if build.err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			build.bin, build.err = etcdproc.Build(ctx, build.dir)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

func startCluster(t *testing.T) *etcdproc.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := etcdproc.Start(ctx, etcdproc.Config{Binary: binary(t), Dir: t.TempDir(), Args: []string{"--unsafe-no-fsync"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func client(t *testing.T, c *etcdproc.Cluster, eps ...string) *clientv3.Client {
	t.Helper()
	cli, err := c.Client(eps...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// A killed leader is replaced, comes back on its data, and the cluster
// keeps what was written; a paused member is out until resumed.
func TestClusterKillPauseRestart(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := startCluster(t)
	cli := client(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := cli.Put(ctx, pfx+"/a", "1"); err != nil {
		t.Fatal(err)
	}
	leader := c.Leader(ctx, cli)
	if leader < 0 {
		t.Fatal("no leader in a healthy cluster")
	}
	c.Members[leader].Kill()
	if c.Members[leader].Running() {
		t.Fatal("killed member still running")
	}
	etcdtest.Eventually(t, 20*time.Second, func() bool {
		l := c.Leader(ctx, cli)
		return l >= 0 && l != leader
	}, "no new leader after killing member %d", leader)
	if err := c.Members[leader].Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	one := client(t, c, c.Members[leader].ClientURL)
	resp, err := one.Get(ctx, pfx+"/a")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("restarted member: get = %v, %v; want the key", resp, err)
	}

	m := c.Members[(leader+1)%3]
	m.Pause()
	pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = client(t, c, m.ClientURL).Get(pctx, pfx+"/a")
	pcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read from a paused member = %v, want a timeout", err)
	}
	m.Resume()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	// A full restart keeps the data.
	if killed := c.StopAll(); killed != 0 {
		t.Errorf("%d members ignored SIGTERM for 10 s", killed)
	}
	for _, m := range c.Members {
		if m.Running() {
			t.Fatalf("%s still running after StopAll", m.Name)
		}
		if err := m.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := cli.Get(ctx, pfx+"/a"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("after a full restart: get = %v, %v; want the key", resp, err)
	}
	c.Close()
	for _, m := range c.Members {
		if m.Running() {
			t.Fatalf("%s still running after Close", m.Name)
		}
	}
}

func TestStartBadConfig(t *testing.T) {
	for _, cfg := range []etcdproc.Config{
		{Dir: t.TempDir()},
		{Binary: "etcd"},
		{Binary: "etcd", Dir: t.TempDir(), Size: -1},
	} {
		if _, err := etcdproc.Start(t.Context(), cfg); !errors.Is(err, etcdproc.ErrConfig) {
			t.Errorf("Start(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
	_, err := etcdproc.Start(t.Context(), etcdproc.Config{Binary: "/nonexistent/etcd", Dir: t.TempDir()})
	if err == nil {
		t.Error("Start with a missing binary succeeded")
	}
}

func TestProxy(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := startCluster(t)
	p, err := etcdproc.NewProxy(c.Members[0].ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cli := client(t, c, p.URL())
	get := func(d time.Duration) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		start := time.Now()
		_, err := cli.Get(ctx, pfx)
		return time.Since(start), err
	}
	if _, err := get(5 * time.Second); err != nil {
		t.Fatal(err)
	}

	p.Delay(300 * time.Millisecond)
	if took, err := get(5 * time.Second); err != nil || took < 600*time.Millisecond {
		t.Fatalf("delayed read took %v (%v), want at least two 300 ms delays", took, err)
	}

	p.Blackhole()
	if _, err := get(time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read through a blackhole = %v, want a timeout", err)
	}
	p.Heal()
	if _, err := get(10 * time.Second); err != nil {
		t.Fatalf("read after Heal = %v", err)
	}

	p.Drop()
	if _, err := get(time.Second); err == nil {
		t.Fatal("read through a dropping proxy succeeded")
	}
	p.Heal()
	if _, err := get(10 * time.Second); err != nil {
		t.Fatalf("read after Heal = %v", err)
	}
}

// Replacing the leader and then a follower leaves a healthy cluster of
// three running members, the new ones holding what was written before.
func TestReplace(t *testing.T) {
	pfx := etcdtest.Begin(t)
	c := startCluster(t)
	cli := client(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := cli.Put(ctx, pfx+"/a", "1"); err != nil {
		t.Fatal(err)
	}
	l := c.Leader(ctx, cli)
	if l < 0 {
		t.Fatal("no leader")
	}
	for _, i := range []int{l, (l + 1) % len(c.Members)} {
		old := c.Members[i].Name
		if err := c.Replace(ctx, i); err != nil {
			t.Fatalf("replace %s: %v", old, err)
		}
		if c.Members[i].Name == old {
			t.Fatalf("member %d kept its name %s", i, old)
		}
		if err := c.WaitHealthy(ctx); err != nil {
			t.Fatalf("after replacing %s: %v", old, err)
		}
		one := client(t, c, c.Members[i].ClientURL)
		resp, err := one.Get(ctx, pfx+"/a")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "1" {
			t.Fatalf("%s reads %v, want 1", c.Members[i].Name, resp.Kvs)
		}
		list, err := cli.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Members) != len(c.Members) {
			t.Fatalf("%d members listed, want %d", len(list.Members), len(c.Members))
		}
	}
}
