package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/audit"
	"github.com/fencehq/fence/internal/policy"
)

// need is what a call requires of its caller under a policy: a right, on
// the name the request carries (name nil: on some name).
type need struct {
	right policy.Right
	name  func(req any) string
}

func named[R interface{ GetName() string }](req any) string { return req.(R).GetName() }
func keyed[R interface{ GetKey() string }](req any) string  { return req.(R).GetKey() }

// cluster is the name of calls on the whole cluster (membership,
// leadership): only a grant on the prefix "" covers it.
func cluster(any) string { return "" }

// needs lists every method of the Fence service; a method missing here is
// refused under a policy (TestEveryMethodHasANeed keeps it complete).
var needs = map[string]need{
	api.FenceService_CreateLease_FullMethodName:    {policy.Acquire, nil},
	api.FenceService_KeepAlive_FullMethodName:      {policy.Acquire, nil},
	api.FenceService_Session_FullMethodName:        {policy.Acquire, nil}, // each call is judged as its unary call (session.go)
	api.FenceService_Revoke_FullMethodName:         {policy.Acquire, nil},
	api.FenceService_Acquire_FullMethodName:        {policy.Acquire, named[*api.AcquireRequest]},
	api.FenceService_Release_FullMethodName:        {policy.Acquire, named[*api.ReleaseRequest]},
	api.FenceService_Put_FullMethodName:            {policy.Acquire, keyed[*api.PutRequest]},
	api.FenceService_GetLock_FullMethodName:        {policy.Read, named[*api.GetLockRequest]},
	api.FenceService_ListLocks_FullMethodName:      {policy.Read, nil}, // the answer holds only the caller's names
	api.FenceService_HotLocks_FullMethodName:       {policy.Read, nil}, // so does this one's
	api.FenceService_Watch_FullMethodName:          {policy.Read, nil}, // judged per name by the handler
	api.FenceService_Get_FullMethodName:            {policy.Read, keyed[*api.GetRequest]},
	api.FenceService_Members_FullMethodName:        {policy.Read, nil},
	api.FenceService_ForceRelease_FullMethodName:   {policy.Admin, named[*api.ForceReleaseRequest]},
	api.FenceService_AddMember_FullMethodName:      {policy.Admin, cluster},
	api.FenceService_RemoveMember_FullMethodName:   {policy.Admin, cluster},
	api.FenceService_TransferLeader_FullMethodName: {policy.Admin, cluster},
	api.FenceService_Backup_FullMethodName:         {policy.Admin, cluster},
}

// caller is who makes a call, as authorize found it (policy in force only;
// the zero caller otherwise).
type caller struct {
	identity string
	admin    bool // the admin token: every right
}

type callerKey struct{}

// callerOf is the caller authorize put in the call's context.
func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// bearers are the call's "authorization: Bearer <token>" tokens (a client
// may send its identity's token and, on an admin call, the admin token);
// values without the "Bearer " scheme, or empty, are no tokens.
func bearers(ctx context.Context) []string {
	md, _ := metadata.FromIncomingContext(ctx)
	var out []string
	for _, v := range md.Get(AdminHeader) {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok && tok != "" {
			out = append(out, tok)
		}
	}
	return out
}

// identify finds who calls: the holder of the admin token, the identity of
// a policy token, or the common name of the verified client certificate.
// admin reports the admin token.
func (s *Server) identify(ctx context.Context, p *policy.Policy) (id string, admin bool, err error) {
	if toks := bearers(ctx); len(toks) > 0 {
		for _, tok := range toks {
			if s.cfg.AdminToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.AdminToken)) == 1 {
				return "admin token", true, nil
			}
		}
		for _, tok := range toks {
			if id, ok := p.TokenIdentity(tok); ok {
				return id, false, nil
			}
		}
		return "", false, status.Error(codes.Unauthenticated, "the bearer token is not one the policy knows")
	}
	if pr, ok := peer.FromContext(ctx); ok {
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
			if cn := ti.State.VerifiedChains[0][0].Subject.CommonName; cn != "" {
				return cn, false, nil
			}
		}
	}
	return "", false, status.Error(codes.Unauthenticated, "no identity: present a client certificate of the cluster's CA, or a bearer token the policy knows")
}

// authorize admits a call under the policy in force, or refuses it with
// Unauthenticated (no identity) or PermissionDenied (the policy does not
// grant it), counted and logged with the caller. It returns the context
// the handler gets, carrying the identity.
func (s *Server) authorize(ctx context.Context, method string, req any) (context.Context, error) {
	p := s.policy.Load()
	if p == nil {
		return ctx, nil
	}
	id, admin, err := s.identify(ctx, p)
	if err == nil && !admin {
		err = s.permit(p, id, method, req)
	}
	if err != nil {
		return nil, s.refused(ctx, method, id, err)
	}
	return context.WithValue(ctx, callerKey{}, caller{identity: id, admin: admin}), nil
}

// refused reports a call the policy refuses — counted, logged and written
// to the audit file with the caller — and returns err.
func (s *Server) refused(ctx context.Context, method, id string, err error) error {
	if isDryRun(ctx) && status.Code(err) == codes.PermissionDenied {
		// A known identity's question about its rights, not a call (the
		// dashboard's /ui/api/may). Without an identity, or with a token
		// the policy does not know, it is a probe: recorded as any call.
		return err
	}
	st := status.Convert(err)
	s.metrics.AuthDenied.WithLabelValues(st.Code().String()).Inc()
	s.log.Warn("call refused", "method", method, "identity", id, "caller", callerAddr(ctx), "err", st.Message())
	if aerr := s.node.AuditDenial(audit.Denial{At: time.Now(), Method: method, Identity: id, Caller: callerAddr(ctx),
		Code: st.Code().String(), Reason: st.Message()}); aerr != nil {
		s.log.Error("audit file: the refusal was not recorded", "err", aerr)
	}
	return err
}

// permit checks one call of identity id against p.
func (s *Server) permit(p *policy.Policy, id, method string, req any) error {
	n, ok := needs[method]
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s: not a call the policy covers", method)
	}
	short := method[strings.LastIndex(method, "/")+1:]
	if n.name == nil {
		if !p.AllowsSome(id, n.right) {
			return status.Errorf(codes.PermissionDenied, "%s: identity %q has no %s right under the policy", short, id, n.right)
		}
		return nil
	}
	name := n.name(req)
	if name == "" && !p.Allows(id, n.right, "") {
		return status.Errorf(codes.PermissionDenied, "%s acts on the whole cluster: identity %q needs the %s right on every name (the prefix \"\"); it has it under %s",
			short, id, n.right, prefixList(p.Prefixes(id, n.right)))
	}
	if !p.Allows(id, n.right, name) {
		return status.Errorf(codes.PermissionDenied, "%s %q: identity %q has the %s right only under %s", short, name, id, n.right, prefixList(p.Prefixes(id, n.right)))
	}
	return nil
}

func prefixList(ps []string) string {
	if len(ps) == 0 {
		return "no prefix"
	}
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = fmt.Sprintf("%q", p)
	}
	return "the prefixes " + strings.Join(q, ", ")
}

// unaryAuth is the interceptor of unary calls: the policy, then (without a
// policy) the admin rule.
func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if openMethods[info.FullMethod] {
		return handler(ctx, req)
	}
	if s.policy.Load() == nil {
		return s.adminInterceptor(ctx, req, info, handler)
	}
	ctx, err := s.authorize(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// streamAuth is the interceptor of streams (KeepAlive, Backup): the
// policy's check of the call itself (the stream's messages name no lock),
// or without a policy the admin rule.
func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if openMethods[info.FullMethod] {
		return handler(srv, ss)
	}
	if s.policy.Load() == nil {
		if what, ok := adminCalls[info.FullMethod]; ok {
			if err := s.authorizeAdmin(ss.Context(), what); err != nil {
				return err
			}
		}
		return handler(srv, ss)
	}
	ctx, err := s.authorize(ss.Context(), info.FullMethod, nil)
	if err != nil {
		return err
	}
	return handler(srv, &identifiedStream{ServerStream: ss, ctx: ctx})
}

// policyReloaded returns a channel that is closed at the next policy
// reload (a queued Acquire is judged again then).
func (s *Server) policyReloaded() <-chan struct{} {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.reloaded == nil {
		s.reloaded = make(chan struct{})
	}
	return s.reloaded
}

// stillPermitted judges a message of a stream opened earlier (a renewal)
// against the policy in force now: a reload that took the caller's rights
// away stops its renewals, so its leases end within their TTL.
func (s *Server) stillPermitted(ctx context.Context, method string, req any) error {
	p, c := s.policy.Load(), callerOf(ctx)
	if p == nil || c.admin {
		return nil
	}
	if err := s.permit(p, c.identity, method, req); err != nil {
		return s.refused(ctx, method, c.identity, err)
	}
	return nil
}

type identifiedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identifiedStream) Context() context.Context { return s.ctx }

// loadPolicy reads Config.PolicyFile, if set, into force.
func (s *Server) loadPolicy() error {
	if s.cfg.PolicyFile == "" {
		return nil
	}
	p, err := policy.Load(s.cfg.PolicyFile)
	if err != nil {
		return err
	}
	s.policy.Store(p)
	return nil
}

// ReloadPolicy re-reads the policy file (fence serve does on SIGHUP): calls
// after it are judged by the new one. A file with problems changes nothing;
// the error lists them all.
func (s *Server) ReloadPolicy() error {
	if s.cfg.PolicyFile == "" {
		return errors.New("this node has no policy file (--policy-file): every holder of a certificate of the CA may do everything")
	}
	if err := s.loadPolicy(); err != nil {
		return err
	}
	s.reloadMu.Lock()
	if s.reloaded != nil {
		close(s.reloaded)
		s.reloaded = nil
	}
	s.reloadMu.Unlock()
	s.log.Info("reloaded the policy", "file", s.cfg.PolicyFile)
	return nil
}
