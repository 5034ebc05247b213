package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/etcdtest"
)

// The tests run the real etcdlock binary as subprocesses against real etcd
// members in this process. The binary and the shared cluster are made on
// first use, so that a run that selects none of these tests pays for
// neither.
var shared struct {
	tb        testutil.TB // the test context of the framework's clusters
	pkgDir    string      // this package's source, where etcdlock is built
	once      sync.Once
	err       error
	dir       string
	bin       string               // the etcdlock binary
	clus      *integration.Cluster // shared, single member
	endpoints []string
}

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == guardianArg {
		// A supervised command started in this process (not by the
		// etcdlock binary) re-executes the test binary as its guardian.
		os.Exit(guardian(os.Args[2:]))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	if os.Getenv("ETCDTEST_LOG") == "" {
		log.SetOutput(io.Discard)
	}
	// BeforeTest moves to a temporary directory.
	var err error
	if shared.pkgDir, err = os.Getwd(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The framework's clusters start only inside a test context; this one
	// lives as long as the test binary. (etcdtest.Main does the same for
	// its 3-member cluster, but exits without returning.)
	tb, closeTB := testutil.NewTestingTBProthesis("etcdlock")
	defer closeTB()
	integration.BeforeTest(tb, integration.WithoutGoLeakDetection(), integration.WithoutSkipInShort())
	shared.tb = tb
	code := m.Run()
	if shared.clus != nil {
		shared.clus.Terminate(nil)
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	return code
}

// setUp builds etcdlock and starts the shared cluster, once.
func setUp() error {
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "etcdlock-test"); shared.err != nil {
			return
		}
		shared.bin = filepath.Join(shared.dir, "etcdlock")
		args := []string{"build", "-o", shared.bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		build := exec.Command("go", append(args, ".")...)
		build.Dir = shared.pkgDir
		if out, err := build.CombinedOutput(); err != nil {
			shared.err = fmt.Errorf("building etcdlock: %v\n%s", err, out)
			return
		}
		shared.clus = integration.NewCluster(shared.tb, &integration.ClusterConfig{Size: 1, UseTCP: true, UseIP: true})
		shared.endpoints = shared.clus.Endpoints()
	})
	return shared.err
}

// begin starts a test that runs etcdlock: it makes sure that the binary
// and the shared cluster exist (before the leak check starts), and returns
// a key prefix of the test's own (etcdtest.Begin).
func begin(t *testing.T) string {
	t.Helper()
	if err := setUp(); err != nil {
		t.Fatal(err)
	}
	return etcdtest.Begin(t)
}

// sharedClient returns a client of the shared cluster, closed when the test
// ends.
func sharedClient(t *testing.T) *clientv3.Client {
	return etcdtest.NewClient(t, shared.endpoints)
}

// syncBuffer is an output buffer that a process writes while the test
// reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is an etcdlock process.
type proc struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr *syncBuffer
	done           chan struct{} // closed when the process has exited
	started        time.Time
	exited         time.Time
}

// baseEnv is the environment of etcdlock processes: the test's, without
// the variables etcdlock reads, and with the shared cluster's endpoints.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) && !strings.HasPrefix(kv, "ETCD_LOCK_") && !strings.HasPrefix(kv, "ETCD_ELECT_") {
			env = append(env, kv)
		}
	}
	return append(env, envPrefix+"ENDPOINTS="+strings.Join(shared.endpoints, ","))
}

// withEnv returns base with the variables of extra set ("NAME=value") or
// removed ("NAME").
func withEnv(base, extra []string) []string {
	env := append([]string{}, base...)
	for _, kv := range extra {
		name, _, set := strings.Cut(kv, "=")
		env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, name+"=") })
		if set {
			env = append(env, kv)
		}
	}
	return env
}

// start starts etcdlock with args and extra environment variables (see
// withEnv). The process is killed, if it still runs, when the test ends.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	if shared.bin == "" {
		t.Fatal("start before begin")
	}
	p.cmd = exec.Command(shared.bin, args...)
	p.cmd.Env = withEnv(baseEnv(), env)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.WaitDelay = 5 * time.Second // a stray grandchild must not hold the pipes forever
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		p.exited = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			// etcdlock runs its command in a process group of its own,
			// which SIGKILL to etcdlock does not reach.
			groups := childGroups(p.cmd.Process.Pid)
			p.cmd.Process.Kill()
			for _, pgid := range groups {
				syscall.Kill(-pgid, syscall.SIGKILL)
			}
			<-p.done
		}
	})
	return p
}

// childGroups returns the process groups that children of pid lead: the
// groups of the commands an etcdlock runs.
func childGroups(pid int) []int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var groups []int
	for _, e := range procs {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp ...", comm in parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) >= 3 && f[1] == strconv.Itoa(pid) && f[2] == e.Name() {
			groups = append(groups, child)
		}
	}
	return groups
}

// wait waits for the process to exit and returns its exit code, failing
// the test after d.
func (p *proc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("etcdlock %q still running after %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], d, p.stdout, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// expectExit waits for the process and fails the test unless it exits
// with code.
func (p *proc) expectExit(d time.Duration, code int) {
	p.t.Helper()
	if got := p.wait(d); got != code {
		p.t.Fatalf("etcdlock %q exited %d, want %d\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], got, code, p.stdout, p.stderr)
	}
}

// waitFor polls out until it contains s, and returns it; it fails the test
// after 10 s or if the process exits first without having written s.
func (p *proc) waitFor(out *syncBuffer, s string) string {
	p.t.Helper()
	var got string
	etcdtest.Eventually(p.t, 10*time.Second, func() bool {
		got = out.String()
		if strings.Contains(got, s) {
			return true
		}
		select {
		case <-p.done:
			if got = out.String(); !strings.Contains(got, s) {
				p.t.Fatalf("etcdlock %q exited %d without writing %q\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], p.cmd.ProcessState.ExitCode(), s, p.stdout, p.stderr)
			}
			return true
		default:
			return false
		}
	}, "etcdlock %q did not write %q; stdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], s, p.stdout, p.stderr)
	return got
}

// firstLine waits for the first line on stdout and returns it.
func (p *proc) firstLine() string {
	p.t.Helper()
	out := p.waitFor(p.stdout, "\n")
	return strings.SplitN(out, "\n", 2)[0]
}

// holdLock starts `etcdlock lock name` and returns it once it holds the
// lock, with the lock key it printed.
func holdLock(t *testing.T, name string) (*proc, string) {
	t.Helper()
	p := start(t, nil, "lock", name)
	return p, p.firstLine()
}

// release ends a `lock` that holds without a command, as a person would:
// with SIGINT, after which it must exit 0.
func (p *proc) release() {
	p.t.Helper()
	p.signal(syscall.SIGINT)
	p.expectExit(10*time.Second, 0)
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// runEtcdlock runs etcdlock to completion within d and returns its exit
// code and output.
func runEtcdlock(t *testing.T, d time.Duration, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, env, args...)
	code = p.wait(d)
	return code, p.stdout.String(), p.stderr.String()
}

// expectRun runs etcdlock and fails the test unless it exits with code
// within d and its stderr contains each of want.
func expectRun(t *testing.T, d time.Duration, code int, env []string, args []string, want ...string) (stdout, stderr string) {
	t.Helper()
	got, stdout, stderr := runEtcdlock(t, d, env, args...)
	if got != code {
		t.Fatalf("etcdlock %q exited %d, want %d\nstdout:\n%s\nstderr:\n%s", args, got, code, stdout, stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("etcdlock %q: stderr does not contain %q:\n%s", args, w, stderr)
		}
	}
	return stdout, stderr
}
