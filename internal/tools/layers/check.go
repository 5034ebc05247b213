package main

// This file holds the check: the package read with go/types, each use of
// a name mapped to the file that defines it, and the uses that go the
// wrong way.

import (
	"cmp"
	"fmt"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// use is one use, in file at line, of name, defined in def.
type use struct {
	file string
	line int
	name string
	def  string
}

// result is what check found: files the table does not place (or places
// but are gone), and the uses that go the wrong way.
type result struct {
	floors   map[string]floor
	unplaced []string
	wrong    []use
}

func (r *result) ok() bool { return len(r.unplaced) == 0 && len(r.wrong) == 0 }

// check reads the table at table and the package in dir, and returns
// what breaks the floors. An error means that it could not check.
func check(dir, table string) (*result, error) {
	f, err := os.Open(table)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	floors, err := readFloors(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", table, err)
	}
	r := &result{floors: floors}
	if r.unplaced, err = unplaced(dir, floors); err != nil {
		return nil, err
	}
	uses, err := crossFileUses(dir)
	if err != nil {
		return nil, err
	}
	for _, u := range uses {
		from, okFrom := floors[u.file]
		to, okTo := floors[u.def]
		if okFrom && okTo && !from.mayUse(to) {
			r.wrong = append(r.wrong, u)
		}
	}
	return r, nil
}

// unplaced lists the package's non-test files that the table does not
// name, and the files it names that are not there.
func unplaced(dir string, floors map[string]floor) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var out []string
	there := map[string]bool{}
	for _, p := range paths {
		name := filepath.Base(p)
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		there[name] = true
		if _, ok := floors[name]; !ok {
			out = append(out, name+": on no floor of the table (place it)")
		}
	}
	for name := range floors {
		if !there[name] {
			out = append(out, name+": in the table, but not in "+dir)
		}
	}
	slices.Sort(out)
	return out, nil
}

// crossFileUses loads the package in dir (without its tests) and returns
// every use of one of its names outside the file that defines it.
func crossFileUses(dir string) ([]use, error) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo, Dir: dir}
	pkgs, err := packages.Load(cfg, ".")
	if err != nil {
		return nil, err
	}
	if len(pkgs) != 1 {
		return nil, fmt.Errorf("%s: %d packages, want 1", dir, len(pkgs))
	}
	p := pkgs[0]
	if len(p.Errors) > 0 {
		return nil, fmt.Errorf("%s: %v", dir, p.Errors[0])
	}
	owners := fieldOwners(p.Types)
	var out []use
	for id, obj := range p.TypesInfo.Uses {
		if obj.Pkg() != p.Types || !obj.Pos().IsValid() {
			continue
		}
		at, def := p.Fset.Position(id.Pos()), p.Fset.Position(obj.Pos())
		if at.Filename == def.Filename {
			continue
		}
		out = append(out, use{file: filepath.Base(at.Filename), line: at.Line, name: qualified(obj, owners), def: filepath.Base(def.Filename)})
	}
	slices.SortFunc(out, func(a, b use) int {
		return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.line, b.line), cmp.Compare(a.name, b.name))
	})
	return slices.Compact(out), nil // a name used twice on a line is one use
}

// fieldOwners maps the fields of the package's named struct types to
// their types' names, so that a field is reported as Type.field.
func fieldOwners(pkg *types.Package) map[*types.Var]string {
	owners := map[*types.Var]string{}
	for _, n := range pkg.Scope().Names() {
		tn, ok := pkg.Scope().Lookup(n).(*types.TypeName)
		if !ok {
			continue
		}
		if st, ok := tn.Type().Underlying().(*types.Struct); ok {
			for f := range st.Fields() {
				owners[f] = n
			}
		}
	}
	return owners
}

// qualified names obj as a reader looks for it: a method or field with
// its type (Session.Close, hold.key), anything else by its name.
func qualified(obj types.Object, owners map[*types.Var]string) string {
	switch o := obj.(type) {
	case *types.Func:
		if recv := o.Origin().Signature().Recv(); recv != nil {
			t := recv.Type()
			if p, ok := t.(*types.Pointer); ok {
				t = p.Elem()
			}
			if n, ok := t.(interface{ Obj() *types.TypeName }); ok {
				return n.Obj().Name() + "." + o.Name()
			}
		}
	case *types.Var:
		if owner, ok := owners[o.Origin()]; ok {
			return owner + "." + o.Name()
		}
	}
	return obj.Name()
}

// report is what the command prints: the table's problems, each wrong
// use, and then each pair of files with the names one takes from the
// other.
func (r *result) report() []string {
	lines := slices.Clone(r.unplaced)
	type pair struct{ file, def string }
	names := map[pair][]string{}
	var pairs []pair
	for _, u := range r.wrong {
		from, to := r.floors[u.file], r.floors[u.def]
		lines = append(lines, fmt.Sprintf("%s:%d: uses %s (%s, floor %s) from floor %s", u.file, u.line, u.name, u.def, to.name, from.name))
		k := pair{u.file, u.def}
		if _, ok := names[k]; !ok {
			pairs = append(pairs, k)
		}
		if !slices.Contains(names[k], u.name) {
			names[k] = append(names[k], u.name)
		}
	}
	if len(r.wrong) > 0 {
		lines = append(lines, fmt.Sprintf("%d wrong-way uses, in %d pairs of files:", len(r.wrong), len(pairs)))
	}
	for _, k := range pairs {
		lines = append(lines, fmt.Sprintf("  %s (%s) → %s (%s): %s", k.file, r.floors[k.file].name, k.def, r.floors[k.def].name, strings.Join(names[k], ", ")))
	}
	return lines
}
