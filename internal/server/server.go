package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/audit"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/metrics"
	"github.com/fencehq/fence/internal/node"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/policy"
)

// Server is one fence node's front: the gRPC service (handlers, request
// validation, admin authorization) and the HTTP endpoints, on top of a
// node.Node that holds the raft group and the replicated state. New starts
// it; Close stops it. Safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	limits  limits
	metrics *metrics.Server
	node    *node.Node
	tls     *pki.Reloader                 // nil: plaintext (Config.Insecure)
	policy  atomic.Pointer[policy.Policy] // nil: no policy file
	// reloaded is closed at the next policy reload (policyReloaded).
	reloadMu sync.Mutex
	reloaded chan struct{}
	// signer signs grants (nil: no token key); tokenKeyFile is its file.
	signer       atomic.Pointer[fencing.Signer]
	tokenKeyFile string

	grpc    *grpc.Server
	grpcLis net.Listener
	http    *http.Server
	httpLis net.Listener
	// gw and gwLis serve the HTTP/JSON gateway (nil: Config.GatewayAddr "").
	gw    *http.Server
	gwLis net.Listener
	// raftLis is the raft port from listen until the node takes it over;
	// raftAdvertised is where the other members dial it.
	raftLis        net.Listener
	raftAdvertised string
	closeErr       error
	closed         sync.Once
	// stopHealth ends the health status updates (serveHealth).
	stopHealth chan struct{}
	// closing is closed when Close begins: open Watch streams end at once
	// (UNAVAILABLE) instead of holding GracefulStop up.
	closing chan struct{}
}

// streamWorkers is the size of the gRPC server's pool of call goroutines:
// enough for the unary calls a busy leader has in flight at once (each
// waits for its commit), small enough that the idle pool costs little.
const streamWorkers = 256

// New opens (or creates) the node's data dir, starts its raft group (a
// single node bootstraps itself on first start; a node with Join asks a
// member to add it first), and starts serving. It returns once the
// listeners are open; use WaitReady to wait for leadership.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger,
		limits: limits{minTTL: cfg.MinTTL, maxTTL: cfg.MaxTTL, lockDelay: cfg.DefaultLockDelay}}
	if err := s.open(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) open() (err error) {
	cfg := s.cfg
	reg, gather := cfg.Registerer, cfg.Gatherer
	if g, ok := reg.(prometheus.Gatherer); ok && gather == nil {
		gather = g // a *prometheus.Registry is both
	}
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg, gather = r, r
	}
	if err := s.listen(); err != nil { // (the dev setup's refusals are Validate's)
		return err
	}
	var dev devSetup
	_, statErr := os.Stat(cfg.DataDir)
	defer func() {
		if err == nil {
			return
		}
		if dev.made {
			os.RemoveAll(dev.dir) // a start that failed leaves no certificates behind
		}
		if errors.Is(statErr, fs.ErrNotExist) {
			os.Remove(cfg.DataDir) // nor a data dir it made, if nothing else is in it
		}
	}()
	if s.tls, dev, err = cfg.openTLS(s.log); err != nil {
		return err
	}
	if err := s.loadPolicy(); err != nil {
		return err
	}
	if err := s.openTokenKey(dev.dir); err != nil {
		return err
	}
	s.metrics = metrics.NewServer(reg, metrics.Gauges{
		Leases:  s.gauge(func(st *fsm.State) int { return st.NumLeases() }),
		Locks:   s.gauge(func(st *fsm.State) int { return st.NumLocks() }),
		Waiters: s.gauge(func(st *fsm.State) int { return st.NumWaiters() }),
		LastToken: func() float64 {
			var t uint64
			if s.node != nil {
				s.node.View(func(st *fsm.State) { t = st.Token() })
			}
			return float64(t)
		},
		IsLeader: func() float64 { return map[bool]float64{true: 1}[s.Ready()] },
		Raft: func() metrics.RaftStatus {
			if s.node == nil {
				return metrics.RaftStatus{}
			}
			r := s.node.RaftStatus()
			return metrics.RaftStatus{Term: r.Term, Commit: r.Commit, Applied: r.Applied, LeaderChanges: r.LeaderChanges}
		},
		Peers: s.peerGauges,
		Queues: func(fn func(string, int)) {
			if s.node != nil {
				s.node.View(func(st *fsm.State) { st.Queues(fn) })
			}
		},
		Prefixes: cfg.MetricsPrefixes,
	})
	raftLevel, err := node.ParseRaftLogLevel(cfg.RaftLogLevel)
	if err != nil {
		return err
	}
	ncfg := node.Config{Name: cfg.NodeID, DataDir: cfg.DataDir, RaftAddr: s.AdvertisedRaftAddr(), RaftListener: s.raftLis, ClientAddr: s.AdvertisedGRPCAddr(),
		WrapTransport: cfg.WrapTransport, TickInterval: cfg.TickInterval, MaxBatch: cfg.MaxBatch,
		SnapshotThreshold: cfg.SnapshotThreshold, TrailingLogs: cfg.TrailingLogs, WatchHistory: cfg.WatchHistory, HotLocks: cfg.HotLocks,
		HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout,
		AuditFile: cfg.AuditFile, Clock: cfg.Clock, Metrics: s.metrics, Logger: s.log, RaftLogLevel: raftLevel}
	if s.tls != nil {
		ncfg.RaftServerTLS, ncfg.RaftClientTLS = s.tls.MemberConfig(), s.tls.ClientConfig
	}
	for _, p := range cfg.Bootstrap {
		ncfg.Bootstrap = append(ncfg.Bootstrap, node.Member{Name: p.ID, RaftAddr: p.RaftAddr})
	}
	if len(cfg.Join) > 0 && !node.HasLog(cfg.DataDir) {
		// What could fail the start locally fails it before the cluster
		// adds this node: a start that fails after the join leaves a
		// learner behind (AddMember with the same address is a no-op, so
		// a retry with the same flags joins it).
		if err := node.CheckDataDir(cfg.DataDir); err != nil {
			return err
		}
		if cfg.AuditFile != "" {
			if err := audit.Check(cfg.AuditFile); err != nil {
				return err
			}
		}
		if ncfg.Join, err = s.join(); err != nil {
			return err
		}
	}
	s.raftLis = nil // the node owns it now, and closes it if New fails
	if s.node, err = node.New(ncfg); err != nil {
		return err
	}
	if err := s.checkAlone(dev); err != nil {
		return err
	}

	creds := insecure.NewCredentials()
	// Under a policy a client may identify itself by a bearer token instead
	// of a certificate (authorize then requires one or the other).
	clientAuth := tls.RequireAndVerifyClientCert
	if cfg.PolicyFile != "" {
		clientAuth = tls.VerifyClientCertIfGiven
	}
	if s.tls != nil {
		creds = credentials.NewTLS(s.tls.ServerConfig(clientAuth))
	}
	opts := []grpc.ServerOption{grpc.Creds(creds), grpc.MaxRecvMsgSize(fsm.MaxValueLen + 64<<10),
		// A connection that has not finished its TLS handshake (and HTTP/2
		// preface) in 10s is closed, as on the raft port (gRPC's default: 120s).
		grpc.ConnectionTimeout(10 * time.Second),
		// Calls run on a pool of long-lived goroutines whose stacks have
		// already grown, instead of a new goroutine each (runtime.copystack
		// was 7 % of a leader's CPU under 64 clients); when every worker is
		// busy (waiting Acquires, KeepAlive streams) a call gets its own.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.StaticStreamWindowSize(api.StreamWindow), grpc.StaticConnWindowSize(api.ConnWindow),
		// The standard proto encoding without protobuf's reflection.
		grpc.ForceServerCodecV2(api.Codec),
		grpc.UnaryInterceptor(s.unaryAuth), grpc.StreamInterceptor(s.streamAuth),
		// Clients ping every 2s to find dead connections (see client.Dial).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		// The server pings too, so the handlers of a connection that died on
		// the client's side only (a waiting Acquire, say) end within ~3s
		// instead of when TCP gives up.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Second, Timeout: time.Second})}
	if cfg.TracerProvider != nil {
		opts = append(opts, grpc.StatsHandler(tracingHandler(cfg.TracerProvider)))
	}
	s.grpc = grpc.NewServer(opts...)
	svc := &service{s: s}
	api.RegisterFenceServiceServer(s.grpc, svc)
	s.stopHealth, s.closing = make(chan struct{}), make(chan struct{})
	s.serveHealth(s.grpc, s.stopHealth)
	go s.grpc.Serve(s.grpcLis)

	if s.httpLis != nil {
		if s.tls != nil {
			s.httpLis = tls.NewListener(s.httpLis, s.tls.ServerConfig(tls.VerifyClientCertIfGiven))
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", s.metricsHandler(gather)) // (the prefix labels as the policy allows: metricsport.go)
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		// The dashboard and its data calls (ui.go), under the gRPC port's rules.
		mux.Handle("/ui/", s.uiHandler(svc))
		if cfg.Pprof {
			mux.HandleFunc("/debug/pprof/", requireClientCert(pprof.Index))
			mux.HandleFunc("/debug/pprof/profile", requireClientCert(pprof.Profile))
			mux.HandleFunc("/debug/pprof/trace", requireClientCert(pprof.Trace))
			mux.HandleFunc("/debug/pprof/symbol", requireClientCert(pprof.Symbol))
			mux.HandleFunc("/debug/pprof/cmdline", requireClientCert(pprof.Cmdline))
		}
		// Ready: can serve clients (it leads, or follows a leader it knows,
		// and sends clients there): what a Kubernetes readiness probe
		// wants, so all members of a healthy cluster are Ready.
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !s.CanServe() {
				http.Error(w, "not ready: no leader known (cut off, or an election)", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ready")
		})
		// The leader: for load balancers that send only to it.
		mux.HandleFunc("/leaderz", func(w http.ResponseWriter, _ *http.Request) {
			if !s.Ready() {
				http.Error(w, "not the leader, or still taking over", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "leader")
		})
		// Idle or slow callers are cut off (no WriteTimeout: a pprof
		// profile streams for as long as it was asked to).
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)} // refused handshakes, say
		go s.http.Serve(s.httpLis)
	}
	if s.gwLis != nil {
		if s.tls != nil {
			s.gwLis = tls.NewListener(s.gwLis, s.tls.ServerConfig(clientAuth))
		}
		// No ReadTimeout or WriteTimeout: a waiting Acquire is answered when
		// the lock is granted (its ?timeout= bounds it).
		s.gw = &http.Server{Handler: s.gateway(svc), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
		go s.gw.Serve(s.gwLis)
	}
	s.log.Info("fence serving", "grpc", s.GRPCAddr(), "metrics", s.MetricsAddr(), "gateway", s.GatewayAddr(), "raft", s.node.RaftAddr(),
		"advertised_grpc", s.AdvertisedGRPCAddr(), "advertised_raft", s.AdvertisedRaftAddr(), "data_dir", cfg.DataDir, "tls", s.tls != nil)
	return nil
}

// listen binds every port of this node before anything is written: a busy
// port fails the start with the data dir untouched (no certificates, no
// raft log, no bootstrap).
func (s *Server) listen() error {
	bind := func(what, flag, addr string) (net.Listener, error) {
		l, err := net.Listen("tcp", addr)
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			return nil, fmt.Errorf("the %s port %s is in use (by another fence, or another program): free it or give another %s; nothing was written to the data dir", what, addr, flag)
		case err != nil:
			return nil, fmt.Errorf("the %s port (%s %s): %w; nothing was written to the data dir", what, flag, addr, err)
		}
		return l, nil
	}
	var err error
	if s.grpcLis, err = bind("gRPC", "--grpc-addr", s.cfg.GRPCAddr); err != nil {
		return err
	}
	if s.cfg.MetricsAddr != "" {
		if s.httpLis, err = bind("metrics", "--metrics-addr", s.cfg.MetricsAddr); err != nil {
			return err
		}
	}
	if s.cfg.GatewayAddr != "" {
		if s.gwLis, err = bind("gateway", "--gateway-addr", s.cfg.GatewayAddr); err != nil {
			return err
		}
	}
	if s.raftLis = s.cfg.RaftListener; s.raftLis == nil {
		if s.raftLis, err = bind("raft", "--raft-addr", s.cfg.RaftAddr); err != nil {
			return err
		}
	}
	if s.raftAdvertised = s.cfg.AdvertiseRaftAddr; s.raftAdvertised == "" {
		s.raftAdvertised = s.raftLis.Addr().String()
	}
	return nil
}

// AdvertisedGRPCAddr is the gRPC address this node gives out (recorded when
// it leads, so followers redirect clients there): Config.AdvertiseGRPCAddr,
// else the one it listens on.
func (s *Server) AdvertisedGRPCAddr() string {
	if s.cfg.AdvertiseGRPCAddr != "" {
		return s.cfg.AdvertiseGRPCAddr
	}
	return s.GRPCAddr()
}

// AdvertisedRaftAddr is the raft address the other members dial (recorded
// in the membership): Config.AdvertiseRaftAddr, else the one this node
// listens on.
func (s *Server) AdvertisedRaftAddr() string {
	return s.raftAdvertised
}

// peerGauges are the other members as this node sees them, for the
// per-peer metrics (none before the node runs, or if its loop does not
// answer within a second).
func (s *Server) peerGauges() []metrics.Peer {
	if s.node == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ms, err := s.node.Members(ctx)
	if err != nil {
		return nil
	}
	leading := s.node.Ready()
	var out []metrics.Peer
	for _, m := range ms {
		if m.Name == s.cfg.NodeID || !leading && !m.Leader {
			continue // a follower hears from the leader only: another follower's last contact would only grow
		}
		out = append(out, metrics.Peer{Name: m.Name, LastContact: m.LastContact.Seconds(), Match: m.Match, Active: m.Active, Leading: leading})
	}
	return out
}

// gauge reads f of this node's state for a metric (0 before the node runs).
func (s *Server) gauge(f func(*fsm.State) int) func() float64 {
	return func() float64 {
		var v int
		if s.node != nil {
			s.node.View(func(st *fsm.State) { v = f(st) })
		}
		return float64(v)
	}
}

// Ready reports whether this node is the leader and has taken over: it
// accepts commands and reads.
func (s *Server) Ready() bool { return s.node != nil && s.node.Ready() }

// WaitReady blocks until Ready or ctx ends.
func (s *Server) WaitReady(ctx context.Context) error {
	if s.node == nil {
		return errors.New("server not started")
	}
	return s.node.WaitReady(ctx)
}

// notLeader is the refusal of a node that is not the ready leader; it names
// the leader when this node knows it, so clients can go there.
func (s *Server) notLeader() error {
	id, raftAddr, grpcAddr := s.node.Leader()
	if id == "" {
		return status.Error(codes.Unavailable, "no leader right now (an election is under way); retry shortly")
	}
	if id == s.cfg.NodeID {
		return status.Error(codes.Unavailable, "this node was just elected and is still taking over; retry shortly")
	}
	if grpcAddr == "" {
		return status.Errorf(codes.Unavailable, "this node (%s) is not the leader; the leader is %s (raft address %s); retry there", s.cfg.NodeID, id, raftAddr)
	}
	st := status.Newf(codes.Unavailable, "this node (%s) is not the leader; the leader is %s at %s; retry there", s.cfg.NodeID, id, grpcAddr)
	return withDetail(st, &api.NotLeader{LeaderId: id, LeaderAddr: grpcAddr})
}

// linearizableRead confirms leadership with a quorum (raft's ReadIndex) and
// waits until this node has applied every write acknowledged before the
// call, so a read served after it reflects them all.
func (s *Server) linearizableRead(ctx context.Context) error {
	if !s.Ready() {
		return s.notLeader()
	}
	return s.readErr(ctx, s.node.Read(ctx, func(*fsm.State) {}))
}

// readErr is the status of a failed linearizable read (nil for nil).
func (s *Server) readErr(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, node.ErrNotLeader):
		return s.notLeader()
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "leadership not confirmed: %v; retry shortly", err)
}

// Snapshot takes a snapshot now (and compacts the log).
func (s *Server) Snapshot() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.node.Snapshot(ctx)
}

// GRPCAddr returns the address clients connect to.
func (s *Server) GRPCAddr() string {
	if s.grpcLis == nil {
		return ""
	}
	return s.grpcLis.Addr().String()
}

// RaftAddr returns the address of the raft transport.
func (s *Server) RaftAddr() string {
	if s.node == nil {
		return ""
	}
	return s.node.RaftAddr()
}

// GatewayAddr returns the HTTP/JSON gateway's address, or "" when disabled.
func (s *Server) GatewayAddr() string {
	if s.gwLis == nil {
		return ""
	}
	return s.gwLis.Addr().String()
}

// MetricsAddr returns the HTTP address of /metrics, or "" when disabled.
func (s *Server) MetricsAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Failed is closed when the node stopped on its own (a raft log write
// failed); Failure says why. The server then answers nothing useful: its
// owner should Close it and end the process (fence serve exits 1).
func (s *Server) Failed() <-chan struct{} { return s.node.Failed() }

// Failure returns why the node stopped on its own, or nil.
func (s *Server) Failure() error { return s.node.Failure() }

// Close stops serving and stops the node; committed state stays in DataDir.
func (s *Server) Close() error {
	s.closed.Do(func() {
		if s.stopHealth != nil {
			close(s.stopHealth)
			close(s.closing)
		}
		if s.grpc != nil {
			stopped := make(chan struct{})
			go func() { s.grpc.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(2 * time.Second):
				s.grpc.Stop()
			}
		} else if s.grpcLis != nil {
			s.grpcLis.Close()
		}
		for _, h := range []struct {
			srv *http.Server
			lis net.Listener
		}{{s.http, s.httpLis}, {s.gw, s.gwLis}} {
			if h.srv != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if h.srv.Shutdown(ctx) != nil {
					h.srv.Close() // a waiting Acquire on the gateway
				}
				cancel()
			} else if h.lis != nil {
				h.lis.Close()
			}
		}
		if s.raftLis != nil { // a start that failed before the node took it
			s.raftLis.Close()
		}
		if s.node != nil {
			s.closeErr = s.node.Close()
		}
	})
	return s.closeErr
}
