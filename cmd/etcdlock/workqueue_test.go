package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// The work subcommands end to end: put (one a poison item), take --once
// acknowledges an item whose command exits 0; take gives back the poison
// item until it is dead; stats, dead, requeue and purge see and repair
// it; a taker killed with SIGKILL mid-item loses its claim with its lease,
// and the next taker runs the item again, as its second delivery.
func TestWork(t *testing.T) {
	name := begin(t)
	c := sharedClient(t)
	expectRun(t, 10*time.Second, 0, nil, []string{"work", "put", "--priority", "1", name, "good"})
	poison, _ := expectRun(t, 10*time.Second, 0, nil, []string{"work", "put", "--priority", "2", "--dedup", "p", name, "bad"})
	poison = strings.TrimSpace(poison)
	expectRun(t, 10*time.Second, exitBusy, nil, []string{"work", "put", "--dedup", "p", name, "again"})
	expectRun(t, 10*time.Second, exitUsage, nil, []string{"work", "put", "--delay", "-1", name, "x"})

	out, _ := expectRun(t, 20*time.Second, 0, nil, []string{"work", "take", "--once", name, "--", "sh", "-c", `echo "ran $ETCDLOCK_ITEM $ETCDLOCK_DELIVERY"`})
	if strings.TrimSpace(out) != "ran good 1" {
		t.Errorf("take --once printed %q, want ran good 1", out)
	}
	for i := 1; i <= 2; i++ {
		expectRun(t, 20*time.Second, 3, nil, []string{"work", "take", "--once", "--max-deliveries", "2", "--retry-delay", "0", name, "--", "sh", "-c", "exit 3"})
	}
	out, _ = expectRun(t, 10*time.Second, 0, nil, []string{"work", "stats", name})
	if !strings.Contains(out, "ready 0\n") || !strings.Contains(out, "dead 1\n") {
		t.Errorf("stats printed:\n%s\nwant ready 0, dead 1", out)
	}
	out, _ = expectRun(t, 10*time.Second, 0, nil, []string{"work", "dead", name})
	if !strings.Contains(out, poison) || !strings.Contains(out, "deliveries 2") {
		t.Errorf("dead printed:\n%s\nwant %s with 2 deliveries", out, poison)
	}
	expectRun(t, 10*time.Second, 0, nil, []string{"work", "requeue", name, poison})
	expectRun(t, 10*time.Second, exitNotFound, nil, []string{"work", "purge", name, poison})

	// A taker killed mid-item: its claim goes with its lease (TTL 2).
	a := start(t, nil, "work", "take", "--ttl", "2", name, "--", "sh", "-c", `echo "start $ETCDLOCK_DELIVERY"; exec sleep 10`)
	a.waitFor(a.stdout, "start 1")
	out, _ = expectRun(t, 10*time.Second, 0, nil, []string{"work", "list", name})
	if !strings.Contains(out, "in flight") {
		t.Errorf("list printed:\n%s\nwant the item in flight", out)
	}
	a.signal(syscall.SIGKILL)
	a.wait(10 * time.Second)
	out, _ = expectRun(t, 30*time.Second, 0, nil, []string{"work", "take", "--once", name, "--", "sh", "-c", `echo "again $ETCDLOCK_DELIVERY"`})
	if strings.TrimSpace(out) != "again 2" {
		t.Errorf("take after a killed taker printed %q, want again 2", out)
	}
	expectRun(t, 10*time.Second, 0, nil, []string{"work", "purge", "--all", name})
	// Nothing is left: the killed taker's lease expired, the item was
	// acknowledged, the dead letter purged with its dedup id. (Its
	// command, sleep 10, dies with it: the guardian of guardian.go, as
	// TestKilledEtcdlockKillsCommand checks for lock, elect and shards.)
	etcdtest.Eventually(t, 10*time.Second, func() bool { return len(etcdtest.Keys(t, c, name)) == 0 }, "keys left under %s", name)
}
