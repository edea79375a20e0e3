package peers

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/bench"
	"github.com/fencehq/fence/internal/pki"
)

// Fence is a 3-node fence cluster of real `fence serve` processes.
type Fence struct {
	bench.Fence
	procs   []*Proc
	metrics []string     // each node's /metrics, /healthz, /readyz address
	http    *http.Client // for them (with the CA when they serve TLS)
}

// makeCA creates a CA and a client certificate in dir.
func makeCA(dir string) (*pki.CA, error) {
	ca, err := pki.NewCA("peerbench CA", 48*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := pki.SaveCA(dir, ca); err != nil {
		return nil, err
	}
	_, err = ca.IssueFiles(dir, filepath.Join(dir, pki.CACertFile), pki.Client, "client", nil, 24*time.Hour)
	return ca, err
}

// BuildFence builds cmd/fence into dir, inside fence's own module (the one
// go.mod's replace points at), so it gets exactly fence's dependencies. With
// a rev (a commit, tag or branch of that module's git repository) it builds
// that revision instead of the working tree, from a `git archive` of it
// extracted under dir: to measure an earlier fence in the same run.
func BuildFence(dir, rev string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/fencehq/fence").Output()
	if err != nil {
		return "", fmt.Errorf("find the fence module: %w", err)
	}
	src, bin := strings.TrimSpace(string(out)), filepath.Join(dir, "fence")
	if rev != "" {
		bin = filepath.Join(dir, "fence@"+rev)
		tree := filepath.Join(dir, "src@"+rev)
		if err := os.MkdirAll(tree, 0o755); err != nil {
			return "", err
		}
		archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", src, rev, tree)
		if out, err := archive.CombinedOutput(); err != nil {
			return "", fmt.Errorf("git archive %s of %s: %v\n%s", rev, src, err, out)
		}
		src = tree
	}
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/fence")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build fence%s: %v\n%s", revSuffix(rev), err, out)
	}
	return bin, nil
}

func revSuffix(rev string) string {
	if rev == "" {
		return ""
	}
	return "@" + rev
}

// FenceOptions say how StartFence's cluster serves.
type FenceOptions struct {
	// TLS: every port TLS, with certificates of a CA made in the run's
	// dir (as a production cluster runs); else plaintext, as the peers run.
	TLS bool
	// Signed: every member has a token key, so every grant is signed.
	Signed bool
	// Relock: the lock-and-release loops relock (peerbench sets
	// bench.Config.Relock from it); the cluster serves as without.
	Relock bool
}

// StartFence starts nodes on 127.0.0.1 (gRPC basePort+10i, metrics +1,
// raft +2), with lock-delay 0 (the peers have none) and /debug/pprof on the
// metrics address, served as how says, and waits for a leader.
func StartFence(bin, dir string, nodes, basePort int, ttl time.Duration, how FenceOptions) (*Fence, error) {
	tls := how.TLS
	var peers []string
	for i := range nodes {
		peers = append(peers, fmt.Sprintf("n%d=127.0.0.1:%d", i+1, basePort+10*i+2))
	}
	f := &Fence{Fence: bench.Fence{TTL: ttl}, http: http.DefaultClient}
	var ca *pki.CA
	certs := filepath.Join(dir, "certs")
	if tls {
		var err error
		if ca, err = makeCA(certs); err != nil {
			return nil, err
		}
		if f.TLS, err = pki.ClientTLS(pki.ClientFiles(certs)); err != nil {
			return nil, err
		}
		f.http = &http.Client{Transport: &http.Transport{TLSClientConfig: f.TLS}}
	}
	// A fence from before the fence.v1 cut serves the API as /fence.v1.Fence/.
	if exe, err := os.ReadFile(bin); err == nil && !bytes.Contains(exe, []byte(api.FenceService_ServiceDesc.ServiceName)) {
		f.Service = "/fence.v1.Fence/"
	}
	// A fence from before TLS has no --insecure: it serves plaintext anyway.
	help, _ := exec.Command(bin, "serve", "--help").CombinedOutput()
	hasTLS := strings.Contains(string(help), "--insecure")
	if tls && !hasTLS {
		return nil, fmt.Errorf("%s serves no TLS", bin)
	}
	var tokenKey []string
	if how.Signed {
		if !strings.Contains(string(help), "--token-key") {
			return nil, fmt.Errorf("%s signs no tokens", bin)
		}
		if _, err := pki.CreateTokenKey(certs); err != nil {
			return nil, err
		}
		tokenKey = []string{"--token-key", filepath.Join(certs, pki.TokenKeyFile)}
	}
	for i := range nodes {
		id, port := fmt.Sprintf("n%d", i+1), basePort+10*i
		args := []string{bin, "serve", "--node-id", id, "--data-dir", filepath.Join(dir, id),
			"--grpc-addr", fmt.Sprintf("127.0.0.1:%d", port), "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port+1),
			"--raft-addr", fmt.Sprintf("127.0.0.1:%d", port+2), "--bootstrap", strings.Join(peers, ","),
			"--lock-delay", "0", "--log-level", "warn", "--pprof"}
		args = append(args, tokenKey...)
		switch {
		case tls:
			nf, err := ca.IssueFiles(certs, filepath.Join(certs, pki.CACertFile), pki.Node, id, []string{"127.0.0.1"}, 24*time.Hour)
			if err != nil {
				f.Stop()
				return nil, err
			}
			args = append(args, "--tls-ca", nf.CA, "--tls-cert", nf.Cert, "--tls-key", nf.Key)
		case hasTLS:
			args = append(args, "--insecure")
		}
		p, err := StartProc(id, args, filepath.Join(dir, id+".log"))
		if err != nil {
			f.Stop()
			return nil, err
		}
		f.procs = append(f.procs, p)
		f.Servers = append(f.Servers, fmt.Sprintf("127.0.0.1:%d", port))
		f.metrics = append(f.metrics, fmt.Sprintf("127.0.0.1:%d", port+1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sec := client.WithInsecure()
	if f.TLS != nil {
		sec = client.WithTLS(f.TLS)
	}
	c, err := client.Dial(ctx, f.Servers, sec, client.WithDialOptions(f.DialOptions()...))
	if err != nil {
		f.Stop()
		return nil, err
	}
	defer c.Close()
	for {
		if _, err := c.Status(ctx, "peerbench/ready"); err == nil {
			return f, nil
		} else if ctx.Err() != nil {
			f.Stop()
			return nil, fmt.Errorf("fence cluster not ready: %w (logs in %s)", err, dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends the nodes.
func (f *Fence) Stop() {
	for _, p := range f.procs {
		p.Stop()
	}
}

// Procs are the node processes.
func (f *Fence) Procs() []*Proc { return f.procs }
