package server_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// TestSessionPolicyReloadAndForeignLease: the calls of a Session stream
// opened earlier are judged by the policy in force when each arrives: once
// a reload takes alice's acquire right away, her next Acquire on the open
// stream is refused and so is her renewal (her lease then ends within its
// TTL). Another identity renewing alice's lease with her secret on its own
// stream is refused too, and nothing renews it.
func TestSessionPolicyReloadAndForeignLease(t *testing.T) {
	pc := startWithPolicy(t, fmt.Sprintf(testPolicy, strings.Repeat("0", 64)))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	alice, ops := pc.rawAs("alice"), pc.rawAs("ops")
	lease, err := alice.CreateLease(ctx, &api.CreateLeaseRequest{RequestId: []byte("session-reload-1"), Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	renew := func(st api.FenceService_SessionClient, id uint64) *api.KeepAliveResponse {
		t.Helper()
		r, err := sessionCall(t, st, &api.SessionRequest{CallId: id, Call: &api.SessionRequest_KeepAlive{KeepAlive: &api.KeepAliveRequest{LeaseSecret: lease.LeaseSecret, Seq: id}}})
		if err != nil {
			t.Fatalf("renewal %d: %v", id, err)
		}
		return r.GetKeepAlive()
	}
	theirs, err := ops.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := renew(theirs, 1); r.GetOk() || !strings.Contains(r.GetError(), "another identity") {
		t.Fatalf("ops renews alice's lease on its stream: %v, want refused", r)
	}
	st, err := alice.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := renew(st, 1); !r.GetOk() {
		t.Fatalf("alice renews her lease: %v", r)
	}
	if err := os.WriteFile(pc.policy, []byte(strings.Replace(fmt.Sprintf(testPolicy, strings.Repeat("0", 64)),
		"prefixes: [a/]\n    rights: [acquire, read]", "prefixes: [a/]\n    rights: [read]", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := pc.srv.ReloadPolicy(); err != nil {
		t.Fatal(err)
	}
	_, err = sessionCall(t, st, &api.SessionRequest{CallId: 2, Call: &api.SessionRequest_Acquire{Acquire: &api.AcquireRequest{
		RequestId: []byte("session-reload-2"), LeaseSecret: lease.LeaseSecret, Name: "a/job", Seq: 1, Ack: 1}}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice acquires on her open stream after losing the right: %v, want PERMISSION_DENIED", err)
	}
	if r := renew(st, 3); r.GetOk() {
		t.Fatalf("alice renews on her open stream after losing the right: %v, want refused", r)
	}
}
