package clock

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestLeasesNeverReadTheWallClock keeps lease timing on monotonic readings:
// the packages that time leases (the client, the server, the state machine)
// never call what reads or keeps only the wall clock. Methods that drop the
// monotonic reading (Round(0), UTC, In, Local…) or build times from wall
// values (time.Unix, time.Date, time.Parse) would let a wall-clock step move
// a deadline. The chaos harness shifts the monotonic clock per process; this
// test covers the clock Linux cannot shift per process.
func TestLeasesNeverReadTheWallClock(t *testing.T) {
	forbidden := map[string]bool{"Unix": true, "UnixNano": true, "UnixMilli": true, "UnixMicro": true,
		"Round": true, "Truncate": true, "UTC": true, "Local": true, "In": true, "Date": true,
		"Parse": true, "ParseInLocation": true, "YearDay": true}
	checked := 0
	for _, dir := range []string{"../../client", "../server", "../fsm"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			checked++
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && forbidden[sel.Sel.Name] {
					t.Errorf("%s: .%s reads or keeps only the wall clock; lease timing must use monotonic differences", fset.Position(sel.Pos()), sel.Sel.Name)
				}
				return true
			})
		}
	}
	if checked < 10 {
		t.Fatalf("only %d files checked: the paths are wrong", checked)
	}
}
