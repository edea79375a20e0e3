package server

import (
	"context"
	"crypto/subtle"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
)

// AdminHeader is the gRPC metadata key of the admin token ("Bearer <token>").
const AdminHeader = "authorization"

// adminCalls are the operator calls, by gRPC method, with the words errors use.
var adminCalls = map[string]string{
	api.FenceService_ForceRelease_FullMethodName:   "force-release",
	api.FenceService_AddMember_FullMethodName:      "add member",
	api.FenceService_RemoveMember_FullMethodName:   "remove member",
	api.FenceService_TransferLeader_FullMethodName: "transfer leadership",
	api.FenceService_Backup_FullMethodName:         "backup",
}

// adminInterceptor refuses an admin call that authorizeAdmin does not
// admit, before its handler runs; other calls pass.
func (s *Server) adminInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if what, ok := adminCalls[info.FullMethod]; ok {
		if err := s.authorizeAdmin(ctx, what); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

// authorizeAdmin admits an operator call (force-release, membership,
// leadership transfer). With an admin token configured, the call must carry
// it; without one, only callers on this machine (loopback) are admitted, so
// a default single node cannot be administered from the network.
func (s *Server) authorizeAdmin(ctx context.Context, what string) error {
	if s.cfg.AdminToken == "" {
		if p, ok := peer.FromContext(ctx); ok {
			if tcp, ok := p.Addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
				return nil
			}
		}
		return status.Errorf(codes.PermissionDenied, "%s is an admin call: from another host it needs an admin token (start the servers with --admin-token-file and send the token, e.g. FENCE_ADMIN_TOKEN)", what)
	}
	toks := bearers(ctx)
	if len(toks) == 0 {
		return status.Errorf(codes.Unauthenticated, "%s is an admin call: send the admin token (FENCE_ADMIN_TOKEN or --admin-token-file)", what)
	}
	for _, tok := range toks { // a client may also send its identity's token
		if subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.AdminToken)) == 1 {
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied, "%s: wrong admin token", what)
}

// callerAddr is the caller's network address, for the audit log.
func callerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr.String()
	}
	return "unknown"
}
