package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/locktest"
)

// TestDeposedLeaderAnswersRenewal: a renewal sent to a leader the moment it
// is cut off from the majority (it still believes it leads, so it takes the
// renewal, whose round then cannot commit) must be answered — the stream
// ends with UNAVAILABLE — without the client sending anything more. Before,
// the failed round ended the round goroutine while the handler sat in Recv
// waiting for the client's next request: a client without per-renewal
// timeouts waited forever.
func TestDeposedLeaderAnswersRenewal(t *testing.T) {
	c := locktest.NewCluster(t, 3)
	old := c.Leader()
	direct := directClient(t, old)
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := direct.CreateLease(cctx, &api.CreateLeaseRequest{RequestId: []byte("deposed-test-001"), Ttl: durationpb.New(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second) // a hang guard, not a bound under test
	defer scancel()
	stream, err := direct.KeepAlive(sctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Partition(old)
	if err := stream.Send(&api.KeepAliveRequest{LeaseSecret: lease.LeaseSecret, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err == nil && r.Ok {
		t.Fatal("the cut-off leader acknowledged a renewal")
	}
	if err != nil && status.Code(err) != codes.Unavailable {
		t.Fatalf("the cut-off leader's renewal stream ended with %v, want UNAVAILABLE while the client waits (no further request)", err)
	}
}
