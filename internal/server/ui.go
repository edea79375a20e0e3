package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/ui"
)

// The dashboard (internal/ui) is served on the metrics port at /ui. Its
// data calls are the gRPC service's, through the same code as the
// HTTP/JSON gateway, so the policy, the admin rule and the validation are
// exactly the gRPC port's:
//
//	POST /ui/api/v1/<Call>    ListLocks, GetLock, Members, ForceRelease: the gateway's handler
//	POST /ui/api/may/<Call>   the same request, judged by the interceptor only (the call is not made)
//	GET  /ui/api/watch        Watch as server-sent events (?prefix=, or ?name=; &from_index=)
//	GET  /ui/api/stats        this node's counters, as /metrics shows them (no identity needed)
//
// The identity is the TLS client certificate (a TLS metrics port asks for
// one) or an Authorization: Bearer header, as on the gRPC port.

// uiCalls are the unary calls the dashboard makes.
var uiCalls = map[string]bool{"ListLocks": true, "GetLock": true, "Members": true, "ForceRelease": true}

// uiAdminCalls are those the loopback admin rule may admit.
var uiAdminCalls = map[string]bool{"ForceRelease": true}

// uiWriteTimeout bounds each write of the event stream: a reader that has
// stopped reading (its window shut, its kernel still answering TCP
// keepalives) or gone away (a laptop put to sleep: TCP retransmits for
// many minutes) is dropped, as the gRPC port's keepalive pings drop the
// Watch of a peer that no longer answers.
var uiWriteTimeout = 30 * time.Second

type dryRunKey struct{}

// isDryRun reports a call judged for /ui/api/may: a refusal of a known
// identity is the answer, not an event to count, log or audit.
func isDryRun(ctx context.Context) bool { return ctx.Value(dryRunKey{}) != nil }

// uiHandler serves /ui/ (the page) and /ui/api/ (its data) over svc.
func (s *Server) uiHandler(svc *service) http.Handler {
	unary := map[string]grpc.MethodDesc{}
	for _, m := range api.FenceService_ServiceDesc.Methods {
		if uiCalls[m.MethodName] {
			unary[m.MethodName] = m
		}
	}
	gw := s.gateway(svc)
	mux := http.NewServeMux()
	mux.Handle("/ui/", ui.Handler())
	mux.Handle("/ui/api/v1/", s.uiCall("/ui/api/v1/", func(w http.ResponseWriter, r *http.Request, call string) {
		r.URL.Path = "/v1/" + call
		gw.ServeHTTP(w, r)
	}))
	mux.Handle("/ui/api/may/", http.NewCrossOriginProtection().Handler(s.uiCall("/ui/api/may/", func(w http.ResponseWriter, r *http.Request, call string) {
		s.uiMay(w, r, svc, unary[call])
	})))
	mux.HandleFunc("/ui/api/watch", s.uiTransport(func(w http.ResponseWriter, r *http.Request) { s.uiWatch(w, r, svc) }))
	mux.HandleFunc("/ui/api/stats", s.uiStats)
	mux.HandleFunc("/ui/api/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, status.Newf(codes.NotFound, "no %s: the dashboard's calls are /ui/api/v1/<call>, /ui/api/may/<call>, /ui/api/watch and /ui/api/stats", r.URL.Path))
	})
	return mux
}

// uiCall passes a request for one of uiCalls (the path after prefix) to
// h, after uiTransport and, for an admin call the loopback rule would
// admit, the loopback Host check.
func (s *Server) uiCall(prefix string, h func(w http.ResponseWriter, r *http.Request, call string)) http.Handler {
	return s.uiTransport(func(w http.ResponseWriter, r *http.Request) {
		call := strings.TrimPrefix(r.URL.Path, prefix)
		if !uiCalls[call] {
			writeStatus(w, status.Newf(codes.Unimplemented, "the dashboard makes only the calls ListLocks, GetLock, Members and ForceRelease (not %q); the gateway (--gateway-addr) serves them all", call))
			return
		}
		// Without an admin token or a policy, the admin rule admits any
		// caller on this machine: a page of another site whose name was
		// made to resolve to 127.0.0.1 (DNS rebinding) would be one. Such
		// calls must name this machine by address or as localhost.
		if uiAdminCalls[call] && s.cfg.AdminToken == "" && s.policy.Load() == nil && !pki.IsLoopbackHost(r.Host) {
			writeStatus(w, status.Newf(codes.PermissionDenied, "%s from the dashboard without an admin token: open the dashboard at a loopback address (http://127.0.0.1:<port>/ui/ or localhost), not %q", call, r.Host))
			return
		}
		h(w, r, call)
	})
}

// uiTransport applies the gRPC port's transport rule: with TLS and no
// policy, only holders of a client certificate of the cluster's CA may
// call (the metrics port asks for one but, for Prometheus, does not
// require it).
//
// Without TLS or a policy, the data is open to whoever reaches the port;
// a call from this machine (loopback) may then come from a page of another
// site whose name was made to resolve to 127.0.0.1 (DNS rebinding), which
// the browser lets read the answers as its own: such calls must name this
// machine by address or as localhost.
func (s *Server) uiTransport(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.tls != nil && s.policy.Load() == nil && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			writeStatus(w, status.New(codes.Unauthenticated, "no identity: present a client certificate of the cluster's CA (as on the gRPC port)"))
			return
		}
		if s.tls == nil && s.policy.Load() == nil && gatewayAddr(r.RemoteAddr).(*net.TCPAddr).IP.IsLoopback() && !pki.IsLoopbackHost(r.Host) {
			writeStatus(w, status.Newf(codes.PermissionDenied, "the dashboard's data on a plaintext node without a policy: open the dashboard at a loopback address (http://127.0.0.1:<port>/ui/ or localhost), not %q", r.Host))
			return
		}
		h(w, r)
	}
}

// uiMay answers whether the caller may make call m with the request in the
// body: the interceptor judges it as it would the call, and the call is not
// made. 200 {"allowed": true}, or the refusal the call would get.
func (s *Server) uiMay(w http.ResponseWriter, r *http.Request, svc *service, m grpc.MethodDesc) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, status.Newf(codes.Unimplemented, "%s %s: send POST with the request as JSON", r.Method, r.URL.Path))
		return
	}
	ctx, cancel, body, err := gatewayRequest(w, r, api.FenceService_ServiceDesc.ServiceName+"/"+m.MethodName)
	if err != nil {
		writeStatus(w, status.Convert(err))
		return
	}
	defer cancel()
	ctx = context.WithValue(ctx, dryRunKey{}, true)
	judged := false
	_, err = m.Handler(svc, ctx, decodeJSON(body), func(ctx context.Context, req any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		return s.unaryAuth(ctx, req, info, func(context.Context, any) (any, error) { judged = true; return nil, nil })
	})
	if err == nil && !judged {
		err = status.Error(codes.Internal, "the call was not judged")
	}
	if err != nil {
		writeStatus(w, status.Convert(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"allowed": true}` + "\n"))
}

// uiWatch serves Watch as server-sent events: each WatchResponse is one
// "data:" line in the proto's JSON mapping. The call goes through the
// stream interceptor and the Watch handler, as on the gRPC port. A refusal
// before the first message is the gateway's JSON error with its HTTP
// status; an end after it is an "end" event carrying the same JSON.
func (s *Server) uiWatch(w http.ResponseWriter, r *http.Request, svc *service) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, status.Newf(codes.Unimplemented, "%s /ui/api/watch: send GET", r.Method))
		return
	}
	q := r.URL.Query()
	req := &api.WatchRequest{Name: q.Get("prefix"), Prefix: true}
	if q.Has("name") {
		req.Name, req.Prefix = q.Get("name"), false
	}
	if f := q.Get("from_index"); f != "" {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			writeStatus(w, status.Newf(codes.InvalidArgument, "from_index=%q: give a raft index (a whole number)", f))
			return
		}
		req.FromIndex = n
	}
	ctx, cancel, _, err := gatewayRequest(w, r, api.FenceService_ServiceDesc.ServiceName+"/Watch")
	if err != nil {
		writeStatus(w, status.Convert(err))
		return
	}
	defer cancel()
	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }() // the connection may serve other calls
	started := false
	send := func(m proto.Message) error {
		out, err := gatewayOut.Marshal(m)
		if err != nil {
			return status.Errorf(codes.Internal, "encoding an event: %v", err)
		}
		_ = rc.SetWriteDeadline(time.Now().Add(uiWriteTimeout))
		if !started {
			started = true
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusOK)
		}
		if _, err := w.Write(append(append([]byte("data: "), out...), '\n', '\n')); err != nil {
			return err
		}
		return rc.Flush()
	}
	info := &grpc.StreamServerInfo{FullMethod: api.FenceService_Watch_FullMethodName, IsServerStream: true}
	err = s.streamAuth(svc, &oneRequest{ctx: ctx, req: req, send: send}, info, streamHandler("Watch"))
	if r.Context().Err() != nil {
		return // the page went away
	}
	st := status.Convert(err)
	if err == nil {
		st = status.New(codes.OK, "the watch ended")
	}
	if !started {
		writeStatus(w, st)
		return
	}
	b, _ := json.Marshal(statusBody(httpStatus[st.Code()], st))
	_ = rc.SetWriteDeadline(time.Now().Add(uiWriteTimeout))
	_, _ = w.Write(append(append([]byte("event: end\ndata: "), b...), '\n', '\n'))
	_ = rc.Flush()
}

// uiStatsBody is /ui/api/stats: counts since this node started, and live
// sizes, as the same numbers' /metrics series show them.
type uiStatsBody struct {
	// Node is this node's id and Leader the leader it knows ("" in an
	// election): /metrics tells as much (fence_is_leader, the peer labels).
	Node   string `json:"node"`
	Leader string `json:"leader"`
	// Grants, Expirations, Releases and RenewalsFailed are the counters
	// fence_grants_total, fence_lease_expirations_total,
	// fence_releases_total and fence_renewals_failed_total.
	Grants         float64 `json:"grants"`
	Expirations    float64 `json:"expirations"`
	Releases       float64 `json:"releases"`
	RenewalsFailed float64 `json:"renewals_failed"`
	// Waiters, Locks and Leases are fence_waiters, fence_active_locks and
	// fence_active_leases.
	Waiters int `json:"waiters"`
	Locks   int `json:"locks"`
	Leases  int `json:"leases"`
}

// uiStats serves /ui/api/stats. It needs no identity, as /metrics on the
// same port does not: it tells nothing /metrics does not.
func (s *Server) uiStats(w http.ResponseWriter, _ *http.Request) {
	m := s.metrics
	b := uiStatsBody{Node: s.cfg.NodeID, Grants: counterValue(m.Grants), Expirations: counterValue(m.Expirations),
		Releases: counterValue(m.Releases), RenewalsFailed: counterValue(m.RenewalsFailed)}
	b.Leader, _, _ = s.node.Leader()
	s.node.View(func(st *fsm.State) { b.Waiters, b.Locks, b.Leases = st.NumWaiters(), st.NumLocks(), st.NumLeases() })
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(b)
}

// counterValue reads a counter's value.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
