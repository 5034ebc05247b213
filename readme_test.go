package concurrency_test

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// readmeMarker precedes, in README.md, the code block that must be
// example_readme_test.go after its package clause.
const readmeMarker = "<!-- example_readme_test.go: readme_test.go checks that the block below is that file -->"

// TestREADMEExample checks that the README's example is the code of
// Example (example_readme_test.go), which go test compiles and runs
// against a real etcd, so that the README never shows code that does not
// run.
func TestREADMEExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	got, err := readmeBlock(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	_, want, ok := strings.Cut(string(src), "package concurrency_test\n")
	if !ok {
		t.Fatal("example_readme_test.go: no package clause")
	}
	want = strings.TrimSpace(want)
	if got == want {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Fatalf("README.md's example differs from example_readme_test.go at line %d of the block:\nREADME: %q\nfile:   %q", i+1, gl, wl)
		}
	}
}

// readmeBlock returns the text of the ```go block that follows
// readmeMarker, without its fences.
func readmeBlock(readme string) (string, error) {
	_, after, ok := strings.Cut(readme, readmeMarker+"\n")
	if !ok {
		return "", errors.New("README.md: marker not found: " + readmeMarker)
	}
	body, ok := strings.CutPrefix(after, "```go\n")
	if !ok {
		return "", errors.New("README.md: no ```go block right after the marker")
	}
	body, _, ok = strings.Cut(body, "\n```\n")
	if !ok {
		return "", errors.New("README.md: the example's block is not closed")
	}
	return strings.TrimSpace(body), nil
}
