package server_test

import (
	"context"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/locktest"
)

// TestSessionDeposedLeaderGrantsNothing: on a Session stream to a leader
// the moment it is cut off from the majority, and once it has stepped down,
// neither a renewal nor an Acquire of a free lock is answered as done
// (it cannot commit them): each is refused, or the stream ends UNAVAILABLE,
// without the client sending anything more. (The planted bug
// fence_bug_deposed, a deposed leader renewing from memory, fails it.)
func TestSessionDeposedLeaderGrantsNothing(t *testing.T) {
	for name, deposed := range map[string]bool{"cut off": false, "deposed": true} {
		t.Run(name, func(t *testing.T) { sessionOnCutOffLeader(t, deposed) })
	}
}

// sessionOnCutOffLeader sends a renewal and an Acquire on a Session stream
// to a leader once it is cut off (deposed: once another leads and it knows
// it does not) and checks that neither is answered as done.
func sessionOnCutOffLeader(t *testing.T, deposed bool) {
	c := locktest.NewCluster(t, 3)
	old := c.Leader()
	direct := directClient(t, old)
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := direct.CreateLease(cctx, &api.CreateLeaseRequest{RequestId: []byte("deposed-sessn-01"), Ttl: durationpb.New(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second) // a hang guard, not a bound under test
	defer scancel()
	st, err := direct.Session(sctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Partition(old)
	if deposed {
		var rest []*locktest.Node
		for _, n := range c.Nodes {
			if n != old {
				rest = append(rest, n)
			}
		}
		c.Leader(rest...)
		for old.Server.Ready() { // until it knows it no longer leads
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, req := range []*api.SessionRequest{
		{CallId: 1, Call: &api.SessionRequest_KeepAlive{KeepAlive: &api.KeepAliveRequest{LeaseSecret: lease.LeaseSecret, Seq: 1}}},
		{CallId: 2, Call: &api.SessionRequest_Acquire{Acquire: &api.AcquireRequest{RequestId: []byte("deposed-sessn-02"),
			LeaseSecret: lease.LeaseSecret, Name: "cut/off", Seq: 1, Ack: 1, LockDelay: durationpb.New(0)}}},
	} {
		if err := st.Send(req); err != nil {
			break // the stream ended already: Recv says how
		}
	}
	for answered := 0; answered < 2; answered++ {
		r, err := st.Recv()
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("the cut-off leader's Session stream ended with %v, want UNAVAILABLE", err)
			}
			return
		}
		switch res := r.Result.(type) {
		case *api.SessionResponse_KeepAlive:
			if res.KeepAlive.Ok {
				t.Fatal("the cut-off leader acknowledged a renewal")
			}
		case *api.SessionResponse_Acquire:
			t.Fatalf("the cut-off leader granted %q (token %d)", "cut/off", res.Acquire.Token)
		case *api.SessionResponse_Error:
			var s spb.Status
			if err := proto.Unmarshal(res.Error, &s); err != nil {
				t.Fatal(err)
			}
			t.Logf("call %d refused: %s", r.CallId, s.Message)
		}
	}
}
