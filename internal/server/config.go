package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencehq/fence/internal/clock"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/hotlocks"
	"github.com/fencehq/fence/internal/metrics"
	"github.com/fencehq/fence/internal/node"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/watch"
)

// Default addresses of a single node.
const (
	DefaultGRPCAddr    = "127.0.0.1:7300"
	DefaultMetricsAddr = "127.0.0.1:7301"
	DefaultRaftAddr    = "127.0.0.1:7302"
)

// Config is everything a server needs. Start from DefaultConfig.
type Config struct {
	// NodeID names this node in the raft group; it must never change for a data dir.
	NodeID string
	// DataDir holds FORMAT, LOCK and the raft log (raft/: etcd's WAL, fsynced
	// on every write, and snapshot files).
	DataDir string
	// GRPCAddr is where clients connect. ":0" picks a free port (see Server.GRPCAddr).
	GRPCAddr string
	// MetricsAddr serves /metrics, /healthz, /readyz (can serve clients) and
	// /leaderz (leads) over HTTP; "" disables it.
	MetricsAddr string
	// GatewayAddr serves the HTTP/JSON gateway (POST /v1/<call>, see
	// gateway.go) with the gRPC port's TLS and rules; "" disables it.
	GatewayAddr string
	// Pprof also serves /debug/pprof/ on MetricsAddr (profiles reveal internals:
	// keep that address private).
	Pprof bool
	// RaftAddr is where the raft transport listens (TCP streams). Other
	// members reach this node there unless AdvertiseRaftAddr says otherwise.
	RaftAddr string
	// AdvertiseGRPCAddr is the gRPC address clients are sent to when this
	// node leads (followers redirect there); empty: GRPCAddr. Give it when
	// GRPCAddr binds every interface (0.0.0.0:7300) or is not what clients
	// dial (a pod's DNS name, a NAT).
	AdvertiseGRPCAddr string
	// AdvertiseRaftAddr is the raft address the other members dial, recorded
	// in the membership; empty: RaftAddr. Required when RaftAddr binds every
	// interface. A member's recorded address never changes: a later start
	// that advertises another one is refused.
	AdvertiseRaftAddr string
	// AuditFile, if set, receives one JSON line (AuditRecord) per applied
	// entry that started or ended a lease or granted or released a lock.
	AuditFile string
	// AdminToken, if set, is required (as "authorization: Bearer <token>"
	// metadata) on admin calls: ForceRelease, AddMember, RemoveMember,
	// TransferLeader. If empty, admin calls are accepted only from loopback.
	// Nodes joining with --join send it too, so give every node the same one.
	AdminToken string
	// TLS names this node's certificate and key (a node certificate: it
	// serves with it and presents it to the other members) and the cluster's
	// CA, which client and member certificates must chain to. Empty, with
	// Insecure false, is the dev setup: if every address is on loopback,
	// the node creates a CA, a node and a client certificate in
	// <DataDir>/tls on first start and serves with them; otherwise New
	// refuses to start. Server.ReloadTLS re-reads the files.
	TLS pki.Files
	// Insecure serves every port in plaintext, with a warning in the log:
	// anyone who can reach a port can then take, hold and watch any lock,
	// and read lease secrets on the wire. Only for tests and trusted
	// networks; it cannot be combined with TLS.
	Insecure bool
	// PolicyFile, if set, is the policy (internal/policy) that every call is
	// judged by: identities (client certificates' common names, bearer
	// tokens) and the lock-name prefixes and rights they have. Without one,
	// every holder of a certificate of the CA may do everything but admin
	// calls (see AdminToken). Server.ReloadPolicy re-reads it.
	PolicyFile string
	// TokenKeyFile is the Ed25519 key (pki.CreateTokenKey) that signs the
	// grants this node hands out (AcquireResponse.signed_token), which
	// storage checks offline with fencing.Verifier. Give every member the
	// same key. Empty: the dev setup's key in <DataDir>/tls; without the
	// dev setup, grants carry no signed token. Server.ReloadTokenKey
	// re-reads the file.
	TokenKeyFile string
	// RaftListener, if set, is where the raft transport serves (RaftAddr is
	// then ignored): tests open it first to learn the port.
	RaftListener net.Listener
	// WrapTransport, if set, wraps the raft transport: internal/locktest cuts
	// links between nodes this way.
	WrapTransport func(node.Transport) node.Transport
	// Bootstrap lists the voters of a new cluster (this node included), the
	// same on every node. Used only on a node's first start; empty (and no
	// Join) means a single node that bootstraps itself.
	Bootstrap []Peer
	// Join lists gRPC addresses of members of an existing cluster. On its first
	// start the node asks them to add it (New waits for that, up to
	// JoinTimeout), then catches up from the leader's log or snapshot as a
	// learner, and votes once it has.
	Join []string
	// JoinTimeout bounds how long a first start with Join waits to be added.
	JoinTimeout time.Duration

	// MinTTL and MaxTTL bound the TTL a client may ask for.
	MinTTL, MaxTTL time.Duration
	// DefaultLockDelay applies when an Acquire does not set one: after a
	// holder's lease *expires* (not on a clean release or revoke), its locks
	// are not re-granted for this long. It narrows the window in which a
	// paused holder that has not yet noticed its expiry overlaps the next
	// holder on resources that do not check tokens. 5s covers typical GC and
	// VM pauses while adding only 5s to recovery from a crashed holder; set 0
	// where every resource is fenced and fast failover matters more.
	DefaultLockDelay time.Duration
	// TickInterval is how often the leader writes its elapsed time into the
	// log and checks for expired leases. Expiry happens within one tick of the
	// deadline; a new leader credits leases with the logged time.
	TickInterval time.Duration

	// MaxBatch bounds the commands packed into one raft entry.
	MaxBatch int
	// SnapshotThreshold is the number of applied log entries that triggers a snapshot.
	SnapshotThreshold uint64
	// TrailingLogs is how many entries to keep after a snapshot (for slow followers).
	TrailingLogs uint64
	// WatchHistory is how many lock events the node keeps for Watch calls
	// to start or resume from (older ones: FAILED_PRECONDITION, list again).
	WatchHistory int
	// HeartbeatTimeout is how often the leader heartbeats; ElectionTimeout is
	// how long a follower waits without hearing from a leader before it starts
	// an election (randomized up to twice that). Raft ticks every
	// ElectionTimeout/10.
	HeartbeatTimeout, ElectionTimeout time.Duration

	// MetricsPrefixes maps lock names to the prefix label of the per-lock
	// metrics (--metrics-prefix-separator, --metrics-prefix-depth,
	// --metrics-max-prefixes; see metrics.PrefixConfig).
	MetricsPrefixes metrics.PrefixConfig
	// HotLocks is how many lock names the hot-lock sketch behind HotLocks
	// tracks (--hot-locks): its memory, whatever the number of names.
	HotLocks int

	// Clock drives leases, ticks and lock-delays. Raft keeps its own timers.
	Clock clock.Clock
	// Registerer receives the server's metrics; nil means a fresh registry
	// (served on MetricsAddr).
	Registerer prometheus.Registerer
	// Gatherer is what /metrics serves; it must match Registerer when both
	// are set. Nil with a Registerer that is also a Gatherer (a
	// *prometheus.Registry) serves that.
	Gatherer prometheus.Gatherer
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// RaftLogLevel is the level of the raft library's own log: debug, info,
	// warn (the default), error or off.
	RaftLogLevel string
	// TracerProvider, if set, traces every call but the long streams
	// (KeepAlive, Watch): a server span per call, continuing the caller's
	// W3C trace context (traceparent metadata), with the raft path of the
	// commands it proposes as children (fence.raft.propose, .commit,
	// .apply), and the audit file's lines for those commands on this node
	// carry the trace id. Nil: no tracing, at no cost. The caller shuts
	// it down, after Close.
	TracerProvider trace.TracerProvider
}

// checkAdvertised refuses advertised addresses nobody can dial, and a bind
// address on every interface with nothing advertised where another node
// must dial it: the raft port always (the membership records it), the
// gRPC port in a cluster (followers redirect clients to the leader's).
func (c *Config) checkAdvertised() []error {
	var errs []error
	for _, a := range []struct{ flag, addr string }{{"--advertise-grpc-addr", c.AdvertiseGRPCAddr}, {"--advertise-raft-addr", c.AdvertiseRaftAddr}} {
		if a.addr == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a.addr)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			errs = append(errs, fmt.Errorf("%s %q: give host:port, with a host or IP the other nodes can dial and a port 1-65535", a.flag, a.addr))
		} else if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			errs = append(errs, fmt.Errorf("%s %q: %s is every interface, not an address anyone can dial; give this node's own host name or IP", a.flag, a.addr, host))
		} else if err := fsm.ValidName(a.flag, a.addr); err != nil { // the replicated state records it
			errs = append(errs, err)
		}
	}
	unspecified := func(addr string) bool {
		host, _, err := net.SplitHostPort(addr)
		ip := net.ParseIP(host)
		return err == nil && (host == "" || ip != nil && ip.IsUnspecified())
	}
	if c.RaftListener == nil && c.AdvertiseRaftAddr == "" && unspecified(c.RaftAddr) {
		errs = append(errs, fmt.Errorf("--raft-addr %s listens on every interface, which is not an address other members can dial: "+
			"give --advertise-raft-addr host:port (this node's own name or IP)", c.RaftAddr))
	}
	if c.AdvertiseGRPCAddr == "" && unspecified(c.GRPCAddr) && (len(c.Bootstrap) > 1 || len(c.Join) > 0) {
		errs = append(errs, fmt.Errorf("--grpc-addr %s listens on every interface, which followers cannot send clients to: "+
			"give --advertise-grpc-addr host:port (this node's own name or IP)", c.GRPCAddr))
	}
	return errs
}

// Peer is one voter of a bootstrap list.
type Peer struct {
	ID       string
	RaftAddr string
}

// ParsePeers parses "id=host:port,id=host:port".
func ParsePeers(s string) ([]Peer, error) {
	var peers []Peer
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		id, addr, ok := strings.Cut(item, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("peer %q: write it as id=host:port (the node's id and raft address)", item)
		}
		peers = append(peers, Peer{ID: id, RaftAddr: addr})
	}
	return peers, nil
}

// DefaultConfig returns the settings of the embedded single node.
func DefaultConfig() Config {
	return Config{
		NodeID:            "node1",
		DataDir:           "fence-data",
		GRPCAddr:          DefaultGRPCAddr,
		MetricsAddr:       DefaultMetricsAddr,
		RaftAddr:          DefaultRaftAddr,
		MinTTL:            time.Second,
		MaxTTL:            time.Hour,
		DefaultLockDelay:  5 * time.Second,
		TickInterval:      100 * time.Millisecond,
		MaxBatch:          1024,
		SnapshotThreshold: 16384,
		TrailingLogs:      10240,
		WatchHistory:      watch.DefaultMaxEvents,
		MetricsPrefixes:   metrics.DefaultPrefixConfig(),
		HotLocks:          hotlocks.DefaultK,
		HeartbeatTimeout:  100 * time.Millisecond,
		ElectionTimeout:   500 * time.Millisecond,
		JoinTimeout:       2 * time.Minute,
		Clock:             clock.Real{},
		RaftLogLevel:      "warn",
	}
}

// Validate reports the first setting that cannot work.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	if err := fsm.ValidName("node id", c.NodeID); err != nil { // it goes into the log (SetNode)
		errs = append(errs, err)
	}
	check(c.DataDir != "", "data dir is empty")
	check(c.GRPCAddr != "", "gRPC address is empty")
	check(c.RaftAddr != "" || c.RaftListener != nil, "raft address is empty")
	ports := []struct{ flag, addr string }{{"--grpc-addr", c.GRPCAddr}, {"--metrics-addr", c.MetricsAddr}, {"--gateway-addr", c.GatewayAddr}}
	if c.RaftListener == nil {
		ports = append(ports, struct{ flag, addr string }{"--raft-addr", c.RaftAddr})
	}
	seen := map[string]string{}
	for _, p := range ports {
		if _, port, _ := net.SplitHostPort(p.addr); p.addr == "" || port == "0" {
			continue // off, or a free port picked at start
		}
		check(seen[p.addr] == "", "%s and %s are both %s: each port needs its own address", seen[p.addr], p.flag, p.addr)
		seen[p.addr] = p.flag
	}
	errs = append(errs, c.checkAdvertised()...)
	if err := c.checkDevSetup(); err != nil { // a cluster or a wide address without certificates
		errs = append(errs, err)
	}
	check(c.MinTTL >= fsm.MinTTL && c.MinTTL <= c.MaxTTL && c.MaxTTL <= fsm.MaxTTL,
		"TTL bounds %v…%v must satisfy %v ≤ min ≤ max ≤ %v", c.MinTTL, c.MaxTTL, fsm.MinTTL, fsm.MaxTTL)
	check(c.DefaultLockDelay >= 0 && c.DefaultLockDelay <= fsm.MaxLockDelay,
		"lock-delay %v is outside 0…%v", c.DefaultLockDelay, fsm.MaxLockDelay)
	check(c.TickInterval >= time.Millisecond && c.TickInterval <= time.Second,
		"tick interval %v is outside 1ms…1s", c.TickInterval)
	check(c.TickInterval < c.MinTTL, "tick interval %v must be shorter than the minimum TTL %v", c.TickInterval, c.MinTTL)
	check(c.MaxBatch >= 1, "max batch %d must be at least 1", c.MaxBatch)
	check(c.SnapshotThreshold >= 1, "snapshot threshold must be at least 1")
	check(c.WatchHistory >= 1 && c.WatchHistory <= maxWatchHistory, "watch history %d is outside 1…%d events", c.WatchHistory, maxWatchHistory)
	if err := c.MetricsPrefixes.Validate(); err != nil {
		errs = append(errs, err)
	}
	check(c.HotLocks >= 1 && c.HotLocks <= maxHotLocks, "--hot-locks %d is outside 1…%d", c.HotLocks, maxHotLocks)
	check(c.ElectionTimeout >= 10*time.Millisecond, "election timeout %v must be at least 10ms", c.ElectionTimeout)
	check(c.HeartbeatTimeout >= c.ElectionTimeout/10 && c.HeartbeatTimeout <= c.ElectionTimeout/2,
		"heartbeat timeout %v must be between a tenth and a half of the election timeout %v", c.HeartbeatTimeout, c.ElectionTimeout)
	check(len(c.Join) == 0 || c.JoinTimeout > 0, "join timeout must be positive")
	if _, err := node.ParseRaftLogLevel(c.RaftLogLevel); err != nil {
		errs = append(errs, err)
	}
	check(c.Clock != nil, "clock is nil")
	if _, ok := c.Registerer.(prometheus.Gatherer); c.MetricsAddr != "" && c.Registerer != nil && c.Gatherer == nil && !ok {
		errs = append(errs, errors.New("a Registerer that is not a Gatherer needs a Gatherer for /metrics"))
	}
	check(!c.Insecure || !c.TLS.Set(), "give either TLS files or insecure (plaintext), not both")
	check(!c.Insecure || c.PolicyFile == "", "a policy needs TLS: its identities are certificates and bearer tokens, which plaintext cannot protect (drop --insecure)")
	if c.TLS.Set() {
		if err := c.TLS.Check(); err != nil {
			errs = append(errs, err)
		}
	}
	check(len(c.Bootstrap) == 0 || len(c.Join) == 0, "give either a bootstrap list (a new cluster) or join addresses (an existing one), not both")
	if len(c.Bootstrap) > 0 {
		ids := map[string]bool{}
		self := false
		for _, p := range c.Bootstrap {
			check(!ids[p.ID], "bootstrap lists node %q twice", p.ID)
			ids[p.ID] = true
			self = self || p.ID == c.NodeID
			if p.ID == c.NodeID {
				addr, flag := c.RaftAddr, "--raft-addr"
				if c.RaftListener != nil {
					addr = c.RaftListener.Addr().String()
				}
				if c.AdvertiseRaftAddr != "" {
					addr, flag = c.AdvertiseRaftAddr, "--advertise-raft-addr"
				}
				check(p.RaftAddr == addr, "bootstrap gives this node (%s) raft address %s, but %s is %s", p.ID, p.RaftAddr, flag, addr)
			}
		}
		check(self, "the bootstrap list must include this node (%s)", c.NodeID)
	}
	return errors.Join(errs...)
}
