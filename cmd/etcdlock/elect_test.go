package main

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// Candidates are elected in turn; an observer prints each leader's
// proposal; SIGINT resigns; a lost leadership exits 122.
func TestElect(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)

	observer := start(t, nil, "elect", "--listen", pfx)
	first := start(t, nil, "elect", pfx, "one")
	key1 := first.firstLine()
	kvs := etcdtest.WaitKeys(t, c, pfx, 1)
	if key1 != string(kvs[0].Key) || string(kvs[0].Value) != "one" {
		t.Fatalf("leader printed %q; etcd has %s = %q", key1, kvs[0].Key, kvs[0].Value)
	}
	observer.waitFor(observer.stdout, "one\n")

	second := start(t, nil, "elect", pfx, "two words")
	kvs = etcdtest.WaitKeys(t, c, pfx, 2)
	if out := second.stdout.String(); out != "" {
		t.Fatalf("second candidate elected while the first leads: %q", out)
	}
	// inspect shows who leads and who stands, with their proposals, in
	// the table too.
	st := inspectJSON(t, pfx)
	for i, want := range []struct {
		p     *proc
		value string
	}{{first, "one"}, {second, "two words"}} {
		e := append(st.Holders, st.Waiters...)[i]
		if e.Value != want.value || e.PID != want.p.cmd.Process.Pid || e.Host == "" || e.Label != "etcdlock elect" {
			t.Errorf("candidate %d = %+v, want value %q, pid %d, a host, label \"etcdlock elect\"", i, e, want.value, want.p.cmd.Process.Pid)
		}
	}
	out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"inspect", pfx})
	t.Logf("inspect %s:\n%s", pfx, out)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 ||
		!strings.HasSuffix(lines[2], " one") || !strings.HasSuffix(lines[3], ` "two words"`) ||
		!strings.Contains(lines[2], fmt.Sprint(" ", first.cmd.Process.Pid, " ")) {
		t.Errorf("inspect printed:\n%s\nwant the leader's pid and both proposals", out)
	}
	first.release()
	if key2 := second.firstLine(); key2 != string(kvs[1].Key) {
		t.Fatalf("second leader printed %q, want its key %s", key2, kvs[1].Key)
	}
	observer.waitFor(observer.stdout, "one\ntwo words\n")

	if _, err := c.Revoke(t.Context(), clientv3.LeaseID(kvs[1].Lease)); err != nil {
		t.Fatal(err)
	}
	second.expectExit(10*time.Second, exitLost)
	observer.release()
	if out := observer.stdout.String(); out != "one\ntwo words\n" {
		t.Errorf("observer printed %q, want one, two", out)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// printElectEnv is a command that prints what elect passes in its
// environment, as "KEY REV", and then runs until a signal.
const printElectEnv = `echo "$ETCD_ELECT_KEY $ETCD_ELECT_REV"; exec sleep 30`

// electKeyRev parses line n (from 0) of printElectEnv's output, waiting
// for it.
func electKeyRev(t *testing.T, p *proc, n int) (string, int64) {
	t.Helper()
	var line string
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		lines := strings.Split(p.stdout.String(), "\n")
		if len(lines) > n+1 { // the last is "" or incomplete
			line = lines[n]
			return true
		}
		select {
		case <-p.done:
			t.Fatalf("etcdlock %q exited %d before its command printed line %d\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], p.cmd.ProcessState.ExitCode(), n, p.stdout, p.stderr)
		default:
		}
		return false
	}, "line %d of the command's output; stdout:\n%s\nstderr:\n%s", n, p.stdout, p.stderr)
	key, revs, ok := strings.Cut(line, " ")
	rev, err := strconv.ParseInt(revs, 10, 64)
	if !ok || err != nil || key == "" {
		t.Fatalf("command saw ETCD_ELECT_KEY and ETCD_ELECT_REV as %q", line)
	}
	return key, rev
}

// A supervisor runs its command while leader, stops it when the leadership
// is lost and campaigns again; a signal goes to the command, after which
// the supervisor resigns and exits with the command's status.
func TestElectSupervise(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)

	first := start(t, nil, "elect", pfx, "one", "--", "sh", "-c", printElectEnv)
	key1, rev1 := electKeyRev(t, first, 0)
	kvs := etcdtest.WaitKeys(t, c, pfx, 1)
	if key1 != string(kvs[0].Key) || rev1 != kvs[0].CreateRevision || string(kvs[0].Value) != "one" {
		t.Fatalf("command saw %s %d; etcd has %s = %q created at %d", key1, rev1, kvs[0].Key, kvs[0].Value, kvs[0].CreateRevision)
	}
	second := start(t, nil, "elect", pfx, "two", "--", "sh", "-c", printElectEnv)
	etcdtest.WaitKeys(t, c, pfx, 2)
	if out := second.stdout.String(); out != "" {
		t.Fatalf("second command ran while the first leads: %q", out)
	}

	// The first loses its lease: its command is stopped, the second's
	// runs, and the first campaigns again on a new lease.
	if _, err := c.Revoke(t.Context(), clientv3.LeaseID(kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	key2, rev2 := electKeyRev(t, second, 0)
	if rev2 <= rev1 || key2 == key1 {
		t.Fatalf("second leader ran with %s %d after %s %d", key2, rev2, key1, rev1)
	}
	first.waitFor(first.stderr, "campaigning again")
	etcdtest.Eventually(t, 10*time.Second, func() bool {
		kvs = etcdtest.Keys(t, c, pfx)
		return len(kvs) == 2 && string(kvs[1].Value) == "one"
	}, "first supervisor campaigning again")
	if kvs[1].Lease == int64(clientv3.LeaseID(kvs[0].Lease)) || string(kvs[1].Key) == key1 {
		t.Fatalf("first supervisor campaigns again with key %s", kvs[1].Key)
	}
	if s := first.stderr.String(); !strings.Contains(s, "sending SIGTERM") || !strings.Contains(s, "lost the leadership") {
		t.Errorf("first supervisor's stderr does not say it stopped its command:\n%s", s)
	}

	// SIGTERM goes to the second's command; the second resigns and exits
	// with its status, and the first's command runs again.
	second.signal(syscall.SIGTERM)
	second.expectExit(10*time.Second, exitSignal+int(syscall.SIGTERM))
	key3, rev3 := electKeyRev(t, first, 1)
	if key3 != string(kvs[1].Key) || rev3 != kvs[1].CreateRevision {
		t.Fatalf("first command's second run saw %s %d, want %s %d", key3, rev3, kvs[1].Key, kvs[1].CreateRevision)
	}
	first.signal(syscall.SIGINT)
	first.expectExit(10*time.Second, exitSignal+int(syscall.SIGINT))
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// A command that exits by itself as the leader ends the supervisor with
// its status, and --once exits 122 on a loss instead of campaigning again.
func TestElectOnce(t *testing.T) {
	t.Run("command exits", func(t *testing.T) {
		pfx := begin(t)
		c := sharedClient(t)
		for _, once := range []bool{false, true} {
			args := []string{"elect", pfx, "v", "--", "sh", "-c", "exit 7"}
			if once {
				args = append([]string{"elect", "--once"}, args[1:]...)
			}
			expectRun(t, 10*time.Second, 7, nil, args)
			etcdtest.WaitKeys(t, c, pfx, 0)
		}
	})
	t.Run("lost", func(t *testing.T) {
		pfx := begin(t)
		c := sharedClient(t)
		p := start(t, nil, "elect", "--once", "--kill-grace", "0", pfx, "v", "--", "sh", "-c", printElectEnv)
		electKeyRev(t, p, 0)
		kvs := etcdtest.WaitKeys(t, c, pfx, 1)
		if _, err := c.Revoke(t.Context(), clientv3.LeaseID(kvs[0].Lease)); err != nil {
			t.Fatal(err)
		}
		p.expectExit(10*time.Second, exitLost)
		if s := p.stderr.String(); !strings.Contains(s, "sending SIGKILL") || !strings.Contains(s, "lost the leadership") {
			t.Errorf("stderr does not say the command was stopped:\n%s", s)
		}
		if n := strings.Count(p.stdout.String(), "\n"); n != 1 {
			t.Errorf("command ran %d times with --once", n)
		}
		etcdtest.WaitKeys(t, c, pfx, 0)
	})
	t.Run("signal while campaigning", func(t *testing.T) {
		pfx := begin(t)
		c := sharedClient(t)
		holder := start(t, nil, "elect", pfx, "holder")
		holder.firstLine()
		p := start(t, nil, "elect", pfx, "v", "--", "echo", "ran")
		etcdtest.WaitKeys(t, c, pfx, 2)
		p.signal(syscall.SIGINT)
		p.expectExit(10*time.Second, exitSignal+int(syscall.SIGINT))
		if out := p.stdout.String(); out != "" {
			t.Errorf("command ran while another led: %q", out)
		}
		etcdtest.WaitKeys(t, c, pfx, 1)
		holder.release()
		etcdtest.WaitKeys(t, c, pfx, 0)
	})
	t.Run("usage", func(t *testing.T) {
		begin(t)
		for _, args := range [][]string{
			{"elect", "--once", "n", "v"},
			{"elect", "n", "--", "echo"},
			{"elect", "n", "v", "--"},
			{"elect", "--listen", "n", "v", "--", "echo"},
			{"elect", "--kill-grace", "-1s", "n", "v", "--", "echo"},
		} {
			expectRun(t, 10*time.Second, exitUsage, nil, args)
		}
	})
}
