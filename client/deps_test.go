package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPublicPackagesStayLean keeps the client free of the server side: a
// program that embeds it must not pull in raft, bbolt, prometheus, fence's
// internals, or package testing. (fencing has its own, stricter test.)
func TestPublicPackagesStayLean(t *testing.T) {
	forbidden := []string{"go.etcd.io/raft", "go.etcd.io/etcd", "go.etcd.io/bbolt", "github.com/boltdb/bolt",
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
