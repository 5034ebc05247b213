package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdconc "go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seed-a9d410c6/concurrency"
	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// printEnv is a command that prints what etcdlock passes in its
// environment, as "KEY REV".
const printEnv = `echo "$ETCD_LOCK_KEY $ETCD_LOCK_REV"`

// keyRev parses a line of printEnv.
func keyRev(t *testing.T, line string) (string, int64) {
	t.Helper()
	key, revs, ok := strings.Cut(strings.TrimSpace(line), " ")
	rev, err := strconv.ParseInt(revs, 10, 64)
	if !ok || err != nil || key == "" {
		t.Fatalf("command saw ETCD_LOCK_KEY and ETCD_LOCK_REV as %q", line)
	}
	return key, rev
}

// leaseKey is the lock key of lease under lock name.
func leaseKey(name string, lease int64) string { return fmt.Sprintf("%s/%x", name, lease) }

// Two lock processes on one name run their commands one after the other,
// in queue order; each command sees its key and fencing token, and the
// second's token is larger.
func TestLockRunsCommandsInTurn(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)

	first := start(t, nil, "lock", pfx, "--", "sh", "-c", printEnv+`; read line; exit 0`)
	key1, rev1 := keyRev(t, first.firstLine())
	kvs := etcdtest.WaitKeys(t, c, pfx, 1)
	if string(kvs[0].Key) != key1 || kvs[0].CreateRevision != rev1 || key1 != leaseKey(pfx, kvs[0].Lease) {
		t.Fatalf("first command saw %s %d; etcd has %s created at %d on lease %x", key1, rev1, kvs[0].Key, kvs[0].CreateRevision, kvs[0].Lease)
	}

	second := start(t, nil, "lock", pfx, "--", "sh", "-c", printEnv+`; exit 7`)
	kvs = etcdtest.WaitKeys(t, c, pfx, 2)
	msg := second.waitFor(second.stderr, "waiting for lock")
	if !strings.Contains(msg, "held by "+key1) || !strings.Contains(msg, "position 1 of 1") {
		t.Errorf("waiting message does not name the holder %s and position 1 of 1:\n%s", key1, msg)
	}
	if out := second.stdout.String(); out != "" {
		t.Fatalf("second command ran while the first held the lock: %q", out)
	}

	// The first command exits when its stdin gets a line.
	io.WriteString(first.stdin, "done\n")
	first.expectExit(10*time.Second, 0)
	second.expectExit(10*time.Second, 7) // the command's own status
	key2, rev2 := keyRev(t, second.stdout.String())
	if key2 != string(kvs[1].Key) || rev2 != kvs[1].CreateRevision {
		t.Errorf("second command saw %s %d, want its queued key %s created at %d", key2, rev2, kvs[1].Key, kvs[1].CreateRevision)
	}
	if rev2 <= rev1 || key2 == key1 {
		t.Errorf("second holder's token %d (key %s) after first's %d (key %s): want a larger token and another key", rev2, key2, rev1, key1)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// Without a command, lock prints the key and holds the lock until SIGINT or
// SIGTERM, then releases it and exits 0; with a command, the signal goes to
// the command.
func TestLockSignalReleases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sig     syscall.Signal
		command []string
		code    int
	}{
		{"SIGINT", syscall.SIGINT, nil, 0},
		{"SIGTERM", syscall.SIGTERM, nil, 0},
		{"SIGTERM to the command", syscall.SIGTERM, []string{"--", "sh", "-c", "echo ready; exec sleep 30"}, exitSignal + int(syscall.SIGTERM)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := begin(t)
			c := sharedClient(t)
			p := start(t, nil, append([]string{"lock", pfx}, tc.command...)...)
			line := p.firstLine()
			kvs := etcdtest.WaitKeys(t, c, pfx, 1)
			if tc.command == nil && line != string(kvs[0].Key) {
				t.Fatalf("lock printed %q, etcd has key %s", line, kvs[0].Key)
			}
			p.signal(tc.sig)
			p.expectExit(10*time.Second, tc.code)
			etcdtest.WaitKeys(t, c, pfx, 0)
		})
	}
}

// A waiter that gets SIGINT, or whose session ends (its lease revoked),
// stops waiting without running its command, removes its key, and exits
// 128+2 or 122.
func TestLockWaitEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, c *clientv3.Client, waiter *proc, kv *mvccpb.KeyValue)
		code int
	}{
		{"SIGINT", func(t *testing.T, _ *clientv3.Client, waiter *proc, _ *mvccpb.KeyValue) {
			waiter.signal(syscall.SIGINT)
		}, exitSignal + int(syscall.SIGINT)},
		{"lease revoked", func(t *testing.T, c *clientv3.Client, _ *proc, kv *mvccpb.KeyValue) {
			if _, err := c.Revoke(t.Context(), clientv3.LeaseID(kv.Lease)); err != nil {
				t.Fatal(err)
			}
		}, exitLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := begin(t)
			c := sharedClient(t)
			holder, _ := holdLock(t, pfx)
			waiter := start(t, nil, "lock", pfx, "--", "echo", "ran")
			kvs := etcdtest.WaitKeys(t, c, pfx, 2)
			tc.end(t, c, waiter, kvs[1])
			waiter.expectExit(10*time.Second, tc.code)
			if out := waiter.stdout.String(); out != "" {
				t.Errorf("waiter ran its command: %q", out)
			}
			etcdtest.WaitKeys(t, c, pfx, 1)
			holder.release()
			etcdtest.WaitKeys(t, c, pfx, 0)
		})
	}
}

// When the lock is lost while the command runs, the command gets SIGTERM,
// then SIGKILL after --kill-grace, and lock exits 122.
func TestLockLostStopsCommand(t *testing.T) {
	revoke := func(t *testing.T, c *clientv3.Client, pfx string, kv *mvccpb.KeyValue) {
		if _, err := c.Revoke(t.Context(), clientv3.LeaseID(kv.Lease)); err != nil {
			t.Fatal(err)
		}
	}
	forceUnlock := func(t *testing.T, c *clientv3.Client, pfx string, kv *mvccpb.KeyValue) {
		out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"force-unlock", pfx, "--key", string(kv.Key)})
		if !strings.Contains(out, "deleted "+string(kv.Key)) || !strings.Contains(out, "the holder") {
			t.Errorf("force-unlock printed %q", out)
		}
	}
	for _, tc := range []struct {
		name    string
		grace   time.Duration
		command string // "" for none
		lose    func(t *testing.T, c *clientv3.Client, pfx string, kv *mvccpb.KeyValue)
		want    string
	}{
		{"lease revoked", 10 * time.Second, "echo ready; exec sleep 30", revoke, "sending SIGTERM"},
		{"SIGTERM ignored", 500 * time.Millisecond, `trap "" TERM; echo ready; exec sleep 30`, revoke, "sending SIGKILL"},
		{"no grace", 0, `trap "" TERM; echo ready; exec sleep 30`, revoke, "sending SIGKILL"},
		{"force-unlock", 10 * time.Second, "echo ready; exec sleep 30", forceUnlock, "sending SIGTERM"},
		{"no command", 0, "", revoke, "lost lock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := begin(t)
			c := sharedClient(t)
			args := []string{"lock", "--kill-grace", tc.grace.String(), pfx}
			if tc.command != "" {
				args = append(args, "--", "sh", "-c", tc.command)
			}
			p := start(t, nil, args...)
			p.firstLine()
			kvs := etcdtest.WaitKeys(t, c, pfx, 1)
			lost := time.Now()
			tc.lose(t, c, pfx, kvs[0])
			p.expectExit(10*time.Second, exitLost)
			if took := p.exited.Sub(lost); took < tc.grace && tc.grace < 10*time.Second {
				t.Errorf("exited %v after the loss, before --kill-grace %v", took, tc.grace)
			}
			if s := p.stderr.String(); !strings.Contains(s, tc.want) || !strings.Contains(s, "lost lock") {
				t.Errorf("stderr does not say %q and \"lost lock\":\n%s", tc.want, s)
			}
			etcdtest.WaitKeys(t, c, pfx, 0)
		})
	}
}

// Issue 31: --signal chooses what the command's group gets when the lock is
// lost, as timeout -s does, and --kill-grace takes bare seconds; lock and
// elect alike.
func TestLostSignal(t *testing.T) {
	script := `trap 'echo got HUP; exit 0' HUP; echo ready; while :; do sleep 0.05; done`
	for _, tc := range []struct {
		name string
		args []string // before NAME
		prop []string // after NAME
	}{
		{"lock", []string{"lock", "--signal", "HUP", "--kill-grace", "10"}, nil},
		{"elect --once", []string{"elect", "--once", "-s", "1", "--kill-grace", "10"}, []string{"v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := begin(t)
			c := sharedClient(t)
			args := append(append(append(tc.args, pfx), tc.prop...), "--", "sh", "-c", script)
			p := start(t, nil, args...)
			p.waitFor(p.stdout, "ready\n")
			kvs := etcdtest.WaitKeys(t, c, pfx, 1)
			lost := time.Now()
			if _, err := c.Revoke(t.Context(), clientv3.LeaseID(kvs[0].Lease)); err != nil {
				t.Fatal(err)
			}
			p.expectExit(10*time.Second, exitLost)
			if took := p.exited.Sub(lost); took >= 10*time.Second {
				t.Errorf("exited %v after the loss: the command did not act on SIGHUP", took)
			}
			if s := p.stderr.String(); !strings.Contains(s, "sending SIGHUP") || strings.Contains(s, "SIGTERM") {
				t.Errorf("stderr does not say it sent SIGHUP, or mentions SIGTERM:\n%s", s)
			}
			if s := p.stdout.String(); !strings.Contains(s, "got HUP") {
				t.Errorf("the command did not get SIGHUP; stdout:\n%s", s)
			}
			etcdtest.WaitKeys(t, c, pfx, 0)
		})
	}
}

// --try on a held lock exits 123 at once, --timeout exits 124 once it has
// passed (or both the code of --conflict-exit-code); neither runs the
// command nor leaves a key.
func TestLockTryAndTimeout(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	holder, holderKey := holdLock(t, pfx)

	t0 := time.Now()
	out, _ := expectRun(t, 10*time.Second, exitBusy, nil, []string{"lock", "--try", pfx, "--", "echo", "ran"}, "is busy", "held by "+holderKey)
	if out != "" {
		t.Errorf("--try ran the command: %q", out)
	}
	t.Logf("--try on a held lock took %v", time.Since(t0))
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 1 || string(kvs[0].Key) != holderKey {
		t.Fatalf("keys after --try: %v, want only the holder's", kvs)
	}

	t0 = time.Now()
	out, _ = expectRun(t, 10*time.Second, exitTimeout, nil, []string{"lock", "--timeout", "500ms", pfx, "--", "echo", "ran"}, "gave up", "held by "+holderKey)
	if took := time.Since(t0); took < 500*time.Millisecond {
		t.Errorf("--timeout 500ms gave up after %v", took)
	}
	if out != "" {
		t.Errorf("--timeout ran the command: %q", out)
	}
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 1 || string(kvs[0].Key) != holderKey {
		t.Fatalf("keys after --timeout: %v, want only the holder's", kvs)
	}

	// Issue 31: bare seconds, as timeout(1) and flock -w take them, and
	// --conflict-exit-code (-E), as flock -E, for --try and --timeout.
	t0 = time.Now()
	expectRun(t, 10*time.Second, exitTimeout, nil, []string{"lock", "--timeout", "0.5", pfx, "--", "echo", "ran"}, "gave up", "after --timeout 500ms")
	if took := time.Since(t0); took < 500*time.Millisecond {
		t.Errorf("--timeout 0.5 gave up after %v", took)
	}
	expectRun(t, 10*time.Second, 7, nil, []string{"lock", "--try", "-E", "7", pfx, "--", "echo", "ran"}, "is busy")
	out, _ = expectRun(t, 10*time.Second, 0, nil, []string{"lock", "--timeout", "0.2", "--conflict-exit-code", "0", pfx, "--", "echo", "ran"}, "gave up")
	if out != "" {
		t.Errorf("--timeout with -E 0 ran the command: %q", out)
	}
	if kvs := etcdtest.Keys(t, c, pfx); len(kvs) != 1 || string(kvs[0].Key) != holderKey {
		t.Fatalf("keys after -E: %v, want only the holder's", kvs)
	}

	holder.release()
	// The command line: a bare --timeout on a free lock runs the
	// command.
	out, _ = expectRun(t, 10*time.Second, 0, nil, []string{"lock", "--timeout", "1", pfx, "--", "echo", "ran"})
	if out != "ran\n" {
		t.Errorf("lock --timeout 1 NAME -- echo ran printed %q", out)
	}
	// -E does not change the command's own status.
	expectRun(t, 10*time.Second, 3, nil, []string{"lock", "-E", "0", "--try", pfx, "--", "sh", "-c", "exit 3"})
	// Once the lock is free, --try takes it.
	out, _ = expectRun(t, 10*time.Second, 0, nil, []string{"lock", "--try", pfx, "--", "sh", "-c", printEnv})
	if key, _ := keyRev(t, out); !strings.HasPrefix(key, pfx+"/") {
		t.Errorf("--try on a free lock ran with key %q", key)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// A command that cannot be run gives the shell's codes, and releases the
// lock.
func TestLockCommandNotRunnable(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	expectRun(t, 10*time.Second, exitNoCommand, nil, []string{"lock", pfx, "--", "/nonexistent/command"}, "/nonexistent/command")
	expectRun(t, 10*time.Second, exitCannotExec, nil, []string{"lock", pfx, "--", t.TempDir()})
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// etcdlock and etcd's own concurrency package (which etcdctl lock uses)
// exclude each other on the same name.
func TestLockExcludesEtcdPackage(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	s, err := etcdconc.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := etcdconc.NewMutex(s, pfx)
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	expectRun(t, 10*time.Second, exitBusy, nil, []string{"lock", "--try", pfx, "--", "echo", "ran"}, "held by "+m.Key())

	waiter := start(t, nil, "lock", pfx, "--", "sh", "-c", printEnv)
	etcdtest.WaitKeys(t, c, pfx, 2)
	if out := waiter.stdout.String(); out != "" {
		t.Fatalf("etcdlock ran its command while etcd's Mutex held the lock: %q", out)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	waiter.expectExit(10*time.Second, 0)
	if _, rev := keyRev(t, waiter.stdout.String()); rev <= m.Header().Revision {
		t.Errorf("etcdlock's token %d is not after etcd's hold (revision %d)", rev, m.Header().Revision)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// --max-hold: the command runs with the key on a lease of its own, and is
// stopped as on a loss once the max hold passes, although etcdlock runs
// and renews its session; the next holder (etcd's own Mutex) gets the
// lock.
func TestMaxHoldLockStopsCommand(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	p := start(t, nil, "lock", "--max-hold", "3", pfx, "--", "sh", "-c", "echo ready; exec sleep 30")
	p.waitFor(p.stdout, "ready\n")
	locked := time.Now()
	kvs := etcdtest.WaitKeys(t, c, pfx, 1)
	r, err := c.TimeToLive(t.Context(), clientv3.LeaseID(kvs[0].Lease))
	if err != nil || r.GrantedTTL != 3 {
		t.Fatalf("the key's lease: %v %v, want one granted 3 s (the max hold's, not --ttl's)", r, err)
	}
	s, err := etcdconc.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := etcdconc.NewMutex(s, pfx)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("etcd's Mutex behind --max-hold 3: %v", err)
	}
	took := time.Since(locked)
	p.expectExit(10*time.Second, exitLost)
	if took > 10*time.Second {
		t.Errorf("next holder granted %v after the command started, with --max-hold 3", took)
	}
	if s := p.stderr.String(); !strings.Contains(s, "lost lock") || !strings.Contains(s, "maximum duration") || !strings.Contains(s, "sending SIGTERM") {
		t.Errorf("stderr does not say the max hold passed and the command was stopped:\n%s", s)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// etcdlock yield asks the holder; lock --yield stops its command as on a
// loss, and the next waiter, itself without --yield, gets the lock and
// ignores a request in turn. yield on a free name exits 125.
func TestYieldCommand(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	a := start(t, nil, "lock", "--yield", pfx, "--", "sh", "-c", "echo ready; exec sleep 30")
	a.waitFor(a.stdout, "ready\n")
	b := start(t, nil, "lock", pfx, "--", "sh", "-c", "echo ready; exec sleep 30")
	etcdtest.WaitKeys(t, c, pfx, 2)

	out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"yield", pfx})
	if !strings.Contains(out, "asked "+pfx+"/") {
		t.Errorf("yield printed %q, want the holder it asked", out)
	}
	a.expectExit(10*time.Second, exitLost)
	if s := a.stderr.String(); !strings.Contains(s, "yield requested") || !strings.Contains(s, "sending SIGTERM") {
		t.Errorf("the yielding holder's stderr does not say why it stopped its command:\n%s", s)
	}
	b.waitFor(b.stdout, "ready\n")
	expectRun(t, 10*time.Second, 0, nil, []string{"yield", pfx})
	kvs := etcdtest.WaitKeys(t, c, pfx, 1)
	q, err := concurrency.Inspect(t.Context(), c, pfx)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Keys) != 1 || q.Keys[0].Key != string(kvs[0].Key) || !q.Keys[0].YieldRequested {
		t.Fatalf("inspect after the second request: %+v, want the holder without --yield asked and still there", q.Keys)
	}
	if out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"inspect", pfx}); !strings.Contains(out, "etcdlock yield asked "+string(kvs[0].Key)) {
		t.Errorf("inspect does not show the request:\n%s", out)
	}
	if out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"inspect", "--json", pfx}); !strings.Contains(out, `"yield_requested": true`) {
		t.Errorf("inspect --json does not show the request:\n%s", out)
	}
	b.signal(syscall.SIGTERM)
	if code := b.wait(10 * time.Second); code == exitLost || strings.Contains(b.stderr.String(), "lost lock") {
		t.Fatalf("the holder without --yield gave up its lock (exit %d):\n%s", code, b.stderr.String())
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
	expectRun(t, 10*time.Second, exitNotFound, nil, []string{"yield", pfx}, "nobody holds")
}

// --lock-delay: after a holder's lease is revoked (a loss), the next
// lock --lock-delay starts its command only the delay later; --try during
// the delay is busy (123).
func TestLockDelayCommand(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	a := start(t, nil, "lock", "--lock-delay", "6", pfx, "--", "sh", "-c", "echo ready; exec sleep 30")
	a.waitFor(a.stdout, "ready\n")
	b := start(t, nil, "lock", "--lock-delay", "6", pfx, "--", "sh", "-c", "echo ready; exec sleep 30")
	kvs := etcdtest.WaitKeys(t, c, pfx, 2)
	if _, err := c.Revoke(t.Context(), clientv3.LeaseID(kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	a.expectExit(10*time.Second, exitLost)
	etcdtest.WaitKeys(t, c, pfx, 1)
	// inspect shows the delay (6 s: time for this and the --try below).
	if _, out, _ := runEtcdlock(t, 10*time.Second, nil, "inspect", pfx); !strings.Contains(out, "is in a lock-delay after a lost hold") {
		t.Errorf("inspect during the lock-delay does not show it:\n%s", out)
	}
	expectRun(t, 10*time.Second, 123, nil, []string{"lock", "--try", "--lock-delay", "6", pfx, "--", "true"})
	b.waitFor(b.stdout, "ready\n")
	if took := time.Since(lost); took < 6*time.Second {
		t.Fatalf("the next command started %v after the loss, before --lock-delay 6", took)
	}
	b.signal(syscall.SIGTERM)
	b.wait(10 * time.Second)
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// --health-cmd: once the check fails --health-failures times in a row,
// the session ends and its lease is revoked: the command is stopped as on
// a loss, and the next waiter gets the lock at once, not after --ttl.
func TestHealthCommand(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	flag := t.TempDir() + "/healthy"
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a := start(t, nil, "lock", "--ttl", "60", "--health-cmd", "test -e "+flag, "--health-interval", "2", "--health-failures", "3",
		pfx, "--", "sh", "-c", "echo ready; exec sleep 30")
	a.waitFor(a.stdout, "ready\n")
	b := start(t, nil, "lock", pfx, "--", "sh", "-c", "echo ready; exec sleep 30")
	etcdtest.WaitKeys(t, c, pfx, 2)
	// While the checks fail, before the third, inspect shows it.
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		_, out, _ := runEtcdlock(t, 10*time.Second, nil, "inspect", pfx)
		return strings.Contains(out, " of 3 health checks in a row, the last: --health-cmd")
	}, "inspect does not show the failing health checks")
	sick := time.Now()
	a.expectExit(10*time.Second, exitLost)
	if s := a.stderr.String(); !strings.Contains(s, "health checks failed") || !strings.Contains(s, "sending SIGTERM") {
		t.Errorf("stderr does not say the health checks failed and the command was stopped:\n%s", s)
	}
	b.waitFor(b.stdout, "ready\n")
	if took := time.Since(sick); took > 30*time.Second {
		t.Errorf("the next holder started %v after the check began to fail (--ttl 60)", took)
	}
	b.signal(syscall.SIGTERM)
	b.wait(10 * time.Second)
	etcdtest.WaitKeys(t, c, pfx, 0)
}
