package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
)

// within is a context that ends after d, or when the test ends.
func within(t *testing.T, d time.Duration) context.Context {
	cx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return cx
}

// directClient calls node n alone, not following the leader.
func directClient(t *testing.T, n *locktest.Node) api.FenceServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(n.Server.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return api.NewFenceServiceClient(conn)
}

// renewing opens a KeepAlive stream on cli and sends one renewal (seq 1)
// of the lease with secret.
func renewing(t *testing.T, ctx context.Context, cli api.FenceServiceClient, secret []byte) api.FenceService_KeepAliveClient {
	t.Helper()
	stream, err := cli.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&api.KeepAliveRequest{LeaseSecret: secret, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	return stream
}

// TestNotReadyRefusesCalls: a node that does not lead refuses commands and
// linearizable reads with UNAVAILABLE (naming the leader), instead of
// answering from its own, possibly stale, state.
func TestNotReadyRefusesCalls(t *testing.T) {
	c := locktest.NewCluster(t, 3)
	leader := c.Leader()
	var follower *locktest.Node
	for _, n := range c.Nodes {
		if n != leader {
			follower = n
		}
	}
	cli := directClient(t, follower)
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := cli.CreateLease(cctx, &api.CreateLeaseRequest{RequestId: []byte("not-ready-call-1"), Ttl: durationpb.New(time.Minute)})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("call on a node that is not ready: %v", err)
	}
	if _, err := cli.ListLocks(cctx, &api.ListLocksRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("read on a node that is not ready: %v", err)
	}

	// A renewal of a live lease sent to a follower ends the stream with
	// NotLeader (so the client renews on the leader); it is not answered
	// ok=false, which would tell the holder that its lease has ended.
	lease, err := directClient(t, leader).CreateLease(cctx, &api.CreateLeaseRequest{RequestId: []byte("not-ready-call-2"), Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	stream := renewing(t, cctx, cli, lease.LeaseSecret)
	resp, err := stream.Recv()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("renewal on a node that is not ready: answer %v, error %v; want the stream ended with UNAVAILABLE", resp, err)
	}
	var hint *api.NotLeader
	for _, d := range status.Convert(err).Details() {
		if nl, ok := d.(*api.NotLeader); ok {
			hint = nl
		}
	}
	if hint == nil || hint.LeaderAddr != leader.Server.GRPCAddr() {
		t.Fatalf("renewal on a follower: NotLeader detail %v, want the leader at %s", hint, leader.Server.GRPCAddr())
	}
}

// TestPartitionedLeaderIsInert cuts the leader off from the majority. The
// cut-off node must grant nothing and renew nothing; the majority elects a
// new leader and carries on (the client fails over, a renewed lease
// survives); after healing, the old leader follows and nothing it was asked
// during the cut took effect.
func TestPartitionedLeaderIsInert(t *testing.T) {
	c := locktest.NewCluster(t, 3)
	ctx := func(d time.Duration) context.Context { return within(t, d) }
	cl, err := client.Dial(ctx(5*time.Second), c.Addrs(), client.WithInsecure(), client.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	held, err := cl.Lock(ctx(5*time.Second), "held-through")
	if err != nil {
		t.Fatal(err)
	}

	old := c.Leader()
	direct := directClient(t, old)
	lease, err := direct.CreateLease(ctx(5*time.Second), &api.CreateLeaseRequest{RequestId: []byte("partition-test-1"), Ttl: durationpb.New(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}

	c.Partition(old)

	// The minority grants nothing...
	if r, err := direct.Acquire(ctx(1500*time.Millisecond), &api.AcquireRequest{RequestId: []byte("partition-test-2"), Seq: 1, Ack: 1, LeaseSecret: lease.LeaseSecret, Name: "minority"}); err == nil {
		t.Fatalf("the cut-off leader granted a lock: token %d", r.Token)
	}
	// ...and renews nothing: it refuses promptly (UNAVAILABLE, so a client
	// moves to another member), long before the stream's own deadline.
	stream, err := direct.KeepAlive(ctx(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&api.KeepAliveRequest{LeaseSecret: lease.LeaseSecret, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err == nil && r.Ok {
		t.Fatal("the cut-off leader acknowledged a renewal")
	} else if code := status.Code(err); err != nil && code != codes.Unavailable {
		t.Fatalf("the cut-off leader's renewal stream ended with %v, want UNAVAILABLE before the call's deadline", err)
	}
	// The majority elects and continues.
	var majority []*locktest.Node
	for _, nd := range c.Nodes {
		if nd != old {
			majority = append(majority, nd)
		}
	}
	next := c.Leader(majority...)
	l, err := cl.TryLock(ctx(10*time.Second), "majority")
	if err != nil {
		t.Fatalf("the majority (leader %s) did not grant: %v", next.ID, err)
	}
	if l.Token() <= held.Token() {
		t.Fatalf("token %d after %d", l.Token(), held.Token())
	}
	time.Sleep(2 * time.Second) // a whole TTL: only renewals through the new leader keep it
	if err := held.Err(); err != nil {
		t.Fatalf("a renewed lease was lost across the partition: %v", err)
	}

	c.Heal()
	time.Sleep(500 * time.Millisecond)
	if old.Server.Ready() {
		t.Fatal("the old leader still leads after healing")
	}
	if info, err := cl.Status(ctx(5*time.Second), "minority"); err != nil || info.Held() {
		t.Fatalf("the cut-off leader's grant took effect after healing: %+v %v", info, err)
	}
}

// TestMembersNameEveryClientAddress: one address is enough to find the
// whole group. Members (a follower sends the caller to the leader, whose
// view it is) names each member's gRPC address (as it announced it), its
// role (one leader) and its suffrage.
func TestMembersNameEveryClientAddress(t *testing.T) {
	c := locktest.NewCluster(t, 3)
	leader := c.Leader()
	want := map[string]string{}
	for _, n := range c.Nodes {
		want[n.ID] = n.Server.GRPCAddr()
	}
	for _, asked := range []*locktest.Node{leader} { // followers send the caller here
		var resp *api.MembersResponse
		deadline := time.Now().Add(10 * time.Second)
		for { // a member announces its address once it has joined: wait for all three
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := directClient(t, asked).Members(cctx, &api.MembersRequest{})
			cancel()
			if err != nil {
				t.Fatalf("Members asked of %s: %v", asked.ID, err)
			}
			resp = r
			announced := 0
			for _, m := range r.Members {
				if m.GrpcAddr != "" {
					announced++
				}
			}
			if announced == len(want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		leaders := 0
		for _, m := range resp.Members {
			if m.GrpcAddr != want[m.Id] {
				t.Errorf("asked %s: member %s has grpc_addr %q, want %q", asked.ID, m.Id, m.GrpcAddr, want[m.Id])
			}
			if m.Suffrage != api.Suffrage_SUFFRAGE_VOTER {
				t.Errorf("asked %s: member %s is %v, want a voter", asked.ID, m.Id, m.Suffrage)
			}
			switch m.Role {
			case api.Role_ROLE_LEADER:
				leaders++
				if m.Id != leader.ID {
					t.Errorf("asked %s: %s is named leader, the leader is %s", asked.ID, m.Id, leader.ID)
				}
			case api.Role_ROLE_FOLLOWER:
			default:
				t.Errorf("asked %s: member %s has role %v", asked.ID, m.Id, m.Role)
			}
		}
		if len(resp.Members) != len(want) || leaders != 1 {
			t.Fatalf("asked %s: %d members, %d leaders: %v", asked.ID, len(resp.Members), leaders, resp.Members)
		}
	}
}
