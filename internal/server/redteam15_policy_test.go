package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// Coverage (passes: the feature holds). Under a policy, Backup — the whole
// state with every lease's secret — needs the admin right on every name
// (the prefix ""): an identity with admin only under a prefix, one with
// every other right on "", and a caller with no certificate are all
// refused before any state is sent; an identity with admin on "" gets the
// state. No other test runs Backup under a policy.
//
//	go test -count=1 -run TestRedteamBackupUnderAPolicy ./internal/server/
func TestRedteamBackupUnderAPolicy(t *testing.T) {
	pc := startWithPolicy(t, `
identities:
  - name: jobsadmin
    prefixes: [jobs/]
    rights: [acquire, read, admin]
  - name: everyone
    prefixes: [""]
    rights: [acquire, read]
  - name: ops
    prefixes: [""]
    rights: [acquire, read, admin]
`)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := pc.as("ops").Lock(ctx, "jobs/x"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"jobsadmin", "everyone"} {
		b, err := pc.as(id).Backup(ctx)
		if err == nil || len(b.State) > 0 {
			t.Errorf("%s took a backup (%d bytes of state)", id, len(b.State))
			continue
		}
		wantCode(t, id, err, codes.PermissionDenied, "")
	}
	if b, err := pc.dial(pc.noCert()).Backup(ctx); err == nil || len(b.State) > 0 {
		t.Errorf("a caller without a certificate took a backup (%d bytes)", len(b.State))
	} else {
		wantCode(t, "no certificate", err, codes.Unauthenticated, "")
	}
	b, err := pc.as("ops").Backup(ctx)
	if err != nil || b.Locks != 1 || len(b.State) == 0 {
		t.Fatalf("ops (admin on every name): %+v %v", b.Locks, err)
	}
}
