// Package etcdproc runs real etcd servers as separate processes on loopback
// ports, for the fault tests: it builds the server binary from this
// module's own dependency graph, starts clusters of it (or of another etcd
// binary, such as Debian's etcd 3.4), and stops, kills, pauses and restarts
// their members. Proxy, beside it, puts a TCP proxy between a client and a
// member that can delay, drop or blackhole the traffic.
//
// Every process is started in its own process group and with a parent-death
// signal, and Cluster.Close kills them all; callers register Close with
// t.Cleanup so that no server outlives its test, also on failure.
package etcdproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/seed-a9d410c6/concurrency/internal/testkit/loopback"
)

// ServerPackage is the main package of the etcd server in the module graph.
const ServerPackage = "go.etcd.io/etcd/server/v3"

// Build compiles the etcd server of this module's dependency graph into
// dir/etcd and returns its path. It runs the go command of the current
// toolchain in the current directory, which must be inside this module.
func Build(ctx context.Context, dir string) (string, error) {
	return GoBuild(ctx, filepath.Join(dir, "etcd"), ServerPackage)
}

// GoBuild runs `go build -o out [flags] pkg` and returns out.
func GoBuild(ctx context.Context, out, pkg string, flags ...string) (string, error) {
	args := append([]string{"build", "-o", out}, flags...)
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("etcdproc: go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// ErrConfig is returned by Start for a Config without Binary or Dir, or
// with a negative Size.
var ErrConfig = errors.New("etcdproc: invalid config")

// Config describes a cluster to start.
type Config struct {
	// Binary is the etcd server executable.
	Binary string
	// Dir holds one data directory and one log file per member. It must
	// exist; a test passes t.TempDir().
	Dir string
	// Size is the number of members (default 3).
	Size int
	// Args are extra flags for every member, e.g. "--unsafe-no-fsync".
	Args []string
}

// Cluster is a running cluster of etcd server processes. Its methods are
// safe for concurrent use.
type Cluster struct {
	cfg     Config
	Members []*Member
}

// Member is one etcd server process of a Cluster.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	DataDir   string
	LogPath   string

	binary string
	args   []string

	mu     sync.Mutex    // guards cmd, exited, paused
	cmd    *exec.Cmd     // the current process; nil when never started
	exited chan struct{} // closed when the current process has exited
	paused bool
}

// Start starts a new cluster and returns once every member answers and
// the cluster has a leader, or ctx ends. On error every process it started
// is killed.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Size == 0 {
		cfg.Size = 3
	}
	if cfg.Binary == "" || cfg.Dir == "" || cfg.Size < 0 {
		return nil, fmt.Errorf("%w: Binary %q, Dir %q, Size %d", ErrConfig, cfg.Binary, cfg.Dir, cfg.Size)
	}
	ports, err := loopback.Ports(2 * cfg.Size)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	var initial []string
	for i := 0; i < cfg.Size; i++ {
		name := fmt.Sprintf("m%d", i)
		m := &Member{
			Name:      name,
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			DataDir:   filepath.Join(cfg.Dir, name+".etcd"),
			LogPath:   filepath.Join(cfg.Dir, name+".log"),
		}
		initial = append(initial, name+"="+m.PeerURL)
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		m.binary = cfg.Binary
		m.args = append(m.flags(initial, "new"), "--initial-cluster-token", "etcdproc-"+filepath.Base(cfg.Dir))
		m.args = append(m.args, cfg.Args...)
		if err := m.start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Endpoints returns the client URLs of the members, in member order.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Close kills every member (resuming paused ones first, so that they die
// at once) and waits for the processes to exit. Data directories are left
// to the caller's Dir. Close may be called more than once.
func (c *Cluster) Close() {
	for _, m := range c.Members {
		m.Kill()
	}
}

// listed reports whether the member list that cli gets has member id.
func listed(ctx context.Context, cli *clientv3.Client, id uint64) (bool, error) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.MemberList(lctx)
	if err != nil {
		return false, err
	}
	for _, mm := range resp.Members {
		if mm.ID == id {
			return true, nil
		}
	}
	return false, nil
}

// waitListed waits until the member list of each of endpoints, asked
// through that member alone, has member id, or until 30 s or ctx end.
func (c *Cluster) waitListed(ctx context.Context, endpoints []string, id uint64) error {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, ep := range endpoints {
		cli, err := c.Client(ep)
		if err != nil {
			return err
		}
		for ok, _ := listed(wctx, cli, id); !ok; ok, _ = listed(wctx, cli, id) {
			select {
			case <-wctx.Done():
				cli.Close()
				return fmt.Errorf("etcdproc: %s does not list the new member %x: %w", ep, id, wctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		cli.Close()
	}
	return nil
}

// flags are the member's server flags for its name, directory and URLs,
// in a cluster of the initial members (name=peer URL) in state ("new" or
// "existing").
func (m *Member) flags(initial []string, state string) []string {
	return []string{
		"--name", m.Name,
		"--data-dir", m.DataDir,
		"--listen-client-urls", m.ClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", strings.Join(initial, ","),
		"--initial-cluster-state", state,
		"--logger", "zap",
		"--log-level", "warn",
	}
}

// start starts the member's process, which must not be running.
func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil && !isClosed(m.exited) {
		return fmt.Errorf("etcdproc: %s is already running", m.Name)
	}
	log, err := os.OpenFile(m.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own copy
	fmt.Fprintf(log, "==== etcdproc: start %s at %s\n", m.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(m.binary, m.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = ProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcdproc: start %s: %w", m.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	m.cmd, m.exited, m.paused = cmd, exited, false
	return nil
}

// Running reports whether the member's process is alive (possibly paused).
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil && !isClosed(m.exited)
}

// Paused reports whether the member is stopped with SIGSTOP.
func (m *Member) Paused() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paused && m.cmd != nil && !isClosed(m.exited)
}

// Pid returns the process ID of the running member, or 0.
func (m *Member) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || isClosed(m.exited) {
		return 0
	}
	return m.cmd.Process.Pid
}

// signal sends sig to the member's process group and returns the channel
// closed when the process exits, or nil if it is not running.
func (m *Member) signal(sig syscall.Signal) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || isClosed(m.exited) {
		return nil
	}
	syscall.Kill(-m.cmd.Process.Pid, sig)
	switch sig {
	case syscall.SIGSTOP:
		m.paused = true
	case syscall.SIGCONT:
		m.paused = false
	}
	return m.exited
}

// Kill kills the member with SIGKILL (kill -9) and waits for it to exit.
// It does nothing if the member is not running.
func (m *Member) Kill() {
	m.signal(syscall.SIGCONT)
	if exited := m.signal(syscall.SIGKILL); exited != nil {
		<-exited
	}
}

// Stop stops the member with SIGTERM, as an operator would, and kills it
// if it has not exited after 10 seconds; it reports whether it had to.
func (m *Member) Stop() (killed bool) {
	m.signal(syscall.SIGCONT)
	exited := m.signal(syscall.SIGTERM)
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	case <-time.After(10 * time.Second):
		m.Kill()
		return true
	}
}

// StopAll stops every member at once with Stop, so that none waits for a
// quorum that the others are leaving, and returns how many had to be
// killed.
func (c *Cluster) StopAll() int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	killed := 0
	for _, m := range c.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.Stop() {
				mu.Lock()
				killed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return killed
}

// Restart starts the member again on its data directory, after Kill or
// Stop. It returns once the process is started, not once it serves.
func (m *Member) Restart() error { return m.start() }

// Pause stops the member with SIGSTOP and returns once all its threads
// have stopped (or after 5 seconds); Resume continues it.
func (m *Member) Pause() {
	if m.signal(syscall.SIGSTOP) != nil {
		WaitStopped(m.Pid(), 5*time.Second)
	}
}

// Resume continues a member stopped by Pause.
func (m *Member) Resume() { m.signal(syscall.SIGCONT) }

// Client returns a client of the given endpoints (default: every member)
// with short dial and keepalive timeouts, so that it notices a dead or
// paused member quickly. The caller closes it.
func (c *Cluster) Client(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	return clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
}

// Status is one member's view of the cluster.
type Status struct {
	ID, Leader uint64
	Revision   int64
}

// Status asks every running, unpaused member for its status, each bounded
// by 1 second. Members that do not answer are absent from the map.
func (c *Cluster) Status(ctx context.Context, cli *clientv3.Client) map[int]Status {
	out := make(map[int]Status)
	for i, m := range c.Members {
		if !m.Running() || m.Paused() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := cli.Status(sctx, m.ClientURL)
		cancel()
		if err == nil {
			out[i] = Status{ID: resp.Header.MemberId, Leader: resp.Leader, Revision: resp.Header.Revision}
		}
	}
	return out
}

// Leader returns the index of the member that leads the cluster, as every
// answering member agrees, or -1 if there is none or they disagree.
func (c *Cluster) Leader(ctx context.Context, cli *clientv3.Client) int {
	st := c.Status(ctx, cli)
	leader := -1
	var lid uint64
	for i, s := range st {
		if s.Leader == 0 || (lid != 0 && s.Leader != lid) {
			return -1
		}
		lid = s.Leader
		if s.ID == s.Leader {
			leader = i
		}
	}
	return leader
}

// WaitHealthy waits until every member runs, answers its status with the
// same leader, and a linearizable read through every member succeeds; or
// until ctx ends. Each poll is bounded; there is no sleep-based guess.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	cli, err := c.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	var last error
	for {
		last = c.healthy(ctx, cli)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdproc: cluster not healthy: %w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) healthy(ctx context.Context, cli *clientv3.Client) error {
	for _, m := range c.Members {
		if !m.Running() {
			return fmt.Errorf("%s is not running; the end of its log: %s", m.Name, logTail(m.LogPath, 600))
		}
		if m.Paused() {
			return fmt.Errorf("%s is paused", m.Name)
		}
	}
	st := c.Status(ctx, cli)
	if len(st) != len(c.Members) {
		return fmt.Errorf("%d of %d members answer", len(st), len(c.Members))
	}
	if c.Leader(ctx, cli) < 0 {
		return errors.New("no agreed leader")
	}
	for _, m := range c.Members {
		one, err := c.Client(m.ClientURL)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = one.Get(rctx, "etcdproc-health")
		cancel()
		one.Close()
		if err != nil {
			return fmt.Errorf("%s: read: %w", m.Name, err)
		}
	}
	return nil
}

// logTail returns the last n bytes of the file at path, or the error
// reading it.
func logTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	b := make([]byte, min(n, st.Size()))
	if _, err := f.ReadAt(b, st.Size()-int64(len(b))); err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(b))
}

func isClosed(c chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Replace replaces member i with a new, empty member at the same URLs, as
// an operator replaces a failed machine: it removes the member from the
// cluster, kills its process, deletes its data directory, adds a new
// member with the same peer URL, and starts it, named after the old one
// with a suffix, to join the cluster as it is. It talks to the cluster
// through the other members. It returns once the new process is started,
// not once it serves (see WaitHealthy). The cluster has one member fewer
// while it runs; the caller must not use member i meanwhile.
func (c *Cluster) Replace(ctx context.Context, i int) error {
	m := c.Members[i]
	// The requests go to the other members: the one removed stops as soon
	// as it applies its removal, and may not answer.
	var others []string
	for j, o := range c.Members {
		if j != i {
			others = append(others, o.ClientURL)
		}
	}
	cli, err := c.Client(others...)
	if err != nil {
		return err
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	st, err := cli.Status(sctx, m.ClientURL)
	cancel()
	if err != nil {
		return fmt.Errorf("etcdproc: status of %s: %w", m.Name, err)
	}
	old := st.Header.MemberId
	// A removal whose reply is lost (a leader change) may have been
	// applied: the membership decides.
	for deadline := time.Now().Add(20 * time.Second); ; {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = cli.MemberRemove(rctx, old)
		cancel()
		if err != nil {
			// On an error of its own, the list says nothing: try again.
			if still, lerr := listed(ctx, cli, old); lerr == nil && !still {
				err = nil
			}
		}
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("etcdproc: remove %s (%x): %w", m.Name, old, err)
	}
	m.Kill()
	if err := os.RemoveAll(m.DataDir); err != nil {
		return err
	}
	// A removed member's peer URL may be added again once it is gone from
	// the membership; etcd refuses the add while the removal is not yet
	// applied everywhere, so try for a while.
	var added *clientv3.MemberAddResponse
	for deadline := time.Now().Add(20 * time.Second); ; {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		added, err = cli.MemberAdd(actx, []string{m.PeerURL})
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("etcdproc: add a member at %s: %w", m.PeerURL, err)
	}
	// The new member asks the others for the membership when it starts,
	// and exits ("member count is unequal") if the one it asks has not yet
	// applied the add: start it only once every other member lists it.
	if err := c.waitListed(ctx, others, added.Member.ID); err != nil {
		return err
	}
	base, _, _ := strings.Cut(m.Name, "r")
	name := fmt.Sprintf("%sr%x", base, added.Member.ID&0xffff)
	var initial []string
	for _, am := range added.Members {
		n := am.Name
		if am.ID == added.Member.ID {
			n = name
		}
		for _, u := range am.PeerURLs {
			initial = append(initial, n+"="+u)
		}
	}
	m.mu.Lock()
	m.Name = name
	m.DataDir = filepath.Join(c.cfg.Dir, name+".etcd")
	m.args = append(m.flags(initial, "existing"), c.cfg.Args...)
	m.mu.Unlock()
	return m.start()
}
