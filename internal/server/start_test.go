package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// startConfig is a node on free loopback ports in dir: the dev setup (TLS
// certificates made in dir), so a start that writes anything shows.
func startConfig(dir string) Config {
	cfg := DefaultConfig()
	cfg.DataDir, cfg.GRPCAddr, cfg.RaftAddr, cfg.MetricsAddr = dir, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Registerer, cfg.Logger, cfg.RaftLogLevel = prometheus.NewRegistry(), testLogger(), "off"
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = 10*time.Millisecond, 50*time.Millisecond
	return cfg
}

// TestBusyPortChangesNothing: a first start whose gRPC, metrics or raft
// port is taken fails, naming the port and its flag, before it writes
// anything: no data dir, no certificates, no raft log (the raft port used
// to fail after the data dir was bootstrapped).
func TestBusyPortChangesNothing(t *testing.T) {
	for _, port := range []struct {
		name, flag string
		set        func(*Config, string)
	}{
		{"gRPC", "--grpc-addr", func(c *Config, a string) { c.GRPCAddr = a }},
		{"metrics", "--metrics-addr", func(c *Config, a string) { c.MetricsAddr = a }},
		{"raft", "--raft-addr", func(c *Config, a string) { c.RaftAddr = a }},
	} {
		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "data")
		cfg := startConfig(dir)
		port.set(&cfg, busy.Addr().String())
		s, err := New(cfg)
		busy.Close()
		if err == nil {
			s.Close()
			t.Fatalf("%s port taken: the node started", port.name)
		}
		want := fmt.Sprintf("the %s port %s is in use", port.name, busy.Addr())
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), port.flag) {
			t.Errorf("%s port taken: the error does not say which port and flag (want %q): %v", port.name, want, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s port taken: the failed start left %v", port.name, listDir(t, dir))
		}
	}
}

// memberConfigs are n plaintext members (n1, n2, …) of one cluster on free
// loopback raft listeners, each changed by mutate if set, and the peers of
// their bootstrap list.
func memberConfigs(t *testing.T, n int, mutate func(*Config)) ([]Peer, []Config) {
	t.Helper()
	var peers []Peer
	var cfgs []Config
	for i := range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := startConfig(t.TempDir())
		cfg.NodeID, cfg.RaftListener, cfg.Insecure, cfg.MetricsAddr = fmt.Sprintf("n%d", i+1), lis, true, ""
		if mutate != nil {
			mutate(&cfg)
		}
		peers = append(peers, Peer{ID: cfg.NodeID, RaftAddr: lis.Addr().String()})
		cfgs = append(cfgs, cfg)
	}
	return peers, cfgs
}

// TestMemberMustKeepItsRaftAddr: a member of a 3-node cluster restarted
// on another raft port is refused, with the recorded address in the error
// and its data dir exactly as it was (the others would go on dialing the
// old address); on the recorded address it starts.
func TestMemberMustKeepItsRaftAddr(t *testing.T) {
	peers, cfgs := memberConfigs(t, 3, nil)
	var srvs []*Server
	for _, cfg := range cfgs {
		cfg.Bootstrap = peers
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		srvs = append(srvs, s)
	}
	waitLeader(t, srvs)
	for _, s := range srvs {
		s.Close()
	}

	cfg := cfgs[0]
	cfg.RaftListener = nil // a restart as documented: no --bootstrap, --raft-addr on another port
	cfg.Registerer = prometheus.NewRegistry()
	before := listDir(t, cfg.DataDir)
	s, err := New(cfg)
	if err == nil {
		s.Close()
		t.Fatal("a member of a 3-node cluster restarted on another raft address")
	}
	if !strings.Contains(err.Error(), peers[0].RaftAddr) || !strings.Contains(err.Error(), "does not change") {
		t.Errorf("the error does not give the recorded address %s: %v", peers[0].RaftAddr, err)
	}
	if after := listDir(t, cfg.DataDir); !slices.Equal(before, after) {
		t.Errorf("the refused start changed the data dir:\nbefore %v\nafter  %v", before, after)
	}
	cfg.RaftAddr, cfg.Registerer = peers[0].RaftAddr, prometheus.NewRegistry()
	s, err = New(cfg)
	if err != nil {
		t.Fatalf("restart on the recorded raft address: %v", err)
	}
	s.Close()
}

// TestSingleNodeMoves: a single node restarted on another raft port starts
// and records its new address (a node that joins later dials that one).
func TestSingleNodeMoves(t *testing.T) {
	n := startNode(t, nil)
	old := n.srv.RaftAddr()
	n.stop()
	n.raftAddr = "127.0.0.1:0"
	n.start()
	now := n.srv.RaftAddr()
	if now == old {
		t.Fatalf("the restart got the same port %s", old)
	}
	eventually(t, "the membership to record the new raft address", func() bool {
		ms, err := n.srv.node.Members(context.Background())
		return err == nil && len(ms) == 1 && ms[0].RaftAddr == now
	})
}

// TestAdvertisedAddrs: what the membership records and what clients are
// redirected to are the advertised addresses, not the bound ones.
func TestAdvertisedAddrs(t *testing.T) {
	n := startNode(t, func(c *Config) {
		c.RaftAddr, c.AdvertiseRaftAddr = "127.0.0.1:0", "fence-0.fence.default.svc:7302"
		c.AdvertiseGRPCAddr = "fence-0.fence.default.svc:7300"
	})
	ms, err := n.srv.node.Members(context.Background())
	if err != nil || len(ms) != 1 || ms[0].RaftAddr != "fence-0.fence.default.svc:7302" {
		t.Fatalf("membership: %+v %v", ms, err)
	}
	if got := n.srv.AdvertisedGRPCAddr(); got != "fence-0.fence.default.svc:7300" {
		t.Fatalf("advertised gRPC address %q", got)
	}
}

// TestUnspecifiedBindNeedsAdvertise: binding every interface with nothing
// advertised where another node must dial it is refused at once, as are
// advertised addresses nobody can dial.
func TestUnspecifiedBindNeedsAdvertise(t *testing.T) {
	for name, c := range map[string]struct {
		mutate func(*Config)
		want   string
	}{
		"raft on 0.0.0.0": {func(c *Config) { c.RaftAddr = "0.0.0.0:7302" }, "--advertise-raft-addr"},
		"raft on :7302":   {func(c *Config) { c.RaftAddr = ":7302" }, "--advertise-raft-addr"},
		"gRPC on 0.0.0.0 in a cluster": {func(c *Config) {
			c.GRPCAddr, c.Join = "0.0.0.0:7300", []string{"127.0.0.1:1"}
		}, "--advertise-grpc-addr"},
		"advertised 0.0.0.0":    {func(c *Config) { c.AdvertiseRaftAddr = "0.0.0.0:7302" }, "every interface"},
		"advertised no port":    {func(c *Config) { c.AdvertiseGRPCAddr = "fence-0" }, "host:port"},
		"advertised port 0":     {func(c *Config) { c.AdvertiseGRPCAddr = "fence-0:0" }, "host:port"},
		"advertised empty host": {func(c *Config) { c.AdvertiseRaftAddr = ":7302" }, "host:port"},
	} {
		cfg := startConfig(filepath.Join(t.TempDir(), "data"))
		cfg.Insecure = true
		c.mutate(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error mentioning %q", name, err, c.want)
		}
	}
	cfg := startConfig(t.TempDir())
	cfg.Insecure, cfg.RaftAddr, cfg.AdvertiseRaftAddr = true, "0.0.0.0:7302", "10.0.0.5:7302"
	if err := cfg.Validate(); err != nil {
		t.Errorf("0.0.0.0 with an advertised address: %v", err)
	}
}

func waitLeader(t *testing.T, srvs []*Server) {
	t.Helper()
	eventually(t, "a leader", func() bool { return slices.ContainsFunc(srvs, (*Server).Ready) })
}

// Two ports on one address are refused with the settings, before anything
// binds (the second bind would blame "another program").
func TestSamePortTwiceIsRefused(t *testing.T) {
	cfg := startConfig(t.TempDir())
	cfg.GRPCAddr, cfg.RaftAddr = "127.0.0.1:7399", "127.0.0.1:7399"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--grpc-addr and --raft-addr are both 127.0.0.1:7399") {
		t.Fatalf("gRPC and raft on one port: %v", err)
	}
}
