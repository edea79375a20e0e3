package fsm

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPure keeps the state machine deterministic: its (non-test) files import
// only an allowlist of standard packages, never read the clock, start no
// goroutines and select on no channels.
func TestPure(t *testing.T) {
	allowed := map[string]bool{"encoding/binary": true, "encoding/hex": true, "errors": true, "fmt": true,
		"cmp": true, "maps": true, "slices": true, "time": true, "unicode": true, "unicode/utf8": true,
		"github.com/fencehq/fence/internal/planted": true} // constants only: see that package
	forbiddenTime := map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
		"AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true}
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); !allowed[path] {
				t.Errorf("%s imports %q; the fsm may not do I/O or use randomness", name, path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: goroutine at %v", name, fset.Position(n.Pos()))
			case *ast.SelectStmt:
				t.Errorf("%s: select at %v", name, fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && forbiddenTime[n.Sel.Name] {
					t.Errorf("%s: time.%s at %v; time enters only through commands", name, n.Sel.Name, fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
	if len(files) == 0 {
		t.Fatal("no files checked")
	}
}
