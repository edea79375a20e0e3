package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/fsm"
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

// Backup is an admin call on the stream path too (it carries every lease's
// secret): without the token it is refused before any byte of state is
// sent; with it, the state arrives whole (its size and SHA-256 match the
// header).
func TestBackupNeedsTheToken(t *testing.T) {
	n := startNode(t, func(c *Config) { c.AdminToken = "s3cret" })
	n.lease(time.Hour, "holder")
	recv := func(ctx context.Context) ([]*api.BackupResponse, error) {
		stream, err := n.cli.Backup(ctx, &api.BackupRequest{})
		if err != nil {
			return nil, err
		}
		var got []*api.BackupResponse
		for {
			c, err := stream.Recv()
			if err != nil {
				if err == io.EOF {
					return got, nil
				}
				return got, err
			}
			got = append(got, c)
		}
	}
	for name, c := range map[string]struct {
		ctx  context.Context
		want codes.Code
	}{
		"no token":    {ctx(t), codes.Unauthenticated},
		"wrong token": {metadata.AppendToOutgoingContext(ctx(t), AdminHeader, "Bearer guess"), codes.PermissionDenied},
	} {
		got, err := recv(c.ctx)
		if code(err) != c.want || len(got) != 0 {
			t.Errorf("%s: %d messages, %v; want %v and nothing sent", name, len(got), err, c.want)
		}
	}
	got, err := recv(metadata.AppendToOutgoingContext(ctx(t), AdminHeader, "Bearer s3cret"))
	if err != nil || len(got) < 2 || got[0].GetHeader() == nil {
		t.Fatalf("with the token: %d messages, %v", len(got), err)
	}
	var state []byte
	for _, c := range got[1:] {
		state = append(state, c.GetData()...)
	}
	h := got[0].GetHeader()
	if sum := sha256.Sum256(state); uint64(len(state)) != h.GetSize() || !bytes.Equal(sum[:], h.GetSha256()) || h.GetLeases() != 1 {
		t.Fatalf("the state received does not match its header %v", h)
	}
	if _, err := fsm.Unmarshal(state); err != nil {
		t.Fatal(err)
	}
}
