package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/server"
)

// Every member of a healthy cluster answers the standard gRPC health check
// SERVING — the leader, and the followers, which send clients to it — even
// to a caller without a certificate under a policy (probes have none); a
// member cut off from the others answers NOT_SERVING once it knows no
// leader, and SERVING again when healed. Reflection lists the API.
func TestGRPCHealthAndReflection(t *testing.T) {
	certs := locktest.NewCerts(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte("identities:\n  - name: ops\n    prefixes: [\"\"]\n    rights: [acquire, read, admin]\n"), 0o600)
	c := locktest.NewCluster(t, 3, certs.Serve, func(cfg *server.Config) { cfg.PolicyFile = pol })
	noCert, err := pki.ClientTLS(certs.Client)
	if err != nil {
		t.Fatal(err)
	}
	noCert.Certificates = nil
	dial := func(nd *locktest.Node) *grpc.ClientConn {
		cc, err := grpc.NewClient(nd.Server.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(noCert.Clone())))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	status := func(cc *grpc.ClientConn, service string) healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health check: %v", err)
		}
		return r.GetStatus()
	}
	waitStatus := func(cc *grpc.ClientConn, want healthpb.HealthCheckResponse_ServingStatus, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for status(cc, "") != want || status(cc, "fence.v1.FenceService") != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not %v within 10 s", what, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	leader := c.Leader()
	var follower *locktest.Node
	for _, nd := range c.Nodes {
		cc := dial(nd)
		waitStatus(cc, healthpb.HealthCheckResponse_SERVING, nd.ID)
		if nd != leader {
			follower = nd
		}
	}
	cc := dial(follower)
	c.Partition(follower)
	waitStatus(cc, healthpb.HealthCheckResponse_NOT_SERVING, "a follower cut off from the others")
	c.Heal()
	waitStatus(cc, healthpb.HealthCheckResponse_SERVING, "the follower, healed")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := rpb.NewServerReflectionClient(dial(leader)).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	found := false
	for _, s := range resp.GetListServicesResponse().GetService() {
		found = found || s.GetName() == "fence.v1.FenceService"
	}
	if !found {
		t.Fatalf("reflection lists %v, not fence.v1.FenceService", resp.GetListServicesResponse().GetService())
	}
	// The policy still covers every other call from a caller without one.
	if _, err := api.NewFenceServiceClient(dial(leader)).GetLock(ctx, &api.GetLockRequest{Name: "x"}); grpcstatus.Code(err) != codes.Unauthenticated {
		t.Fatalf("GetLock without an identity: %v, want Unauthenticated", err)
	}
}

// The raft gauges: term, commit and applied index, leader changes.
func TestRaftMetrics(t *testing.T) {
	cfg := locktest.Config(t.TempDir())
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.WaitReady(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := map[string]float64{}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				v[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
		ok := v["fence_raft_term"] >= 1 && v["fence_raft_commit_index"] >= 1 && v["fence_raft_applied_index"] >= 1 &&
			v["fence_raft_applied_index"] <= v["fence_raft_commit_index"] && v["fence_raft_leader_changes_total"] >= 1
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("raft metrics of a ready single node: %v", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// /readyz is 200 on every member that can serve clients (a Kubernetes
// StatefulSet then sees all of a healthy cluster Ready); /leaderz only on
// the leader; a member cut off from the others is not ready.
func TestReadyzAndLeaderz(t *testing.T) {
	c := locktest.NewCluster(t, 3, func(cfg *server.Config) { cfg.MetricsAddr = "127.0.0.1:0" })
	code := func(nd *locktest.Node, path string) int {
		resp, err := http.Get("http://" + nd.Server.MetricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitCode := func(nd *locktest.Node, path string, want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); code(nd, path) != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s %s: not %d within 10 s", nd.ID, path, want)
			}
		}
	}
	leader := c.Leader()
	var follower *locktest.Node
	for _, nd := range c.Nodes {
		waitCode(nd, "/readyz", 200)
		if nd == leader {
			waitCode(nd, "/leaderz", 200)
		} else if follower = nd; code(nd, "/leaderz") != http.StatusServiceUnavailable {
			t.Errorf("follower %s: /leaderz %d, want 503", nd.ID, code(nd, "/leaderz"))
		}
	}
	c.Partition(follower)
	waitCode(follower, "/readyz", http.StatusServiceUnavailable)
	c.Heal()
	waitCode(follower, "/readyz", 200)
}

func hasKey(m map[string]float64, k string) bool { _, ok := m[k]; return ok }

// The per-peer gauges: on the leader, every other member's match index,
// active flag and last contact, one series per member; a member cut off
// goes inactive and its last contact grows.
func TestPeerMetrics(t *testing.T) {
	c := locktest.NewCluster(t, 3, func(cfg *server.Config) { cfg.MetricsAddr = "127.0.0.1:0" })
	leader := c.Leader()
	scrapeOf := func(nd *locktest.Node) map[string]float64 {
		resp, err := http.Get("http://" + nd.Server.MetricsAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		v := map[string]float64{}
		for _, line := range strings.Split(string(b), "\n") {
			if name, val, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "fence_raft_peer_") {
				f, _ := strconv.ParseFloat(val, 64)
				v[name] = f
			}
		}
		return v
	}
	scrape := func() map[string]float64 { return scrapeOf(leader) }
	var cut *locktest.Node
	eventually := func(what string, ok func(v map[string]float64) bool) map[string]float64 {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			v := scrape()
			if ok(v) {
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", what, v)
			}
		}
	}
	series := func(metric, peer string) string { return fmt.Sprintf("%s{peer=%q}", metric, peer) }
	v := eventually("every follower active, with a match index and a last contact", func(v map[string]float64) bool {
		n := 0
		for _, nd := range c.Nodes {
			if nd == leader {
				continue
			}
			cut = nd
			if v[series("fence_raft_peer_active", nd.ID)] == 1 && v[series("fence_raft_peer_match_index", nd.ID)] >= 1 {
				if _, ok := v[series("fence_raft_peer_last_contact_seconds", nd.ID)]; ok {
					n++
				}
			}
		}
		return n == 2
	})
	if _, ok := v[series("fence_raft_peer_active", leader.ID)]; ok || len(v) != 6 {
		t.Fatalf("want 3 series for each of the 2 other members, none for the leader itself: %v", v)
	}
	// A follower hears from the leader only: one series, the leader's.
	if fv := scrapeOf(cut); len(fv) != 1 || !hasKey(fv, series("fence_raft_peer_last_contact_seconds", leader.ID)) {
		t.Fatalf("a follower's peer series: %v, want only the leader's last contact", fv)
	}
	c.Partition(cut)
	eventually("the cut-off member inactive, last heard from over half a second ago", func(v map[string]float64) bool {
		return v[series("fence_raft_peer_active", cut.ID)] == 0 && v[series("fence_raft_peer_last_contact_seconds", cut.ID)] > 0.5
	})
	c.Heal()
}

// A single node's start logs no WARN (an earlier engine warned about
// heartbeat timeouts with nobody to hear from): a WARN means an operator
// should look.
func TestSingleNodeStartLogsNoWarning(t *testing.T) {
	logs := &locktest.LogBuffer{}
	cfg := locktest.Config(t.TempDir())
	cfg.Insecure = false // the dev setup, as 'fence serve' with no flags
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.RaftLogLevel = "warn" // the default: the raft library's own warnings count too
	s, err := locktest.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if logs.Contains("level=WARN") || logs.Contains("level=ERROR") {
		t.Fatalf("a single node's start logged a warning:\n%s", logs)
	}
}
