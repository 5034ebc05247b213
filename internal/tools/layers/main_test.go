package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const fixture = "testdata/fixture"

// fixtureTable writes a table of the fixture's floors, one row per
// "floor file" pair, and returns its path.
func fixtureTable(t *testing.T, rows ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("text before\n\n" + beginMark + "\n| Floor | Files | What |\n|---|---|---|\n")
	for _, r := range rows {
		floor, file, _ := strings.Cut(r, " ")
		b.WriteString("| `" + floor + "` | `" + file + "` | |\n")
	}
	b.WriteString(endMark + "\n\ntext after\n")
	p := filepath.Join(t.TempDir(), "floors.md")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, table string) []string {
	t.Helper()
	r, err := check(fixture, table)
	if err != nil {
		t.Fatal(err)
	}
	return r.report()
}

// The fixture's own table: ground.go uses Right, a floor up.
func TestFixtureFailsOnce(t *testing.T) {
	got := run(t, filepath.Join(fixture, "floors.md"))
	want := []string{
		"ground.go:9: uses Right (right.go, floor top/right) from floor ground",
		"1 wrong-way uses, in 1 pairs of files:",
		"  ground.go (ground) → right.go (top/right): Right",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Siblings share only lower floors, both ways: with ground.go beside
// left.go, its use of right.go's Right is wrong, and so is right.go's use
// of its Ground, though all rank as top.
func TestSiblingsMayNotUseEachOther(t *testing.T) {
	got := run(t, fixtureTable(t, "base", "top/left ground.go", "top/left left.go", "top/right right.go", "observers observe.go"))
	want := []string{
		"ground.go:9: uses Right (right.go, floor top/right) from floor top/left",
		"right.go:4: uses Ground (ground.go, floor top/left) from floor top/right",
	}
	if len(got) != 5 || !slices.Equal(got[:2], want) {
		t.Fatalf("got\n%s", strings.Join(got, "\n"))
	}
}

// With every file on one floor, nothing is wrong: the check passes.
func TestOneFloorPasses(t *testing.T) {
	r, err := check(fixture, fixtureTable(t, "all ground.go", "all left.go", "all right.go", "observers observe.go"))
	if err != nil || !r.ok() {
		t.Fatalf("err %v, report %q", err, r.report())
	}
}

// A file the table does not place, and one it places that is not there,
// are both reported, and fail the check.
func TestEveryFilePlaced(t *testing.T) {
	r, err := check(fixture, fixtureTable(t, "ground ground.go", "top left.go", "top gone.go", "observers observe.go"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"gone.go: in the table, but not in " + fixture, "right.go: on no floor of the table (place it)"}
	if !slices.Equal(r.unplaced, want) || r.ok() {
		t.Fatalf("unplaced %q, want %q", r.unplaced, want)
	}
}

func TestMayUse(t *testing.T) {
	files, err := readFloors(strings.NewReader(beginMark + "\n| `contract` | `contract.go` | |\n| `session` | `session.go` | |\n" +
		"| `runners/lead` | `lead.go` | |\n| `runners/shards` | `shard.go` | |\n| `observers` | `observers.go` | |\n" + endMark))
	if err != nil {
		t.Fatal(err)
	}
	f := map[string]floor{}
	for _, fl := range files {
		f[fl.name] = fl
	}
	if f["runners/lead"].rank != f["runners/shards"].rank || f["session"].rank <= f["contract"].rank {
		t.Fatalf("ranks %v", f)
	}
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{"session", "contract", true},
		{"contract", "session", false},
		{"session", "session", true},
		{"runners/lead", "session", true},
		{"runners/shards", "runners/lead", false},
		{"runners/lead", "runners/shards", false},
		{"contract", "observers", true},
		{"runners/shards", "observers", true},
		{"observers", "contract", true},
		{"observers", "session", false},
		{"observers", "runners/lead", false},
	} {
		if got := f[c.from].mayUse(f[c.to]); got != c.ok {
			t.Errorf("%s may use %s: %v, want %v", c.from, c.to, got, c.ok)
		}
	}
}

// A table that is not closed, or names a file twice, is an error, not an
// empty set of floors that would pass.
func TestBadTables(t *testing.T) {
	for _, table := range []string{
		"no table at all\n",
		beginMark + "\n| `a` | `x.go` | |\n",
		beginMark + "\n| `a` | `x.go` | |\n| `b` | `x.go` | |\n" + endMark + "\n",
		beginMark + "\n| two words | `x.go` | |\n" + endMark + "\n",
	} {
		if _, err := readFloors(strings.NewReader(table)); err == nil {
			t.Errorf("no error for %q", table)
		}
	}
}
