// Command ctxpath measures how far a reader travels to follow a context
// through a package (issue 39): from one function, it follows every call
// that passes a context.Context to a function of the same package, depth
// first in source order, each function once, and prints the files in the
// order the reader visits them, how many there are, and how many times
// the reader returns to a file already left. A tail call is no return:
// the reader comes back to a caller's file only if the caller goes on to
// call something more with a context. With CTXPATH_V set, it also prints
// the tree of functions it followed, with their files, on standard error.
//
// It is its own module, outside go.work, so that its dependency on
// golang.org/x/tools reaches no other module:
//
//	cd internal/tools/ctxpath && GOWORK=off go run . ../../.. '(*holder).lock'
package main

import (
	"fmt"
	"go/ast"
	"go/types"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/packages"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: ctxpath DIR FUNC (a package's directory, and e.g. '(*holder).lock')")
		os.Exit(2)
	}
	dir, start := os.Args[1], os.Args[2]
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo, Dir: dir}
	pkgs, err := packages.Load(cfg, ".")
	if err != nil || len(pkgs) != 1 {
		panic(fmt.Sprint(err, len(pkgs)))
	}
	p := pkgs[0]
	decls := map[*types.Func]*ast.FuncDecl{}
	files := map[*ast.FuncDecl]string{}
	var first *ast.FuncDecl
	for _, f := range p.Syntax {
		name := filepath.Base(p.Fset.Position(f.Pos()).Filename)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			obj := p.TypesInfo.Defs[fd.Name].(*types.Func)
			decls[obj] = fd
			files[fd] = name
			if fullName(obj) == start {
				first = fd
			}
		}
	}
	if first == nil {
		panic("no " + start)
	}
	isCtx := func(e ast.Expr) bool {
		t := p.TypesInfo.TypeOf(e)
		return t != nil && (t.String() == "context.Context")
	}
	seen := map[*ast.FuncDecl]bool{}
	var seq []string
	visit := func(file string) {
		if len(seq) == 0 || seq[len(seq)-1] != file {
			seq = append(seq, file)
		}
	}
	var walk func(fd *ast.FuncDecl)
	depth := 0
	walk = func(fd *ast.FuncDecl) {
		seen[fd] = true
		visit(files[fd])
		if os.Getenv("CTXPATH_V") != "" {
			fmt.Fprintf(os.Stderr, "%s%s (%s)\n", strings.Repeat("  ", depth), fd.Name.Name, files[fd])
		}
		depth++
		defer func() { depth-- }()
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			passes := false
			for _, a := range call.Args {
				if isCtx(a) {
					passes = true
				}
			}
			if !passes {
				return true
			}
			var id *ast.Ident
			switch f := ast.Unparen(call.Fun).(type) {
			case *ast.Ident:
				id = f
			case *ast.SelectorExpr:
				id = f.Sel
			case *ast.IndexExpr:
				if x, ok := f.X.(*ast.Ident); ok {
					id = x
				}
			}
			if id == nil {
				return true
			}
			fn, ok := p.TypesInfo.Uses[id].(*types.Func)
			if !ok {
				return true
			}
			fn = fn.Origin()
			callee := decls[fn]
			if callee == nil || seen[callee] {
				return true
			}
			// The reader is back in fd's file only if fd goes on to call
			// something more with a context: a tail call is no return.
			visit(files[fd])
			walk(callee)
			return true
		})
	}
	walk(first)
	distinct := map[string]bool{}
	left := map[string]bool{}
	returns := 0
	for i, f := range seq {
		if left[f] {
			returns++
		}
		distinct[f] = true
		if i > 0 {
			left[seq[i-1]] = true
		}
	}
	fmt.Printf("%d files, %d visits, %d returns to a file already left\n%s\n", len(distinct), len(seq), returns, strings.Join(seq, " → "))
}

func fullName(f *types.Func) string {
	sig := f.Type().(*types.Signature)
	if r := sig.Recv(); r != nil {
		t := r.Type()
		ptr := ""
		if pt, ok := t.(*types.Pointer); ok {
			t, ptr = pt.Elem(), "*"
		}
		return fmt.Sprintf("(%s%s).%s", ptr, t.(*types.Named).Obj().Name(), f.Name())
	}
	return f.Name()
}
