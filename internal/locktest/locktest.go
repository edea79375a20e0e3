// Package locktest runs real fence servers inside tests: raft, its log and gRPC
// on loopback, in a temporary data dir, with fast elections and quiet logs.
// Only tests import it.
package locktest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/server"
)

// Config returns a server config for tests: data in dir, free loopback ports,
// 50ms elections, no metrics listener, a fresh metrics registry, logs discarded.
func Config(dir string) server.Config {
	cfg := server.DefaultConfig()
	cfg.DataDir, cfg.GRPCAddr, cfg.RaftAddr, cfg.MetricsAddr = dir, "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = 10*time.Millisecond, 50*time.Millisecond
	cfg.Registerer = prometheus.NewRegistry()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.RaftLogLevel = "off"
	// Plaintext, so tests dial with client.WithInsecure(); the TLS tests
	// (internal/server/tls_test.go) and the e2e quick start serve TLS.
	cfg.Insecure = true
	return cfg
}

// Run starts a server with cfg and waits until it leads. A restart may reuse
// cfg: it gets a fresh metrics registry each time.
func Run(cfg server.Config) (*server.Server, error) {
	cfg.Registerer = prometheus.NewRegistry()
	srv, err := server.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.WaitReady(ctx); err != nil {
		srv.Close()
		return nil, err
	}
	return srv, nil
}

// Start runs a ready single-node server in a temp dir, closed when the test
// ends. mutate, if given, adjusts the config first.
func Start(t testing.TB, mutate ...func(*server.Config)) *server.Server {
	t.Helper()
	cfg := Config(t.TempDir())
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// LockOnce dials srv with a client of opts (plaintext, a one-minute TTL
// unless opts say otherwise), takes the lock name and releases it, then
// closes the client and srv (so every handler has returned), and returns
// the released lease. ctx is the calls' (a test's span, say).
func LockOnce(ctx context.Context, t testing.TB, srv *server.Server, name string, opts ...client.Option) *client.Lease {
	t.Helper()
	cl, err := client.Dial(ctx, []string{srv.GRPCAddr()}, append([]client.Option{client.WithInsecure(), client.WithTTL(time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := cl.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	srv.Close()
	return l
}
