// Package upstreamtest proves the drop-in promise against etcd's own code:
// it runs etcd's tests and examples for its concurrency package against
// this package, with only the import path changed (integration_test.go
// adds etcd's STM and election integration tests, and the tests of etcd's
// gRPC Lock and Election services built on this package; recipes_test.go
// runs etcd's recipe tests against this module's recipes), and it runs
// `etcdctl lock`, built from this module's graph, against this package's
// Mutex on the same lock name. Nothing of etcd's is copied into this repository: the
// files are read from the module cache when the test runs.
package upstreamtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	etcdPkg = `"go.etcd.io/etcd/client/v3/concurrency"`
	ourPkg  = `"github.com/seed-a9d410c6/concurrency"`
)

// etcdFiles are etcd's tests and examples of Session, Mutex, Election and
// STM, in go.etcd.io/etcd/tests/v3/integration/clientv3/concurrency.
var etcdFiles = []string{
	"main_test.go",
	"session_test.go",
	"mutex_test.go",
	"election_test.go",
	"example_mutex_test.go",
	"example_election_test.go",
	"example_stm_test.go",
}

// pkgDir is this package's directory: etcdtest.Main changes the working
// directory before the tests run.
var pkgDir, _ = os.Getwd()

// goCmd runs the go command in dir (default: this package's) and returns
// its combined output.
func goCmd(t *testing.T, ctx context.Context, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	if dir == "" {
		cmd.Dir = pkgDir
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// moduleDir returns the directory of a module of this module's graph.
func moduleDir(t *testing.T, ctx context.Context, mod string) string {
	t.Helper()
	out, err := goCmd(t, ctx, "", "list", "-m", "-f", "{{.Dir}}", mod)
	if err != nil {
		t.Fatalf("go list -m %s: %v\n%s", mod, err, out)
	}
	return strings.TrimSpace(out)
}

func TestEtcdTestsAgainstThisPackage(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	src := filepath.Join(moduleDir(t, ctx, "go.etcd.io/etcd/tests/v3"), "integration", "clientv3", "concurrency")
	root := filepath.Join(moduleDir(t, ctx, hostModule))

	// A directory whose name starts with "_" is part of the module (so it
	// can import this package) but not of ./... patterns.
	dir, err := os.MkdirTemp(root, "_etcdtests")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, f := range etcdFiles {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if f != "main_test.go" && !bytes.Contains(b, []byte(etcdPkg)) {
			t.Fatalf("%s does not import etcd's concurrency package", f)
		}
		b = bytes.ReplaceAll(b, []byte(etcdPkg), []byte(ourPkg))
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := goCmd(t, ctx, root, "test", "-count=1", "-v", "./"+filepath.Base(dir))
	var summary []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "FAIL") {
			summary = append(summary, l)
		}
	}
	if err != nil {
		t.Fatalf("etcd's tests failed against this package: %v\n%s", err, out)
	}
	passed := 0
	for _, l := range summary {
		if strings.HasPrefix(l, "--- PASS") {
			passed++
		}
	}
	if passed == 0 {
		t.Fatalf("no test of etcd's ran:\n%s", out)
	}
	t.Logf("etcd's tests with the import path swapped:\n%s", strings.Join(summary, "\n"))
}
