package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// printShardEnv prints what shards passes a command, as "start SHARD
// SHARDS REV", and runs until a signal.
const printShardEnv = `echo "start $ETCDLOCK_SHARD $ETCDLOCK_SHARDS $ETCDLOCK_SHARD_REV"; exec sleep 30`

// starts counts the commands a shards process started.
func starts(p *proc) int { return strings.Count(p.stdout.String(), "start ") }

// A process alone runs a command for every shard; a second one that
// joins gets half, the first's commands for them stopped as the shards
// are handed over; --list shows both; SIGTERM ends the second, exit 0, and
// its shards go back to the first; then the first ends and leaves nothing.
func TestShards(t *testing.T) {
	group := begin(t)
	c := sharedClient(t)
	const n = 4
	a := start(t, nil, "shards", "--ttl", "5", "--kill-grace", "2s", group, "4", "--", "sh", "-c", printShardEnv)
	etcdtest.Eventually(t, 10*time.Second, func() bool { return starts(a) == n }, "a started %d commands:\n%s\n%s", starts(a), a.stdout, a.stderr)
	for _, line := range strings.Split(strings.TrimSpace(a.stdout.String()), "\n") {
		if f := strings.Fields(line); len(f) != 4 || f[2] != "4" || f[3] == "" || f[3] == "0" {
			t.Errorf("command printed %q, want start SHARD 4 REV", line)
		}
	}
	out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"shards", "--list", group, "4"})
	if !strings.Contains(out, "1 members") || !strings.Contains(out, "owns 4 [0 1 2 3] etcdlock shards: sh") {
		t.Errorf("--list printed:\n%s\nwant one member owning 0 to 3, labelled", out)
	}

	b := start(t, nil, "shards", "--ttl", "5", group, "4", "--", "sh", "-c", printShardEnv)
	etcdtest.Eventually(t, 10*time.Second, func() bool { return starts(b) == n/2 }, "b started %d commands:\n%s\n%s", starts(b), b.stdout, b.stderr)
	a.waitFor(a.stderr, "yield requested")
	out, _ = expectRun(t, 10*time.Second, 0, nil, []string{"shards", "--list", group, "4"})
	if strings.Count(out, "share 2 owns 2") != 2 {
		t.Errorf("--list printed:\n%s\nwant two members owning 2 each", out)
	}
	// inspect --shards shows the same, for operators who look at locks.
	if in, _ := expectRun(t, 10*time.Second, 0, nil, []string{"inspect", "--shards", "4", group}); strings.Count(in, "share 2 owns 2") != 2 {
		t.Errorf("inspect --shards printed:\n%s\nwant two members owning 2 each", in)
	}

	b.signal(syscall.SIGTERM)
	b.expectExit(10*time.Second, 0)
	etcdtest.Eventually(t, 10*time.Second, func() bool { return starts(a) == n+n/2 }, "a started %d commands after b left:\n%s\n%s", starts(a), a.stdout, a.stderr)
	a.signal(syscall.SIGTERM)
	a.expectExit(10*time.Second, 0)
	if kvs := etcdtest.Keys(t, c, group); len(kvs) != 0 {
		t.Errorf("%d keys left under %s", len(kvs), group)
	}
}

// Bad input is a usage error, before etcd is contacted.
func TestShardsUsage(t *testing.T) {
	group := begin(t)
	for _, args := range [][]string{
		{"shards", group, "4"},
		{"shards", group, "0", "--", "true"},
		{"shards", group, "x", "--", "true"},
		{"shards", "--list", group},
		{"shards", "--weight", "0", group, "4", "--", "true"},
		{"shards", "--weight", "65537", group, "4", "--", "true"},
		{"shards", group, "65537", "--", "true"},
		{"shards", "--list", group, "1125899906842624"},
		{"inspect", "--shards", "65537", group},
		{"inspect", "--shards", "0", group},
	} {
		expectRun(t, 10*time.Second, exitUsage, nil, args)
	}
}

// A member key of weight 1<<60 written by hand beside a live member
// (issue 49: --list panicked, as every member did): --list prints the
// heavy member at the maximum weight, and the shares add up to N.
func TestShardsListForeignWeight(t *testing.T) {
	group := begin(t)
	c := sharedClient(t)
	a := start(t, nil, "shards", "--ttl", "5", group, "16", "--", "sh", "-c", printShardEnv)
	etcdtest.Eventually(t, 10*time.Second, func() bool { return starts(a) == 16 }, "a started %d commands:\n%s\n%s", starts(a), a.stdout, a.stderr)
	lease, err := c.Grant(t.Context(), 30)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Revoke(context.WithoutCancel(t.Context()), lease.ID)
	key := fmt.Sprintf("%s/members/%x", group, int64(lease.ID))
	if _, err := c.Put(t.Context(), key, "shards=16 weight=1152921504606846976", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"shards", "--list", group, "16"})
	if !strings.Contains(out, "2 members") || !strings.Contains(out, fmt.Sprintf("weight %d share 16", concurrency.MaxShardWeight)) {
		t.Errorf("--list printed:\n%s\nwant two members, the heavy one at weight %d with share 16", out, concurrency.MaxShardWeight)
	}
	a.signal(syscall.SIGTERM)
	a.expectExit(10*time.Second, 0)
}
