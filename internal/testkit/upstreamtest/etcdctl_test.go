package upstreamtest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// buildEtcdctl builds etcdctl from this module's graph.
func buildEtcdctl(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "etcdctl")
	if out, err := goCmd(t, ctx, "", "build", "-o", bin, "go.etcd.io/etcd/etcdctl/v3"); err != nil {
		t.Fatalf("go build etcdctl: %v\n%s", err, out)
	}
	return bin
}

// `etcdctl lock` and this package's Mutex exclude each other on one name,
// in both orders, and hand the lock over in queue order.
func TestEtcdctlLockInterop(t *testing.T) {
	bin := buildEtcdctl(t)
	name := etcdtest.Begin(t)
	eps := etcdtest.Endpoints()
	c := etcdtest.NewClient(t, eps)
	s, err := concurrency.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, name)
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// etcdctl queues behind this package's holder.
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	ourToken := m.Token()
	// The command holds the lock until the release file appears; it
	// reports the key etcdctl holds.
	script := `echo "$ETCD_LOCK_KEY" > ` + filepath.Join(dir, "key") + `; while [ ! -e ` + release + ` ]; do sleep 0.02; done`
	cmd := exec.CommandContext(ctx, bin, "--endpoints="+strings.Join(eps, ","), "lock", name, "--", "sh", "-c", script)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		os.WriteFile(release, nil, 0o644)
		<-done
	}()

	kvs := etcdtest.WaitKeys(t, c, name, 2)
	if string(kvs[0].Key) != m.Key() {
		t.Fatalf("holder key %s, want ours %s", kvs[0].Key, m.Key())
	}
	if _, err := os.Stat(filepath.Join(dir, "key")); err == nil {
		t.Fatal("etcdctl ran its command while this package held the lock")
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// etcdctl now holds; this package must wait behind it.
	etcdtest.Eventually(t, 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "key"))
		return err == nil
	}, "etcdctl did not take the lock after Unlock")
	if err := m.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock while etcdctl holds = %v, want ErrLocked", err)
	}
	kvs = etcdtest.WaitKeys(t, c, name, 1)
	if kvs[0].CreateRevision <= ourToken {
		t.Fatalf("etcdctl's key has create revision %d, not above ours %d", kvs[0].CreateRevision, ourToken)
	}
	etcdctlRev := kvs[0].CreateRevision

	locked := make(chan error, 1)
	go func() { locked <- m.Lock(ctx) }()
	etcdtest.WaitKeys(t, c, name, 2)
	select {
	case err := <-locked:
		t.Fatalf("Lock returned %v while etcdctl held the lock", err)
	default:
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	if m.Token() <= etcdctlRev {
		t.Fatalf("token %d after etcdctl's %d", m.Token(), etcdctlRev)
	}
	if err := <-done; err != nil {
		t.Fatalf("etcdctl lock: %v", err)
	}
	done <- nil // for the deferred wait
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	etcdtest.WaitKeys(t, c, name, 0)
}
