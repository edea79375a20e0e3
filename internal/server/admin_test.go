package server

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/fencehq/fence/api"
)

func TestAdminCallsNeedTheToken(t *testing.T) {
	n := startNode(t, func(c *Config) { c.AdminToken = "s3cret" })
	a := n.lease(time.Hour, "holder")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	with := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(ctx(t), AdminHeader, "Bearer "+tok)
	}
	if _, err := n.cli.ForceRelease(ctx(t), &api.ForceReleaseRequest{Name: "x"}); code(err) != codes.Unauthenticated {
		t.Fatalf("without a token: %v", err)
	}
	if _, err := n.cli.ForceRelease(with("guess"), &api.ForceReleaseRequest{Name: "x"}); code(err) != codes.PermissionDenied {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := n.cli.TransferLeader(ctx(t), &api.TransferLeaderRequest{}); code(err) != codes.Unauthenticated {
		t.Fatalf("membership call without a token: %v", err)
	}
	noScheme := metadata.AppendToOutgoingContext(ctx(t), AdminHeader, "s3cret") // the token without "Bearer "
	if _, err := n.cli.ForceRelease(noScheme, &api.ForceReleaseRequest{Name: "x"}); code(err) != codes.Unauthenticated {
		t.Fatalf("the token without its scheme: %v", err)
	}
	if n.getLock("x").HolderOwner != "holder" {
		t.Fatal("a refused admin call changed the lock")
	}
	// A client sends its identity's token first, then the admin token.
	both := metadata.AppendToOutgoingContext(ctx(t), AdminHeader, "Bearer identity-token", AdminHeader, "Bearer s3cret")
	if _, err := n.cli.TransferLeader(both, &api.TransferLeaderRequest{}); code(err) == codes.PermissionDenied || code(err) == codes.Unauthenticated {
		t.Fatalf("the admin token after an identity's token: %v", err)
	}
	if _, err := n.cli.ForceRelease(with("s3cret"), &api.ForceReleaseRequest{RequestId: newReq(), Name: "x", Token: n.getLock("x").Token}); err != nil {
		t.Fatalf("right token: %v", err)
	}
}

func TestAdminWithoutTokenOnlyFromLoopback(t *testing.T) {
	s := &Server{}
	from := func(ip string) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
	}
	if err := s.authorizeAdmin(from("127.0.0.1"), "force-release"); err != nil {
		t.Fatalf("loopback refused: %v", err)
	}
	if err := s.authorizeAdmin(from("::1"), "force-release"); err != nil {
		t.Fatalf("IPv6 loopback refused: %v", err)
	}
	if err := s.authorizeAdmin(from("10.0.0.7"), "force-release"); code(err) != codes.PermissionDenied {
		t.Fatalf("remote caller without a configured token: %v", err)
	}
	if err := s.authorizeAdmin(context.Background(), "force-release"); code(err) != codes.PermissionDenied {
		t.Fatalf("caller of unknown address: %v", err)
	}
}
