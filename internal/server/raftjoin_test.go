package server_test

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/server"
)

// A node joins a cluster with --join, in plaintext and over TLS, and
// becomes a voter. Over TLS the raft port once refused it: a joiner starts
// knowing no members, and the membership check refused the leader's
// streams to it (found by a red team; the port now refuses removed members
// only).
//
// "compacted": the member's log no longer starts at index 1 (a snapshot
// with no trailing entries), so the joiner can only catch up from a
// snapshot, which must list it (raft refuses one whose configuration lacks
// the node: a snapshot taken before the join never would); a restored
// cluster (fence snapshot restore) starts that way.
func TestJoinOverTLS(t *testing.T) {
	for _, mode := range []string{"plaintext", "tls", "compacted"} {
		t.Run(mode, func(t *testing.T) {
			certs := locktest.NewCerts(t)
			var mutate []func(*server.Config)
			dialOpt := client.WithInsecure()
			if mode == "tls" {
				mutate = append(mutate, certs.Serve)
				dialOpt = client.WithTLSFiles(certs.Client.CA, certs.Client.Cert, certs.Client.Key)
			}
			c := locktest.NewCluster(t, 1, append(mutate, func(cfg *server.Config) { cfg.TrailingLogs = 0 })...)
			n1 := c.Nodes[0]
			cl, err := client.Dial(ctxT(t, 5*time.Second), []string{n1.Server.GRPCAddr()}, dialOpt)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if mode == "compacted" {
				if _, err := cl.Lock(ctxT(t, 5*time.Second), "before-the-join"); err != nil {
					t.Fatal(err)
				}
				if err := n1.Server.Snapshot(); err != nil {
					t.Fatal(err)
				}
			}

			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			logs := &locktest.LogBuffer{}
			cfg := locktest.Config(t.TempDir())
			cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			cfg.NodeID, cfg.RaftListener, cfg.RaftAddr = "n2", lis, lis.Addr().String()
			cfg.Join = []string{n1.Server.GRPCAddr()}
			cfg.JoinTimeout = 10 * time.Second
			for _, m := range mutate {
				m(&cfg)
			}
			n2, err := server.New(cfg)
			if err != nil {
				t.Fatalf("join: %v", err)
			}
			defer n2.Close()

			var last []client.Member
			voter := waitFor(12*time.Second, func() bool {
				ms, _, err := cl.Members(ctxT(t, 5*time.Second))
				if err != nil {
					return false
				}
				last = ms
				for _, m := range ms {
					if m.ID == "n2" && strings.EqualFold(m.Suffrage, "voter") {
						return true
					}
				}
				return false
			})
			if !voter {
				var refusals []string
				for _, line := range strings.Split(logs.String(), "\n") {
					if strings.Contains(line, "refused") && len(refusals) < 2 {
						refusals = append(refusals, line)
					}
				}
				t.Fatalf("n2 never became a voter within 12 s of joining (%s): members %+v; n2 logged: %s", mode, last, strings.Join(refusals, " | "))
			}
		})
	}
}

func waitFor(d time.Duration, f func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return false
}
