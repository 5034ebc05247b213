package upstreamtest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	etcdRecipes = `"go.etcd.io/etcd/client/v3/experimental/recipes"`
	ourRecipes  = `"github.com/seed-a9d410c6/concurrency/recipes"`
)

// TestEtcdRecipeTests runs etcd's tests of its experimental recipes
// (tests/v3/integration/clientv3/experimental/recipes: barrier, double
// barrier, queue, priority queue, locks and RWMutex) with etcd's recipes
// and concurrency packages swapped for this module's, and nothing else
// changed. Each test runs in its own process, as runEach does.
func TestEtcdRecipeTests(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	src := filepath.Join(moduleDir(t, ctx, "go.etcd.io/etcd/tests/v3"), "integration", "clientv3", "experimental", "recipes")
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), "_test.go") {
			files = append(files, e.Name())
		}
	}
	root, dir := tempModuleDir(t, ctx)
	copyFiles(t, src, dir, files, swap{etcdRecipes, ourRecipes, true}, swap{etcdPkg, ourPkg, true})
	rel, _ := filepath.Rel(root, dir)
	// The tests must reach recipes only through this module's package.
	out, err := goCmd(t, ctx, root, "list", "-test", "-deps", "-f", "{{.ImportPath}}", "./"+filepath.ToSlash(rel))
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(out)
	if !slices.Contains(deps, strings.Trim(ourRecipes, `"`)) || slices.Contains(deps, strings.Trim(etcdRecipes, `"`)) {
		t.Fatalf("etcd's recipe tests do not run on this module's recipes only:\n%s", out)
	}
	runEach(t, ctx, root, rel, testNames(t, dir, files, "^Test"))
}
