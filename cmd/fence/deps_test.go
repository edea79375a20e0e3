package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestSlimBuildLinksNoDatabaseDriver: the fence that servers run (make dist,
// the Dockerfile: -tags fence_slim) links no database driver — a server
// needs none; only 'fence demo --dsn' does, and a slim build refuses a DSN.
// The default build has the demo's Postgres driver, so the test fails if
// the tag stops being what keeps it out.
func TestSlimBuildLinksNoDatabaseDriver(t *testing.T) {
	drivers := []string{"github.com/jackc/", "github.com/go-sql-driver/", "github.com/lib/pq", "modernc.org/", "github.com/mattn/go-sqlite3"}
	linked := func(tags string) []string {
		out, err := exec.Command("go", "list", "-deps", "-tags", tags, ".").Output()
		if err != nil {
			t.Fatalf("go list -tags %q: %v", tags, err)
		}
		var found []string
		for _, dep := range strings.Fields(string(out)) {
			if slices.ContainsFunc(drivers, func(d string) bool { return strings.HasPrefix(dep, d) }) {
				found = append(found, dep)
			}
		}
		return found
	}
	if got := linked(""); !slices.Contains(got, "github.com/jackc/pgx/v5/stdlib") {
		t.Errorf("the default build links %q, want the demo's github.com/jackc/pgx/v5/stdlib among them (did the demo drop it? then this test and the fence_slim tag can go)", got)
	}
	if got := linked("fence_slim"); len(got) > 0 {
		t.Errorf("the slim build links database drivers: %q", got)
	}
}
