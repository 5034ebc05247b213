package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// pgidOf returns the process group of pid, from /proc.
func pgidOf(t *testing.T, pid int) int {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		t.Fatal(err)
	}
	return pgid
}

// Issue 49: an etcdlock that gets SIGKILL takes its command with it, and
// every process of the command's group (a shell's background children,
// one ignoring SIGTERM), within 1 s, long before the lease (TTL 3 s) that
// guarded the command expires; for lock, elect and shards. For shards, a
// second etcdlock waits on the group and starts the shard's command only
// after the first's lease expired, when none of the first's processes
// runs. For work take (issue 53), the item's command dies the same way.
func TestKilledEtcdlockKillsCommand(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string // before NAME
		after []string // after NAME
	}{
		{"lock", []string{"lock", "--ttl", "3"}, nil},
		{"elect", []string{"elect", "--ttl", "3"}, []string{"v"}},
		{"shards", []string{"shards", "--ttl", "3"}, []string{"1"}},
		{"work", []string{"work", "take", "--ttl", "3"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := begin(t)
			pids := backgroundPIDs(t)
			if tc.name == "work" {
				expectRun(t, 10*time.Second, 0, nil, []string{"work", "put", pfx, "item"})
			}
			args := append(append(append(append([]string{}, tc.args...), pfx), tc.after...), "--", "sh", "-c", backgroundScript)
			p := start(t, []string{"PIDS=" + pids}, args...)
			p.waitFor(p.stdout, "ready\n")
			var survivor *proc
			if tc.name == "shards" {
				survivor = start(t, nil, "shards", "--ttl", "3", pfx, "1", "--", "sh", "-c", printShardEnv)
				c := sharedClient(t)
				etcdtest.WaitKeys(t, c, pfx+"/members", 2)
			}
			ps := readPIDs(t, pids)
			pgid := pgidOf(t, ps[0])
			if pgid == p.cmd.Process.Pid {
				t.Fatalf("the command runs in etcdlock's group %d", pgid)
			}
			p.signal(syscall.SIGKILL)
			killed := time.Now()
			p.wait(10 * time.Second)
			expectGone(t, ps, time.Second)
			// The guardian, the group's leader, gets the group's SIGKILL
			// with the command's processes; its threads may take a moment
			// longer to die than theirs, so the group is given the same
			// second.
			etcdtest.Eventually(t, time.Until(killed.Add(time.Second)), func() bool { return !groupRunning(pgid) },
				"a process of the command's group %d still runs 1 s after SIGKILL", pgid)
			t.Logf("the command's processes were gone %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
			if survivor == nil {
				return
			}
			etcdtest.Eventually(t, 15*time.Second, func() bool { return starts(survivor) == 1 }, "the survivor did not start the shard:\n%s", survivor.stderr)
			for _, pid := range ps {
				if alive(pid) {
					t.Errorf("process %d of the killed etcdlock's command runs as the survivor starts the shard", pid)
				}
			}
			t.Logf("the survivor started the shard %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
			survivor.signal(syscall.SIGTERM)
			survivor.expectExit(10*time.Second, 0)
		})
	}
}

// With --foreground the command runs in etcdlock's own group, without a
// guardian: its process gets the parent-death signal (SIGKILL) itself.
func TestKilledEtcdlockKillsForegroundCommand(t *testing.T) {
	pfx := begin(t)
	pids := backgroundPIDs(t)
	p := start(t, []string{"PIDS=" + pids}, "lock", "--foreground", "--ttl", "3", pfx, "--", "sh", "-c", `echo $$ >> "$PIDS"; echo ready; exec sleep 300`)
	p.waitFor(p.stdout, "ready\n")
	ps := readPIDs(t, pids)
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
	etcdtest.Eventually(t, time.Second, func() bool { return !alive(ps[0]) }, "the foreground command %d still runs 1 s after etcdlock's SIGKILL", ps[0])
}
