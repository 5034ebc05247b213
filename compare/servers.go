package compare

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Servers is a set of server processes of one system on 127.0.0.1.
type Servers struct {
	System string   // "etcd", "redis" or "zookeeper"
	Procs  []*Proc  // one per server
	Addrs  []string // client host:port, in Procs order
	// Master is, for Redis with a replica, the index of the current master.
	Master int
	dir    string
}

// Close kills every server.
func (s *Servers) Close() {
	for _, p := range s.Procs {
		p.Kill()
	}
}

// BuildEtcd compiles the etcd server of this module's graph (the version
// the root module tests against) into dir/etcd.
func BuildEtcd(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "etcd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "go.etcd.io/etcd/server/v3")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compare: go build etcd: %w\n%s", err, b)
	}
	return out, nil
}

// StartEtcd starts an n-member etcd cluster from binary bin with its data
// in dir and waits until it has a leader. etcd keeps its defaults (fsync
// on, 100 ms heartbeat, 1 s election timeout).
func StartEtcd(ctx context.Context, bin, dir string, n int) (*Servers, error) {
	ports, err := Ports(2 * n)
	if err != nil {
		return nil, err
	}
	s := &Servers{System: "etcd", dir: dir}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i, ports[2*i+1]))
	}
	for i := range n {
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		name := fmt.Sprintf("e%d", i)
		p := NewProc("etcd-"+name, filepath.Join(dir, name+".log"), bin,
			"--name", name, "--data-dir", filepath.Join(dir, name+".etcd"),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "compare-"+filepath.Base(dir),
			"--log-level", "warn")
		s.Procs = append(s.Procs, p)
		s.Addrs = append(s.Addrs, fmt.Sprintf("127.0.0.1:%d", ports[2*i]))
		if err := p.Start(); err != nil {
			s.Close()
			return nil, err
		}
	}
	if _, err := s.EtcdLeader(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// EtcdLeader polls the members until one reports a leader that answers,
// and returns that leader's index.
func (s *Servers) EtcdLeader(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		for i, a := range s.Addrs {
			if s.Procs[i].Pid() == 0 {
				continue
			}
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + a}, DialTimeout: time.Second, Logger: zap.NewNop()})
			if err != nil {
				continue
			}
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, "http://"+a)
			scancel()
			cli.Close()
			if err == nil && st.Leader != 0 && st.Header.MemberId == st.Leader {
				return i, nil
			}
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("compare: etcd has no leader: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// RedisServer is the redis-server binary the harness starts.
func RedisServer() string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	return "/usr/bin/redis-server"
}

// StartRedis starts n Redis servers with their default durability (no
// AOF) and no snapshots. With replica, server 1 replicates server 0 and n
// must be 2; otherwise the servers are independent, as Redlock wants.
func StartRedis(ctx context.Context, dir string, n int, replica bool) (*Servers, error) {
	ports, err := Ports(n)
	if err != nil {
		return nil, err
	}
	s := &Servers{System: "redis", dir: dir}
	for i := range n {
		s.Addrs = append(s.Addrs, fmt.Sprintf("127.0.0.1:%d", ports[i]))
	}
	for i := range n {
		var of string
		if replica && i > 0 {
			of = s.Addrs[0]
		}
		p := s.redisProc(i, of)
		s.Procs = append(s.Procs, p)
		if err := p.Start(); err != nil {
			s.Close()
			return nil, err
		}
	}
	for i := range n {
		if err := s.WaitRedis(ctx, i, replica && i > 0); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// redisProc describes Redis server i, a replica of `of` unless of is "".
func (s *Servers) redisProc(i int, of string) *Proc {
	_, port, _ := net.SplitHostPort(s.Addrs[i])
	d := filepath.Join(s.dir, fmt.Sprintf("r%d", i))
	os.MkdirAll(d, 0o755)
	args := []string{"--port", port, "--bind", "127.0.0.1", "--dir", d,
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no",
		"--logfile", ""}
	if of != "" {
		h, p, _ := net.SplitHostPort(of)
		args = append(args, "--replicaof", h, p)
	}
	return NewProc(fmt.Sprintf("redis-%d", i), filepath.Join(s.dir, fmt.Sprintf("r%d.log", i)), RedisServer(), args...)
}

// WaitRedis polls server i until it answers PING and, for a replica, until
// its link to the master is up.
func (s *Servers) WaitRedis(ctx context.Context, i int, replica bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: s.Addrs[i], MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	for {
		if err := c.Ping(ctx).Err(); err == nil {
			if !replica {
				return nil
			}
			info, err := c.Info(ctx, "replication").Result()
			if err == nil && strings.Contains(info, "master_link_status:up") {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("compare: redis %s not ready: %w", s.Addrs[i], ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Promote makes Redis server i a master (REPLICAOF NO ONE), as Sentinel
// does in a failover.
func (s *Servers) Promote(ctx context.Context, i int) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addrs[i], MaxRetries: -1})
	defer c.Close()
	if err := c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		return err
	}
	s.Master = i
	return nil
}

// RestartRedis starts Redis server i again with an empty data set, as a
// replica of the current master when asReplica is set.
func (s *Servers) RestartRedis(ctx context.Context, i int, asReplica bool) error {
	of := ""
	if asReplica {
		of = s.Addrs[s.Master]
	}
	s.Procs[i] = s.redisProc(i, of)
	if err := s.Procs[i].Start(); err != nil {
		return err
	}
	return s.WaitRedis(ctx, i, asReplica)
}

// ZooKeeperJar is Debian's ZooKeeper server jar.
const ZooKeeperJar = "/usr/share/java/zookeeper.jar"

// StartZooKeeper starts an n-server ensemble with tickTime 500 ms (so that
// a 2 s session timeout is allowed; the default 2000 ms sets a 4 s
// minimum) and waits until every server serves clients. Four-letter words
// are limited to srvr, which the harness uses to find the leader.
func StartZooKeeper(ctx context.Context, dir string, n int) (*Servers, error) {
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		return nil, fmt.Errorf("compare: ZooKeeper not installed (sh compare/setup.sh): %w", err)
	}
	ports, err := Ports(3 * n)
	if err != nil {
		return nil, err
	}
	s := &Servers{System: "zookeeper", dir: dir}
	var quorum []string
	for i := range n {
		quorum = append(quorum, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[3*i+1], ports[3*i+2]))
		s.Addrs = append(s.Addrs, fmt.Sprintf("127.0.0.1:%d", ports[3*i]))
	}
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("z%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(d, "myid"), fmt.Appendf(nil, "%d\n", i+1), 0o644); err != nil {
			return nil, err
		}
		cfg := fmt.Sprintf(`tickTime=500
initLimit=20
syncLimit=5
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=srvr
%s
`, d, ports[3*i], strings.Join(quorum, "\n"))
		cfgPath := filepath.Join(d, "zoo.cfg")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return nil, err
		}
		p := NewProc(fmt.Sprintf("zk-%d", i+1), filepath.Join(dir, fmt.Sprintf("z%d.log", i)), "java",
			"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dzookeeper.log.dir="+d, "-Dzookeeper.root.logger=WARN,CONSOLE",
			"-cp", "/etc/zookeeper/conf:"+ZooKeeperJar,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath)
		s.Procs = append(s.Procs, p)
		if err := p.Start(); err != nil {
			s.Close()
			return nil, err
		}
	}
	for i := range n {
		if err := s.WaitZooKeeper(ctx, i); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// WaitZooKeeper polls server i with a client connect and a read until it
// serves, which it does only once it has joined a quorum.
func (s *Servers) WaitZooKeeper(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		c, _, err := zk.Connect([]string{s.Addrs[i]}, 4*time.Second, zk.WithLogger(nopLogger{}))
		if err == nil {
			ok := make(chan error, 1)
			go func() {
				_, _, err := c.Exists("/")
				ok <- err
			}()
			select {
			case err = <-ok:
			case <-time.After(time.Second):
				err = errors.New("no answer")
			}
			c.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("compare: zookeeper %s not ready: %w", s.Addrs[i], ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ZooKeeperLeader asks every running server for its mode (srvr) and
// returns the leader's index.
func (s *Servers) ZooKeeperLeader(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		for i, a := range s.Addrs {
			if s.Procs[i].Pid() == 0 {
				continue
			}
			if mode, _ := fourLetter(a, "srvr"); strings.Contains(mode, "Mode: leader") {
				return i, nil
			}
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("compare: zookeeper has no leader: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func fourLetter(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(cmd)); err != nil {
		return "", err
	}
	var b strings.Builder
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String(), nil
}

// nopLogger silences go-zookeeper's connection log.
type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// ZooKeeperVersion is what a running server says of its version (srvr).
func (s *Servers) ZooKeeperVersion() string {
	for _, a := range s.Addrs {
		out, err := fourLetter(a, "srvr")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(l, "Zookeeper version: "); ok {
				return v
			}
		}
	}
	return "unknown"
}
