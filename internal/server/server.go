package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/metrics"
)

// Server is one fence node: raft (raft-wal log, file snapshots), the replicated
// state, the leader's lease duties and the gRPC and HTTP endpoints. New
// starts it; Close stops it. Safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	limits  limits
	metrics *metrics.Server

	replica  *replica
	raft     *raft.Raft
	dirLock  *os.File // the data dir's LOCK, held while running
	store    *wal.WAL
	trans    raft.Transport
	proposer *proposer
	lessor   *lessor
	waiters  waiters
	audit    *auditLog   // nil unless Config.AuditFile is set
	led      atomic.Bool // this node has led (read only by a planted bug)

	grpc     *grpc.Server
	grpcLis  net.Listener
	http     *http.Server
	httpLis  net.Listener
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	epochMu  sync.Mutex
	epoch    uint64 // guarded by epochMu; +1 on every leadership change
	closeErr error
	closed   sync.Once
}

// New opens (or creates) the node's data dir, starts raft, bootstraps a
// single-node group on first start, and starts serving. It returns once the
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

func (s *Server) open() error {
	cfg := s.cfg
	reg, gather := cfg.Registerer, cfg.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg, gather = r, r
	}
	if cfg.AuditFile != "" {
		var err error
		if s.audit, err = openAudit(cfg.AuditFile); err != nil {
			return err
		}
	}
	s.replica = &replica{state: fsm.New(), applied: s.applied, restored: s.restored, log: s.log}
	s.metrics = metrics.NewServer(reg, metrics.Gauges{
		Leases:   s.gauge(func(st *fsm.State) int { return st.NumLeases() }),
		Locks:    s.gauge(func(st *fsm.State) int { return st.NumLocks() }),
		Waiters:  s.gauge(func(st *fsm.State) int { return st.NumWaiters() }),
		IsLeader: func() float64 { return map[bool]float64{true: 1}[s.Ready()] },
	})

	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	hl := raftLogger(s.log, cfg.RaftLogLevel)
	var err error
	if s.dirLock, err = lockDataDir(cfg.DataDir); err != nil {
		return err
	}
	if err := checkFormat(cfg.DataDir); err != nil {
		return err
	}
	if s.store, err = openLogStore(cfg.DataDir, hl); err != nil {
		return err
	}
	logs, err := raft.NewLogCache(4096, s.store)
	if err != nil {
		return err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 3, hl)
	if err != nil {
		return fmt.Errorf("snapshot store: %w", err)
	}
	if s.trans = cfg.Transport; s.trans == nil {
		if s.trans, err = raft.NewTCPTransportWithLogger(cfg.RaftAddr, nil, 3, 10*time.Second, hl); err != nil {
			return fmt.Errorf("raft transport on %s: %w", cfg.RaftAddr, err)
		}
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout, rc.ElectionTimeout = cfg.HeartbeatTimeout, cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	rc.SnapshotThreshold, rc.SnapshotInterval, rc.TrailingLogs = cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs
	rc.BatchApplyCh = true
	rc.LeaderWritesInParallel = true
	rc.Logger = hl
	leaderCh := make(chan bool, 8)
	rc.NotifyCh = leaderCh

	if s.raft, err = raft.NewRaft(rc, s.replica, logs, s.store, snaps, s.trans); err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	existing, err := raft.HasExistingState(logs, s.store, snaps)
	if err != nil {
		return err
	}
	if !existing && len(cfg.Join) == 0 {
		boot := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: s.trans.LocalAddr()}}}
		if len(cfg.Bootstrap) > 0 {
			boot.Servers = nil
			for _, p := range cfg.Bootstrap {
				boot.Servers = append(boot.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
			}
		}
		s.log.Info("first start: bootstrapping", "node", cfg.NodeID, "voters", len(boot.Servers), "data_dir", cfg.DataDir)
		if err := s.raft.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}

	s.proposer = newProposer(s.raft, cfg.MaxBatch, s.metrics)
	s.lessor = newLessor(cfg.Clock, cfg.TickInterval, s.proposer.proposeAll, s.log)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.watchLeadership(ctx, leaderCh) }()
	go func() { defer s.wg.Done(); s.lessor.run(ctx) }()
	if !existing && len(cfg.Join) > 0 {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.join(ctx) }()
	}

	if s.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return fmt.Errorf("gRPC listener on %s: %w", cfg.GRPCAddr, err)
	}
	s.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(fsm.MaxValueLen+64<<10),
		// Clients ping every 2s to find dead connections (see client.Dial).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		// The server pings too, so the handlers of a connection that died on
		// the client's side only (a waiting Acquire, say) end within ~3s
		// instead of when TCP gives up.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Second, Timeout: time.Second}))
	api.RegisterFenceServer(s.grpc, &service{s: s})
	go s.grpc.Serve(s.grpcLis)

	if cfg.MetricsAddr != "" {
		if s.httpLis, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("metrics listener on %s: %w", cfg.MetricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		if cfg.Pprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		}
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !s.Ready() {
				http.Error(w, "not ready: not the leader, or still taking over", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ready")
		})
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go s.http.Serve(s.httpLis)
	}
	s.log.Info("fence serving", "grpc", s.GRPCAddr(), "metrics", s.MetricsAddr(), "raft", string(s.trans.LocalAddr()), "data_dir", cfg.DataDir)
	return nil
}

func (s *Server) gauge(f func(*fsm.State) int) func() float64 {
	return func() float64 {
		var n int
		s.replica.read(func(st *fsm.State) { n = f(st) })
		return float64(n)
	}
}

// watchLeadership starts the leader duties when this node becomes leader and
// has applied every earlier entry (a barrier), and stops them when it is not.
func (s *Server) watchLeadership(ctx context.Context, ch <-chan bool) {
	for {
		select {
		case <-ctx.Done():
			s.lessor.deactivate()
			return
		case leader := <-ch:
			s.epochMu.Lock()
			s.epoch++
			epoch := s.epoch
			s.epochMu.Unlock()
			if !leader {
				s.lessor.deactivate()
				continue
			}
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.takeOver(ctx, epoch) }()
		}
	}
}

func (s *Server) takeOver(ctx context.Context, epoch uint64) {
	for ctx.Err() == nil {
		err := s.raft.Barrier(10 * time.Second).Error()
		if err == nil {
			break
		}
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
			return
		}
		s.log.Warn("barrier after election failed; retrying", "err", err)
	}
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	if s.epoch != epoch || ctx.Err() != nil {
		return
	}
	s.replica.read(s.lessor.activate)
	s.led.Store(true)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.announce(ctx) }()
}

// announce records this leader's client address in the replicated state, so
// followers can send clients here.
func (s *Server) announce(ctx context.Context) {
	addr := s.GRPCAddr()
	var known string
	s.replica.read(func(st *fsm.State) { known, _ = st.NodeAddr(s.cfg.NodeID) })
	if known == addr {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.proposer.propose(ctx, fsm.Command{Kind: fsm.KindSetNode, Name: s.cfg.NodeID, Addr: addr}); err != nil {
		s.log.Warn("could not record this leader's address; followers cannot redirect clients until it is", "err", err)
	}
}

// restored runs on the apply path (replica locked) after a snapshot restore.
func (s *Server) restored() {
	s.waiters.wakeAll()
	if s.audit != nil {
		if err := s.audit.restored(); err != nil {
			s.log.Error("audit file write failed", "err", err)
		}
	}
}

// applied runs on the apply path (replica locked) for every entry.
func (s *Server) applied(index uint64, cmds []fsm.Command, results []fsm.Result) {
	if s.audit != nil {
		if err := s.audit.entry(index, cmds, results); err != nil {
			s.log.Error("audit file write failed", "index", index, "err", err)
		}
	}
	s.lessor.applied(results)
	m := s.metrics
	for i := range results {
		r := &results[i]
		switch {
		case r.Code == fsm.LockHeld && r.Delayed:
			m.LockDelayRefused.Inc()
		case r.Code == fsm.Stale:
			m.StaleWrites.Inc()
		case r.Code == fsm.OK && cmds[i].Kind == fsm.KindExpire:
			m.Expirations.Inc()
		case r.Code == fsm.OK && cmds[i].Kind == fsm.KindRevoke:
			m.Revocations.Inc()
		}
		for j := range r.Events {
			e := &r.Events[j]
			s.waiters.event(e)
			switch e.Kind {
			case fsm.Granted:
				m.Grants.Inc()
			case fsm.Released:
				m.Releases.Inc()
			case fsm.LeaseRenewed:
				m.Renewals.Inc()
			}
		}
	}
}

// Ready reports whether this node is the leader and has taken over: it
// accepts commands and reads.
func (s *Server) Ready() bool {
	return s.lessor != nil && s.lessor.isActive() && s.raft.State() == raft.Leader
}

// WaitReady blocks until Ready or ctx ends.
func (s *Server) WaitReady(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !s.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("server not ready: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// notLeader is the refusal of a node that is not the ready leader; it names
// the leader when this node knows it, so clients can go there.
func (s *Server) notLeader() error {
	addr, id := s.raft.LeaderWithID()
	if id == "" {
		return status.Error(codes.Unavailable, "no leader right now (an election is under way); retry shortly")
	}
	if string(id) == s.cfg.NodeID {
		return status.Error(codes.Unavailable, "this node was just elected and is still taking over; retry shortly")
	}
	var grpcAddr string
	s.replica.read(func(st *fsm.State) { grpcAddr, _ = st.NodeAddr(string(id)) })
	if grpcAddr == "" {
		return status.Errorf(codes.Unavailable, "this node (%s) is not the leader; the leader is %s (raft address %s); retry there", s.cfg.NodeID, id, addr)
	}
	st := status.Newf(codes.Unavailable, "this node (%s) is not the leader; the leader is %s at %s; retry there", s.cfg.NodeID, id, grpcAddr)
	return withDetail(st, &api.NotLeader{LeaderId: string(id), LeaderAddr: grpcAddr})
}

// linearizableRead confirms leadership with a quorum, so a read served now
// reflects every acknowledged write (writes are acknowledged after apply).
func (s *Server) linearizableRead(ctx context.Context) error {
	if !s.Ready() {
		return s.notLeader()
	}
	if err := s.raft.VerifyLeader().Error(); err != nil {
		return status.Errorf(codes.Unavailable, "leadership not confirmed: %v; retry shortly", err)
	}
	return ctx.Err()
}

// Snapshot takes a raft snapshot now (and compacts the log).
func (s *Server) Snapshot() error { return s.raft.Snapshot().Error() }

// GRPCAddr returns the address clients connect to.
func (s *Server) GRPCAddr() string {
	if s.grpcLis == nil {
		return ""
	}
	return s.grpcLis.Addr().String()
}

// MetricsAddr returns the HTTP address of /metrics, or "" when disabled.
func (s *Server) MetricsAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Close stops serving and shuts raft down; committed state stays in DataDir.
func (s *Server) Close() error {
	s.closed.Do(func() {
		if s.grpc != nil {
			stopped := make(chan struct{})
			go func() { s.grpc.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(2 * time.Second):
				s.grpc.Stop()
			}
		}
		if s.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.http.Shutdown(ctx)
			cancel()
		}
		if s.cancel != nil {
			s.cancel()
		}
		if s.proposer != nil {
			s.proposer.close()
		}
		var errs []error
		if s.raft != nil {
			errs = append(errs, s.raft.Shutdown().Error())
		}
		s.wg.Wait()
		if c, ok := s.trans.(raft.WithClose); ok && s.cfg.Transport == nil {
			errs = append(errs, c.Close())
		}
		if s.store != nil {
			errs = append(errs, s.store.Close())
		}
		if s.dirLock != nil {
			errs = append(errs, s.dirLock.Close())
		}
		if s.audit != nil {
			errs = append(errs, s.audit.close())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
