package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPublicPackagesStayLean keeps the client free of the server side: a
// program that embeds it must not pull in raft, bbolt, prometheus, fence's
// internals, a Redis driver (that lives in client/redislock), a SQL
// driver (the Postgres lease lives in client/pglease), or package testing. (fencing has its own, stricter test.)
func TestPublicPackagesStayLean(t *testing.T) {
	forbidden := []string{"github.com/redis/", "go.etcd.io/raft", "go.etcd.io/etcd", "go.etcd.io/bbolt", "github.com/boltdb/bolt",
		"github.com/jackc/", "github.com/lib/pq", "github.com/go-sql-driver/", "modernc.org/",
		"github.com/fencehq/fence/client/redislock", "github.com/fencehq/fence/client/pglease",
		"github.com/prometheus/", "github.com/fencehq/fence/internal/", "testing"}
	// Exceptions to the internal/ rule, each with its reason.
	allowed := map[string]bool{
		// Lease deadlines are measured on CLOCK_BOOTTIME through the same
		// clock the server's lessor uses; it imports only the standard
		// library and x/sys. Must move (e.g. to client/internal) if client
		// becomes its own module.
		"github.com/fencehq/fence/internal/clock": true,
		// WithTLSFiles and FENCE_CA/CERT/KEY load PEM files the way the
		// server loads its own; standard library only. Same note as above.
		"github.com/fencehq/fence/internal/pki": true,
		// The safety margin rule and the lease's context, shared with
		// client/redislock and client/pglease (with their renewal loop);
		// standard library and internal/clock only. Same note as above.
		"github.com/fencehq/fence/internal/hold": true,
	}
	for _, pkg := range []string{"github.com/fencehq/fence/client"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 5 {
			t.Fatalf("go list %s returned too little: %q", pkg, deps)
		}
		for _, dep := range deps {
			if allowed[dep] {
				continue
			}
			for _, bad := range forbidden {
				if dep == bad || strings.HasPrefix(dep, bad) && (strings.HasSuffix(bad, "/") || strings.HasPrefix(dep, bad+"/")) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
