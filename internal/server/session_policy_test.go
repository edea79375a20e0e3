package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/audit"
	"github.com/fencehq/fence/internal/locktest"
)

// sessionCall sends req on st and returns its answer (one call at a time).
func sessionCall(t *testing.T, st api.FenceService_SessionClient, req *api.SessionRequest) (*api.SessionResponse, error) {
	t.Helper()
	// io.EOF: the server ended the stream already (a refusal at its
	// opening); Recv returns how.
	if err := st.Send(req); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		return nil, err
	}
	if r.CallId != req.CallId {
		t.Fatalf("answer to call %d, want %d", r.CallId, req.CallId)
	}
	if e, ok := r.Result.(*api.SessionResponse_Error); ok {
		var s spb.Status
		if err := proto.Unmarshal(e.Error, &s); err != nil {
			t.Fatal(err)
		}
		return r, status.FromProto(&s).Err()
	}
	return r, nil
}

// The policy judges each call of a Session stream by its lock's name, as
// the unary call: on one stream alice takes a/… and is refused b/…, and
// the refusal is in the audit file; the stream lives on.
func TestSessionPolicyPerName(t *testing.T) {
	pc := startWithPolicy(t, fmt.Sprintf(testPolicy, strings.Repeat("0", 64)))
	alice := pc.rawAs("alice")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	lease, err := alice.CreateLease(ctx, &api.CreateLeaseRequest{RequestId: []byte("session-policy-1"), Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := alice.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acquire := func(id uint64, name string) error {
		_, err := sessionCall(t, st, &api.SessionRequest{CallId: id, Call: &api.SessionRequest_Acquire{Acquire: &api.AcquireRequest{
			RequestId: []byte(fmt.Sprintf("session-policy%02d", id)), LeaseSecret: lease.LeaseSecret, Name: name, Seq: id, Ack: id}}})
		return err
	}
	if err := acquire(1, "a/job"); err != nil {
		t.Fatalf("alice takes a/job on the stream: %v", err)
	}
	err = acquire(2, "b/job")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `only under the prefixes "a/"`) {
		t.Fatalf("alice takes b/job on the stream: %v, want PERMISSION_DENIED as the unary call", err)
	}
	if err := acquire(3, "a/other"); err != nil {
		t.Fatalf("the stream after a refusal: %v", err)
	}
	r, err := sessionCall(t, st, &api.SessionRequest{CallId: 4, Call: &api.SessionRequest_KeepAlive{KeepAlive: &api.KeepAliveRequest{LeaseSecret: lease.LeaseSecret, Seq: 1}}})
	if err != nil || !r.GetKeepAlive().GetOk() || len(r.GetKeepAlive().GetHeldTokens()) != 2 {
		t.Fatalf("renewal on the stream: %v %v", r, err)
	}

	b, err := os.ReadFile(pc.audit)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec audit.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if d := rec.Denied; d != nil && d.Identity == "alice" && strings.HasSuffix(d.Method, "/Acquire") && strings.Contains(d.Reason, "b/job") {
			found = true
		}
	}
	if !found {
		t.Error("the refusal of b/job on the stream is not in the audit file")
	}

	// Another identity holding alice's lease secret is refused its use.
	ops := pc.rawAs("ops")
	st2, err := ops.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sessionCall(t, st2, &api.SessionRequest{CallId: 1, Call: &api.SessionRequest_Release{Release: &api.ReleaseRequest{
		RequestId: []byte("session-policy99"), LeaseSecret: lease.LeaseSecret, Name: "a/job", Seq: 5, Ack: 5}}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ops releases alice's grant with her secret on a stream: %v, want PERMISSION_DENIED", err)
	}
}

// A client without an identity gets no Session stream under a policy, and
// an identity without the acquire right none either.
func TestSessionUnauthenticated(t *testing.T) {
	pc := startWithPolicy(t, fmt.Sprintf(testPolicy, strings.Repeat("0", 64)))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for who, want := range map[string]codes.Code{"": codes.Unauthenticated, "reader": codes.PermissionDenied} {
		st, err := pc.rawAs(who).Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = sessionCall(t, st, &api.SessionRequest{CallId: 1, Call: &api.SessionRequest_Acquire{Acquire: &api.AcquireRequest{
			RequestId: []byte("session-unauth01"), LeaseSecret: make([]byte, 16), Name: "a/job", Seq: 1, Ack: 1}}})
		if status.Code(err) != want {
			t.Errorf("%q opens a Session stream: %v, want %v", who, err, want)
		}
	}
}

// A member that does not lead ends a Session stream at once with
// UNAVAILABLE and the NotLeader detail, as KeepAlive.
func TestSessionOnFollowerNamesLeader(t *testing.T) {
	c := locktest.NewCluster(t, 3)
	var follower *locktest.Node
	for _, n := range c.Nodes {
		if n != c.Leader() {
			follower = n
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cli := directClient(t, follower)
	for { // until the follower has applied the entry recording the leader's address
		st, err := cli.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		s := status.Convert(err)
		if s.Code() != codes.Unavailable {
			t.Fatalf("a Session stream on a follower: %v, want UNAVAILABLE", err)
		}
		for _, d := range s.Details() {
			if nl, ok := d.(*api.NotLeader); ok && nl.LeaderAddr == c.Leader().Server.GRPCAddr() {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("a Session stream on a follower: %v (details %v), want UNAVAILABLE naming the leader", err, s.Details())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
