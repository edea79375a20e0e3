package peers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/bench"
)

// Fence is a 3-node fence cluster of real `fence serve` processes.
type Fence struct {
	bench.Fence
	procs   []*Proc
	metrics []string // each node's /metrics, /healthz, /readyz address
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

// StartFence starts nodes on 127.0.0.1 (gRPC basePort+10i, metrics +1,
// raft +2), with lock-delay 0 (the peers have none) and /debug/pprof on the
// metrics address, and waits for a leader.
func StartFence(bin, dir string, nodes, basePort int, ttl time.Duration) (*Fence, error) {
	var peers []string
	for i := range nodes {
		peers = append(peers, fmt.Sprintf("n%d=127.0.0.1:%d", i+1, basePort+10*i+2))
	}
	f := &Fence{Fence: bench.Fence{TTL: ttl}}
	// Plaintext, as the peers run; a fence from before TLS has no flag for it.
	var plain []string
	if help, _ := exec.Command(bin, "serve", "--help").CombinedOutput(); strings.Contains(string(help), "--insecure") {
		plain = []string{"--insecure"}
	}
	for i := range nodes {
		id, port := fmt.Sprintf("n%d", i+1), basePort+10*i
		p, err := StartProc(id, append([]string{bin, "serve", "--node-id", id, "--data-dir", filepath.Join(dir, id),
			"--grpc-addr", fmt.Sprintf("127.0.0.1:%d", port), "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port+1),
			"--raft-addr", fmt.Sprintf("127.0.0.1:%d", port+2), "--bootstrap", strings.Join(peers, ","),
			"--lock-delay", "0", "--log-level", "warn", "--pprof"}, plain...), filepath.Join(dir, id+".log"))
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
	c, err := client.Dial(ctx, f.Servers, client.WithInsecure())
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
