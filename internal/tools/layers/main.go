// Command layers checks the floors of a package (issue 51): each of the
// package's files stands on a floor, and a file may use only the names of
// its own floor or of a floor below it. It reads the package with
// go/types, maps each use of a name to the file that defines the name,
// and prints every use of a name from a higher floor as
//
//	file:line: uses NAME (file, floor X) from floor Y
//
// then one line per pair of files, and exits 1 if there was any.
//
// The floors are read from one table, in docs/development.md, between the
// lines `<!-- layers:floors -->` and `<!-- /layers:floors -->`: one row
// per floor, ground first, whose first cell is the floor's name and whose
// second names its files in backquotes. People read the same table, so the
// docs and the check cannot disagree. The rules:
//
//   - Floors rank in the order of the table.
//   - Floors named base/sub (runners/lead, runners/shards) are siblings:
//     they rank together, and a sibling may not use another's names; they
//     share only the floors below them.
//   - The floor named observers stands beside the others: every floor
//     may use its names, and it uses none but the ground floor's (the
//     first row: the contract, whose error sentinels it labels causes by).
//   - Every non-test .go file in the package's directory must be in the
//     table (a new file must be placed), and every file in the table must
//     exist. Test files and examples are not checked.
//
// It is its own module, outside go.work, so that its dependency on
// golang.org/x/tools reaches no other module:
//
//	cd internal/tools/layers && GOWORK=off go run . ../../..
//
// or, for another package and table, `go run . DIR TABLE.md`.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	dir := "../../.."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	table := filepath.Join(dir, "docs", "development.md")
	if len(os.Args) > 2 {
		table = os.Args[2]
	}
	if len(os.Args) > 3 {
		fmt.Fprintln(os.Stderr, "usage: layers [DIR [TABLE.md]] (default: ../../.. and its docs/development.md)")
		os.Exit(2)
	}
	r, err := check(dir, table)
	if err != nil {
		fmt.Fprintln(os.Stderr, "layers:", err)
		os.Exit(2)
	}
	for _, line := range r.report() {
		fmt.Println(line)
	}
	if !r.ok() {
		os.Exit(1)
	}
}
