package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdproc"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// backgroundScript is a command that starts two background children, the
// second ignoring SIGTERM, writes their PIDs and its own (the first line)
// to the file $PIDS, says "ready", and waits for them: the shape of
// `sh -c 'a & b'` in issue 21.
const backgroundScript = `echo $$ >> "$PIDS"
sleep 300 & echo $! >> "$PIDS"
(trap "" TERM; exec sleep 300) & echo $! >> "$PIDS"
echo ready
wait`

// alive reports whether process pid still runs: kill(pid, 0) finds it and
// it is not a zombie (an orphan's zombie lasts until PID 1 reaps it).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return errors.Is(err, syscall.EPERM)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// backgroundPIDs returns a file for backgroundScript's PIDs, and kills
// whatever it lists (and the script's process group) when the test ends,
// so that a failing test leaves nothing running.
func backgroundPIDs(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "pids")
	t.Cleanup(func() {
		pids := readPIDs(t, file)
		if len(pids) > 0 {
			syscall.Kill(-pids[0], syscall.SIGKILL) // the script leads its group, if it has one
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return file
}

// readPIDs reads the PIDs that backgroundScript wrote.
func readPIDs(t *testing.T, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// expectGone polls until none of pids runs, and fails the test if one
// still does after d.
func expectGone(t *testing.T, pids []int, d time.Duration) {
	t.Helper()
	if len(pids) != 3 {
		t.Fatalf("the command wrote PIDs %v, want 3", pids)
	}
	var running []int
	deadline := time.Now().Add(d)
	for {
		running = running[:0]
		for _, pid := range pids {
			if alive(pid) {
				running = append(running, pid)
			}
		}
		if len(running) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of the command (script and its background children %v) still run %v after etcdlock exited", running, pids, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Issue 21: when the lock or the leadership is lost, the whole command is
// stopped, not only its first process: a shell's background children,
// even one that ignores SIGTERM (it gets SIGKILL after --kill-grace), are
// gone by the time etcdlock has exited 122, instead of running on without
// the lock.
func TestLostStopsProcessGroup(t *testing.T) {
	revoke := func(t *testing.T, c *clientv3.Client, pfx string) {
		kvs := etcdtest.WaitKeys(t, c, pfx, 1)
		if _, err := c.Revoke(t.Context(), clientv3.LeaseID(kvs[0].Lease)); err != nil {
			t.Fatal(err)
		}
	}
	forceUnlock := func(t *testing.T, c *clientv3.Client, pfx string) {
		kvs := etcdtest.WaitKeys(t, c, pfx, 1)
		expectRun(t, 10*time.Second, 0, nil, []string{"force-unlock", pfx, "--key", string(kvs[0].Key)})
	}
	for _, tc := range []struct {
		name string
		args []string // before NAME
		prop []string // after NAME
		lose func(t *testing.T, c *clientv3.Client, pfx string)
	}{
		{"lock, force-unlock", []string{"lock"}, nil, forceUnlock},
		{"lock, lease revoked", []string{"lock"}, nil, revoke},
		{"lock --limit, force-unlock", []string{"lock", "-q", "--limit", "2"}, nil, forceUnlock},
		{"elect --once, lease revoked", []string{"elect", "--once"}, []string{"v"}, revoke},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := begin(t)
			c := sharedClient(t)
			pids := backgroundPIDs(t)
			args := append(append(append(tc.args, "--kill-grace", "500ms", pfx), tc.prop...), "--", "sh", "-c", backgroundScript)
			p := start(t, []string{"PIDS=" + pids}, args...)
			p.waitFor(p.stdout, "ready\n")
			tc.lose(t, c, pfx)
			p.expectExit(10*time.Second, exitLost)
			expectGone(t, readPIDs(t, pids), 2*time.Second)
			etcdtest.WaitKeys(t, c, pfx, 0)
		})
	}
}

// A signal to etcdlock goes to the command's whole process group, as a
// terminal's ^C goes to a shell job, and etcdlock exits with the command's
// status once its first process has exited.
func TestSignalReachesProcessGroup(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	pids := backgroundPIDs(t)
	script := `echo $$ >> "$PIDS"
sleep 300 & echo $! >> "$PIDS"
sleep 300 & echo $! >> "$PIDS"
echo ready
wait`
	p := start(t, []string{"PIDS=" + pids}, "lock", pfx, "--", "sh", "-c", script)
	p.waitFor(p.stdout, "ready\n")
	p.signal(syscall.SIGTERM)
	p.expectExit(10*time.Second, exitSignal+int(syscall.SIGTERM))
	expectGone(t, readPIDs(t, pids), 2*time.Second)
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// With etcd unreachable, the session ends at its conservative deadline, the
// command is stopped, and etcdlock exits 122 at once: it does not spend
// --command-timeout on a release that cannot reach etcd (the key goes with
// its lease, which etcd expires).
func TestLostUnreachableExitsPromptly(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string // before NAME
		prop []string // after NAME
	}{
		{"lock", []string{"lock"}, nil},
		{"elect --once", []string{"elect", "--once"}, []string{"v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := begin(t)
			args := append(append(append([]string{}, tc.args...), "--ttl", "3", "--kill-grace", "0", pfx), tc.prop...)
			testLostUnreachable(t, pfx, args)
		})
	}
}

func testLostUnreachable(t *testing.T, pfx string, args []string) {
	c := sharedClient(t)
	px, err := etcdproc.NewProxy(shared.endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	pids := backgroundPIDs(t)
	p := start(t, []string{"PIDS=" + pids}, append(append([]string{"--endpoints", px.URL()}, args...),
		"--", "sh", "-c", `echo $$ >> "$PIDS"; echo ready; exec sleep 300`)...)
	p.waitFor(p.stdout, "ready\n")
	cmdPID := readPIDs(t, pids)[0]
	etcdtest.WaitKeys(t, c, pfx, 1)

	cut := time.Now()
	px.Blackhole()
	var gone time.Time
	etcdtest.Eventually(t, 15*time.Second, func() bool {
		if alive(cmdPID) {
			return false
		}
		gone = time.Now()
		return true
	}, "the command (pid %d) still runs with etcd unreachable; stderr:\n%s", cmdPID, p.stderr)
	p.expectExit(15*time.Second, exitLost)
	t.Logf("etcd cut off: command stopped after %v, etcdlock exited %v after that",
		gone.Sub(cut).Round(time.Millisecond), p.exited.Sub(gone).Round(time.Millisecond))
	// About 1 s on an idle machine (the bounded clean-up); 2.004 s was seen
	// with the 2 cores kept busy by a CPU hog. What must not happen is
	// waiting for --command-timeout (5 s).
	if after := p.exited.Sub(gone); after > 4*time.Second {
		t.Errorf("etcdlock exited %v after its command was stopped, want at most 4s (--command-timeout is 5s)", after)
	}
	// The lease was not renewed: etcd expires it and the key with it.
	etcdtest.WaitKeys(t, c, pfx, 0)
}
