package concurrency_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestMain runs the examples and tests of this package against one real
// etcd server process on loopback, started by compat/test-etcd.sh (which
// builds etcd outside this module's graph, so that go.mod requires no
// server). Without a server the tests fail with the script's reason: they
// are never skipped.
func TestMain(m *testing.M) {
	flag.Parse()
	if w := flag.Lookup("test.fuzzworker"); w != nil && w.Value.String() == "true" {
		// A worker of go test -fuzz runs only the fuzz target, which
		// needs no server: one per worker process would be wasted.
		os.Exit(m.Run())
	}
	stop, err := startEtcd(filepath.Join("compat", "test-etcd.sh"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "concurrency tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// etcdEndpoint is the client URL of the server TestMain started.
var etcdEndpoint string

// endpoints returns the client URLs the examples dial.
func endpoints() []string { return []string{etcdEndpoint} }

// newClient returns a client of the server that is closed when the test
// ends.
func newClient(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startEtcd runs script with a temporary directory and two free loopback
// URLs, waits until the server answers, sets etcdEndpoint and returns the
// function that stops the server and removes the directory.
func startEtcd(script string) (stop func(), err error) {
	dir, err := os.MkdirTemp("", "concurrency-test-etcd")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	client, err := freeURL()
	if err != nil {
		return nil, err
	}
	peer, err := freeURL()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("sh", script, dir, client, peer)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop = func() {
		in.Close() // the script stops the server when its input closes
		cmd.Wait()
		os.RemoveAll(dir)
	}
	// The script prints "started" once the server runs, after building it
	// if need be (minutes the first time), or exits with its reason.
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "started\n" {
		stop()
		return nil, errors.New("no etcd server: " + script + " failed (its reason is above)")
	}
	if err := waitReady(client); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
		stop()
		return nil, fmt.Errorf("etcd at %s: %w; its log:\n%s", client, err, log)
	}
	etcdEndpoint = client
	return stop, nil
}

// waitReady polls the server's status for up to a minute.
func waitReady(endpoint string) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Status(ctx, endpoint)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeURL returns a loopback URL whose port was free a moment ago.
func freeURL() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return "http://" + l.Addr().String(), nil
}

// testContext returns a context cancelled when the test ends (the
// library's go line, 1.23, predates testing.T.Context).
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}
