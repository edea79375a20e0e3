package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/internal/gcfloor"
	"github.com/fencehq/fence/internal/memlimit"
	"github.com/fencehq/fence/internal/server"
)

// gcFloor is the heap a node may grow to before it collects garbage
// (internal/gcfloor; GOGC in the environment turns it off).
const gcFloor = 64 << 20

// gcHeadroom is how far a large heap may grow above its live data before
// a collection (internal/gcfloor; GOGC in the environment turns it off).
const gcHeadroom = 256 << 20

// setMemoryLimit gives the runtime a soft memory limit of 90 % of what
// this process may use (internal/memlimit) unless GOMEMLIMIT is set, and
// logs the limit in force either way.
func setMemoryLimit(log *slog.Logger, getenv func(string) string, read func(string) ([]byte, error)) {
	if v := getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return
	}
	limit, from := memlimit.Default(read)
	if limit == 0 {
		log.Warn("no memory limit: neither the cgroup's nor the machine's memory could be read; set GOMEMLIMIT")
		return
	}
	debug.SetMemoryLimit(limit)
	log.Info("memory limit set (GOMEMLIMIT unset)", "limit_mib", limit>>20, "percent", memlimit.Percent, "of", from)
}

func newServe(g *globals) *cobra.Command {
	cfg := server.DefaultConfig()
	var logLevel, logFormat, bootstrap, configPath string
	tracing := traceSettings{ratio: 1}
	var printOnly bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a fence node (a single node by default, data in ./fence-data)",
		Long: `Run a fence node. On first start it creates the data dir and bootstraps a
single-node raft group; later starts come back from the data dir (raft log in
raft/: etcd's WAL, fsynced on every write, and snapshots; a data dir of another format,
such as one from an earlier fence, is refused: see README, Upgrading).

Clients connect over gRPC (default 127.0.0.1:7300); it also serves the
standard gRPC health service and reflection. /metrics, /healthz, /readyz
(can serve clients) and /leaderz (leads) are served over HTTPS (default
127.0.0.1:7301).

Every port speaks TLS, and clients and members must present a certificate
of the cluster's CA. With no --tls-* flags and every address on loopback,
the first start creates a dev CA, a node and a client certificate in
<data-dir>/tls, and fence commands run in the same directory find them.
A cluster, or a node on another address, needs certificates from one CA
('fence certs'). --insecure serves plaintext instead, deliberately. SIGHUP
re-reads the certificate files (rotation without a restart).

Admin calls (release --force, members add/remove/transfer) need the admin
token given with --admin-token-file or $FENCE_ADMIN_TOKEN; without one, they
are accepted only from this machine. Give every node of a cluster the same.

--otlp-endpoint sends OpenTelemetry traces of the calls and of their way
through raft to a collector (off by default; README, Tracing).`,
		Example: `  # the embedded single node, everything default
  fence serve

  # a 3-node cluster on one machine: certificates of one CA, then three terminals
  # (same --bootstrap everywhere)
  fence certs create-ca --dir certs
  for n in n1 n2 n3; do fence certs create-node $n --dir certs --host 127.0.0.1,localhost; done
  fence certs create-client me --dir certs
  fence serve --node-id n1 --data-dir d1 --grpc-addr 127.0.0.1:7300 --metrics-addr 127.0.0.1:7301 --raft-addr 127.0.0.1:7302 \
    --tls-ca certs/ca.crt --tls-cert certs/n1.crt --tls-key certs/n1.key \
    --bootstrap n1=127.0.0.1:7302,n2=127.0.0.1:7312,n3=127.0.0.1:7322
  # (n2 and n3 likewise on 7310-7312 and 7320-7322, with their certificates)
  fence --ca certs/ca.crt --cert certs/me.crt --key certs/me.key --server 127.0.0.1:7300,127.0.0.1:7310 ls

  # add a fourth node to a running cluster
  fence certs create-node n4 --dir certs --host 127.0.0.1,localhost
  fence serve --node-id n4 --data-dir d4 --grpc-addr 127.0.0.1:7330 --metrics-addr 127.0.0.1:7331 --raft-addr 127.0.0.1:7332 \
    --tls-ca certs/ca.crt --tls-cert certs/n4.crt --tls-key certs/n4.key --join 127.0.0.1:7300,127.0.0.1:7310,127.0.0.1:7320

  # another data dir and ports, leases between 500ms and 10m, no lock-delay
  fence serve --data-dir /var/lib/fence --grpc-addr 127.0.0.1:8300 \
    --metrics-addr 127.0.0.1:8301 --raft-addr 127.0.0.1:8302 \
    --min-ttl 500ms --max-ttl 10m --lock-delay 0`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := configPath
			if path == "" {
				path = os.Getenv("FENCE_CONFIG")
			}
			from, err := applyConfig(cmd, path, os.LookupEnv)
			errs := []error{err}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				errs = append(errs, fmt.Errorf("--log-level %q: use debug, info, warn or error", logLevel))
			}
			opts := &slog.HandlerOptions{Level: level}
			switch logFormat {
			case "text":
				cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), opts))
			case "json":
				cfg.Logger = slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), opts))
			default:
				errs = append(errs, fmt.Errorf("--log-format %q: use text or json", logFormat))
			}
			if cfg.Bootstrap, err = server.ParsePeers(bootstrap); err != nil {
				errs = append(errs, fmt.Errorf("--bootstrap: %w", err))
			}
			if cfg.AdminToken, err = g.adminToken(); err != nil {
				errs = append(errs, err)
			}
			cfg.Insecure = g.insecure
			errs = append(errs, tracing.validate())
			errs = append(errs, cfg.Validate())
			if printOnly && errs[0] == nil { // nothing printed when a source did not load: it would read as a config of defaults
				if err := printConfig(cmd.OutOrStdout(), cmd, from); err != nil {
					return err
				}
			}
			if err := errors.Join(errs...); err != nil {
				return usageError(cmd, fmt.Errorf("the configuration has problems (all of them listed):\n%w", err))
			}
			if printOnly {
				return nil
			}
			// Signals are caught before the node starts: a SIGHUP meanwhile
			// must not kill it (it is handled once the node serves).
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			defer gcfloor.Keep(gcFloor, gcHeadroom, time.Second)()
			setMemoryLimit(cfg.Logger, os.Getenv, os.ReadFile)
			tp, stopTracing, err := tracing.tracerProvider(ctx, cfg.NodeID, cfg.Logger)
			if err != nil {
				return err
			}
			defer func() {
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := stopTracing(sctx); err != nil {
					cfg.Logger.Warn("tracing: spans not flushed at shutdown", "err", err)
				}
			}()
			if tp != nil {
				cfg.TracerProvider = tp
				cfg.Logger.Info("tracing", "otlp-endpoint", tracing.endpoint, "sample-ratio", tracing.ratio)
			}
			srv, err := server.New(cfg)
			if err != nil {
				return err
			}
			for {
				select {
				case <-hup:
					if cfg.Insecure {
						cfg.Logger.Info("SIGHUP: this node serves without TLS (--insecure); there are no certificates to reload")
					} else if err := srv.ReloadTLS(); err != nil {
						cfg.Logger.Error("SIGHUP: TLS certificates not reloaded; the node keeps serving with the ones it had", "err", err)
					}
					if cfg.PolicyFile != "" {
						if err := srv.ReloadPolicy(); err != nil {
							cfg.Logger.Error("SIGHUP: policy not reloaded; the node keeps the one it had", "err", err)
						}
					}
					if srv.SignsTokens() {
						if err := srv.ReloadTokenKey(); err != nil {
							cfg.Logger.Error("SIGHUP: token key not reloaded; the node keeps signing with the one it had", "err", err)
						}
					}
				case <-srv.Failed():
					// Exit, so that a supervisor restarts the node: a node
					// whose log cannot be written serves no one.
					cfg.Logger.Error("the raft node stopped; shutting down", "err", srv.Failure())
					return errors.Join(fmt.Errorf("the raft node stopped: %w", srv.Failure()), srv.Close())
				case <-ctx.Done():
					cfg.Logger.Info("shutting down")
					return srv.Close()
				}
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "a YAML file of settings, keyed by these flags' names (default $FENCE_CONFIG); flags, then $FENCE_<FLAG> variables, win over it")
	f.BoolVar(&printOnly, "print-config", false, "print the effective settings, each with where it came from (flag, env, file, default), and exit")
	f.StringVar(&cfg.NodeID, "node-id", cfg.NodeID, "this node's raft id (never change it for a data dir)")
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "where the raft log and snapshots live")
	f.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "client gRPC address")
	f.StringVar(&cfg.MetricsAddr, "metrics-addr", cfg.MetricsAddr, `HTTP address for /metrics, /healthz, /readyz, /leaderz and the dashboard /ui/ ("" disables)`)
	f.StringVar(&cfg.GatewayAddr, "gateway-addr", cfg.GatewayAddr, `HTTP/JSON gateway: POST /v1/<call> with JSON, the gRPC port's TLS and rules ("" disables; e.g. 127.0.0.1:7303)`)
	f.StringVar(&cfg.RaftAddr, "raft-addr", cfg.RaftAddr, "raft transport address (other members connect here)")
	f.StringVar(&cfg.AdvertiseGRPCAddr, "advertise-grpc-addr", "", "gRPC address clients are sent to when this node leads (default --grpc-addr; needed in a cluster when that binds 0.0.0.0)")
	f.StringVar(&cfg.AdvertiseRaftAddr, "advertise-raft-addr", "", "raft address the other members dial, recorded in the membership and never changed (default --raft-addr; needed when that binds 0.0.0.0)")
	f.StringVar(&cfg.TLS.CA, "tls-ca", "", "CA certificate that client and member certificates must chain to (default: the dev CA in <data-dir>/tls, on loopback only)")
	f.StringVar(&cfg.TLS.Cert, "tls-cert", "", "this node's certificate (a node certificate of the CA: 'fence certs create-node'); re-read on SIGHUP")
	f.StringVar(&cfg.TLS.Key, "tls-key", "", "this node's certificate's key; re-read on SIGHUP")
	f.StringVar(&cfg.TokenKeyFile, "token-key", "", "Ed25519 key that signs the fencing tokens of grants, for storage that verifies them (make it with 'fence certs create-token-key'; the same on every member; default in the dev setup: <data-dir>/tls/token-key.pem); re-read on SIGHUP")
	f.StringVar(&cfg.PolicyFile, "policy-file", "", "who may do what to which locks (identities, prefixes, rights: see 'fence policy --help'); re-read on SIGHUP")
	f.StringVar(&bootstrap, "bootstrap", "", "a new cluster's voters, the same on every node: id=raft-addr,id=raft-addr,…")
	f.StringSliceVar(&cfg.Join, "join", nil, "gRPC address(es) of an existing cluster's members to join on first start")
	f.DurationVar(&cfg.JoinTimeout, "join-timeout", cfg.JoinTimeout, "how long a first start with --join waits to be added")
	f.DurationVar(&cfg.HeartbeatTimeout, "heartbeat", cfg.HeartbeatTimeout, "how often the raft leader heartbeats")
	f.DurationVar(&cfg.ElectionTimeout, "election-timeout", cfg.ElectionTimeout, "how long followers wait for a leader before an election (randomized up to twice that)")
	f.DurationVar(&cfg.MinTTL, "min-ttl", cfg.MinTTL, "shortest lease TTL a client may ask for")
	f.DurationVar(&cfg.MaxTTL, "max-ttl", cfg.MaxTTL, "longest lease TTL a client may ask for")
	f.DurationVar(&cfg.DefaultLockDelay, "lock-delay", cfg.DefaultLockDelay, "default wait before re-granting a lock whose holder's lease expired (0 disables)")
	f.DurationVar(&cfg.TickInterval, "tick", cfg.TickInterval, "how often the leader logs elapsed time and checks for expired leases")
	f.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", cfg.SnapshotThreshold, "log entries between snapshots")
	f.StringVar(&cfg.MetricsPrefixes.Separator, "metrics-prefix-separator", cfg.MetricsPrefixes.Separator, `per-lock metrics are labelled by the lock name's prefix up to this separator, never by the full name (names without it: prefix="(none)")`)
	f.IntVar(&cfg.MetricsPrefixes.Depth, "metrics-prefix-depth", cfg.MetricsPrefixes.Depth, "the prefix label runs to this many separators (2: a/b/ of a/b/c)")
	f.IntVar(&cfg.MetricsPrefixes.Max, "metrics-max-prefixes", cfg.MetricsPrefixes.Max, `distinct prefix labels, the first seen since start; later prefixes are counted under prefix="(other)"`)
	f.IntVar(&cfg.HotLocks, "hot-locks", cfg.HotLocks, "lock names the hot-lock sketch tracks for 'fence hot' (about 150 bytes each, with its name)")
	f.IntVar(&cfg.WatchHistory, "watch-history", cfg.WatchHistory, "lock events kept for watches to start or resume from (about 100 bytes each)")
	var unusedInterval time.Duration
	f.DurationVar(&unusedInterval, "snapshot-interval", 0, "no effect (snapshots are taken as soon as --snapshot-threshold entries are applied)")
	_ = f.MarkDeprecated("snapshot-interval", "it has no effect: snapshots are taken as soon as --snapshot-threshold entries are applied")
	f.Uint64Var(&cfg.TrailingLogs, "trailing-logs", cfg.TrailingLogs, "log entries kept after a snapshot")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text (key=value lines) or json (one object per line)")
	f.StringVar(&cfg.RaftLogLevel, "raft-log-level", cfg.RaftLogLevel, "the raft library's own log level: debug, info, warn, error or off")
	f.StringVar(&cfg.AuditFile, "audit-file", "", "append a JSON line per committed lease or lock change (grants, releases, lease starts and ends) to this file")
	f.BoolVar(&cfg.Pprof, "pprof", false, "serve /debug/pprof/ on --metrics-addr (keep that address private)")
	f.StringVar(&tracing.endpoint, "otlp-endpoint", "", "send OpenTelemetry traces (OTLP/gRPC) to the collector at host:port (\"\" disables tracing; OTEL_EXPORTER_OTLP_* variables set the rest: headers, timeout, certificate)")
	f.BoolVar(&tracing.insecure, "otlp-insecure", false, "send traces to --otlp-endpoint in plaintext instead of TLS")
	f.Float64Var(&tracing.ratio, "trace-sample-ratio", tracing.ratio, "fraction of the traces this node starts that it records (0 to 1); a call that arrives in a client's trace follows the client's choice")
	return cmd
}
