// Package proctest helps tests that run fence's programs as real
// processes: it builds each program once per test binary and finds free
// loopback ports.
package proctest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	dir   string            // guarded by mu; where the binaries go
	built map[string]string // guarded by mu; package → binary
	fails map[string]error  // guarded by mu; package → why it did not build
)

// Binary returns the path of the Go program pkg (an import path, e.g.
// github.com/fencehq/fence/cmd/fence), built with go build on first use in
// this test binary; a failed build fails t, every time it is asked for.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if bin, ok := built[pkg]; ok {
		return bin
	}
	if err := fails[pkg]; err != nil {
		t.Fatal(err)
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "fence-test-bin")
		if err != nil {
			t.Fatal(err)
		}
		dir, built, fails = d, map[string]string{}, map[string]error{}
	}
	bin := filepath.Join(dir, fmt.Sprintf("%s-%d", path.Base(pkg), len(built)))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		fails[pkg] = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		t.Fatal(fails[pkg])
	}
	built[pkg] = bin
	return bin
}

// FreeAddr returns a loopback address (127.0.0.1:port) whose port was free
// a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
