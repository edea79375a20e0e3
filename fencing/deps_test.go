package fencing_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeaf keeps fencing a leaf: a service that only checks tokens must not
// pull in fence's server side (raft, bbolt, gRPC, the api or client packages,
// internals), Prometheus, a database driver (Redis's included: that lives in
// fencingredis), or package testing.
func TestLeaf(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/fencehq/fence/fencing").Output()
	if err != nil {
		t.Fatal(err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list returned too little: %q", deps)
	}
	forbidden := []string{"github.com/hashicorp/", "go.etcd.io/", "google.golang.org/grpc", "google.golang.org/protobuf",
		"github.com/prometheus/", "github.com/jackc/", "github.com/go-sql-driver/", "modernc.org/", "github.com/redis/",
		"github.com/fencehq/fence/api", "github.com/fencehq/fence/client", "github.com/fencehq/fence/internal", "testing"}
	for _, dep := range deps {
		for _, bad := range forbidden {
			if dep == bad || strings.HasPrefix(dep, strings.TrimSuffix(bad, "/")+"/") || strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad) {
				t.Errorf("fencing depends on %s", dep)
			}
		}
	}
}
