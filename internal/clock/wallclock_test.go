package clock

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// What lease code may not use from package time, by kind (type-checked, so
// time.Duration's Round and Truncate are fine and a renamed import is not a
// way around it).
var (
	// wallOnly are Time methods that drop the monotonic reading or work on
	// wall values, and functions that build a Time from wall values: a
	// wall-clock step would move a deadline made with them.
	wallOnly = map[string]bool{"Round": true, "Truncate": true, "UTC": true, "Local": true, "In": true,
		"Unix": true, "UnixNano": true, "UnixMilli": true, "UnixMicro": true, "YearDay": true,
		"Date": true, "Parse": true, "ParseInLocation": true}
	// directReads read Go's monotonic clock or wait on it (CLOCK_MONOTONIC,
	// which stands still while the host is suspended): lease code reads time
	// through a clock.Clock (CLOCK_BOOTTIME) instead.
	directReads = map[string]bool{"Now": true, "Since": true, "Until": true, "After": true, "AfterFunc": true,
		"NewTimer": true, "NewTicker": true, "Tick": true, "Sleep": true}
)

// leaseScope says, per package and file, which rules apply: wall-only uses
// are refused in every package that times leases; direct reads in the
// client, the state machine and the lessor (internal/node/lessor.go since
// the engine moved it there: the rest of the node and the server time RPCs,
// raft ticks and logs, not leases).
func leaseScope(pkgPath, file string) (wall, direct bool) {
	switch {
	case strings.HasPrefix(pkgPath, "github.com/fencehq/fence/client"),
		strings.HasPrefix(pkgPath, "github.com/fencehq/fence/internal/fsm"):
		return true, true
	case strings.HasPrefix(pkgPath, "github.com/fencehq/fence/internal/server"),
		strings.HasPrefix(pkgPath, "github.com/fencehq/fence/internal/node"):
		return true, filepath.Base(file) == "lessor.go"
	}
	return false, false
}

// displayOnly marks a line whose wall-clock use is for people and never
// times anything (a "ran at …" in a message): the line carries a comment
// that starts with it and says why. It lifts only the wall-clock rule:
// direct reads of the monotonic clock stay refused.
const displayOnly = "wall clock for display only:"

// goClock marks a line that reads Go's monotonic clock because what it
// measures is on that clock: a context's deadline (time.Until(deadline), as
// gRPC does for a unary call's grpc-timeout). It lifts only the direct-read
// rule, for that line.
const goClock = "Go's clock, as context deadlines are:"

// timeUses returns the forbidden uses of package time in files (type-checked
// in info, parsed with their comments), one line each.
func timeUses(fset *token.FileSet, pkgPath string, files []*ast.File, info *types.Info) []string {
	var bad []string
	for _, f := range files {
		name := fset.Position(f.Pos()).Filename
		wall, direct := leaseScope(pkgPath, name)
		shown := map[int]bool{}  // the lines marked displayOnly
		goTime := map[int]bool{} // the lines marked goClock
		for _, g := range f.Comments {
			for _, c := range g.List {
				text := strings.TrimSpace(strings.TrimPrefix(c.Text, "//"))
				shown[fset.Position(c.Pos()).Line] = shown[fset.Position(c.Pos()).Line] || strings.HasPrefix(text, displayOnly)
				goTime[fset.Position(c.Pos()).Line] = goTime[fset.Position(c.Pos()).Line] || strings.HasPrefix(text, goClock)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			fn, ok := info.Uses[id].(*types.Func)
			if !ok || fn.Pkg() == nil || fn.Pkg().Path() != "time" {
				return true
			}
			sig := fn.Type().(*types.Signature)
			what := "time." + fn.Name()
			if recv := sig.Recv(); recv != nil {
				t := recv.Type()
				if p, ok := t.(*types.Pointer); ok {
					t = p.Elem()
				}
				if named, ok := t.(*types.Named); !ok || named.Obj().Name() != "Time" {
					return true // Duration.Round and friends are arithmetic on spans
				}
				what = "time.Time." + fn.Name()
			}
			switch {
			case wall && wallOnly[fn.Name()] && !shown[fset.Position(id.Pos()).Line]:
				bad = append(bad, fset.Position(id.Pos()).String()+": "+what+" reads or keeps only the wall clock")
			case direct && sig.Recv() == nil && directReads[fn.Name()] && !goTime[fset.Position(id.Pos()).Line]:
				bad = append(bad, fset.Position(id.Pos()).String()+": "+what+" runs on Go's monotonic clock, which stops during a host suspend; use a clock.Clock")
			}
			return true
		})
	}
	return bad
}

// TestLeasesNeverReadTheWallClock keeps lease timing on the clock package:
// the packages that time leases (the client, the server, the state machine,
// with their sub-packages) never call what reads or keeps only the wall
// clock, and the client, the state machine and the lessor never read or wait
// on Go's monotonic clock directly. The chaos harness shifts the monotonic
// and boottime clocks per process; this test covers the clocks Linux cannot
// shift per process.
func TestLeasesNeverReadTheWallClock(t *testing.T) {
	patterns := []string{"./client/...", "./internal/server/...", "./internal/fsm/...", "./internal/node/..."}
	root := "../.."
	type pkg struct{ path, dir, files string }
	var pkgs []pkg
	lines(t, root, append([]string{"list", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \",\"}}"}, patterns...), func(f []string) {
		pkgs = append(pkgs, pkg{f[0], f[1], f[2]})
	})
	exports := map[string]string{}
	lines(t, root, append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, patterns...), func(f []string) {
		exports[f[0]] = f[1]
	})
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) { return os.Open(exports[path]) })
	checked := 0
	var bad []string
	for _, p := range pkgs {
		var files []*ast.File
		for _, name := range strings.Split(p.files, ",") {
			if name == "" {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(p.dir, name), nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
		if _, err := (&types.Config{Importer: imp}).Check(p.path, fset, files, info); err != nil {
			t.Fatalf("type-check %s: %v", p.path, err)
		}
		checked += len(files)
		bad = append(bad, timeUses(fset, p.path, files, info)...)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
	if checked < 20 {
		t.Fatalf("only %d files checked: the patterns are wrong", checked)
	}
}

// TestTimeUsesCatchesPlantedCalls: the checker flags a planted time.Now and
// Time.Round in lease code and lets Duration.Round pass.
func TestTimeUsesCatchesPlantedCalls(t *testing.T) {
	const src = `package planted

import clk "time"

func spans(d clk.Duration) clk.Duration { return d.Round(clk.Second) + d.Truncate(clk.Millisecond) }

func deadline() clk.Time { return clk.Now().Round(0) }

func shown(t clk.Time) string { return t.UTC().Format(clk.RFC3339) } // wall clock for display only: a message

func left(d clk.Time) clk.Duration { return clk.Until(d) } // Go's clock, as context deadlines are: a context's deadline

func wrong(d clk.Time) clk.Duration { return clk.Until(d) + clk.Duration(d.Unix()) } // Go's clock, as context deadlines are: lifts only the direct read
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "planted.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	if _, err := (&types.Config{Importer: importer.Default()}).Check("github.com/fencehq/fence/client/planted", fset, []*ast.File{f}, info); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(timeUses(fset, "github.com/fencehq/fence/client/planted", []*ast.File{f}, info), "\n")
	want := "planted.go:7:39: time.Now runs on Go's monotonic clock, which stops during a host suspend; use a clock.Clock\n" +
		"planted.go:7:45: time.Time.Round reads or keeps only the wall clock\n" +
		"planted.go:13:76: time.Time.Unix reads or keeps only the wall clock"
	if got != want {
		t.Fatalf("flagged:\n%s\nwant:\n%s", got, want)
	}
}

// lines runs go with args in dir and calls fn with each output line's
// tab-separated fields.
func lines(t *testing.T, dir string, args []string, fn func([]string)) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fn(strings.Split(sc.Text(), "\t"))
	}
}
