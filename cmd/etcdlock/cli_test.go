package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// Issue 23: `etcdlock --version` and `etcdlock version` print the module
// version and the commit from the binary's build information. The tests
// build without VCS stamping (GOFLAGS=-buildvcs=false here), so the commit
// may be unknown: only its line is required.
func TestVersion(t *testing.T) {
	begin(t)
	flag, _ := expectRun(t, 10*time.Second, 0, nil, []string{"--version"})
	sub, _ := expectRun(t, 10*time.Second, 0, nil, []string{"version"})
	if flag != sub {
		t.Errorf("--version printed\n%s\nversion printed\n%s", flag, sub)
	}
	for _, want := range []string{"etcdlock ", "\nmodule:      github.com/seed-a9d410c6/concurrency/cmd/etcdlock\n", "\nlibrary:     ", "\ncommit:      ", "\netcd client: v3.", "\ngo:          go"} {
		if !strings.Contains(flag, want) {
			t.Errorf("--version does not say %q:\n%s", want, flag)
		}
	}
	if !strings.HasPrefix(flag, "etcdlock (devel)\n") && !strings.HasPrefix(flag, "etcdlock v") {
		t.Errorf("--version does not start with a module version:\n%s", flag)
	}
	expectRun(t, 10*time.Second, exitUsage, nil, []string{"version", "extra"})
}

// Issue 23: a bare `etcdlock`, as in a cron line that lost its subcommand,
// does not succeed: it exits 2 with the usage on stderr.
// Issue 31: shell completion is there, and the help says so.
func TestCompletion(t *testing.T) {
	begin(t)
	for shell, want := range map[string]string{"bash": "__start_etcdlock", "zsh": "#compdef etcdlock", "fish": "complete -c etcdlock"} {
		out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"completion", shell})
		if !strings.Contains(out, want) {
			t.Errorf("etcdlock completion %s: no %q in its output", shell, want)
		}
	}
	if out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"--help"}); !strings.Contains(out, "etcdlock completion bash") {
		t.Errorf("etcdlock --help does not mention completion:\n%s", out)
	}
	// The shell asks etcdlock for flag values: --signal completes names.
	out, _ := expectRun(t, 10*time.Second, 0, nil, []string{"__complete", "lock", "--signal", "H"})
	if !strings.Contains(out, "HUP") {
		t.Errorf("completing --signal H gave %q, want HUP", out)
	}
}

func TestBareCommandIsUsageError(t *testing.T) {
	begin(t)
	out, stderr := expectRun(t, 10*time.Second, exitUsage, nil, nil, "Usage:", "Available Commands:", "etcdlock: no command given")
	if out != "" {
		t.Errorf("bare etcdlock wrote on stdout:\n%s", out)
	}
	if strings.Count(stderr, "no command given") != 1 {
		t.Errorf("message printed more than once:\n%s", stderr)
	}
}

// Issue 23: -n is --limit, and -q may come before the subcommand, like the
// connection flags.
func TestShorthands(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	p := start(t, nil, "-q", "lock", "-n", "2", pfx)
	key := p.firstLine()
	kvs := etcdtest.WaitKeys(t, c, pfx, 1)
	if string(kvs[0].Key) != key || string(kvs[0].Value) != "2" {
		t.Errorf("-n 2 holds %s = %q (printed %s), want a semaphore key of limit 2", kvs[0].Key, kvs[0].Value, key)
	}
	p.release()
	if s := p.stderr.String(); s != "" {
		t.Errorf("-q before lock: stderr is not empty:\n%s", s)
	}
	etcdtest.WaitKeys(t, c, pfx, 0)
}

// Issue 23: a command that is not found (127) or cannot be executed (126)
// is refused at once, before queueing: even behind a held lock, etcdlock
// exits without waiting, and no key is ever written under the name.
func TestCommandCheckedBeforeQueueing(t *testing.T) {
	pfx := begin(t)
	c := sharedClient(t)
	holder, _ := holdLock(t, pfx)
	elector := start(t, nil, "elect", pfx+"-e", "holder")
	elector.firstLine()

	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Every change under pfx from here on, until the sentinel below.
	resp, err := c.Get(t.Context(), "sentinel")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	wch := c.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))

	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"lock", pfx, "--", "/nonexistent/command"}, exitNoCommand},
		{[]string{"lock", pfx, "--", "etcdlock-test-no-such-command"}, exitNoCommand},
		{[]string{"lock", pfx, "--", dir}, exitCannotExec},
		{[]string{"lock", pfx, "--", notExec}, exitCannotExec},
		{[]string{"lock", "--limit", "3", pfx + "-s", "--", "/nonexistent/command"}, exitNoCommand},
		{[]string{"elect", pfx + "-e", "v", "--", "/nonexistent/command"}, exitNoCommand},
		{[]string{"elect", pfx + "-e", "v", "--", notExec}, exitCannotExec},
	} {
		t0 := time.Now()
		expectRun(t, 10*time.Second, tc.code, nil, tc.args, tc.args[len(tc.args)-1])
		if took := time.Since(t0); took > 3*time.Second {
			t.Errorf("etcdlock %q took %v to refuse the command", tc.args, took)
		}
	}

	if _, err := c.Put(t.Context(), pfx+"-sentinel", ""); err != nil {
		t.Fatal(err)
	}
	for wr := range wch {
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			if string(ev.Kv.Key) == pfx+"-sentinel" {
				cancel()
				continue
			}
			t.Errorf("a refused command changed %s (%v)", ev.Kv.Key, ev.Type)
		}
	}
	if wctx.Err() != context.Canceled {
		t.Fatal("the sentinel did not arrive within 30s")
	}
	if _, err := c.Delete(t.Context(), pfx+"-sentinel"); err != nil {
		t.Fatal(err)
	}
	holder.release()
	elector.signal(syscall.SIGINT)
	elector.expectExit(10*time.Second, 0)
	etcdtest.WaitKeys(t, c, pfx, 0)
	etcdtest.WaitKeys(t, c, pfx+"-e", 0)
}
