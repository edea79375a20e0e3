package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
)

// TestRedTeamWatchPolicyShowsOnlyReadableNames: under a policy, a prefix
// watch of every lock shows only the names the caller may read, and a
// watch of one forbidden name is refused (this held; kept as a guard).
func TestRedTeamWatchPolicyShowsOnlyReadableNames(t *testing.T) {
	pc := startWithPolicy(t, peekAndOps)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	raw := pc.rawAs("peek")
	forbidden, err := raw.Watch(ctx, &api.WatchRequest{Name: "secret/x"})
	if err == nil {
		_, err = forbidden.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("watch of a forbidden name: %v, want PERMISSION_DENIED", err)
	}
	w, err := pc.as("peek").Watch(ctx, "", client.WatchPrefix())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := pc.as("ops").Lock(ctx, "secret/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.as("ops").Lock(ctx, "zzz"); err != nil { // not under "zz/"
		t.Fatal(err)
	}
	if _, err := pc.as("peek").Lock(ctx, "zz/mine"); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-w.Events():
		if e.Name != "zz/mine" {
			t.Fatalf("peek was shown %s of %q", e.Type, e.Name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event for zz/mine")
	}
}
