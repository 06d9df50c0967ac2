package pglease

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The recipes (the elector, Run and TryRun, LeaseSet) are built on the
// exported API of Client and Lease plus the client's two hooks (hooks.go),
// as etcd's mutex and election are built on its Session. This test keeps
// that rule: it type-checks the package and fails when a recipe file
// reaches an unexported field or method of Client or Lease other than the
// hooks and the known reaches listed below.

// recipeFiles are the recipes, whole files.
var recipeFiles = []string{"elector.go", "elector_events.go", "elector_health.go", "leaseset.go", "run.go"}

// recipeHooks are the unexported methods of Client that any recipe may call.
var recipeHooks = []string{"Client.changes", "Client.recipe"}

// recipeKnownReaches are the other reaches that remain, each in one
// function of one file, with why. The list only shrinks: a reach listed
// here that the code no longer makes fails the test too. It is empty: what
// the elector read of its client's settings, option rules and observer
// queue, and what a set used of its leases to end them with its cause,
// come through recipe (hooks.go).
var recipeKnownReaches = map[string]string{}

func TestRecipesUseTheExportedAPIAndTwoHooks(t *testing.T) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name != "pglease" {
			continue
		}
		files = append(files, f)
	}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{
		Importer: importer.ForCompiler(fset, "source", nil),
		// A file for another platform (sessionfile_*.go) redeclares
		// what its sibling declares; the selections are recorded all
		// the same.
		Error: func(error) {},
	}
	pkg, _ := conf.Check("github.com/pglease/pglease", fset, files, info)
	if pkg.Scope().Lookup("Client") == nil {
		t.Fatal("type-checking found no Client")
	}

	seen := map[string]bool{}
	for _, f := range files {
		file := filepath.Base(fset.Position(f.Pos()).Filename)
		if !slices.Contains(recipeFiles, file) {
			continue
		}
		for _, decl := range f.Decls {
			fn := "" // the enclosing function, for the known reaches
			if fd, ok := decl.(*ast.FuncDecl); ok {
				fn = fd.Name.Name
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				s := info.Selections[sel]
				if s == nil || s.Obj().Exported() {
					return true
				}
				recv := s.Recv()
				if p, ok := recv.(*types.Pointer); ok {
					recv = p.Elem()
				}
				named, ok := recv.(*types.Named)
				if !ok || named.Obj().Pkg() != pkg || named.Obj().Name() != "Client" && named.Obj().Name() != "Lease" {
					return true
				}
				member := named.Obj().Name() + "." + s.Obj().Name()
				if slices.Contains(recipeHooks, member) {
					return true
				}
				reach := file + " " + fn + " " + member
				if _, ok := recipeKnownReaches[reach]; ok {
					seen[reach] = true
					return true
				}
				t.Errorf("%s: %s reaches %s: a recipe uses the exported API and the hooks %v only",
					fset.Position(sel.Sel.Pos()), fn, member, recipeHooks)
				return true
			})
		}
	}
	for reach := range recipeKnownReaches {
		if !seen[reach] {
			t.Errorf("known reach %q is no longer made: remove it from recipeKnownReaches", reach)
		}
	}
	for _, file := range recipeFiles {
		if _, err := os.Stat(file); err != nil {
			t.Errorf("recipe file %s: %v", file, err)
		}
	}
}
