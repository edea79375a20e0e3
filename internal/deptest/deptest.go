// Package deptest checks a package's dependencies against rules that carry
// their reasons (after tailscale's tstest/deptest), for the tests that keep
// the public packages lean.
package deptest

import (
	"os/exec"
	"strings"
	"testing"
)

// Check fails t for each package pkg depends on (go list -deps) that lies
// under a forbidden prefix, unless allowed lists it. Both map an import
// path to why: a prefix ending in "/" forbids everything below it, any
// other forbids that package and everything below it.
func Check(t testing.TB, pkg string, forbidden, allowed map[string]string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps %s returned too little: %q", pkg, deps)
	}
	for _, dep := range deps {
		if _, ok := allowed[dep]; ok || dep == pkg {
			continue
		}
		for bad, why := range forbidden {
			if dep == bad || strings.HasPrefix(dep, strings.TrimSuffix(bad, "/")+"/") {
				t.Errorf("%s depends on %s: %s", pkg, dep, why)
			}
		}
	}
}
