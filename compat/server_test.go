package compat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// newestServer is the server TestMain builds when ETCD_COMPAT_SERVER is not
// set, so that a plain `go test ./compat` runs against a real server.
const newestServer = "v3.7.3"

// endpoints are the client URLs of the server the tests share.
var endpoints []string

// TestMain starts one real etcd server process (ETCD_COMPAT_SERVER, else
// newestServer built by build-etcd.sh) on loopback, with a fresh data
// directory, runs the tests against it and kills it. With
// ETCD_COMPAT_WANT_SERVER or ETCD_COMPAT_WANT_CLIENT set (version
// prefixes such as "3.4." or "v3.5.0"), it refuses to run against another
// server or client version, so that a CI line tests what it says.
func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	bin := os.Getenv("ETCD_COMPAT_SERVER")
	if bin == "" {
		out, err := exec.Command("sh", "build-etcd.sh", newestServer).Output()
		if err != nil {
			return 0, fmt.Errorf("build etcd %s: %w", newestServer, err)
		}
		bin = strings.TrimSpace(string(out))
	}
	dir, err := os.MkdirTemp("", "concurrency-compat-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(bin, dir)
	if err != nil {
		return 0, err
	}
	defer srv.stop()
	endpoints = []string{srv.url}

	client := clientVersion()
	if want := os.Getenv("ETCD_COMPAT_WANT_CLIENT"); want != "" && !strings.HasPrefix(client, want) {
		return 0, fmt.Errorf("client is %s, want %s", client, want)
	}
	if want := os.Getenv("ETCD_COMPAT_WANT_SERVER"); want != "" && !strings.HasPrefix(srv.version, want) {
		return 0, fmt.Errorf("server is %s, want %s", srv.version, want)
	}
	fmt.Printf("compat: client go.etcd.io/etcd/api/v3 %s, server %s (%s)\n", client, srv.version, bin)
	return m.Run(), nil
}

// clientVersion is the version of etcd's API module in this test binary,
// which moves with its client module (both are required at one version in
// go.mod and go.newest.mod).
func clientVersion() string { return "v" + version.Version }

// server is one etcd server process.
type server struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	url     string
	log     string
	version string
}

// startServer starts a single-member etcd on two free loopback ports. A
// port can be taken between freePort and the server's bind, so it tries
// up to three times.
func startServer(bin, dir string) (*server, error) {
	var errs []error
	for attempt := range 3 {
		s, err := tryStart(bin, filepath.Join(dir, fmt.Sprintf("member-%d", attempt)))
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func tryStart(bin, dataDir string) (*server, error) {
	cport, err := freePort()
	if err != nil {
		return nil, err
	}
	pport, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{
		url:    "http://" + cport,
		log:    dataDir + ".log",
		exited: make(chan struct{}),
	}
	peer := "http://" + pport
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(bin,
		"--name", "compat",
		"--data-dir", dataDir,
		"--listen-client-urls", s.url,
		"--advertise-client-urls", s.url,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "compat="+peer,
		"--initial-cluster-state", "new")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	setProcAttr(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(20 * time.Second); err != nil {
		s.stop()
		b, _ := os.ReadFile(s.log)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		return nil, fmt.Errorf("etcd at %s: %w\n%s", s.url, err, b)
	}
	return s, nil
}

// waitReady polls the server's status until it answers, it exits, or d
// passes, and records its version.
func (s *server) waitReady(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.url},
		DialTimeout: time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, s.url)
		scancel()
		if err == nil {
			s.version = st.Version
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("exited: %v", s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %w", d, err)
		case <-tick.C:
		}
	}
}

// stop kills the server and waits for it to exit.
func (s *server) stop() {
	s.cmd.Process.Kill()
	<-s.exited
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// newClient returns a client of the shared server, closed when t ends.
func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// prefix is the test's own key prefix; it checks that the test left no
// key behind.
func prefix(t *testing.T) string {
	t.Helper()
	pfx := "/compat/" + t.Name() + "/"
	cli := newClient(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Errorf("count keys left under %s: %v", pfx, err)
		} else if resp.Count != 0 {
			t.Errorf("%d keys left under %s", resp.Count, pfx)
		}
	})
	return pfx
}
